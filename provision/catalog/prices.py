"""List prices: the one table tpuctl prices TPUs and host VMs with.

Prices are USD per chip-hour for TPUs and per hour for host VMs, list price in the reference
region (us-central1; v4 in us-central2), without committed-use or sustained-use discounts.
Cloud TPU bills a node while it exists in READY (and a preempted node holds quota, not billing);
tpuctl uses these figures to say what a deletion saves and what a run cost, never to bill.

For v2 and v3 the single-device prices (v2-8 $4.50/h on demand, $1.35/h preemptible; v3-8
$8.00/h, $2.40/h) are spread over the four chips of the device; pod slices are priced at the same
per-chip rate, which is what Google's evaluation quota lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from .accelerators import AcceleratorType

SOURCE = "https://cloud.google.com/tpu/pricing and https://cloud.google.com/compute/vm-instance-pricing"
RECORDED = "2026-11-22"
REGION = "us-central1 (v4: us-central2)"
CURRENCY = "USD"


@dataclass(frozen=True)
class ChipPrice:
    on_demand: float      # per chip-hour
    preemptible: float    # per chip-hour; preemptible and spot TPUs share this rate


TPU_CHIP_HOUR: dict[str, ChipPrice] = {
    "v2": ChipPrice(on_demand=1.125, preemptible=0.3375),
    "v3": ChipPrice(on_demand=2.00, preemptible=0.60),
    "v4": ChipPrice(on_demand=3.22, preemptible=0.966),
    "v5litepod": ChipPrice(on_demand=1.20, preemptible=0.60),
    "v5p": ChipPrice(on_demand=4.20, preemptible=2.10),
    "v6e": ChipPrice(on_demand=2.70, preemptible=1.35),
}

# Host VMs (on demand; a preemptible host is not offered: the host must outlive the TPU).
VM_HOUR: dict[str, float] = {
    "e2-small": 0.0168,
    "e2-medium": 0.0335,
    "e2-standard-2": 0.0670,
    "e2-standard-4": 0.1340,
    "n1-standard-1": 0.0475,
    "n1-standard-2": 0.0950,
    "n1-standard-4": 0.1900,
    "n1-standard-8": 0.3800,
    "n2-standard-2": 0.0971,
    "n2-standard-4": 0.1942,
    "n2-standard-8": 0.3885,
}

# The local provider bills nothing; its "prices" are shown as what the same cluster would cost.


def tpu_hourly(acc: AcceleratorType, *, preemptible: bool) -> float:
    rate = TPU_CHIP_HOUR[acc.generation.name]
    per_chip = rate.preemptible if preemptible else rate.on_demand
    return round(per_chip * acc.chips, 4)


def vm_hourly(machine_type: str | None) -> float:
    """Hourly price of a host VM; 0 when there is none, and 0 for a type not in the table."""
    if not machine_type:
        return 0.0
    return VM_HOUR.get(machine_type, 0.0)


def known_vm(machine_type: str) -> bool:
    return machine_type in VM_HOUR


def describe_source() -> str:
    return f"list prices, {REGION}, {CURRENCY}, from {SOURCE}, recorded {RECORDED}"
