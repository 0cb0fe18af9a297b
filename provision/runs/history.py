"""What past runs measured, for the next estimate: rates, input rates, preemptions, recoveries. Pure.

The ledger here is the runs' own records (``run.json`` in their buckets, found through this
machine's index of runs): each says what work it did (``workload``: the key of
:func:`provision.runs.flops.workload_key`), on which type, zone and tier (``pricing``), how fast it
trained once warm (``pace.meter``), how long it held its TPU, how often it was preempted and how
long each recovery took (its goodput summary's ``recovery_s``, one per preemption; for a record
without one, ``seconds_lost`` over ``preemptions``). :mod:`provision.runs.forecast` reads
the records; this module turns them into the figures an estimate uses, each with its basis.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..catalog.performance import RECOVERY_S, default_preemptions_per_hour
from .estimate import Interruptions, Measured

# a rate of preemptions is taken from the ledger once it has seen one, or this many held hours
# without any (fewer hours with none say little: the cited default stays)
MIN_HOURS_WITHOUT_PREEMPTION = 24.0
# and never from fewer held hours than this in all: a rate per hour read off minutes of holding
# extrapolates a handful of events (five practice preemptions in a few minutes are "112 an hour",
# and no run finishes), so under an hour the cited default stays. One hour is the shortest window
# in which a count is a rate per hour at all; the default it replaces is 1 per 24 hours.
MIN_HELD_HOURS = 1.0
HELD_STATES = ("training", "making_data", "starting", "waiting")


@dataclass(frozen=True)
class RunFacts:
    run_id: str
    workload: str | None
    accelerator_type: str | None
    zone: str
    interruptible: bool
    steps: int                 # steady steps measured
    seconds: float             # over these seconds
    examples_per_step: int
    hosts: int
    preemptions: int
    held_s: float
    seconds_lost: float
    warmups: tuple[float, ...] = ()
    provider: str | None = None  # the run's provider: its preemptions count only for estimates there
    # each preemption's recovery, seen to the first new step (its goodput summary's recovery_s);
    # empty for a run whose record has none (a tpuctl before it kept them)
    recoveries: tuple[float, ...] = ()

    @property
    def steps_per_sec(self) -> float | None:
        return self.steps / self.seconds if self.steps > 0 and self.seconds > 0 else None


def facts(record: Mapping[str, Any]) -> RunFacts | None:
    """A run record's facts; None for a record from before tpuctl kept them (no ``pricing``)."""
    pricing = record.get("pricing") or {}
    work = record.get("workload") or {}
    if not pricing.get("accelerator_type"):
        return None
    meter = (record.get("pace") or {}).get("meter") or {}
    held = record.get("seconds_by_state") or {}
    return RunFacts(
        run_id=str(record.get("run_id")), workload=work.get("key"), accelerator_type=pricing["accelerator_type"],
        zone=str(pricing.get("zone") or record.get("zone") or ""), interruptible=pricing.get("tier") != "on-demand",
        steps=int(meter.get("steps") or 0), seconds=float(meter.get("seconds") or 0.0),
        examples_per_step=int(work.get("train_batch_size") or 0), hosts=int(work.get("hosts") or 1),
        preemptions=int(record.get("preemptions") or 0),
        held_s=sum(float(held.get(s) or 0.0) for s in HELD_STATES),
        seconds_lost=float(record.get("seconds_lost") or 0.0),
        warmups=tuple(float(w) for w in meter.get("warmups") or () if isinstance(w, (int, float))),
        provider=str(record["provider"]) if record.get("provider") else None,
        recoveries=_recoveries(record.get("goodput")))


def _recoveries(g: Any) -> tuple[float, ...]:
    rec = g.get("recovery_s") if isinstance(g, Mapping) else None
    return tuple(float(x) for x in rec if isinstance(x, (int, float)) and not isinstance(x, bool)
                 and math.isfinite(x) and x >= 0) if isinstance(rec, list) else ()


def median_recovery(runs: Iterable[RunFacts], *, provider: str, accelerator_type: str) -> tuple[float, str, int] | None:
    """The median recovery of ``provider``'s past runs on ``accelerator_type`` (any zone, tier or
    work: a recovery is the TPU's deletion and creation, the hosts' bootstrap and the program's
    restore), over every preemption they measured: seconds, its basis in words, and how many.
    A run's summary names each preemption's recovery; a run without one (a tpuctl before it kept
    them) counts its mean (``seconds_lost`` / ``preemptions``) once per preemption. None: none."""
    values: list[float] = []
    for r in runs:
        if r.provider != provider or r.accelerator_type != accelerator_type or not r.preemptions:
            continue
        values += list(r.recoveries) if r.recoveries else [r.seconds_lost / r.preemptions] * r.preemptions
    if not values:
        return None
    mid = statistics.median(values)
    basis = f"measured over {len(values)} preemption(s) of past {accelerator_type} runs on {provider} (their median)"
    return mid, basis, len(values)


def measured(runs: Iterable[RunFacts], workload: str, accelerator_type: str) -> Measured | None:
    """The steady rate of ``workload`` on ``accelerator_type``, over every past run that measured one."""
    same = [r for r in runs if r.workload == workload and r.accelerator_type == accelerator_type and r.steps_per_sec]
    if not same:
        return None
    steps, seconds = sum(r.steps for r in same), sum(r.seconds for r in same)
    warmups = [w for r in same for w in r.warmups]
    return Measured(steps / seconds, steps, seconds, tuple(r.run_id for r in same),
                    warmup_s=sum(warmups) / len(warmups) if warmups else 0.0)


def input_per_host(runs: Iterable[RunFacts], workload: str) -> float | None:
    """The most examples/s per host the input pipeline delivered to ``workload`` in any past run."""
    rates = [r.steps_per_sec * r.examples_per_step / max(1, r.hosts) for r in runs
             if r.workload == workload and r.steps_per_sec and r.examples_per_step]
    return max(rates) if rates else None


def interruptions(runs: Iterable[RunFacts], *, provider: str, zone: str, accelerator_type: str,
                  interruptible: bool, spot: bool) -> Interruptions:
    """Interruptions per held hour and recovery seconds for a type in a zone and tier on
    ``provider``: the ledger's when it has enough, the cited defaults
    (:mod:`provision.catalog.performance`) otherwise.

    Only ``provider``'s own runs count: preemptions practised on the local provider (``tpuctl
    simulate preempt``) say nothing about Google Cloud's, nor the other way round. A rate needs
    :data:`MIN_HELD_HOURS` of holding in all; short of it the basis says how little was held."""
    runs = list(runs)
    rate = default_preemptions_per_hour(interruptible, spot)
    if rate is None:
        return Interruptions.none()
    same = [r for r in runs if r.provider == provider and r.interruptible and r.zone == zone
            and r.accelerator_type == accelerator_type]
    count = sum(r.preemptions for r in same)
    hours = sum(r.held_s for r in same) / 3600.0
    per_hour, per_hour_basis = rate.value, rate.flag()
    if same and hours >= MIN_HELD_HOURS and (count or hours >= MIN_HOURS_WITHOUT_PREEMPTION):
        per_hour = count / hours
        per_hour_basis = f"ledger: {count} preemption(s) in {hours:.1f} held hours of {len(same)} run(s) here"
    elif count:
        per_hour_basis = (f"{per_hour_basis}; the ledger's {count} preemption(s) here came in "
                          f"{hours * 60:.0f} min held, under the {MIN_HELD_HOURS:g} h a rate needs")
    recovery, recovery_basis, count = RECOVERY_S.value, RECOVERY_S.flag(), 0
    found = median_recovery(runs, provider=provider, accelerator_type=accelerator_type)
    if found is not None:
        recovery, recovery_basis, count = found
    return Interruptions(per_hour, per_hour_basis, recovery, recovery_basis, recoveries_measured=count)
