"""How a TPU is paid for: one ordered value instead of a flag per provisioning model. Pure.

A cluster asks for capacity as an ordered tuple: ``--capacity spot,flex-start,on-demand`` tries
spot first, then a flex-start request, then on-demand, exactly as zones and accelerator types fail
over (a stockout moves on). The single flags are the one-element forms: ``--spot`` is
``(spot,)``, ``--flex-start 4h`` is ``(flex-start,)``, ``--reservation R`` is ``(reservation,)``,
nothing is ``(on-demand,)``. As Google's launcher derives one ``CapacityType`` and changes each
request with ``match`` (AI-Hypercomputer/xpk ``src/xpk/core/capacity.py``), the request bodies
are amended once per capacity (:mod:`provision.cloud.gce_tpu`).

Which API offers which capacity:

- Compute Engine (``Scheduling.provisioningModel``, compute v1 discovery document): SPOT,
  FLEX_START, RESERVATION_BOUND and STANDARD (on demand).
- The Cloud TPU API: spot (and the TPU Node's preemptible) and on demand here; its queued
  resources are ``--queued``. Flex-start and a named reservation are Compute Engine's here.

Flex-start runs are 10 minutes to 7 days (``requestedRunDuration``: compute/docs/instance-groups/
about-resize-requests-mig); the VMs are deleted at the end of it.
"""

from __future__ import annotations

import enum

from ..basics.errors import UsageError

FLEX_MIN_S = 600.0
FLEX_MAX_S = 7 * 86400.0
FLEX_DEFAULT_S = FLEX_MAX_S       # --capacity ...,flex-start without --flex-start DURATION


class Capacity(str, enum.Enum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    FLEX_START = "flex-start"
    RESERVATION = "reservation"

    @property
    def interruptible(self) -> bool:
        """Whether the cloud may take it back at any time (a spot VM is preempted)."""
        return self is Capacity.SPOT


# what each API can make; ordered as tpuctl lists them
OFFERED: dict[str, tuple[Capacity, ...]] = {
    "compute": (Capacity.SPOT, Capacity.FLEX_START, Capacity.RESERVATION, Capacity.ON_DEMAND),
    "tpu": (Capacity.SPOT, Capacity.ON_DEMAND),
}


def parse(value: str | tuple[str, ...] | list[str]) -> tuple[Capacity, ...]:
    """``spot,flex-start,on-demand`` (or a sequence of names): each once, in the order given."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out: list[Capacity] = []
    for raw in names:
        name = raw.strip().lower()
        try:
            cap = Capacity(name)
        except ValueError:
            raise UsageError(f"unknown capacity {raw.strip()!r}",
                             hint="use spot, flex-start, reservation or on-demand, e.g. --capacity "
                                  "spot,on-demand") from None
        if cap in out:
            raise UsageError(f"capacity {cap.value} listed twice", hint="name each capacity once, in the order to try")
        out.append(cap)
    if not out:
        raise UsageError("no capacity given", hint="e.g. --capacity spot,on-demand")
    return tuple(out)


def check_flex_seconds(seconds: float) -> float:
    if not FLEX_MIN_S <= seconds <= FLEX_MAX_S:
        raise UsageError(f"flex-start runs 10 minutes to 7 days, not {seconds / 3600:g} hours",
                         hint="use e.g. --flex-start 4h (between 10m and 7d)")
    return seconds


def for_api(order: tuple[Capacity, ...], api: str) -> tuple[Capacity, ...]:
    """The capacities of ``order`` that ``api`` can make, in order."""
    return tuple(c for c in order if c in OFFERED.get(api, ()))


def refused_on(order: tuple[Capacity, ...], api: str) -> tuple[Capacity, ...]:
    return tuple(c for c in order if c not in OFFERED.get(api, ()))
