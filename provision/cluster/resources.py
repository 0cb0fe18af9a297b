"""A cluster's resources as the cloud reports them (the source of truth), and what they cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import CloudError, NotFound, UsageError
from ..basics.validate import CLUSTER_LABEL
from ..catalog import prices
from ..cloud.base import Operation, Provider, QueuedRequest, TpuNode, Vm
from .cache import cached_spec, cached_zones

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
    queued: list[QueuedRequest] = field(default_factory=list)
    # TPUs their preemption deleted (preempted.py): PREEMPTED, with nothing left to delete
    gone: list[TpuNode] = field(default_factory=list)

    @property
    def vm(self) -> Vm | None:
        return self.vms[0] if self.vms else None

    @property
    def tpu(self) -> TpuNode | None:
        return self.tpus[0] if self.tpus else None

    @property
    def requests(self) -> list[QueuedRequest]:
        """Queued resources that have no node here: each is a resource of its own (a node's request
        goes with its node)."""
        return [q for q in self.queued if not any(q.owns(n) for n in self.tpus)]

    @property
    def request(self) -> QueuedRequest | None:
        reqs = self.requests
        return reqs[0] if reqs else None

    @property
    def empty(self) -> bool:
        return not self.vms and not self.tpus and not self.queued and not self.gone


def find(provider: Provider, name: str, zone: str | None = None) -> Found:
    """The cluster's VMs, TPUs and queued resources, looked up at the same time (independent reads),
    and, where it has no TPU, one its preemption deleted (preempted.py: no call unless this
    machine's cache says the cluster's TPU is a Compute Engine one)."""
    from concurrent.futures import ThreadPoolExecutor

    from .preempted import gone_tpus

    selector = {CLUSTER_LABEL: name}
    with ThreadPoolExecutor(3) as pool:
        vms = pool.submit(provider.list_vms, zone, selector)
        spec = cached_spec(provider, name) if not zone else None
        spec = spec if isinstance(spec, dict) else None
        near = cached_zones(provider, name, spec) if spec else ()
        api = spec.get("api") if spec else None
        tpus = pool.submit(lambda: provider.list_tpus(zone, selector, near=near, api=api))
        queued = pool.submit(provider.list_queued, zone, selector)
        found = Found(vms=vms.result(), tpus=tpus.result(), queued=queued.result())
    if not found.tpus and not found.queued:
        found.gone = gone_tpus(provider, name, zone=zone)
    return found


def delete_request(provider: Provider, req: QueuedRequest, *, nodes: list[TpuNode] | None = None,
                   log: Log = noop) -> Operation | None:
    """Delete a queued resource, with ``force`` where Google requires it: while it holds a node.

    Without ``force`` Google deletes a request only once its nodes are gone (or while it waits,
    FAILED or SUSPENDED: DeleteQueuedResourceRequest.force); with it, its nodes go first. A request
    that began provisioning between the look and the delete is refused without force and deleted
    with it. Returns None when it is gone already.
    """
    if nodes is None:
        nodes = [n for n in (provider.get_tpu(req.zone, name) for name in req.node_names) if n is not None]
    force = req.holds_nodes or any(req.owns(n) for n in nodes)
    try:
        return provider.delete_queued(req.zone, req.name, force=force)
    except NotFound:
        return None
    except CloudError:
        if force:
            raise
        now = provider.get_queued(req.zone, req.name)
        if now is None:
            return None
        if not now.holds_nodes and not any(provider.get_tpu(now.zone, n) for n in now.node_names):
            raise
        log(f"queued resource {req.name} in {req.zone} is {now.state.value} now; deleting it and its node (force)")
        try:
            return provider.delete_queued(req.zone, req.name, force=True)
        except NotFound:
            return None


def tpu_price(node: TpuNode, book: prices.PriceBook | None = None) -> prices.Price:
    """What a TPU costs per hour while it exists, in its zone's region and its tier; a dead node
    bills nothing but holds quota (priced 0, saying so)."""
    from ..catalog.accelerators import parse

    tier = prices.tier_of(node.interruptible, node.paid_as.value)
    if node.dead:
        return prices.Price(0.0, prices.region_of(node.zone) or "-", tier, prices.NOTHING_BILLED, "-",
                            f"{node.state.value}: nothing billed")
    return (book or prices.BUNDLED).tpu_price(parse(node.accelerator_type), node.zone, tier)


def tpu_hourly(node: TpuNode, book: prices.PriceBook | None = None) -> float:
    return tpu_price(node, book).usd_per_hour
