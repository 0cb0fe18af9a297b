"""``up`` and ``recreate_tpu``: plan from what the cloud says exists, then apply.

The cloud is the source of truth. Every resource carries ``tpuctl-cluster=<name>``, so ``up``
after a crash finds what the crashed run made and adopts it instead of creating a duplicate, and
``down`` finds everything to delete whatever the local cache says. The VM and the TPU are created
concurrently; a TPU stockout moves to the next allowed zone, a CIDR conflict to the next free
block; a failure halfway deletes what this call created (unless ``--keep-on-failure``) and says
exactly what, if anything, is still there.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import CloudError, NotFound, PartialFailure, TpuctlError, UsageError
from ..basics.validate import region_of
from ..catalog import prices
from ..catalog.zones import suggested_zone
from ..cloud.base import (
    Arch,
    ClusterSpec,
    Health,
    Operation,
    Provider,
    QueuedRequest,
    QueuedState,
    TpuNode,
    TpuState,
    Vm,
    VmState,
)
from ..cloud.capacity import Capacity
from ..cloud.failures import Failure, Kind, Scope, classify, failure
from ..cloud.operations import Backoff, OperationTimeout, wait_all, wait_until
from . import capacity as capacity_plan
from . import cidr as cidrs
from . import ledger
from .cache import cache_spec
from .candidates import Candidate, CandidatePlan, rank
from .failover import ZonePlan
from .offers import Offers, ZoneFit, plan_zones
from .resources import delete_request, find, noop, tpu_price

Log = Callable[[str], None]

CIDR_ATTEMPTS = 8
# An operation that fails with a transient error ("Please try again") is asked for again in the
# same zone this many times before the zone counts as failed.
OPERATION_RETRIES = 2



@dataclass
class UpResult:
    spec: ClusterSpec
    zone: str | None = None
    cidr: str | None = None
    vm: Vm | None = None
    tpu: TpuNode | None = None
    created: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    book: prices.PriceBook | None = field(default=None, repr=False)   # None: the bundled table

    @property
    def tpu_price(self) -> prices.Price:
        zone = self.zone or self.spec.zone
        cap = self.tpu.paid_as if self.tpu else self.spec.capacities[0]
        return (self.book or prices.BUNDLED).tpu_price(self.spec.accelerator, zone,
                                                        prices.tier_of(cap.interruptible, cap.value))

    @property
    def vm_price(self) -> prices.Price:
        return (self.book or prices.BUNDLED).vm_price(self.spec.machine_type, self.zone or self.spec.zone)

    @property
    def hourly(self) -> float:
        return round(self.tpu_price.usd_per_hour + self.vm_price.usd_per_hour, 4)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True, "cluster": self.spec.name, "provider": self.spec.provider, "project": self.spec.project,
            "zone": self.zone, "dry_run": self.dry_run, "accelerator_type": self.spec.accelerator_type,
            "arch": self.spec.arch.value, "preemptible": self.spec.preemptible, "spot": self.spec.spot,
            "api": self.tpu.api if self.tpu else self.spec.api,
            "capacity": self.tpu.paid_as.value if self.tpu else [c.value for c in self.spec.capacities],
            "runtime_version": self.spec.runtime_version, "machine_type": self.spec.machine_type,
            "cidr": self.cidr, "vm": self.vm.to_dict() if self.vm else None,
            "tpu": self.tpu.to_dict() if self.tpu else None, "created": self.created, "adopted": self.adopted,
            "planned": self.planned, "notes": self.notes, "hourly_usd": self.hourly,
            "price_source": (self.book or prices.BUNDLED).describe(),
            "price": {"tpu": self.tpu_price.to_dict(), "vm": self.vm_price.to_dict()}, "seconds": round(self.seconds, 2),
        }

    def summary(self) -> str:
        s = self.spec
        kind = "preemptible" if s.preemptible else self.tpu.paid_as.value if self.tpu else \
            ",".join(c.value for c in s.capacities)
        if self.tpu is not None and self.tpu.api == "compute":
            kind += ", Compute Engine"
        lines = []
        if self.dry_run:
            lines.append(f"dry run: would create {', '.join(self.planned) or 'nothing'} "
                         f"(nothing was created)")
            if self.adopted:
                lines.append(f"already there (would adopt): {', '.join(self.adopted)}")
        else:
            tpu = self.tpu
            state = "-" if tpu is None else tpu.state.value if tpu.health == Health.HEALTH_UNSPECIFIED \
                else f"{tpu.state.value}/{tpu.health.value}"
            lines.append(f"cluster {s.name} is up in {self.zone}: TPU {s.accelerator_type} ({s.arch.value}, {kind}) "
                         f"{state}" + (f", range {self.cidr}" if self.cidr else "")
                         + (f", host VM {s.machine_type}" if s.machine_type else ", no host VM"))
            if self.created:
                lines.append(f"created: {', '.join(self.created)}")
            if self.adopted:
                lines.append(f"already there (adopted): {', '.join(self.adopted)}")
        lines.extend(self.notes)
        lines.append(f"list price: ${self.hourly:.2f}/hour while it exists; tpuctl down {s.name} deletes it")
        lines.append(f"  TPU {s.accelerator_type}: ${self.tpu_price.usd_per_hour:.2f}/hour ({self.tpu_price.label()})")
        if s.machine_type:
            lines.append(f"  VM {s.machine_type}: ${self.vm_price.usd_per_hour:.3f}/hour ({self.vm_price.label()})")
        return "\n".join(lines)


@dataclass
class _Attempt:
    """Mutable state of one ``up`` call: what it created, so a failure can undo exactly that."""

    created_vm: tuple[str, str] | None = None     # (zone, name)
    created_tpu: tuple[str, str] | None = None
    created_queued: bool = False                  # created_tpu is a queued resource (its node may not exist)
    adopted_request: tuple[str, str] | None = None  # a queued resource that was there before this call
    reserved: str | None = None
    had: str | None = None        # the cluster's range reservation before this call
    # each (type, zone)'s image and host machine type
    fits: dict[tuple[str, str], ZoneFit] = field(default_factory=dict)
    plan: CandidatePlan | None = None             # which TPU candidates were asked for, and how it went
    chosen: Candidate | None = None               # the candidate whose create this call made

    def in_zone(self, spec: ClusterSpec, zone: str) -> ClusterSpec:
        """``spec``'s host VM as created in ``zone``: with the machine type planned there (any type's
        fit: the host does not depend on the TPU's type)."""
        f = self.fits.get((spec.accelerator_type, zone)) or next(
            (v for (_t, z), v in self.fits.items() if z == zone), None)
        return f.apply(spec) if f is not None else spec

    def for_candidate(self, spec: ClusterSpec, cand: Candidate) -> ClusterSpec:
        """``spec`` asking for ``cand``: its type and zone, with the image planned for them."""
        made = spec.with_type(cand.name).with_zone(cand.zone)
        if cand.capacity:
            made = made.with_capacity(cand.capacity)
        f = self.fits.get((cand.name, cand.zone))
        return f.apply(made) if f is not None else made


def up(provider: Provider, spec: ClusterSpec, *, dry_run: bool = False, keep_on_failure: bool = False,
       timeout: float = 1800.0, log: Log = noop, backoff: Backoff | None = None, offers: Offers | None = None,
       keep_image: str | None = None, prefer: tuple[str, str] | None = None) -> UpResult:
    """``offers``: zone catalogues already asked for in this command; ``keep_image``: the image of a
    TPU being recreated, kept in every zone that still offers it; ``prefer``: the (type, zone) of a
    TPU being recreated, asked for first whatever the price order says."""
    start = time.monotonic()
    backoff = backoff or Backoff()
    acc = spec.accelerator
    result = UpResult(spec=spec, dry_run=dry_run, book=provider.price_book())
    found = find(provider, spec.name)

    # --- plan: adopt what exists, refuse what conflicts ------------------------------------
    vm = found.vm
    tpu = found.tpu
    if tpu is not None and tpu.state == TpuState.DELETING:
        log(f"TPU {tpu.name} in {tpu.zone} is being deleted; waiting for it to go before recreating")
        if not dry_run:
            wait_until(lambda: provider.get_tpu(tpu.zone, tpu.name) is None, timeout=timeout, backoff=backoff)
        tpu = None
    wanted = {a.name for a in spec.candidates}
    if tpu is not None:
        if tpu.accelerator_type not in wanted or tpu.arch != spec.arch:
            raise UsageError(
                f"cluster {spec.name} already has a {tpu.accelerator_type} TPU ({tpu.arch.value}) in {tpu.zone}",
                hint=f"use --accelerator-type {tpu.accelerator_type} --arch {tpu.arch.value}, "
                     f"or tpuctl down {spec.name} first")
        spec = capacity_plan.keep_api(spec, tpu)
        if tpu.paid_as not in spec.capacities:
            raise UsageError(
                f"cluster {spec.name} already has a {'preemptible' if tpu.preemptible else tpu.paid_as.value} TPU",
                hint=f"match it, or tpuctl down {spec.name} first")
        spec = spec.with_type(tpu.accelerator_type)
        prefer = prefer or (tpu.accelerator_type, tpu.zone)
    # A queued resource without a node is the cluster's TPU to be: adopted while it is asked for,
    # replaced when dead (FAILED and SUSPENDED requests hold quota and never provision again).
    req = found.request if tpu is None else None
    if req is not None and req.state == QueuedState.DELETING:
        log(f"queued resource {req.name} in {req.zone} is being deleted; waiting for it to go")
        if not dry_run:
            wait_until(lambda: provider.get_queued(req.zone, req.name) is None, timeout=timeout, backoff=backoff)
        req = None
    if req is not None and not req.dead:
        _check_request(spec, req)
        if req.accelerator_type:
            spec = spec.with_type(req.accelerator_type)
            prefer = (req.accelerator_type, req.zone)
    acc = spec.accelerator
    result.spec = spec
    if vm is not None and vm.state == VmState.STOPPING:
        log(f"host VM {vm.name} in {vm.zone} is being deleted; waiting for it to go")
        if not dry_run:
            wait_until(lambda: provider.get_vm(vm.zone, vm.name) is None, timeout=timeout, backoff=backoff)
        vm = None

    want_vm = spec.machine_type is not None
    zones = list(spec.zones)
    if tpu is not None and not tpu.dead:
        zones = [tpu.zone]
    elif tpu is not None:
        # recreating after a preemption: its old zone first, then the user's failover order
        zones = [tpu.zone] + [z for z in zones if z != tpu.zone]
    elif req is not None and not req.dead:
        # the request asked there: wait for it first, then the user's failover order if it fails
        zones = [req.zone] + [z for z in zones if z != req.zone]
    if (tpu is None or tpu.dead) and vm is not None and spec.arch == Arch.NODE:
        # a TPU Node is reached from its host: keep it in the host's region
        same_region = [z for z in zones if region_of(z) == region_of(vm.zone)]
        if not same_region:
            raise UsageError(f"host VM {vm.name} is in {vm.zone}, outside the zones given",
                             hint=f"pass --zone {vm.zone}, or tpuctl down {spec.name} first")
        zones = sorted(same_region, key=lambda z: z != vm.zone)

    dead = tpu is not None and tpu.dead
    need_tpu = tpu is None or dead
    need_vm = want_vm and vm is None

    # --- which (type, zone) to ask for, and what each zone offers: image, host machine type ----
    offers = offers or Offers(provider)
    fits: dict[tuple[str, str], ZoneFit] = {}
    cands: list[Candidate] = []
    if need_tpu:
        if dead and tpu is not None and tpu.arch == Arch.VM and tpu.version:
            keep_image = keep_image or tpu.version      # a recreated TPU keeps its image where offered
        cands, fits = _candidates(provider, spec, zones, offers, result.book, need_vm=need_vm,
                                  keep_image=keep_image, prefer=prefer, log=log)
        zones = list(dict.fromkeys(c.zone for c in cands))
        spec = spec.with_type(cands[0].name)
        acc = spec.accelerator
        result.spec = spec
    elif need_vm:
        vm_fits = plan_zones(offers, spec, zones, tpu=False, vm=True, log=log)
        fits = {(spec.accelerator_type, z): f for z, f in vm_fits.items()}
        zones = [z for z in zones if z in vm_fits]

    # --- CIDR: a user's block is checked before anything is created ---------------------------
    block: str | None = None
    attempt_had: str | None = None
    if spec.arch == Arch.NODE and need_tpu:
        prefix = acc.node_cidr_prefix
        old = tpu.cidr_block if tpu is not None else None
        reserved = provider.reserved_range(spec)
        attempt_had = reserved
        if spec.cidr:
            requested = cidrs.check_requested(ipaddress.ip_network(spec.cidr), prefix, provider.used_ranges(spec))
            block = str(requested)
        elif old or reserved:
            block = old or reserved   # a recreated TPU gets its old block back
        else:
            block = str(cidrs.allocate(prefix, provider.used_ranges(spec), _pool(provider)))
    elif tpu is not None:
        block = tpu.cidr_block

    zone0 = zones[0]
    queued = spec.queued and provider.offers_queued
    how = " through a queued resource" if queued else ""
    if tpu is not None and not dead:
        result.adopted.append(f"TPU {tpu.name} ({tpu.zone}, {tpu.state.value})")
    if req is not None and not req.dead:
        result.adopted.append(f"queued resource {req.name} ({req.zone}, {req.state.value})")
    if vm is not None:
        result.adopted.append(f"VM {vm.name} ({vm.zone}, {vm.state.value})")
    if dead:
        result.planned.append(f"TPU {spec.name} in {tpu.zone} (replacing the {tpu.state.value} one)")
    elif req is not None and req.dead:
        result.planned.append(f"TPU {spec.name} {acc.name} in {zone0}{how} (replacing the {req.state.value} "
                              f"queued resource in {req.zone})")
    elif need_tpu and req is None:
        fit0 = fits.get((acc.name, zone0))
        image = fit0.runtime_version if fit0 else None
        on = capacity_plan.on_compute(acc, cands[0].capacity if cands else "") if fit0 and fit0.api == "compute" else ""
        result.planned.append(f"TPU {spec.name} {acc.name} in {zone0}{how}{on}"
                              + (f" with range {block}" if block else "") + (f", image {image}" if image else ""))
    if spec.queued and not provider.offers_queued:
        result.notes.append(f"the {provider.name} provider has no queued resources: --queued created the TPU "
                            "directly (it matters on Google Cloud)")
    elif queued and spec.preemptible and need_tpu and (req is None or req.dead):
        note = ("--preemptible with --queued asks for the spot tier, as gcloud does: a queued resource has no "
                "preemptible tier, so the TPU is a Spot TPU VM")
        result.notes.append(note)
        if not dry_run:
            log(note)
    if need_vm:
        vm_zone = zone0 if spec.arch == Arch.NODE or not tpu else tpu.zone
        machine = _Attempt(fits=fits).in_zone(spec, vm_zone).machine_type
        result.planned.append(f"VM {spec.name} {machine} in {vm_zone}")
    if len(cands) > 1 and len({c.name for c in cands}) > 1:
        result.notes.append(_order_note(spec, cands))

    if dry_run:
        planned_zone = tpu.zone if tpu else zone0
        result.notes.extend(provider.caveats(planned_zone, acc.name))
        if (acc.name, planned_zone) in fits:
            result.spec = fits[(acc.name, planned_zone)].apply(spec)
        result.zone = tpu.zone if tpu else (vm.zone if vm and spec.arch == Arch.NODE else zone0)
        result.cidr = block
        result.vm, result.tpu = vm, tpu
        result.seconds = time.monotonic() - start
        return result

    attempt = _Attempt(had=attempt_had, fits=fits)
    try:
        _apply(provider, spec, result, attempt, vm=vm, tpu=tpu, dead=dead, need_vm=need_vm, zones=zones,
               cands=cands, block=block, timeout=timeout, log=log, backoff=backoff, request=req)
    except BaseException as exc:
        _fail(provider, spec, attempt, exc, keep_on_failure=keep_on_failure, log=log, backoff=backoff)
        raise  # _fail raises; this is for type checkers
    result.spec = _as_made(spec, result)
    if result.tpu is not None:
        result.notes.extend(provider.caveats(result.tpu.zone, result.tpu.accelerator_type))
    if attempt.chosen is not None and attempt.plan is not None and (attempt.plan.several or attempt.plan.capacities):
        result.notes.append(_chosen_note(spec, attempt.chosen, attempt.plan))
    cache_spec(provider, result.spec, zone=result.zone, cidr=result.cidr)
    if result.tpu is not None and any(c.startswith("TPU ") for c in result.created):
        ledger.tpu_created(provider, spec.name, result.tpu)
    result.seconds = time.monotonic() - start
    return result


def _as_made(spec: ClusterSpec, result: UpResult) -> ClusterSpec:
    """The spec as the cloud made it: the TPU VM's image and the host VM's machine type."""
    import dataclasses

    changes: dict[str, Any] = {}
    if result.tpu is not None and result.tpu.accelerator_type in {a.name for a in spec.candidates}:
        changes["accelerator_type"] = result.tpu.accelerator_type
    if result.tpu is not None and result.tpu.arch == Arch.VM and result.tpu.version:
        changes["runtime_version"] = result.tpu.version
    if result.vm is not None and result.vm.machine_type:
        changes["machine_type"] = result.vm.machine_type
    if result.tpu is not None:
        changes["api"] = result.tpu.api          # a cluster keeps the API it was made with
    return dataclasses.replace(spec, **changes) if changes else spec


def _check_request(spec: ClusterSpec, req: QueuedRequest) -> None:
    """A live queued resource is adopted only if it asks for what this ``up`` asks for."""
    if spec.arch != Arch.VM or (req.accelerator_type and req.accelerator_type not in {a.name for a in spec.candidates}):
        raise UsageError(
            f"cluster {spec.name} already has a queued resource for a {req.accelerator_type} TPU VM in {req.zone} "
            f"({req.state.value})",
            hint=f"use --accelerator-type {req.accelerator_type} --arch vm, or tpuctl down {spec.name} first")
    if req.spot != spec.interruptible:
        tier = "spot" if req.spot else "on-demand"
        raise UsageError(f"cluster {spec.name} already has a queued resource for a {tier} TPU in {req.zone} "
                         f"({req.state.value})",
                         hint=f"{'add --spot' if req.spot else 'drop --spot/--preemptible'} to match it, or "
                              f"tpuctl down {spec.name} first")


def _candidates(provider: Provider, spec: ClusterSpec, zones: list[str], offers: Offers, book: prices.PriceBook, *,
                need_vm: bool, keep_image: str | None, prefer: tuple[str, str] | None, log: Log
                ) -> tuple[list[Candidate], dict[tuple[str, str], ZoneFit]]:
    """Every (type, zone) that can host the cluster, in the order to ask, with what each zone gives it.

    One type keeps the zones in the order given (the failover order, as always); several are
    ranked cheapest first per peak bf16 FLOP/s (or as listed with ``in_order``). A type no zone
    offers, or that no zone has an image or host for, is left out (logged) when others remain; when
    none remains, one line says why: nothing has been created.
    """
    types = spec.candidates
    several = len(types) > 1
    zones_of: dict[str, list[str]] = {}
    fits: dict[tuple[str, str], ZoneFit] = {}
    refused: list[UsageError] = []
    for acc in types:
        offered = [z for z in zones if _offered(offers, spec.with_type(acc.name), z, acc, need_vm, log)]
        try:
            if not offered:
                capacity_plan.check_provider(provider, spec, acc)
                raise UsageError(f"{acc.name} is not offered in {', '.join(zones)}",
                                 hint=f"pick a zone that offers it ({capacity_plan.listing_command(acc)}), "
                                      f"e.g. --zone {suggested_zone(acc.generation.name)}")
            keep = keep_image if prefer is None or prefer[0] == acc.name else None
            got = plan_zones(offers, spec.with_type(acc.name), offered, tpu=True, vm=need_vm, keep_image=keep,
                             log=log)
        except UsageError as exc:
            if not several:
                raise
            log(f"{acc.name} is left out: {exc.message}")
            refused.append(exc)
            continue
        zones_of[acc.name] = [z for z in offered if z in got]
        fits.update({(acc.name, z): f for z, f in got.items()})
    if not zones_of:
        raise UsageError("none of " + ",".join(a.name for a in types) + " can be created in "
                         + ", ".join(zones) + ": " + "; ".join(e.message for e in refused),
                         hint=refused[0].hint if refused else "try other zones")
    def price_for(cap: str) -> Any:
        tier = prices.tier_of(Capacity(cap).interruptible, cap)

        def price(acc: Any, zone: str) -> float | None:
            p = book.tpu_price(acc, zone, tier)
            return p.usd_per_hour if p.usd_per_hour > 0 else None
        return price

    order = tuple(c.value for c in spec.capacities)
    cands = rank([a for a in types if a.name in zones_of], zones_of, price_for(order[0]),
                 in_order=spec.in_order or not several, capacities=order, price_for=price_for,
                 allows=lambda acc, zone, cap: capacity_plan.allowed(spec, fits[(acc.name, zone)].api, cap))
    if not cands:
        raise capacity_plan.nothing_to_ask(spec, zones, types)
    skipped = capacity_plan.left_out(spec, {k: f.api for k, f in fits.items()})
    if skipped:
        log(f"left out (the Cloud TPU API has no such capacity): {', '.join(skipped)}")
    if prefer is not None:
        # its type and zone first within each capacity, the capacity order kept (stable sort)
        cands.sort(key=lambda c: (order.index(c.capacity), (c.name, c.zone) != prefer))
    return cands, fits


def _order_note(spec: ClusterSpec, cands: list[Candidate]) -> str:
    how = "in the order given (--in-order)" if spec.in_order else "cheapest first per peak bf16 FLOP/s"
    several_caps = len({c.capacity for c in cands}) > 1
    shown = ", ".join(c.describe(several_caps) for c in cands[:6]) + (f", and {len(cands) - 6} more" if len(cands) > 6 else "")
    return f"candidates {how}: {shown}"


def _chosen_note(spec: ClusterSpec, chosen: Candidate, plan: CandidatePlan) -> str:
    if plan.candidates and chosen == plan.candidates[0]:
        why = "first in the order given (--in-order)" if spec.in_order else \
            f"the cheapest per peak bf16 FLOP/s of {len(plan.candidates)} candidates" if plan.several else \
            "first in the capacity order (--capacity)"
    else:
        why = f"the first that could be had after {plan.explain()}"
    return f"chose {chosen.describe(plan.capacities)}: {why}"




def _pool(provider: Provider) -> cidrs.IPv4Network:
    return getattr(provider, "cidr_pool", None) or cidrs.DEFAULT_POOL


def _apply(provider: Provider, spec: ClusterSpec, result: UpResult, attempt: _Attempt, *, vm: Vm | None,
           tpu: TpuNode | None, dead: bool, need_vm: bool, zones: list[str], cands: list[Candidate],
           block: str | None, timeout: float, log: Log, backoff: Backoff,
           request: QueuedRequest | None = None) -> None:
    deadline = time.monotonic() + timeout
    plan = attempt.plan = CandidatePlan(tuple(cands))
    vm_plan = ZonePlan(tuple(zones))     # the host VM fails over on its own (Compute's stockouts, quotas)
    retries: dict[tuple[str, str], int] = {}
    cand: Candidate | None = None

    if dead and tpu is not None:
        log(f"deleting {tpu.state.value} TPU {tpu.name} in {tpu.zone} to recreate it")
        op = provider.delete_tpu(tpu.zone, tpu.name)
        wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
        wait_until(lambda: provider.get_tpu(tpu.zone, tpu.name) is None, timeout=_left(deadline), backoff=backoff)
        tpu = None
    if request is not None and request.dead:
        _delete_dead_request(provider, request, deadline, log, backoff)
        request = None

    zone = zones[0] if tpu is None else tpu.zone
    ops: list[Operation] = []
    vm_op: Operation | None = None
    tpu_op: Operation | None = None
    # A TPU VM's host does not depend on the TPU: start it first, it runs while the TPU is asked
    # for. A TPU Node is asked for first (its range reserved, its create call answered), because
    # Google refuses new TPU Nodes to most projects at that call: no host VM is made for nothing,
    # and the host goes to the zone the TPU got. Both operations still run concurrently.
    node_first = spec.arch == Arch.NODE and tpu is None
    if need_vm and not node_first:
        vm_op = _start_vm(provider, spec, zone, attempt, log, vm_plan)
        ops.append(vm_op)
    if block and spec.arch == Arch.NODE and tpu is None:
        block = _reserve(provider, spec, block, attempt, log, had=attempt.had)
    if tpu is None and request is not None:
        log(f"waiting for {request.describe()}, asked for before this call (adopted)")
        tpu_op, zone = provider.watch_queued(request.zone, request.name), request.zone
        attempt.adopted_request = (request.zone, request.name)
        cand = next((c for c in cands if (c.name, c.zone) == (request.accelerator_type, request.zone)), None) \
            or Candidate(spec.accelerator, request.zone)
        ops.append(tpu_op)
    elif tpu is None:
        tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log, deadline=deadline,
                                         backoff=backoff)
        zone = cand.zone
        ops.append(tpu_op)
    if need_vm and node_first:
        vm_op = _start_vm(provider, spec, zone, attempt, log, vm_plan)
        ops.append(vm_op)

    # Poll every pending operation together; a failed TPU create moves to the next zone or block.
    delays = backoff.delays()
    cidr_tries = 0
    while True:
        if vm_op is not None and not vm_op.done:
            vm_op = provider.poll(vm_op)
            if vm_op.done:
                if vm_op.error:
                    f = classify(code=vm_op.error.code, message=vm_op.error.message, where="operation")
                    log(f"creating host VM {spec.name} in {vm_op.zone} failed: {f.kind.value}: {vm_op.error.message}")
                    # a TPU Node's host stays in its TPU's region
                    region = region_of(tpu_op.zone) if spec.arch == Arch.NODE and tpu_op is not None else None
                    nxt = _failed_over(vm_plan, vm_op.zone, f, retries, "vm", region)
                    _forget_failed_vm(provider, spec, vm_op.zone, attempt, deadline, backoff)
                    if nxt is not None:
                        if nxt != vm_op.zone:
                            log(f"moving host VM {spec.name} on to zone {nxt} ({vm_plan.explain()})")
                        vm_op = _start_vm(provider, spec, nxt, attempt, log, vm_plan, region=region)
                        continue
                    if f.scope not in (Scope.ZONE, Scope.REGION):     # it stops the search: said as itself
                        raise CloudError(f"creating host VM {spec.name} in {vm_op.zone} failed: "
                                         f"{vm_op.error.message}",
                                         kind=f.kind.value, hint=f.hint, zone=vm_op.zone)
                    raise CloudError(f"no zone could create host VM {spec.name} ({vm_plan.explain()})",
                                     kind=f.kind.value, hint=f.hint or "add zones to --zone, or retry later",
                                     zone=vm_op.zone)
                log(f"host VM {spec.name} created in {vm_op.zone}")
        if tpu_op is not None and not tpu_op.done:
            tpu_op = provider.poll(tpu_op)
            if tpu_op.done and tpu_op.error:
                assert cand is not None
                f = classify(code=tpu_op.error.code, message=tpu_op.error.message, where="operation")
                log(f"creating TPU {spec.name} in {tpu_op.zone} failed: {f.kind.value}: {tpu_op.error.message}")
                _forget_failed_tpu(provider, spec, tpu_op.zone, attempt, deadline, backoff,
                                   queued=tpu_op.kind == "queued-resource", log=log)
                if f.kind == Kind.CIDR_CONFLICT and spec.arch == Arch.NODE and not spec.cidr \
                        and cidr_tries < CIDR_ATTEMPTS:
                    cidr_tries += 1
                    bad = block
                    used = provider.used_ranges(spec) + ([cidrs.Used.of(bad, "conflict reported by the API")]
                                                         if bad else [])
                    block = str(cidrs.allocate(spec.accelerator.node_cidr_prefix, used, _pool(provider)))
                    log(f"range {bad} conflicts with something on the network; trying {block}")
                    block = _reserve(provider, spec, block, attempt, log, had=attempt.had)
                    tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log,
                                                     cand=cand, deadline=deadline, backoff=backoff)
                    zone = cand.zone
                    continue
                if f.kind == Kind.CIDR_CONFLICT and spec.cidr:
                    raise UsageError(f"--cidr {spec.cidr} conflicts with a range on network {spec.network}",
                                     hint="pick another block, or omit --cidr to let tpuctl choose one")
                nxt = _next_candidate(plan, cand, f, retries)
                if nxt is not None and nxt == cand:
                    log(f"asking again for TPU {spec.name} in {nxt.zone} ({f.kind.value})")
                    time.sleep(min(next(delays), _left(deadline)))
                    tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log, cand=nxt,
                                                     deadline=deadline, backoff=backoff)
                    zone = cand.zone
                    continue
                if nxt is not None:
                    log(f"moving on to {_where(plan, nxt)} ({plan.explain()})")
                    if (spec.arch == Arch.NODE and attempt.created_vm
                            and region_of(attempt.created_vm[0]) != region_of(nxt.zone)):
                        # the host must be near its TPU Node: move the VM we made with it
                        vm_op = _move_vm(provider, spec, attempt, nxt.zone, vm_op, deadline, log, backoff)
                    tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log, cand=nxt,
                                                     deadline=deadline, backoff=backoff)
                    zone = cand.zone
                    continue
                raise _exhausted(spec, plan.stopped or f, plan)
            if tpu_op.done:
                log(f"TPU {spec.name} created in {tpu_op.zone}")
        if (vm_op is None or vm_op.done) and (tpu_op is None or tpu_op.done):
            break
        if time.monotonic() >= deadline:
            pending = [o for o in (vm_op, tpu_op) if o is not None and not o.done]
            raise OperationTimeout(pending)
        time.sleep(min(next(delays), _left(deadline)))

    # Operations done: the TPU must also be READY and healthy before anyone trains on it.
    tpu_zone = tpu.zone if tpu is not None else zone
    node = _wait_ready(provider, spec.name, tpu_zone, deadline, log, backoff)
    result.tpu = node
    result.zone = node.zone
    result.cidr = node.cidr_block or block
    if spec.machine_type:
        host_zone = attempt.created_vm[0] if attempt.created_vm else (vm.zone if vm else tpu_zone)
        result.vm = provider.get_vm(host_zone, spec.name)
        if result.vm is None:
            raise CloudError(f"host VM {spec.name} disappeared in {host_zone}", kind="not_found", zone=host_zone)
    if attempt.created_vm:
        result.created.append(f"VM {spec.name} ({attempt.created_vm[0]})")
    if attempt.created_tpu:
        result.created.append(f"TPU {spec.name} ({attempt.created_tpu[0]})")
    elif attempt.adopted_request:
        result.created.append(f"TPU {spec.name} ({attempt.adopted_request[0]}, granted to the adopted queued resource)")


def _start_vm(provider: Provider, spec: ClusterSpec, zone: str, attempt: _Attempt, log: Log,
              plan: ZonePlan | None = None, region: str | None = None) -> Operation:
    """Create the host VM in ``zone``; a create call refused for that zone or region (Compute's quota,
    a zone not served) moves on to the next zone of ``plan`` (within ``region``, for a TPU Node's
    host), as a failed create operation does."""
    while True:
        made = attempt.in_zone(spec, zone)
        log(f"creating host VM {spec.name} ({made.machine_type}) in {zone}")
        try:
            op = provider.create_vm(made, zone)
        except CloudError as exc:
            f = failure(exc.kind, exc.message, exc.hint)
            if plan is None or f.scope not in (Scope.ZONE, Scope.REGION):
                raise
            log(f"creating host VM {spec.name} in {zone} failed: {f.kind.value}: {exc.message}")
            plan.record(zone, f)
            nxt = plan.next_zone(region)
            if nxt is None:
                raise CloudError(f"no zone could create host VM {spec.name} ({plan.explain()})", kind=f.kind.value,
                                 hint=f.hint or "add zones to --zone, or retry later") from None
            zone = nxt
            continue
        attempt.created_vm = (zone, spec.name)
        return op


def _offered(offers: Offers, spec: ClusterSpec, zone: str, acc: Any, need_vm: bool, log: Log) -> bool:
    """Whether ``zone`` offers the type, as a Compute Engine machine type or a Cloud TPU API type
    (``--api``); a zone not served to the project (403 "Location ... is not found or access is
    unauthorized", a location policy) offers nothing."""
    try:
        return bool(offers.api(zone, acc, spec, vm=need_vm))
    except CloudError as exc:
        if failure(exc.kind, exc.message).scope in (Scope.ZONE, Scope.REGION):
            log(f"zone {zone} is left out: {exc.message}")
            return False
        raise


def _failed_over(plan: ZonePlan, zone: str, f: Failure, retries: dict[tuple[str, str], int], what: str,
                 region: str | None = None) -> str | None:
    """Where to ask next after a failed create operation in ``zone``: the same zone again for a
    transient error (a few times), the next zone the failure leaves, or None (stop)."""
    if f.retriable:
        key = (what, zone)
        retries[key] = retries.get(key, 0) + 1
        if retries[key] <= OPERATION_RETRIES:
            return zone
        f = Failure(f.kind, Scope.ZONE, f.message, f.hint)     # it keeps failing there
    plan.record(zone, f)
    if f.scope not in (Scope.ZONE, Scope.REGION):
        return None
    return plan.next_zone(region)


def _forget_failed_vm(provider: Provider, spec: ClusterSpec, zone: str, attempt: _Attempt, deadline: float,
                      backoff: Backoff) -> None:
    """A failed insert normally leaves no instance; if one is there, delete it before moving on."""
    try:
        vm = provider.get_vm(zone, spec.name)
        if vm is not None:
            op = provider.delete_vm(zone, spec.name)
            wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
    except NotFound:
        pass
    attempt.created_vm = None


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _reserve(provider: Provider, spec: ClusterSpec, block: str, attempt: _Attempt, log: Log,
             had: str | None = None) -> str:
    """Claim the block where every tpuctl sees it; on a race take the next free one.

    ``had`` is the cluster's reservation before this call (kept if this call fails)."""
    for skip in range(CIDR_ATTEMPTS):
        if provider.reserve_range(spec, block):
            if block != had and attempt.reserved is None:
                attempt.reserved = block   # ours to release if this call fails
            return block
        log(f"range {block} was just claimed by another tpuctl; taking the next free block")
        used = provider.used_ranges(spec)
        block = str(cidrs.allocate(spec.accelerator.node_cidr_prefix, used, _pool(provider),
                                   skip=cidrs.spread(spec.name, skip)))
    raise CloudError("could not reserve a TPU range: other tpuctl runs keep claiming the same blocks",
                     kind="conflict", hint="retry in a minute")


def _start_tpu(provider: Provider, spec: ClusterSpec, plan: CandidatePlan, block: str | None, attempt: _Attempt,
               log: Log, cand: Candidate | None = None, *, deadline: float, backoff: Backoff
               ) -> tuple[Operation, Candidate, str | None]:
    """Ask for the TPU as ``cand`` (else the plan's next candidate); a create call refused for its
    zone or region moves on to the next candidate, as a failed create operation does."""
    cand = cand or plan.next()
    queued = spec.queued and provider.offers_queued
    exists_tries = 0
    while True:
        if cand is None:
            raise _exhausted(spec, plan.stopped, plan)
        made = attempt.for_candidate(spec, cand)
        zone = cand.zone
        kind = "preemptible" if made.preemptible else made.capacities[0].value
        kind += ", Compute Engine" if made.api == "compute" else ""
        log(f"creating TPU {spec.name} ({made.accelerator_type}, {spec.arch.value}, {kind}) in {zone}"
            + (f" with range {block}" if block else "") + (" through a queued resource" if queued else ""))
        try:
            op = provider.create_tpu(made, zone, block)
        except CloudError as exc:
            f = failure(exc.kind, exc.message, exc.hint)
            if f.kind == Kind.EXISTS and queued and exists_tries < 3:
                # 409 ALREADY_EXISTS: a request of this name appeared since we looked (another up of
                # this cluster); adopt it rather than abort, or clear a dead one and ask again
                exists_tries += 1
                adopted = _existing_request(provider, made, zone, attempt, deadline, log, backoff)
                if adopted is not None:
                    return adopted, cand, block
                continue
            if f.scope in (Scope.ZONE, Scope.REGION):
                log(f"creating TPU in {zone} failed: {f.kind.value}: {exc.message}")
                plan.record(cand, f)
                cand = plan.next()
                if cand is not None:
                    log(f"moving on to {_where(plan, cand)} ({plan.explain()})")
                continue
            raise
        if cand not in plan.tried:
            plan.tried.append(cand)
        attempt.created_tpu = (zone, spec.name)
        attempt.created_queued = queued
        attempt.chosen = cand
        if queued:
            log(f"queued resource {spec.name} asked for in {zone}; waiting for capacity (Ctrl-C or --timeout "
                f"deletes the request)")
        return op, cand, block


def _where(plan: CandidatePlan, cand: Candidate) -> str:
    where = f"{cand.name} in {cand.zone}" if plan.several else f"zone {cand.zone}"
    return f"{where} ({cand.capacity})" if plan.capacities else where


def _next_candidate(plan: CandidatePlan, cand: Candidate, f: Failure, retries: dict[tuple[str, str], int]
                    ) -> Candidate | None:
    """Where to ask next after ``cand``'s create operation failed: the same candidate again for a
    transient error (a few times), the next candidate the failure leaves, or None (stop)."""
    if f.retriable:
        key = (f"tpu:{cand.name}", cand.zone)
        retries[key] = retries.get(key, 0) + 1
        if retries[key] <= OPERATION_RETRIES:
            return cand
        f = Failure(f.kind, Scope.ZONE, f.message, f.hint)     # it keeps failing there
    plan.record(cand, f)
    if f.scope not in (Scope.ZONE, Scope.REGION):
        return None
    return plan.next()


def _existing_request(provider: Provider, spec: ClusterSpec, zone: str, attempt: _Attempt, deadline: float,
                      log: Log, backoff: Backoff) -> Operation | None:
    """The queued resource a create was refused for (409): its watch operation when it is this
    cluster's and alive (adopted), None when it was dead or gone (ask again); a request that is
    not this cluster's stops ``up`` with the command that deletes it."""
    req = provider.get_queued(zone, spec.name)
    if req is None:
        return None
    if req.cluster != spec.name:
        raise CloudError(f"a queued resource named {spec.name} already exists in {zone} ({req.state.value}) and is "
                         f"not tpuctl cluster {spec.name}'s (its node has no tpuctl-cluster={spec.name} label)",
                         kind="exists", zone=zone,
                         hint=f"pick another cluster name, or delete it: gcloud compute tpus queued-resources "
                              f"delete {spec.name} --zone {zone} --force")
    if req.dead or req.state == QueuedState.DELETING:
        _delete_dead_request(provider, req, deadline, log, backoff)
        return None
    _check_request(spec, req)
    log(f"{req.describe()} already exists: another tpuctl up of this cluster asked for it; waiting for it (adopted)")
    attempt.adopted_request = (zone, spec.name)
    return provider.watch_queued(zone, spec.name)


def _delete_dead_request(provider: Provider, req: QueuedRequest, deadline: float, log: Log,
                         backoff: Backoff) -> None:
    """Delete a FAILED or SUSPENDED request (it holds quota and never provisions) and wait until it is gone."""
    if req.state != QueuedState.DELETING:
        log(f"deleting {req.describe()}: a {req.state.value} request never provisions and holds quota "
            f"({req.quota()}) until deleted")
        op = delete_request(provider, req, log=log)
        if op is not None:
            wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
    wait_until(lambda: provider.get_queued(req.zone, req.name) is None, timeout=_left(deadline), backoff=backoff)


def _exhausted(spec: ClusterSpec, failure: Failure | None, plan: CandidatePlan) -> CloudError:
    """Why ``up`` stops asking for the TPU: a failure that stops the search (a missing role, a request
    no zone can grant) as itself, in the zone that said it; else every candidate failed, each as it did."""
    last = plan.tried[-1] if plan.tried else None
    if failure is not None and failure.scope not in (Scope.ZONE, Scope.REGION):
        where = f" in {last.zone}" if last else ""
        what = f" ({last.name})" if last and plan.several else ""
        return CloudError(f"creating TPU {spec.name}{what}{where} failed: {failure.message}", kind=failure.kind.value,
                          hint=failure.hint, zone=last.zone if last else None)
    tried = ",".join(plan.label(c) for c in plan.tried) or "none"
    skipped = [plan.label(c) for c in plan.untried()]
    what = f"TPU of any of {','.join(plan.types)}" if plan.several else f"{spec.accelerator_type} TPU"
    more = "--zone or --accelerator-type" if plan.several else "--zone"
    hint = f"add zones to {more} (tried {tried}"
    hint += f"; not asked: {','.join(skipped)}" if skipped else ""
    return CloudError(f"no zone could create a {what} ({plan.explain()})", kind="stockout",
                      hint=hint + "), or retry later")


def _forget_failed_tpu(provider: Provider, spec: ClusterSpec, zone: str, attempt: _Attempt, deadline: float,
                       backoff: Backoff, *, queued: bool = False, log: Log = noop) -> None:
    """A failed create may leave a node record behind (in the cloud, a failed node): delete it. A failed
    queued resource stays FAILED, holding quota, until deleted: delete it (and any node it made)."""
    if queued:
        req = provider.get_queued(zone, spec.name)
        if req is not None:
            _delete_dead_request(provider, req, deadline, log, backoff)
        attempt.created_tpu, attempt.created_queued, attempt.adopted_request = None, False, None
    node = provider.get_tpu(zone, spec.name)
    if node is not None:
        try:
            op = provider.delete_tpu(zone, spec.name)
            wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
        except NotFound:
            pass
        wait_until(lambda: provider.get_tpu(zone, spec.name) is None, timeout=_left(deadline), backoff=backoff)
    attempt.created_tpu = None


def _move_vm(provider: Provider, spec: ClusterSpec, attempt: _Attempt, zone: str, vm_op: Operation | None,
             deadline: float, log: Log, backoff: Backoff) -> Operation:
    old_zone = attempt.created_vm[0]
    log(f"moving host VM {spec.name} from {old_zone} to {zone}, next to its TPU")
    if vm_op is not None and not vm_op.done:
        wait_all(provider, [vm_op], timeout=_left(deadline), backoff=backoff)
    op = provider.delete_vm(old_zone, spec.name)
    attempt.created_vm = None
    wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
    new = provider.create_vm(attempt.in_zone(spec.with_zone(zone), zone), zone)
    attempt.created_vm = (zone, spec.name)
    return new


def _wait_ready(provider: Provider, name: str, zone: str, deadline: float, log: Log, backoff: Backoff) -> TpuNode:
    seen: dict[str, TpuNode | None] = {"node": None}

    def ready() -> bool:
        node = provider.get_tpu(zone, name)
        seen["node"] = node
        if node is None:
            raise CloudError(f"TPU {name} disappeared from {zone} while starting", kind="not_found", zone=zone)
        if node.dead:
            raise CloudError(f"TPU {name} was {node.state.value} while starting", kind="stockout", zone=zone)
        return node.usable

    if not wait_until(ready, timeout=_left(deadline), backoff=backoff):
        node = seen["node"]
        state = f"{node.state.value}/{node.health.value}" if node else "missing"
        raise OperationTimeout([Operation(name="-", zone=zone, verb="wait for READY", kind="tpu",
                                          target=f"{name} (still {state})")])
    node = seen["node"]
    assert node is not None
    return node


def _fail(provider: Provider, spec: ClusterSpec, attempt: _Attempt, exc: BaseException, *,
          keep_on_failure: bool, log: Log, backoff: Backoff) -> None:
    """Undo what this call created (or keep it, on request) and raise one error that says what remains."""
    if isinstance(exc, OperationTimeout):
        cause = f"timed out waiting for: {exc}"
    elif isinstance(exc, KeyboardInterrupt):
        cause = "interrupted"
    elif isinstance(exc, TpuctlError):
        cause = exc.one_line()
    else:
        cause = f"{type(exc).__name__}: {exc}"
    made = []
    if attempt.created_tpu:
        made.append(("queued" if attempt.created_queued else "tpu",) + attempt.created_tpu)
    if attempt.created_vm:
        made.append(("vm",) + attempt.created_vm)
    # a queued resource this call adopted (an earlier up asked for it) is not this call's to delete:
    # it stays, and the error line names it
    kept = ([_describe_remaining(spec, "queued", *attempt.adopted_request) + ", kept: it was there before this call"]
            if attempt.adopted_request else [])
    if keep_on_failure:
        remaining = kept + [_describe_remaining(spec, kind, zone, name) for kind, zone, name in made]
        if attempt.reserved:
            remaining.append(f"range reservation {attempt.reserved} (freed by tpuctl down {spec.name})")
        raise PartialFailure(f"up failed: {cause}", remaining=remaining,
                             hint=f"kept as asked (--keep-on-failure); rerun tpuctl up {spec.name} to finish, "
                                  f"or tpuctl down {spec.name}") from (None if isinstance(exc, TpuctlError) else exc)
    if made:
        log(f"up failed ({cause}); rolling back what this call created")
    remaining = _rollback(provider, spec, made, log=log, backoff=backoff)
    if attempt.reserved and not any(k == "tpu" for k, _z, _n in remaining):
        try:
            provider.release_range(spec.name)
        except Exception as rexc:  # noqa: BLE001 - reported below, never hidden
            remaining.append(("range", "-", f"{attempt.reserved} ({rexc})"))
    if remaining:
        raise PartialFailure(f"up failed: {cause}; rollback incomplete",
                             remaining=kept + [_describe_remaining(spec, k, z, n) for k, z, n in remaining],
                             hint=f"run tpuctl down {spec.name} to delete them") from None
    if kept:
        what = f"rolled back {_list(made)}" if made else "nothing of this call's to roll back"
        raise PartialFailure(f"up {'interrupted' if isinstance(exc, KeyboardInterrupt) else f'failed: {cause}'}; "
                             f"{what}", remaining=kept,
                             hint=f"rerun tpuctl up {spec.name} to wait for it again, or tpuctl down {spec.name}"
                             ) from None
    if isinstance(exc, KeyboardInterrupt):
        raise TpuctlError(f"up interrupted; rolled back: {_list(made) or 'nothing had been created'}") from None
    if isinstance(exc, TpuctlError):
        if made:
            exc.message = f"{exc.message}; rolled back {_list(made)}, nothing remains"
        raise exc
    if isinstance(exc, OperationTimeout):
        raise CloudError(f"up timed out waiting for {exc}; rolled back {_list(made) or 'nothing'}",
                         kind="timeout", hint="retry with a longer --timeout or in another zone") from None
    raise exc


def _list(made: list[tuple[str, str, str]]) -> str:
    what = {"vm": "VM", "tpu": "TPU", "queued": "queued resource"}
    return ", ".join(f"{what.get(k, k)} {n} ({z})" for k, z, n in made)


def _describe_remaining(spec: ClusterSpec, kind: str, zone: str, name: str) -> str:
    if kind == "tpu" and spec.api == "compute":
        return (f"TPU {name} in {zone} (billed; Compute Engine instance, or MIG with its instance template and "
                f"workload policy, all named {name}-tpu; delete with tpuctl down {spec.name})")
    if kind == "tpu":
        cmd = (f"gcloud compute tpus tpu-vm delete {name} --zone {zone}" if spec.arch == Arch.VM
               else f"gcloud compute tpus delete {name} --zone {zone}")
        return f"TPU {name} in {zone} (billed; delete with tpuctl down {spec.name} or {cmd})"
    if kind == "vm":
        return f"VM {name} in {zone} (billed; delete with tpuctl down {spec.name} or " \
               f"gcloud compute instances delete {name} --zone {zone})"
    if kind == "queued":
        return (f"queued resource {name} in {zone} (holds quota and becomes a billed TPU once capacity frees up; "
                f"delete with tpuctl down {spec.name} or gcloud compute tpus queued-resources delete {name} "
                f"--zone {zone} --force)")
    return f"{kind} {name}"


def _rollback(provider: Provider, spec: ClusterSpec, made: list[tuple[str, str, str]], *, log: Log,
              backoff: Backoff) -> list[tuple[str, str, str]]:
    ops, remaining = [], []
    for kind, zone, name in made:
        try:
            if kind == "queued":
                # the request, and with force the node it may be making (a waiting one has none)
                req = provider.get_queued(zone, name)
                op = delete_request(provider, req, log=log) if req is not None else None
                if op is None:
                    continue
            else:
                op = provider.delete_tpu(zone, name) if kind == "tpu" else provider.delete_vm(zone, name)
            ops.append((kind, zone, name, op))
        except NotFound:
            continue
        except Exception as exc:  # noqa: BLE001 - a failed rollback is reported, not raised over the cause
            log(f"could not delete {kind} {name} in {zone}: {exc}")
            remaining.append((kind, zone, name))
    try:
        wait_all(provider, [op for *_r, op in ops], timeout=600, backoff=backoff)
    except Exception as exc:  # noqa: BLE001
        log(f"waiting for rollback deletions failed: {exc}")
        return remaining + [(k, z, n) for k, z, n, _op in ops]
    for kind, zone, name, op in ops:
        if op.error and op.error.code != 5:
            remaining.append((kind, zone, name))
        else:
            log(f"rolled back {_list([(kind, zone, name)])}")
    return remaining


def recreate_tpu(provider: Provider, spec: ClusterSpec, *, timeout: float = 1800.0, log: Log = noop,
                 backoff: Backoff | None = None) -> UpResult:
    """Delete the cluster's TPU whatever its state, then bring it back: same name, type and range.

    The range reservation survives the deletion, so the new node gets its old block back; a
    stockout moves it to the next allowed zone as ``up`` does.
    """
    backoff = backoff or Backoff()
    keep_image = None
    prefer = None
    for node in find(provider, spec.name).tpus:
        prefer = prefer or (node.accelerator_type, node.zone)    # its type and zone first, then the rest
        if node.arch == Arch.VM and node.version:
            keep_image = keep_image or node.version     # the new node keeps the image where offered
        if node.state != TpuState.DELETING:
            log(f"deleting TPU {node.name} in {node.zone} ({node.state.value})")
            try:
                op = provider.delete_tpu(node.zone, node.name)
                price = tpu_price(node, provider.price_book())
                ledger.tpu_deleted(provider, spec.name, node, by="recreate", hourly_usd=price.usd_per_hour,
                                   price=price.to_dict())
                wait_all(provider, [op], timeout=timeout, backoff=backoff)
            except NotFound:
                pass
        wait_until(lambda n=node: provider.get_tpu(n.zone, n.name) is None, timeout=timeout, backoff=backoff)
        spec = spec.with_zone(node.zone) if node.zone in spec.zones else spec
    return up(provider, spec, timeout=timeout, log=log, backoff=backoff, keep_image=keep_image, prefer=prefer)
