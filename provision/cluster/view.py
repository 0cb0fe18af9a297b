"""``status`` and ``simulate preempt``: what each cluster is, runs and costs now.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import NotFound, UnknownName, UsageError
from ..basics.validate import CLUSTER_LABEL, format_duration
from ..catalog import prices
from ..cloud.base import Health, Provider, QueuedRequest, TpuNode, TpuState, Vm, VmState
from .cache import cached_spec, cached_zones
from .preempted import gone_tpus
from .resources import find, tpu_price

Log = Callable[[str], None]



@dataclass
class ClusterView:
    name: str
    provider: str
    zone: str | None
    vm: Vm | None
    tpu: TpuNode | None
    run: dict[str, Any] | None = None
    queued: QueuedRequest | None = None    # its queued resource (the TPU to be, while it has no node)
    book: prices.PriceBook | None = field(default=None, repr=False)   # None: the bundled table
    # its last up on this machine, by phase (provision.cluster.timing.up_startup; the cluster cache's)
    startup: dict[str, Any] | None = None

    # API: which Google API made the TPU, as --api names it: compute (Compute Engine) or tpu (the Cloud
    # TPU API, which Google gives bug and security fixes only: a user should see which they are on)
    HEADERS = ("CLUSTER", "ZONE", "VM", "TPU", "API", "STATE", "HEALTH", "RANGE", "PREEMPTIBLE", "RUN", "UPTIME",
               "$/HOUR")

    # prices are looked up once per view (the table, --json and the total each read them)
    @functools.cached_property
    def tpu_price(self) -> prices.Price | None:
        return tpu_price(self.tpu, self.book) if self.tpu else None

    @functools.cached_property
    def vm_price(self) -> prices.Price | None:
        if self.vm and self.vm.state not in (VmState.STOPPED, VmState.TERMINATED):
            return (self.book or prices.BUNDLED).vm_price(self.vm.machine_type, self.vm.zone)
        return None

    @property
    def hourly_total(self) -> prices.Total:
        return prices.Total.of((what, p) for what, p in (("the TPU", self.tpu_price), ("the host VM", self.vm_price))
                               if p is not None)

    @property
    def hourly(self) -> float | None:
        """TPU and host VM per hour; None when either's price is unknown."""
        return self.hourly_total.usd

    def price_lines(self) -> list[str]:
        """Where each part of the hourly figure comes from: region, tier, source and date."""
        out = []
        if self.tpu_price and self.tpu:
            out.append(f"{self.name}: TPU {self.tpu.accelerator_type} "
                       f"{prices.usd_text(self.tpu_price.usd_per_hour)}/hour ({self.tpu_price.label()})")
        if self.vm_price and self.vm:
            out.append(f"{self.name}: VM {self.vm.machine_type} {prices.usd_text(self.vm_price.usd_per_hour, 3)}/hour "
                       f"({self.vm_price.label()})")
        if self.hourly_total.unknown and self.hourly_total.known_usd:
            out.append(f"{self.name}: {self.hourly_total.text()} in all")
        return out

    @property
    def uptime_seconds(self) -> float | None:
        created = self.tpu.created_at if self.tpu and self.tpu.created_at else None
        return time.time() - created if created else None

    def vm_cell(self) -> str | None:
        """The host VM's state, and its zone where failover put it in another zone than ZONE's."""
        if self.vm is None:
            return None
        return self.vm.state.value if self.vm.zone == self.zone else f"{self.vm.state.value} in {self.vm.zone}"

    def row(self) -> list[Any]:
        t, q = self.tpu, self.queued
        if t is None and q is not None:
            return [self.name, self.zone, self.vm_cell(),
                    f"{q.accelerator_type} (queued)", "tpu", q.state.value, None, None, "spot" if q.spot else "no",
                    None, None, self.hourly_total.cell()]
        run = None
        if self.run:
            run = f"{self.run.get('run_id', '?')} ({self.run.get('status')})"
        up_s = self.uptime_seconds
        return [
            self.name, self.zone, self.vm_cell(),
            f"{t.accelerator_type} ({t.arch.value})" if t else None, t.api if t else None,
            t.state.value if t else None, _health(t), t.cidr_block if t else None,
            _paid_as(t) if t else None, run,
            format_duration(up_s) if up_s is not None else None, self.hourly_total.cell(),
        ]

    def queued_line(self) -> str | None:
        """What a queued resource without a node means for the bill: nothing yet, but quota held."""
        q = self.queued
        if q is None or self.tpu is not None:
            return None
        since = f", asked for {format_duration(time.time() - q.created_at)} ago" if q.created_at else ""
        if q.dead:
            why = f": {q.error}" if q.error else ""
            return (f"{self.name}: queued resource {q.name} in {q.zone} is {q.state.value}{why}{since}; it will never "
                    f"provision but holds quota ({q.quota()}) until deleted: tpuctl down {self.name} (or "
                    f"tpuctl down --idle) deletes it")
        return (f"{self.name}: queued resource {q.name} in {q.zone} is {q.state.value}{since}; no TPU billed yet, but "
                f"it holds quota ({q.quota()}) and becomes a billed TPU once capacity frees up: tpuctl down "
                f"{self.name} deletes it")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "provider": self.provider, "zone": self.zone,
                "vm": self.vm.to_dict() if self.vm else None, "tpu": self.tpu.to_dict() if self.tpu else None,
                "queued": self.queued.to_dict() if self.queued else None,
                "run": self.run, "uptime_seconds": round(self.uptime_seconds, 1) if self.uptime_seconds else None,
                "hourly_usd": self.hourly,
                "price": {"tpu": self.tpu_price.to_dict() if self.tpu_price else None,
                          "vm": self.vm_price.to_dict() if self.vm_price else None},
                **({"startup": self.startup} if self.startup is not None else {})}

    def startup_line(self) -> str | None:
        """Its last ``up`` on this machine (``tpuctl up``, or a supervisor's recreate) by phase, dated."""
        from .timing import line

        said = line(self.startup, duration=format_duration, label="took")
        if not said or self.startup is None:
            return None
        at = self.startup.get("from")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(at))) \
            if isinstance(at, (int, float)) and not isinstance(at, bool) else "?"
        by = self.startup.get("by") if isinstance(self.startup.get("by"), str) else "tpuctl up"
        return f"{self.name}: {by} on this machine at {when} {said}"


def _health(t: TpuNode | None) -> str | None:
    """The TPU's health, or "-" where Google reports none (HEALTH_UNSPECIFIED: a node that is not
    running, such as a PREEMPTED one, has no health to report)."""
    return t.health.value if t is not None and t.health != Health.HEALTH_UNSPECIFIED else None


def status(provider: Provider, *, name: str | None = None, zone: str | None = None,
           run_lookup: Callable[[str], dict[str, Any] | None] | None = None) -> list[ClusterView]:
    from concurrent.futures import ThreadPoolExecutor

    selector = {CLUSTER_LABEL: name} if name else None
    spec = cached_spec(provider, name) if name and not zone else None
    spec = spec if isinstance(spec, dict) else None
    near = cached_zones(provider, name, spec) if spec else ()
    # a cluster this machine made without --queued (or on Compute Engine, which has no queued
    # resources) has none to read while its TPU is found; only where it is not (gone, preempted,
    # or made elsewhere since) are its requests listed
    made = spec or {}
    later = (bool(near) or made.get("api") == "compute") and not made.get("queued") \
        and "queued" not in (made.get("capacity") or ())
    with ThreadPoolExecutor(3) as pool:    # independent reads (Compute, TPU nodes, queued resources): at once
        vms_f = pool.submit(provider.list_vms, zone, selector)
        tpus_f = pool.submit(lambda: provider.list_tpus(zone, selector, near=near, api=made.get("api")))
        queued_f = None if later else pool.submit(provider.list_queued, zone, selector)
        vms = [v for v in vms_f.result() if CLUSTER_LABEL in v.labels]
        tpus = [t for t in tpus_f.result() if CLUSTER_LABEL in t.labels]
        listed = queued_f.result() if queued_f else [] if tpus else provider.list_queued(zone, selector)
        queued = [q for q in listed if CLUSTER_LABEL in q.labels]
    # a TPU VM its preemption deleted is still the cluster's TPU, PREEMPTED (preempted.py)
    tpus += gone_tpus(provider, name, live=tpus, zone=zone)
    views = []
    for n, vm, tpu, req in join_by_cluster(vms, tpus, queued):
        z = tpu.zone if tpu else req.zone if req else vm.zone if vm else None
        run = run_lookup(n) if run_lookup else None
        startup = spec.get("startup") if spec is not None and n == name else None
        views.append(ClusterView(name=n, provider=provider.name, zone=z, vm=vm, tpu=tpu, run=run, queued=req,
                                 book=provider.price_book(), startup=startup if isinstance(startup, dict) else None))
    return views


def join_by_cluster(vms: list[Vm], tpus: list[TpuNode], queued: list[QueuedRequest]
                    ) -> list[tuple[str, Vm | None, TpuNode | None, QueuedRequest | None]]:
    """Each cluster's host VM, TPU and queued resource, by name (the first listed of each, and the
    request that owns the TPU before any other of the cluster's). The lists are indexed once, so a
    fleet of thousands of clusters is joined in linear time, not by a scan per cluster."""
    vm_of: dict[str, Vm] = {}
    for v in vms:
        vm_of.setdefault(v.labels[CLUSTER_LABEL], v)
    tpu_of: dict[str, TpuNode] = {}
    for t in tpus:
        tpu_of.setdefault(t.labels[CLUSTER_LABEL], t)
    queued_of: dict[str, list[QueuedRequest]] = {}
    for q in queued:
        queued_of.setdefault(q.labels[CLUSTER_LABEL], []).append(q)
    out = []
    for n in sorted(vm_of.keys() | tpu_of.keys() | queued_of.keys()):
        tpu = tpu_of.get(n)
        mine = queued_of.get(n, [])
        req = next((q for q in mine if tpu is not None and q.owns(tpu)), None) or next(iter(mine), None)
        out.append((n, vm_of.get(n), tpu, req))
    return out


# ---- rehearsal -----------------------------------------------------------------------------------

# How long Compute Engine gives a Spot (or preemptible) VM's guest between the preemption notice
# and the power-off: the ACPI G2 soft-off, then G3 "30 seconds for Spot" (compute v1 discovery
# document, Scheduling.skipGuestOsShutdown); TPU VMs are Compute Engine VMs underneath
# (tpu/docs/prepare-for-maintenance), and TPU Spot VMs defer to Compute Engine's Spot VMs (tpu/docs/spot).
PREEMPTION_GRACE_S = 30.0


def preempt(provider: Provider, name: str, notice_s: float = 0.0) -> tuple[TpuNode, TpuNode | None]:
    """Preempt cluster ``name``'s READY, interruptible TPU as its cloud would: the notice now and
    the power-off ``notice_s`` later (0: at once, no notice). Returns the TPU before, and as it
    is right after the notice (READY) or the power-off (None: deleted)."""
    found = find(provider, name)
    if found.empty:
        raise UnknownName(f"no cluster named {name}", hint="run tpuctl status to list clusters")
    if found.tpu is None and found.gone:
        gone = found.gone[0]
        raise UsageError(f"TPU {gone.name} in {gone.zone} is PREEMPTED already: Compute Engine deleted its VM, "
                         "so there is nothing to preempt", hint=f"run tpuctl up {name} to bring it back")
    if found.tpu is None:
        raise NotFound(f"cluster {name} has no TPU", hint=f"run tpuctl up {name} first")
    node = found.tpu
    if node.state != TpuState.READY:
        raise UsageError(f"TPU {node.name} is {node.state.value}, not READY",
                         hint="preempt a READY TPU (wait for tpuctl up to finish)")
    if not node.interruptible:
        raise UsageError(f"TPU {node.name} is on-demand and cannot be preempted",
                         hint=f"replace it with a preemptible one (the host VM, bucket and range stay): "
                              f"tpuctl down {name} --keep-vm, then tpuctl up {name} --preemptible (or --spot)")
    return node, provider.simulate_preemption(node.zone, node.name, notice_s=notice_s)


def _paid_as(t: Any) -> str:
    """The PREEMPTIBLE column: spot, yes (a preemptible TPU Node), a Compute Engine capacity, or no."""
    if t.preemptible and not t.spot:
        return "yes"
    return "no" if t.paid_as.value == "on-demand" else t.paid_as.value
