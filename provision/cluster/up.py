"""``up``: check what exists, plan, apply, and roll back on failure.

The cloud is the source of truth. Every resource carries ``tpuctl-cluster=<name>``, so ``up``
after a crash finds what the crashed run made and adopts it instead of creating a duplicate, and
``down`` finds everything to delete whatever the local cache says. The steps have homes of their
own: what exists and what the zones offer (``survey``), the decisions (``plan``, pure: the
``UpPlan`` a dry run reports), creating with zone failover (``apply``) and undoing this call's
resources when it fails (``rollback``); ``recreate_tpu`` (``recreate``) runs ``up`` again after a
preemption.
"""

from __future__ import annotations

import time

from ..catalog import prices
from ..cloud.base import ClusterSpec, Provider
from ..cloud.capacity import Capacity
from ..cloud.operations import Backoff
from . import apply as applying
from . import ledger, plan, survey
from .cache import cache_spec
from .offers import Offers
from .resources import Log, find, noop
from .result import UpResult, as_made, chosen_note
from .rollback import Attempt, fail


def up(provider: Provider, spec: ClusterSpec, *, dry_run: bool = False, keep_on_failure: bool = False,
       timeout: float = 1800.0, log: Log = noop, backoff: Backoff | None = None, offers: Offers | None = None,
       keep_image: str | None = None, prefer: tuple[str, str] | None = None, by: str = "tpuctl up") -> UpResult:
    """``offers``: zone catalogues already asked for in this command; ``keep_image``: the image of a
    TPU being recreated, kept in every zone that still offers it; ``prefer``: the (type, zone) of a
    TPU being recreated, asked for first whatever the price order says; ``by``: who asked, in its
    time by phase (``UpResult.startup``)."""
    start = time.monotonic()
    backoff = backoff or Backoff()
    result = UpResult(spec=spec, dry_run=dry_run, book=provider.price_book())
    result.marks.update(began=round(time.time(), 3), by=by)
    found = find(provider, spec.name)

    # --- check: adopt what exists, refuse what conflicts, wait out deletions under way --------
    waiting = {"dry_run": dry_run, "timeout": timeout, "backoff": backoff, "log": log}
    tpu = survey.settled_tpu(provider, found.tpu, **waiting)
    spec, prefer = plan.adopt_tpu(spec, tpu, prefer)
    # A queued resource without a node is the cluster's TPU to be: adopted while it is asked for,
    # replaced when dead (FAILED and SUSPENDED requests hold quota and never provision again).
    req = survey.settled_request(provider, found.request if tpu is None else None, **waiting)
    spec, prefer = plan.adopt_request(spec, req, prefer)
    vm = survey.settled_vm(provider, found.vm, **waiting)
    existing = plan.Existing(vm=vm, tpu=tpu, request=req)

    # --- plan: the zones, what each offers, the range; a user's block is checked here ----------
    zones = plan.zone_order(spec, existing)
    cands, fits = survey.offered(provider, spec, existing, zones, offers or Offers(provider), result.book,
                                 keep_image=keep_image, prefer=prefer, log=log)
    the_plan = plan.make(spec, existing, zones, cands, fits, reserved=lambda: provider.reserved_range(spec),
                         used=lambda: provider.used_ranges(spec), pool=applying.range_pool(provider),
                         provider=provider.name, offers_queued=provider.offers_queued)
    spec = the_plan.spec
    result.spec = spec
    result.adopted.extend(the_plan.adopted)
    result.planned.extend(the_plan.planned)
    result.notes.extend(the_plan.notes)
    if not dry_run:
        for note in the_plan.said:
            log(note)

    if dry_run:
        if existing.need_tpu and the_plan.candidates:       # the API it would use, and why
            first = the_plan.candidates[0]
            fit0 = the_plan.fits.get((first.name, first.zone))
            result.notes.append(survey.api_line(provider, spec, first.name, first.zone, fit0.api if fit0 else ""))
            book = result.book or prices.BUNDLED
            order = plan.capacity_order_note(the_plan.candidates, lambda c: book.tpu_price(
                c.accelerator, c.zone, prices.tier_of(Capacity(c.capacity).interruptible, c.capacity)))
            if order:
                result.notes.append(order)
        result.notes.extend(provider.caveats(the_plan.planned_zone, spec.accelerator.name))
        result.spec = the_plan.as_planned
        result.zone = the_plan.zone
        result.cidr = the_plan.block
        result.vm, result.tpu = vm, tpu
        result.seconds = time.monotonic() - start
        return result

    # --- apply, and on any failure roll back what this call created ---------------------------
    attempt = Attempt(had=the_plan.had, fits=dict(the_plan.fits))
    try:
        applying.apply(provider, spec, result, attempt, vm=vm, tpu=tpu, dead=existing.dead,
                       need_vm=the_plan.need_vm, zones=list(the_plan.zones), cands=list(the_plan.candidates),
                       block=the_plan.block, timeout=timeout, log=log, backoff=backoff, request=req)
    except BaseException as exc:
        fail(provider, spec, attempt, exc, keep_on_failure=keep_on_failure, log=log, backoff=backoff)
        raise  # fail raises; this is for type checkers

    # --- record: the spec as made in the cache, the TPU's creation in the ledger ----------------
    result.spec = as_made(spec, result)
    chosen = attempt.chosen
    if chosen is not None and the_plan.candidates and chosen != the_plan.candidates[0]:
        # a later candidate was taken (another capacity, zone or type): say that one, not the first asked for
        first = plan.tpu_line(spec.name, the_plan.candidates[0], the_plan.fits, block=the_plan.block,
                              how=" through a queued resource" if the_plan.queued else "")
        taken = plan.tpu_line(spec.name, chosen, the_plan.fits, block=result.cidr or the_plan.block,
                              how=" through a queued resource" if the_plan.queued else "")
        result.planned = [taken if line == first else line for line in result.planned]
    if result.tpu is not None and any(c.startswith("TPU ") for c in result.created):   # the API it used, and why
        result.notes.append(survey.api_line(provider, spec, result.tpu.accelerator_type, result.tpu.zone,
                                            result.tpu.api))
    if result.tpu is not None:
        result.notes.extend(provider.caveats(result.tpu.zone, result.tpu.accelerator_type))
    if attempt.chosen is not None and attempt.plan is not None and (attempt.plan.several or attempt.plan.capacities):
        result.notes.append(chosen_note(spec, attempt.chosen, attempt.plan))
    result.marks["adopted"] = list(result.adopted)
    result.marks["ended"] = round(time.time(), 3)
    # the cache keeps this up's time by phase: status NAME shows where a cluster's bring-up went
    cache_spec(provider, result.spec, zone=result.zone, cidr=result.cidr, startup=result.startup)
    if result.tpu is not None and any(c.startswith("TPU ") for c in result.created):
        ledger.tpu_created(provider, spec.name, result.tpu)
    result.seconds = time.monotonic() - start
    return result
