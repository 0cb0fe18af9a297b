"""A cluster's resources as the cloud reports them (the source of truth), and what they cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import UsageError
from ..basics.validate import CLUSTER_LABEL
from ..catalog import prices
from ..cloud.base import Provider, TpuNode, Vm

Log = Callable[[str], None]


Log = Callable[[str], None]

LOCAL_DEFAULT_ZONE = "us-central1-b"


def noop(_: str) -> None:
    pass


def default_zone(target: Any) -> str:
    if target.provider == "local":
        return LOCAL_DEFAULT_ZONE
    raise UsageError("no zone given", hint="pass --zone us-central1-b, set TPUCTL_ZONE, or gcloud config set compute/zone")


# ---- finding a cluster's resources ----------------------------------------------------------------

@dataclass
class Found:
    vms: list[Vm] = field(default_factory=list)
    tpus: list[TpuNode] = field(default_factory=list)

    @property
    def vm(self) -> Vm | None:
        return self.vms[0] if self.vms else None

    @property
    def tpu(self) -> TpuNode | None:
        return self.tpus[0] if self.tpus else None

    @property
    def empty(self) -> bool:
        return not self.vms and not self.tpus


def find(provider: Provider, name: str, zone: str | None = None) -> Found:
    """The cluster's VMs and TPUs, looked up at the same time (two independent API reads)."""
    from concurrent.futures import ThreadPoolExecutor

    selector = {CLUSTER_LABEL: name}
    with ThreadPoolExecutor(2) as pool:
        vms = pool.submit(provider.list_vms, zone, selector)
        tpus = pool.submit(provider.list_tpus, zone, selector)
        return Found(vms=vms.result(), tpus=tpus.result())


def tpu_hourly(node: TpuNode) -> float:
    """What a TPU costs per hour while it exists; a dead node bills nothing but holds quota."""
    from ..catalog.accelerators import parse

    if node.dead:
        return 0.0
    return prices.tpu_hourly(parse(node.accelerator_type), preemptible=node.interruptible)
