"""What ``up`` observes before it plans: the cluster's resources once deletions under way are over,
and which (type, zone) can host it, with each zone's image and host machine type.

Reads only: nothing here creates anything, so a refusal (no zone offers the type, no image fits)
is a usage error before any resource exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..basics.errors import CloudError, UsageError
from ..catalog import compute_tpus, prices
from ..catalog.accelerators import parse
from ..catalog.zones import short_list, suggested_zone, zones_of
from ..cloud.base import (
    Arch,
    ClusterSpec,
    Provider,
    QueuedRequest,
    QueuedState,
    TpuNode,
    TpuState,
    Vm,
    VmState,
)
from ..cloud.capacity import Capacity
from ..cloud.failures import Scope, failure
from ..cloud.operations import Backoff, wait_until
from . import capacity as capacity_plan
from .candidates import Candidate, rank
from .offers import Offers, ZoneFit, plan_zones
from .plan import Existing, image_to_keep
from .resources import Log


def _settled(thing: Any, going: bool, what: str, gone: Callable[[], bool], *, dry_run: bool, timeout: float,
             backoff: Backoff, log: Log, then: str = "") -> Any:
    """``thing``, or None once it was being deleted and is gone (a dry run does not wait)."""
    if thing is None or not going:
        return thing
    log(f"{what} {thing.name} in {thing.zone} is being deleted; waiting for it to go{then}")
    if not dry_run:
        wait_until(gone, timeout=timeout, backoff=backoff)
    return None


def settled_tpu(provider: Provider, tpu: TpuNode | None, *, dry_run: bool, timeout: float, backoff: Backoff,
                log: Log) -> TpuNode | None:
    """The cluster's TPU, or None once one being deleted is gone: it is recreated after."""
    going = tpu is not None and tpu.state == TpuState.DELETING
    return _settled(tpu, going, "TPU", lambda: provider.get_tpu(tpu.zone, tpu.name) is None,  # type: ignore[union-attr]
                    dry_run=dry_run, timeout=timeout, backoff=backoff, log=log, then=" before recreating")


def settled_request(provider: Provider, req: QueuedRequest | None, *, dry_run: bool, timeout: float,
                    backoff: Backoff, log: Log) -> QueuedRequest | None:
    """The cluster's queued resource, or None once one being deleted is gone."""
    going = req is not None and req.state == QueuedState.DELETING
    return _settled(req, going, "queued resource",
                    lambda: provider.get_queued(req.zone, req.name) is None,  # type: ignore[union-attr]
                    dry_run=dry_run, timeout=timeout, backoff=backoff, log=log)


def settled_vm(provider: Provider, vm: Vm | None, *, dry_run: bool, timeout: float, backoff: Backoff,
               log: Log) -> Vm | None:
    """The cluster's host VM, or None once one being deleted is gone."""
    going = vm is not None and vm.state == VmState.STOPPING
    return _settled(vm, going, "host VM", lambda: provider.get_vm(vm.zone, vm.name) is None,  # type: ignore[union-attr]
                    dry_run=dry_run, timeout=timeout, backoff=backoff, log=log)


def offered(provider: Provider, spec: ClusterSpec, existing: Existing, zones: list[str], offers: Offers,
            book: prices.PriceBook, *, keep_image: str | None, prefer: tuple[str, str] | None, log: Log
            ) -> tuple[list[Candidate], dict[tuple[str, str], ZoneFit]]:
    """Which (type, zone) to ask for, and what each zone offers: image, host machine type. Without a
    TPU to make, no candidates: only the zones' host machine types, when a host VM is made."""
    need_vm = existing.need_vm(spec)
    if existing.need_tpu:
        return ranked_candidates(provider, spec, zones, offers, book, need_vm=need_vm,
                                 keep_image=image_to_keep(existing, keep_image), prefer=prefer, log=log)
    if need_vm:
        vm_fits = plan_zones(offers, spec, zones, tpu=False, vm=True, log=log)
        return [], {(spec.accelerator_type, z): f for z, f in vm_fits.items()}
    return [], {}


def ranked_candidates(provider: Provider, spec: ClusterSpec, zones: list[str], offers: Offers, book: prices.PriceBook,
                      *, need_vm: bool, keep_image: str | None, prefer: tuple[str, str] | None, log: Log
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
        if len(offered) < len(zones):
            check_zones_exist(provider, [z for z in zones if z not in offered])
        try:
            if not offered:
                capacity_plan.check_provider(provider, spec, acc)
                other = zone_offering(provider, spec, acc, tried=zones)
                raise UsageError(f"{acc.name} is not offered in {', '.join(zones)}",
                                 hint=f"pick a zone that offers it ({capacity_plan.listing_command(acc)})"
                                      + (f", e.g. --zone {other}" if other else ""))
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
            return p.usd_per_hour or None      # unknown (None) and nothing (0) rank no candidate
        return price

    order = tuple(c.value for c in spec.capacities)
    cands = rank([a for a in types if a.name in zones_of], zones_of, price_for(order[0]),
                 in_order=spec.in_order or not several, capacities=order, price_for=price_for,
                 allows=lambda acc, zone, cap: capacity_plan.allowed(spec, fits[(acc.name, zone)].api, cap))
    if not cands:
        raise capacity_plan.nothing_to_ask(spec, zones, types,
                                           {a.name: _compute_zones(provider, a) for a in types})
    skipped = capacity_plan.left_out(spec, {k: f.api for k, f in fits.items()})
    if skipped:
        log(f"left out (the Cloud TPU API has no such capacity): {', '.join(skipped)}")
    if prefer is not None:
        # its type and zone first within each capacity, the capacity order kept (stable sort)
        cands.sort(key=lambda c: (order.index(c.capacity), (c.name, c.zone) != prefer))
    return cands, fits


def check_zones_exist(provider: Provider, zones: Sequence[str]) -> None:
    """A zone that offers nothing may not exist at all (``us-central1-z``): that is a typo to name,
    with the zones its region has, not a type "not offered there". One ``zones.list``, asked only
    when some zone offered nothing; a region that answers nothing (or a failed question) says
    nothing here, and the caller's own line stands."""
    regions: dict[str, list[str]] = {}
    for zone in zones:
        region = zone.rsplit("-", 1)[0]
        if region not in regions:
            try:
                regions[region] = provider.region_zones(region)
            except CloudError:
                return
        have = regions[region]
        if have and zone not in have:
            raise UsageError(f"no zone {zone} in region {region}; its zones: {short_list(have)}",
                             hint=f"use one of them, e.g. --zone {have[0]} (gcloud compute zones list)")


def _compute_zones(provider: Provider, acc: Any) -> list[str]:
    """Where Compute Engine sells ``acc``, asked of the cloud (one aggregated machine-types list);
    [] where the provider has no Compute Engine TPUs, or the question fails (it only feeds a hint)."""
    shape = compute_tpus.shape(acc)
    if shape is None or not provider.offers_compute_tpus:
        return []
    try:
        return provider.machine_type_zones(shape.machine_type)
    except CloudError:
        return []


def zone_offering(provider: Provider, spec: ClusterSpec, acc: Any, *, tried: Sequence[str]) -> str | None:
    """A zone to suggest when none of ``tried`` offers ``acc`` through the API the spec asks for:
    never one that was just tried. Compute Engine's zones are the cloud's answer; the Cloud TPU
    API's, the bundled table (catalog/zones.py), as the local provider rehearses them."""
    on_compute = spec.api == "compute" or not acc.served_by("tpu")
    zones = _compute_zones(provider, acc) if on_compute else list(zones_of(acc.generation.name))
    if not zones and not on_compute:
        zones = [suggested_zone(acc.generation.name)]
    near = capacity_plan.nearest_zones(zones, tried[0] if tried else "", leave_out=tried)
    return near[0] if near else None


def api_line(provider: Provider, spec: ClusterSpec, accelerator_type: str, zone: str, api: str) -> str:
    """``up``'s line on which API makes the TPU and why; where the Cloud TPU API was taken for a
    type Compute Engine sells too (not for TPU Nodes or queued resources, which only it has), it
    names the zones that sell it there."""
    acc = parse(accelerator_type)
    api = api or "tpu"
    asks = api == "tpu" and spec.arch != Arch.NODE and not spec.queued
    return capacity_plan.api_line(spec, acc, zone, api, _compute_zones(provider, acc) if asks else ())


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
