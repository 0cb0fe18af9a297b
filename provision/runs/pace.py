"""A live run's pace: its steady steps/s, its finish (ETA) and projected total, and how that moved. Pure.

**Steady steps/s** come from the job's progress record as the supervisor reads it, look after
look: within one process of the job, from the first look after its first trained step (the first
host loop carries the compilation; a restore comes before it) to the latest, summed over the
processes of the run. A preemption's recovery, a restore and a warm-up are never in it.

**The projection**: the steps left at that rate, stretched by the interruptions a spot or
preemptible TPU is expected to suffer (:func:`provision.runs.estimate.duration`), gives the ETA;
what is spent plus that time at the list price gives the projected total. Each look's projection
is kept (thinned to :data:`KEPT` points, the first always kept), so ``status`` can say how it moved
since the start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .caps import Caps, Decision, Looked, Verdict, crossings, decide, usd
from .estimate import MIN_ESTIMATE_S, duration, lost_per_interruption_s

KEPT = 48
WARMUPS_KEPT = 16


def meter(prev: Mapping[str, Any] | None, progress: Mapping[str, Any]) -> dict[str, Any]:
    """The meter after one more look at a progress record: ``steps`` and ``seconds`` measured so far,
    the process and (step, step_time) it last anchored at, and each process's warm-up (``warmups``:
    seconds from its start to its first trained step: start-up, restore, compilation)."""
    m = dict(prev or {"steps": 0, "seconds": 0.0})
    started, step = progress.get("started_at"), progress.get("step")
    at, first = progress.get("step_time"), progress.get("first_step_time")
    if not started or not isinstance(step, int) or not isinstance(at, (int, float)) or \
            not isinstance(first, (int, float)) or at < first:
        return m            # this process has not trained its first step yet: warm-up
    if m.get("process") != started or step < int(m.get("step") or 0):
        # a new process: anchor after its warm-up, and keep how long that took (start to first step)
        m.update(process=started, step=step, time=at,
                 warmups=[*(m.get("warmups") or []), round(float(first) - float(started), 1)][-WARMUPS_KEPT:])
        return m
    ds, dt = step - int(m["step"]), float(at) - float(m["time"])
    if ds > 0 and dt > 0:
        m["steps"] = int(m["steps"]) + ds
        m["seconds"] = round(float(m["seconds"]) + dt, 3)
        m.update(step=step, time=at)
    return m


def steps_per_sec(m: Mapping[str, Any] | None) -> float | None:
    """The measured steady rate; None before two looks at a training process."""
    if not m or not m.get("steps") or not m.get("seconds"):
        return None
    return float(m["steps"]) / float(m["seconds"])


@dataclass(frozen=True)
class Projection:
    at: float
    step: int
    steps_per_sec: float | None
    spent_usd: float
    remaining_s: float | None = None      # None: no rate yet
    eta: float | None = None              # unix seconds of the last step
    projected_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"t": round(self.at, 1), "step": self.step,
                "steps_per_sec": round(self.steps_per_sec, 6) if self.steps_per_sec else None,
                "spent_usd": round(self.spent_usd, 6),
                "remaining_s": round(self.remaining_s, 1) if self.remaining_s is not None else None,
                "eta": round(self.eta, 1) if self.eta is not None else None,
                "projected_usd": round(self.projected_usd, 6) if self.projected_usd is not None else None}


def project(*, now: float, step: int, num_train_steps: int, rate: float | None, hourly_usd: float,
            spent_usd: float, per_hour: float, recovery_s: float, checkpoint_steps: int) -> Projection:
    """Where the run ends (time and dollars) from here at ``rate``, with the expected interruptions."""
    if not rate or rate <= 0:
        return Projection(now, step, None, spent_usd)
    compute_s = max(0, num_train_steps - step) / rate
    total_s, _count = duration(compute_s, per_hour=per_hour,
                               per_interruption_s=lost_per_interruption_s(rate, checkpoint_steps, recovery_s))
    return Projection(now, step, rate, spent_usd, total_s, now + total_s, spent_usd + usd(hourly_usd, total_s))


def remember(history: list[dict[str, Any]], p: Projection) -> list[dict[str, Any]]:
    """The projection history with ``p`` added: only projections with a rate, at most :data:`KEPT`
    (every other one dropped when full, the first and the newest kept)."""
    if p.eta is None:
        return history
    out = [*history, p.to_dict()]
    if len(out) > KEPT:
        out = [out[0], *out[1:-1][1::2], out[-1]]
    return out


def moved(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How the projection moved from the first to the newest: ETA and total, then and now."""
    if not history:
        return None
    first, last = history[0], history[-1]
    return {"since": first["t"], "eta_first": first["eta"], "eta_now": last["eta"],
            "usd_first": first["projected_usd"], "usd_now": last["projected_usd"],
            "eta_shift_s": round(last["eta"] - first["eta"], 1),
            "usd_shift": round(last["projected_usd"] - first["projected_usd"], 6)}


def look(rec: Any, *, now: float, finished: bool, stop_s: float
         ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], Decision | None]:
    """One look of the supervisor at a run (a :class:`provision.runs.store.RunRecord` whose
    ``last_progress`` and ``pace.usd_by_state`` are up to date): the new ``pace``, the events to
    log (``cap_warning``, ``projection_crossed``) and the caps' stop, if any (never for a run that
    finished at this look)."""
    pace = dict(rec.pace or {})
    progress = rec.last_progress or {}
    if progress:
        pace["meter"] = meter(pace.get("meter"), progress)
    rate = steps_per_sec(pace.get("meter"))
    pricing = rec.pricing or {}
    hourly = float(pricing.get("usd_per_hour") or 0.0)
    spent = sum(float(v) for v in (pace.get("usd_by_state") or {}).values())
    step = int(progress.get("step") or 0)
    proj = project(now=now, step=step, num_train_steps=rec.num_train_steps, rate=rate, hourly_usd=hourly,
                   spent_usd=spent, per_hour=float(pricing.get("interruptions_per_hour") or 0.0),
                   recovery_s=float(pricing.get("recovery_s") or 0.0), checkpoint_steps=rec.save_checkpoints_steps)
    pace["projections"] = remember(list(pace.get("projections") or []), proj)
    caps = Caps(budget_usd=rec.budget_usd, deadline=rec.deadline, started_at=rec.created_at)
    if finished or not caps.any:
        return pace, [], None
    events: list[tuple[str, dict[str, Any]]] = []
    over = dict(pace.get("over") or {})
    for kind, now_over, line in crossings(caps, projected_usd=proj.projected_usd, projected_end=proj.eta, over=over):
        over[kind] = now_over
        events.append(("projection_crossed", {"cap": kind, "over": now_over, "message": line,
                                              "projected_usd": round(proj.projected_usd or 0.0, 4),
                                              "eta": round(proj.eta or 0.0, 1)}))
    pace["over"] = over
    warned = list(pace.get("warned") or [])
    d = decide(caps, Looked(now=now, spent_usd=spent, hourly_usd=hourly, steps_per_sec=rate, step=step,
                            num_train_steps=rec.num_train_steps, save_checkpoints_steps=rec.save_checkpoints_steps,
                            stop_s=stop_s), warned=frozenset(warned))
    if d.verdict == Verdict.WARN:
        pace["warned"] = [*warned, d.kind]
        events.append(("cap_warning", {"cap": d.kind, "message": d.reason}))
    return pace, events, d if d.verdict == Verdict.STOP else None


ACTIVE_STATES = ("training", "making_data", "waiting")


def summary(rec: Any) -> dict[str, Any]:
    """A run's pace for ``status`` and ``cost`` (and their ``--json``): steps/s, ETA, spend by state,
    projected total and how it moved, its caps, and at the end its estimate against what it took.

    Time and dollars are compared over what an estimate covers: the steps and the recoveries
    (``training``, ``making_data``, ``waiting``), not the start (staging, the TPU's creation), which
    is shown apart; a run that ended before its last step is compared with the estimate's share
    for the steps it did."""
    pace = rec.pace or {}
    usd_by_state = {k: round(float(v), 6) for k, v in (pace.get("usd_by_state") or {}).items()}
    history = list(pace.get("projections") or [])
    last = history[-1] if history else {}
    out: dict[str, Any] = {
        "steps_per_sec": steps_per_sec(pace.get("meter")),
        "eta": last.get("eta") if rec.live else None,
        "remaining_s": last.get("remaining_s") if rec.live else None,
        "spent_usd": round(sum(usd_by_state.values()), 6), "spent_usd_by_state": usd_by_state,
        "projected_usd": last.get("projected_usd") if rec.live else None,
        "moved": moved(history), "budget_usd": rec.budget_usd, "deadline": rec.deadline,
        "stopped_by": rec.stopped_by, "estimate": rec.estimate, "vs_estimate": None}
    est = rec.estimate or {}
    # an estimate under a second (stored before tpuctl refused to make one) had no basis: no comparison
    if not rec.live and float(est.get("total_s") or 0.0) >= MIN_ESTIMATE_S and est.get("steps"):
        done = max(0, int(rec.step or 0))
        share = min(1.0, done / float(est["steps"]))
        seconds = sum(float((rec.seconds_by_state or {}).get(s) or 0.0) for s in ACTIVE_STATES)
        dollars = sum(usd_by_state.get(s, 0.0) for s in ACTIVE_STATES)
        out["vs_estimate"] = {
            "steps": done, "estimate_s": round(est["total_s"] * share, 1),
            "estimate_usd": round(float(est["total_usd"]) * share, 6), "actual_s": round(seconds, 1),
            "actual_usd": round(dollars, 6),
            "starting_s": round(float((rec.seconds_by_state or {}).get("starting") or 0.0), 1),
            "starting_usd": usd_by_state.get("starting", 0.0),
            "time_error": _error(seconds, est["total_s"] * share),
            "usd_error": _error(dollars, float(est["total_usd"]) * share)}
    return out


def _error(actual: float, estimated: float) -> float | None:
    """(estimate - actual) / actual: +0.10 is an estimate 10 % too high."""
    return round((estimated - actual) / actual, 4) if actual > 0 else None
