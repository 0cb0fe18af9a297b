"""Goodput, measured: where a run's wall time went, by cause, from what tpuctl records. Pure.

The terms are Google's, from the ML Goodput Measurement library (``ml-goodput-measurement``,
github.com/AI-Hypercomputer/ml-goodput-measurement, README "Badput Breakdown Details") and the
Cloud TPU page "Monitor goodput with the ML Goodput Measurement library"
(cloud.google.com/tpu/docs/goodput):

- *goodput* is "the proportion of TPU usage time spent making productive, preserved training
  progress"; ``goodput_time`` the productive time in seconds, ``total_elapsed_time`` the wall-clock
  duration "from the moment the application starts running";
- *badput* is the rest, by cause (the library's ``BadputType``): ``TPU_INITIALIZATION`` (device
  discovery, slice initialization), ``TRAINING_PREP`` (checkpoint managers, checkpoint loading),
  ``PROGRAM_STARTUP`` (tracing, compilation, runtime initialization), ``DATA_LOADING_SYNC``,
  ``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME`` / ``_RESTORE_TIME``, ``WASTED_PROGRESS_FROM_DISRUPTION``
  ("time that was spent on productive training but lost after restart"),
  ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION`` (the downtime of a disruption) and ``OTHER``, as the
  library's 0.2.x names them (``DATA_LOADING`` before its 0.0.6; the downtime counted under
  ``WASTED_PROGRESS_FROM_DISRUPTION`` before its 0.0.12).

The library is told these instants by the program itself. tpuctl measures from the outside, for
any program, with what it already records: the run record (``created_at``, ``ended_at``, the
latest ``last_progress``: program start, first step, last step; the ``curve`` of step and time at
each look), its events (``attempt_started``; ``preempted`` with the hit attempt's program start,
first and last step; ``recreate_failed``; ``recreated`` with its seconds; ``resumed`` with the
steps redone, the first new step as ``seconds_lost`` after the preemption and the new program's
start), the hosts' exit records (time, code, after SIGTERM, killed after the grace) and the TPU's
billed lifetimes from the cost ledger. What those do not tell apart is one combined category, and
a span whose cause cannot be told is ``unattributed``: never guessed. A program that has never
reported a step (no progress file, no ``progress_pattern`` match, no TensorBoard scalar) is running
from its start to its exit, but whether it trains, compiles or redoes lost steps is not known: that
span is ``training_no_progress`` ("training, no progress reported"), never goodput and never a
recovery. The categories partition the wall time ``[created_at, ended_at or now)`` exactly
(:func:`breakdown`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import startup as startups

GOODPUT = "goodput"
# every category, in the order they are shown: (key, Google's BadputType it stands for, what it holds)
CATEGORIES: tuple[tuple[str, str, str], ...] = (
    (GOODPUT, "goodput_time",
     "training on steps that were kept: from an attempt's first step to its last, less steps redone later"),
    ("provisioning", "- (tpuctl)",
     "waiting for a TPU: created for the run, recreated after a preemption, retries after stockouts or quota"),
    ("billed_no_job", "- (tpuctl)",
     ("the TPU billed while no job ran and no recovery was under way (staging before the first attempt, "
      "the look that sees the job's end)")),
    ("host_bootstrap", "- (tpuctl)",
     ("an attempt handed to the hosts until its program started: the host agent, wheels, requirements, "
      "checkpoint-dir restore")),
    ("program_startup", ("TPU_INITIALIZATION + TRAINING_PREP + PROGRAM_STARTUP + "
                         "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"),
     ("program start to its first step: accelerator init, checkpoint restore, tracing and compilation "
      "(one program's own phases are not told apart from outside)")),
    ("data_loading", "DATA_LOADING_SYNC", "making pretraining data on the TPU host (the job's data_creation spans)"),
    ("checkpoint_save", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
     "after the preemption notice: from the last step to the job's exit, when it lost no step (it saved)"),
    ("wasted_progress", "WASTED_PROGRESS_FROM_DISRUPTION",
     "training whose steps were redone after a preemption: from the step it resumed at to the job's end"),
    ("disruption", "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
     "no job between a disruption and the next attempt: exit or detection to recreate, recreated to restart"),
    ("training_no_progress", "- (tpuctl)",
     ("a program that never reported a step, from its start to its exit (or the last heartbeat before a "
      "hard kill): running, but its training is not told from its startup or from steps redone")),
    ("unattributed", "OTHER",
     "spans whose cause the records do not tell (a hard kill's power-off, a finished job's last save)"),
)
KEYS = tuple(k for k, _g, _w in CATEGORIES)
# what a preemption costs (``preemption_loss``): within each preempted attempt's span to the next
# attempt, the steps it redid, the downtime and the recreate's wait for a TPU (its failed tries too)
PREEMPTION_LOSS = ("wasted_progress", "disruption", "provisioning")
PREEMPTION_LOSS_WHAT = ("from each preempted attempt to the next: wasted_progress, disruption and the recreate's "
                        "provisioning")
GOOGLE = {k: g for k, g, _w in CATEGORIES}
WHAT = {k: w for k, _g, w in CATEGORIES}
NO_PROGRESS = "training_no_progress"
# how ``status`` and ``cost`` name a category where its key alone would not say it
LABELS = {NO_PROGRESS: "training (no progress reported)"}


@dataclass(frozen=True)
class Billed:
    """A TPU incarnation's billed span and its price per hour (None: unknown)."""

    start: float
    end: float
    usd_per_hour: float | None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _at(t: float | None, lo: float, hi: float) -> float | None:
    """``t`` when it falls inside [lo, hi], else None (a time from another attempt, or no time)."""
    return t if t is not None and lo <= t <= hi else None


class _Cuts:
    """Consecutive segments from a cursor: each ``to(t, cat)`` covers [cursor, t) and moves the
    cursor; a time before the cursor covers nothing. Gaps cannot arise, so the sum is the wall."""

    def __init__(self, start: float, end: float):
        self.cursor, self.end = start, end
        self.segments: list[tuple[float, float, str]] = []

    def to(self, t: float | None, cat: str) -> None:
        if t is None:
            return
        t = min(t, self.end)
        if t > self.cursor:
            if self.segments and self.segments[-1][2] == cat and self.segments[-1][1] == self.cursor:
                a, _b, _c = self.segments.pop()
                self.segments.append((a, t, cat))
            else:
                self.segments.append((self.cursor, t, cat))
            self.cursor = t


def _time_at_step(curve: list[tuple[float, int]], step: int, lo: float, hi: float) -> float | None:
    """When the attempt in [lo, hi] reached ``step``, from the curve's (time, step) points: the
    point itself, or the straight line between the two points around it (the supervisor's looks)."""
    pts = sorted((t, s) for t, s in curve if lo <= t <= hi)
    if not pts:
        return None
    prev = None
    for t, s in pts:
        if s >= step:
            if s == step or prev is None:
                return t
            (t0, s0) = prev
            return t0 + (t - t0) * (step - s0) / (s - s0) if s > s0 else t
        prev = (t, s)
    return None


def breakdown(record: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *, now: float,
              exits: Mapping[int, Mapping[str, Mapping[str, Any]]] | None = None,
              billed: Iterable[Billed] | None = None,
              alive: Mapping[int, Mapping[str, Mapping[str, Any]]] | None = None,
              hosts: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The run's wall time by cause, its goodput, what the badput cost, each preemption's phases
    and the first attempt's startup (:mod:`provision.runs.startup`).

    ``record``: run.json as a dict; ``events``: events.jsonl; ``exits``: the hosts' exit records
    by attempt and worker; ``billed``: the TPU's billed spans and prices (None: not known, no
    dollars); ``alive``: the hosts' heartbeats by attempt and worker (what the attempt wrapper
    recorded of its startup, for an attempt with no exit record); ``hosts``: the hosts' bootstrap
    statuses (GCP). Every second of ``[created_at, ended_at or now)`` is in exactly one category."""
    start = _num(record.get("created_at")) or 0.0
    end = max(start, _num(record.get("ended_at")) or now)
    evs = sorted((e for e in events if isinstance(e, Mapping) and _num(e.get("time")) is not None),
                 key=lambda e: float(e["time"]))
    exits = exits or {}
    spans = sorted(billed or [], key=lambda b: b.start) if billed is not None else None
    curve = [(float(c["t"]), int(c["step"])) for c in record.get("curve") or []
             if isinstance(c, Mapping) and _num(c.get("t")) is not None and _int(c.get("step")) is not None]
    last = record.get("last_progress") if isinstance(record.get("last_progress"), Mapping) else {}
    # the program has never reported a step, in any attempt: its running time is training of unknown progress
    silent = last.get("progress_reported") is False

    # attempts: (n, started)
    attempts = [(_int(e.get("attempt")) or i + 1, float(e["time"])) for i, e in
                enumerate(x for x in evs if x.get("event") == "attempt_started")]
    # outages: each from its first preempted event to its resumed event
    outages: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for e in evs:
        kind, t = e.get("event"), float(e["time"])
        if kind == "preempted":
            if cur is None:
                cur = {"detected_at": t, "preempted": e, "recreate_failed": [], "recreated": None,
                       "resumed": None, "preemptions": [e.get("preemption")]}
                outages.append(cur)
            else:
                cur["preemptions"].append(e.get("preemption"))
        elif cur is not None and kind == "recreate_failed":
            cur["recreate_failed"].append(t)
        elif cur is not None and kind == "recreated":
            cur["recreated"] = e
        elif cur is not None and kind == "resumed":
            cur["resumed"] = e
            cur = None

    cuts = _Cuts(start, end)
    # each preempted attempt, from its start to the next one's: where the preemption's loss is counted
    hit: list[tuple[float, float]] = []
    # before the first attempt: waiting for the TPU, then billed with no job
    first = attempts[0][1] if attempts else end
    created = [b.start for b in spans or [] if start <= b.start < first]
    billed_at_start = any(b.start <= start < b.end for b in spans or [])
    if spans is None:
        cuts.to(first, "unattributed")
    elif billed_at_start:
        cuts.to(first, "billed_no_job")
    elif created:
        cuts.to(min(created), "provisioning")
        cuts.to(first, "billed_no_job")
    else:
        cuts.to(first, "provisioning")

    preemptions: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []          # each attempt's program start and first step, as dated here
    for i, (n, a) in enumerate(attempts):
        b = attempts[i + 1][1] if i + 1 < len(attempts) else end
        outage = next((o for o in outages if a <= o["detected_at"] < b), None)
        latest = i + 1 == len(attempts)
        p_ev = (outage or {}).get("preempted") or {}
        prev_out = next((o for o in outages if o["resumed"] is not None and attempts[i - 1][1] <= o["detected_at"] < a),
                        None) if i else None
        # program start and first step of this attempt
        prog = _at(_num(p_ev.get("program_started_at")), a, b)
        first_step = _at(_num(p_ev.get("first_step_at")), a, b)
        last_step = _at(_num(p_ev.get("step_at")), a, b)
        if prev_out is not None:
            r = prev_out["resumed"]
            prog = prog or _at(_num(r.get("program_started_at")), a, b)
            lost = _num(r.get("seconds_lost"))
            if lost is not None and r.get("step") != "unknown":
                first_step = first_step or _at(min(prev_out["detected_at"] + lost, float(r["time"])), a, b)
        if latest and _num(last.get("started_at")) is not None and a <= float(last["started_at"]) <= b:
            prog = prog or float(last["started_at"])
            first_step = first_step or _at(_num(last.get("first_step_time")), a, b)
            last_step = last_step or _at(_num(last.get("step_time")), a, b)
        # the attempt wrapper's own record of the program's start (its Popen), where it kept one:
        # the program's interpreter and imports are its startup, not the host's
        spawned = _at(_num(startups.marks(_records(exits, alive, n)).get(startups.PROGRAM)), a, b)
        if spawned is not None and (prog is None or spawned < prog) and (first_step is None or spawned <= first_step):
            prog = spawned
        facts.append({"attempt": n, "started_at": a, "program_started_at": prog, "first_step_at": first_step})
        if first_step is not None:
            pts = [t for t, _s in curve if first_step <= t <= (outage["detected_at"] if outage else b)]
            last_step = max([x for x in (last_step, *pts) if x is not None], default=None)
        recs = [x for x in (exits.get(n) or {}).values() if isinstance(x, Mapping)]
        exit_at = max([t for t in (_num(x.get("time")) for x in recs) if t is not None and a <= t <= b], default=None)
        noticed = any(x.get("after_sigterm") or x.get("code") == 42 for x in recs)
        killed = any(x.get("killed_after_s") for x in recs)
        # steps redone: the step this attempt reached, less the step the next one resumed at
        redone, resumed_step = None, None
        if outage is not None and outage["resumed"] is not None and outage["resumed"].get("step") != "unknown":
            redone = _int(outage["resumed"].get("steps_lost"))
            resumed_step = _int(outage["resumed"].get("step"))
        t_kept = None
        if redone and resumed_step is not None and first_step is not None and last_step is not None:
            reached = _int(p_ev.get("step"))
            t_kept = _time_at_step(curve + ([(last_step, reached)] if reached is not None else []),
                                   resumed_step, first_step, last_step)
            t_kept = first_step if t_kept is None else t_kept

        if prog is not None:
            cuts.to(prog, "host_bootstrap")
        if first_step is not None:
            cuts.to(first_step, "program_startup" if prog is not None else "unattributed")
            if redone and t_kept is not None:
                cuts.to(t_kept, GOODPUT)
                cuts.to(last_step, "wasted_progress")
            else:
                cuts.to(last_step, GOODPUT)
        stop = outage["detected_at"] if outage else b
        if silent and first_step is None and prog is not None:
            # running with no step to tell its training from its startup: up to its exit, or to the
            # last heartbeat that saw it before a hard kill, or now while it runs
            ran_to = exit_at if exit_at is not None and exit_at <= stop else \
                _last_beat(_records(exits, alive, n), prog, stop) if outage is not None else b
            cuts.to(ran_to, NO_PROGRESS)
        if exit_at is not None and exit_at <= stop:
            if outage is None:
                cuts.to(exit_at, "unattributed")           # a finished (or failed) job's last save and exit
            elif redone:
                cuts.to(exit_at, "wasted_progress")
            elif noticed and redone == 0:
                cuts.to(exit_at, "checkpoint_save")
            else:
                cuts.to(exit_at, "unattributed")
            cuts.to(stop, "disruption" if outage is not None or not latest else "billed_no_job")
        elif outage is not None:
            # no exit record before it was seen: the power-off (a hard kill) is not recorded
            cuts.to(stop, "unattributed")
        elif not latest:
            cuts.to(b, "unattributed")
        if outage is not None:
            rec_ev = outage["recreated"]
            # its seconds are rounded to a tenth: never before the preemption was seen
            rec_started = max(outage["detected_at"], float(rec_ev["time"]) - (_num(rec_ev.get("seconds")) or 0.0)) \
                if rec_ev else None
            failed = [t for t in outage["recreate_failed"] if t <= (rec_started or b)]
            if failed:
                cuts.to(max(failed), "provisioning")
            cuts.to(rec_started, "disruption")
            cuts.to(float(rec_ev["time"]) if rec_ev else None, "provisioning")
            cuts.to(b, "disruption")
            hit.append((a, b))
            preemptions.append(_preemption(outage, n=n, last_step=last_step, exit_at=exit_at, noticed=noticed,
                                           killed=killed, rec_started=rec_started, failed=failed,
                                           next_attempt=b if not latest else None, redone=redone,
                                           t_kept=t_kept))
        cuts.to(b, "unattributed")      # a live run's step in progress: not kept yet, nor lost
    cuts.to(end, "unattributed")

    segments = _carve(cuts.segments, _data_spans(last, end))
    # fill in each preemption's new attempt: bootstrap, program start, first new step
    for pre in preemptions:
        _restart_phases(pre, segments)
    seconds = dict.fromkeys(KEYS, 0.0)
    usd = dict.fromkeys(KEYS, 0.0) if spans is not None else None
    for x, y, cat in segments:
        seconds[cat] += y - x
        if usd is not None:
            usd[cat] += _cost(x, y, spans or [])
    loss_s, loss_usd = 0.0, 0.0
    for x, y, cat in segments:
        if cat in PREEMPTION_LOSS:
            for wa, wb in hit:
                lo, hi = max(x, wa), min(y, wb)
                if hi > lo:
                    loss_s += hi - lo
                    loss_usd += _cost(lo, hi, spans or [])
    wall = end - start
    bad = {k: v for k, v in seconds.items() if k != GOODPUT}
    out: dict[str, Any] = {
        "start": start, "end": end, "wall_s": round(wall, 3), "goodput_s": round(seconds[GOODPUT], 3),
        "goodput_pct": round(100 * seconds[GOODPUT] / wall, 2) if wall > 0 else None,
        "badput_s": round(sum(bad.values()), 3),
        "badput_usd": round(sum(v for k, v in usd.items() if k != GOODPUT), 6) if usd is not None else None,
        "total_usd": round(sum(usd.values()), 6) if usd is not None else None,
        "categories": {k: {"seconds": round(seconds[k], 3), "usd": round(usd[k], 6) if usd is not None else None,
                           "google": GOOGLE[k], "includes": WHAT[k]} for k in KEYS},
        "preemptions": preemptions,
        "preemption_loss": {"seconds": round(loss_s, 3), "usd": round(loss_usd, 6) if usd is not None else None,
                            "includes": PREEMPTION_LOSS_WHAT},
        "segments": [[round(x, 3), round(y, 3), c] for x, y, c in segments][-400:],
    }
    if facts:
        f = facts[0]
        out["startup"] = startups.run_startup(record, evs, program_started_at=f["program_started_at"],
                                              first_step_at=f["first_step_at"],
                                              agent=startups.marks(_records(exits, alive, f["attempt"])),
                                              hosts=hosts, now=None if record.get("ended_at") else now)
    return out


def _last_beat(recs: list[Mapping[str, Any]], lo: float, hi: float) -> float | None:
    """The latest time a host's record of the attempt saw it alive within [lo, hi] (None: none)."""
    return max([t for t in (_num(r.get("time")) for r in recs) if t is not None and lo <= t <= hi], default=None)


def _records(exits: Mapping[int, Any], alive: Mapping[int, Any] | None, n: int) -> list[Mapping[str, Any]]:
    """Attempt ``n``'s records of each host that say how it started: its exit record, else its heartbeat."""
    ex = exits.get(n) if isinstance(exits.get(n), Mapping) else {}
    al = (alive or {}).get(n) if isinstance((alive or {}).get(n), Mapping) else {}
    out = []
    for w in dict.fromkeys([*ex, *al]):
        rec = ex.get(w) if isinstance(ex.get(w), Mapping) and isinstance(ex[w].get("startup"), Mapping) else al.get(w)
        if isinstance(rec, Mapping):
            out.append(rec)
    return out


def _data_spans(last: Mapping[str, Any], end: float) -> list[tuple[float, float]]:
    out = []
    for entry in last.get("data_creation") or []:
        if isinstance(entry, list) and len(entry) == 2 and _num(entry[0]) is not None:
            out.append((float(entry[0]), _num(entry[1]) if _num(entry[1]) is not None else end))
    return out


def _carve(segments: list[tuple[float, float, str]], data: list[tuple[float, float]]) -> list[tuple[float, float, str]]:
    """The segments with the job's data-making spans cut out of its startup and training as data_loading."""
    for da, db in data:
        out = []
        for x, y, c in segments:
            if c not in (GOODPUT, "program_startup") or db <= x or da >= y:
                out.append((x, y, c))
                continue
            a, b = max(x, da), min(y, db)
            out += [s for s in ((x, a, c), (a, b, "data_loading"), (b, y, c)) if s[1] > s[0]]
        segments = out
    return segments


def _cost(x: float, y: float, spans: list[Billed]) -> float:
    return sum(max(0.0, min(y, b.end) - max(x, b.start)) * (b.usd_per_hour or 0.0) / 3600 for b in spans)


def _phase(name: str, a: float | None, b: float | None) -> dict[str, Any]:
    if a is None or b is None:
        return {"phase": name, "seconds": None, "recorded": False}
    return {"phase": name, "seconds": round(max(0.0, b - a), 3), "from": round(a, 3), "to": round(b, 3),
            "recorded": True}


def _preemption(o: dict[str, Any], *, n: int, last_step: float | None, exit_at: float | None, noticed: bool,
                killed: bool, rec_started: float | None, failed: list[float], next_attempt: float | None,
                redone: int | None, t_kept: float | None) -> dict[str, Any]:
    d = o["detected_at"]
    p = o["preempted"]
    rec = o["recreated"]
    res = o["resumed"] or {}
    notice = True if noticed and exit_at is not None else (False if exit_at is None else None)
    phases = [
        _phase("notice to job exit", None, None),         # the notice's own time is not recorded
        _phase("last step to job exit", last_step, exit_at if notice else None),
        _phase("job exit to preemption seen", exit_at, d if exit_at is not None and exit_at <= d else None),
        _phase("seen to recreate started", d, rec_started),
    ]
    if failed:
        phases.append(_phase("of which failed recreates (capacity, quota)", d, max(failed)))
    phases += [_phase("recreate", rec_started, float(rec["time"]) if rec else None),
               _phase("recreated to attempt started", float(rec["time"]) if rec else None, next_attempt)]
    return {"preemptions": [x for x in o["preemptions"] if x is not None], "attempt": n, "detected_at": d,
            "cause": p.get("cause"), "notice": notice, "killed_after_grace": killed,
            "step": p.get("step"), "checkpoint_step": p.get("checkpoint_step"),
            "resumed_step": res.get("step"), "steps_redone": redone,
            "checkpointed_in_notice": (redone == 0) if notice and redone is not None else None,
            "wasted_s": round(max(0.0, (exit_at or last_step or 0.0) - t_kept), 3)
            if t_kept is not None and redone and (exit_at or last_step) else (0.0 if redone == 0 else None),
            "phases": phases, "seconds_lost": res.get("seconds_lost"), "next_attempt_at": next_attempt}


def _restart_phases(pre: dict[str, Any], segments: list[tuple[float, float, str]]) -> None:
    """The new attempt's host bootstrap and program startup, as the segments after it say."""
    a = pre.get("next_attempt_at")
    if a is None:
        pre["phases"] += [_phase("host bootstrap", None, None), _phase("program start and restore to first step",
                                                                        None, None)]
        return
    boot = next(((x, y) for x, y, c in segments if x >= a and c == "host_bootstrap"), None)
    start = next(((x, y) for x, y, c in segments if x >= a and c == "program_startup"), None)
    pre["phases"] += [_phase("host bootstrap", *(boot or (None, None))),
                      _phase("program start and restore to first step", *(start or (None, None)))]
    first = start[1] if start else None
    pre["first_new_step_at"] = first
    pre["recovery_s"] = round(first - pre["detected_at"], 3) if first is not None else None


def top_badput(g: Mapping[str, Any], n: int = 3) -> list[tuple[str, float, float | None]]:
    """The ``n`` largest badput causes: (key, seconds, dollars)."""
    cats = g.get("categories") or {}
    rows = [(k, v["seconds"], v.get("usd")) for k, v in cats.items() if k != GOODPUT and v["seconds"] > 0]
    return sorted(rows, key=lambda r: -r[1])[:n]


def lines(g: Mapping[str, Any], *, duration: Any, usd: Any) -> list[str]:
    """The compact block ``status`` and ``cost`` show: goodput, the top badput causes, the first
    attempt's startup by phase, each preemption."""
    if not g or g.get("wall_s") is None:
        return []
    pct = g.get("goodput_pct")
    head = (f"goodput {pct:.1f}% ({duration(g['goodput_s'])} of {duration(g['wall_s'])})" if pct is not None
            else "goodput: no time yet")
    if g.get("badput_usd") is not None:
        head += f"; badput {duration(g['badput_s'])}, {usd(g['badput_usd'])}"
    out = [head]
    top = [t for t in top_badput(g, 4) if t[0] != NO_PROGRESS][:3]
    if top:
        out.append("  badput: " + ", ".join(f"{k} {duration(s)}" + (f" {usd(u)}" if u is not None else "")
                                            for k, s, u in top))
    silent = ((g.get("categories") or {}).get(NO_PROGRESS) or {}).get("seconds") or 0
    if silent > 0:
        out.append(f"  {LABELS[NO_PROGRESS]} {duration(silent)}: the program reported no step, so none of it "
                   f"counts as goodput (docs/own-code.md#progress)")
    said = startups.line(g.get("startup"), duration=duration, label="startup")
    if said:
        out.append("  " + said)
    for pre in g.get("preemptions") or []:
        said = "notice, checkpointed in it" if pre.get("checkpointed_in_notice") else \
            "notice" if pre.get("notice") else "no notice seen" if pre.get("notice") is False else "notice unknown"
        parts = [f"{p['phase']} {duration(p['seconds'])}" for p in pre["phases"] if p["recorded"]]
        redone = pre.get("steps_redone")
        out.append(f"  preemption {','.join(str(x) for x in pre['preemptions']) or '?'} ({said}; "
                   f"{'steps redone unknown' if redone is None else f'{redone} steps redone'}): " + ", ".join(parts))
    return out


# ---- what a run keeps of its breakdown, and a fleet's view of them --------------------------------

# a run's per-preemption recovery times kept in its summary (the newest)
RECOVERIES_KEPT = 20
# how a TPU was paid for (provision.cloud.capacity.Capacity), from the tier the run was priced at
_TIER_CAPACITY = {"spot": "spot", "preemptible": "spot", "on-demand": "on-demand", "flex-start": "flex-start"}
_WORD = r"[a-z0-9][a-z0-9._-]{0,62}"


def billed_from_run(record: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *,
                    usd_per_hour: float | None, now: float) -> list[Billed] | None:
    """The TPUs a run's own records show billing: each incarnation its attempts ran on
    (``attempt_started`` and ``recreated`` carry its ``tpu_created_at``, the record's ``attempt``
    the latest one's) from its creation until a preemption was seen after it (the supervisor's
    ``preempted``), the next incarnation, or the run's end; each at ``usd_per_hour``. None when
    they name no incarnation (a run of a tpuctl before they did): no dollars then.

    The cost ledger knows more (a TPU preempted between two looks stopped billing before it was
    seen): ``tpuctl cost RUN`` prices the ledger's lifetimes, this is what a supervisor knows alone."""
    evs = sorted(((float(e["time"]), e) for e in events
                  if isinstance(e, Mapping) and _num(e.get("time")) is not None), key=lambda p: p[0])
    starts = {float(c) for _t, e in evs if e.get("event") in ("attempt_started", "recreated")
              for c in (_num(e.get("tpu_created_at")),) if c is not None}
    att = record.get("attempt")
    if isinstance(att, Mapping) and _num(att.get("tpu_created_at")) is not None:
        starts.add(float(att["tpu_created_at"]))
    if not starts:
        return None
    end = _num(record.get("ended_at")) or now
    seen = [t for t, e in evs if e.get("event") == "preempted"]
    ordered = sorted(starts)
    out = []
    for i, c in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) else math.inf
        stop = min([t for t in seen if t >= c] + [nxt, max(end, c)])
        out.append(Billed(c, stop, usd_per_hour))
    return out


def capacity_of(pricing: Mapping[str, Any] | None) -> str | None:
    """How the run's TPU was paid for: ``spot`` (preemptible too), ``flex-start``, ``on-demand`` or
    ``reservation``; the supervisor's record of the TPU it saw, else the tier the run was priced at."""
    pricing = pricing if isinstance(pricing, Mapping) else {}
    cap = pricing.get("capacity")
    if isinstance(cap, str) and cap:
        return cap
    return _TIER_CAPACITY.get(str(pricing.get("tier")))


def summary(g: Mapping[str, Any], *, record: Mapping[str, Any], final: bool, priced: bool = True,
            capacity: str | None = None) -> dict[str, Any]:
    """What a run keeps of its breakdown (``goodput`` in run.json and in its listed summary): a
    few hundred bytes that a fleet's view reads from one listing of a bucket's records, and that
    ``estimate`` reads its recoveries from. ``final``: the run has ended (else: as of ``as_of``,
    the end of its last recovery); ``priced``: the run's price is known (else no dollars)."""
    pricing = record.get("pricing") if isinstance(record.get("pricing"), Mapping) else {}
    cats = g.get("categories") or {}
    loss = g.get("preemption_loss") or {}
    pres = g.get("preemptions") or []
    usd_known = priced and g.get("total_usd") is not None

    def money(v: Any) -> float | None:
        return round(float(v), 4) if usd_known and _num(v) is not None else None

    return {
        "as_of": round(float(g["end"]), 3), "final": bool(final),
        "accelerator_type": pricing.get("accelerator_type"), "zone": pricing.get("zone") or record.get("zone"),
        "capacity": capacity or capacity_of(pricing),
        "wall_s": round(float(g["wall_s"]), 1), "goodput_s": round(float(g["goodput_s"]), 1),
        "badput_s": round(float(g["badput_s"]), 1), "badput_usd": money(g.get("badput_usd")),
        "total_usd": money(g.get("total_usd")),
        "seconds": {k: round(v["seconds"], 1) for k, v in cats.items() if k != GOODPUT and v["seconds"] >= 0.05},
        "preemptions": sum(max(1, len(p.get("preemptions") or [])) for p in pres),
        "preemption_s": round(float(loss.get("seconds") or 0.0), 1), "preemption_usd": money(loss.get("usd")),
        "recovery_s": [round(float(r), 1) for r in (_recovery(p) for p in pres) if r is not None][-RECOVERIES_KEPT:],
    }


def _recovery(pre: Mapping[str, Any]) -> float | None:
    """A preemption's recovery, seen to the first new step: as its phases date it, else as the
    supervisor dated that step (``resumed``'s ``seconds_lost``: a program whose start is not recorded)."""
    r = _num(pre.get("recovery_s"))
    return r if r is not None else _num(pre.get("seconds_lost"))


def _word(v: Any) -> str | None:
    """A name as tpuctl writes them (types, zones, capacities, run ids, states); anything else is
    not shown (a summary comes from a bucket's metadata, which its writers can set)."""
    return v if isinstance(v, str) and re.fullmatch(_WORD, v) else None


def usable(g: Any) -> dict[str, Any] | None:
    """A stored summary (:func:`summary`) with the types a reader computes with, else None: the
    numbers finite and not negative, names as tpuctl writes them (anything else left out)."""
    if not isinstance(g, Mapping):
        return None
    wall, good = _num(g.get("wall_s")), _num(g.get("goodput_s"))
    if wall is None or good is None or wall < 0 or not 0 <= good <= wall + 1e-6:
        return None

    def pos(k: str) -> float | None:
        v = _num(g.get(k))
        return v if v is not None and v >= 0 else None

    rec = g.get("recovery_s")
    secs = g.get("seconds")
    return {"as_of": _num(g.get("as_of")), "final": g.get("final") is True,
            "accelerator_type": _word(g.get("accelerator_type")), "zone": _word(g.get("zone")),
            "capacity": _word(g.get("capacity")), "wall_s": wall, "goodput_s": good,
            "goodput_pct": round(100 * good / wall, 2) if wall > 0 else None,
            "badput_s": pos("badput_s") if pos("badput_s") is not None else wall - good,
            "badput_usd": pos("badput_usd"), "total_usd": pos("total_usd"),
            "seconds": {k: float(v) for k, v in (secs.items() if isinstance(secs, Mapping) else ())
                        if k in KEYS and _num(v) is not None and v >= 0},
            "preemptions": _int(g.get("preemptions")) if (_int(g.get("preemptions")) or 0) >= 0 else None,
            "preemption_s": pos("preemption_s") or 0.0, "preemption_usd": pos("preemption_usd"),
            "recovery_s": [float(x) for x in (rec if isinstance(rec, list) else [])[-100:]
                           if _num(x) is not None and x >= 0]}


def median(values: Iterable[float]) -> float | None:
    import statistics

    vals = [float(v) for v in values]
    return statistics.median(vals) if vals else None


def _aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    wall = sum(r["wall_s"] for r in rows)
    good = sum(r["goodput_s"] for r in rows)
    priced = [r for r in rows if r.get("total_usd") is not None]
    recoveries = [x for r in rows for x in r["recovery_s"]]

    def usd(key: str) -> float | None:
        return round(sum(r.get(key) or 0.0 for r in priced), 4) if priced else None

    return {"runs": len(rows), "wall_s": round(wall, 1), "goodput_s": round(good, 1),
            "goodput_pct": round(100 * good / wall, 2) if wall > 0 else None,
            "badput_s": round(sum(r["badput_s"] for r in rows), 1), "badput_usd": usd("badput_usd"),
            "total_usd": usd("total_usd"), "priced_runs": len(priced),
            "preemptions": sum(r.get("preemptions") or 0 for r in rows),
            "preemption_s": round(sum(r["preemption_s"] for r in rows), 1), "preemption_usd": usd("preemption_usd"),
            "recovery_median_s": median(recoveries), "recoveries": len(recoveries)}


def fleet(runs: Iterable[Mapping[str, Any]], *, since: float, now: float) -> dict[str, Any]:
    """Goodput of the runs that were live at any time in ``[since, now)``, per run, per accelerator
    type, per capacity kind and in all, from their record summaries (``record_summary``: ``run_id``,
    ``cluster``, ``status``, ``created_at``, ``ended_at``, ``goodput``). A run counts whole (its
    summary is of its whole life, or up to its last recovery while it is live); one without a
    summary (live and not yet recovered from a preemption, or ended before tpuctl kept one) is
    listed apart, never guessed."""
    rows: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    seen: set[str] = set()
    for s in runs:
        created, ended = _num(s.get("created_at")), _num(s.get("ended_at"))
        run_id = _word(s.get("run_id"))
        if created is None or run_id is None or run_id in seen or created > now or \
                (ended is not None and ended < since):
            continue
        seen.add(run_id)
        base = {"run_id": run_id, "cluster": _word(s.get("cluster")), "status": _word(s.get("status")),
                "created_at": created, "ended_at": ended}
        g = usable(s.get("goodput"))
        if g is None:
            missing.append(base)
        else:
            rows.append({**base, **g})
    rows.sort(key=lambda r: (r["created_at"], r["run_id"]))
    missing.sort(key=lambda r: (r["created_at"], r["run_id"]))

    def groups(key: str) -> dict[str, Any]:
        by: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by.setdefault(r.get(key) or "unknown", []).append(r)
        return {k: _aggregate(v) for k, v in sorted(by.items())}

    return {"since": since, "now": now, "runs": rows, "without_summary": missing,
            "by_accelerator_type": groups("accelerator_type"), "by_capacity": groups("capacity"),
            "total": _aggregate(rows)}
