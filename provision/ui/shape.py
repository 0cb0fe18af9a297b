"""The page's documents, from records read back from a bucket: pure, and defensive.

Every value comes from a bucket anyone with write access may fill (docs/security.md): numbers
are checked to be finite numbers, strings are bounded, and only scalar event fields pass. The
page puts each value in the DOM as text (never as HTML), behind a strict Content-Security-Policy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..runs.estimate import MIN_ESTIMATE_S
from ..runs.goodput import GOOGLE, KEYS, WHAT

MAX_EVENTS = 500
MAX_TEXT = 300
# billed states of tpuctl cost (provision.billing.costs), in the order the page stacks them
STATES = ("training", "making_data", "starting", "waiting", "idle")
# an estimate's basis lines shown (provision.runs.estimate writes four or five), and its speed's sources
MAX_BASIS = 8
SPEED_SOURCES = ("measured", "published", "assumed")
# a run that may still move (provision.runs.store.LIVE, not imported: that module does I/O)
LIVE = ("starting", "running", "recovering")


def num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def text(value: Any, limit: int = MAX_TEXT) -> str | None:
    if value is None or isinstance(value, (dict, list, tuple, set)):
        return None
    s = str(value)
    return s[:limit]


def scalars(data: Any, limit: int = 24) -> dict[str, Any]:
    """The scalar fields of a mapping (numbers, booleans, bounded strings), at most ``limit``."""
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, value in list(data.items())[:200]:
        if len(out) >= limit:
            break
        if not isinstance(key, str):
            continue
        if isinstance(value, bool):
            out[key[:60]] = value
        elif num(value) is not None:
            out[key[:60]] = num(value)
        elif isinstance(value, str):
            out[key[:60]] = value[:MAX_TEXT]
    return out


def events(raw: Iterable[Any]) -> list[dict[str, Any]]:
    """A run's events as the page lists them: time, kind and scalar fields, newest last."""
    out = []
    for e in raw:
        if not isinstance(e, Mapping) or not isinstance(e.get("event"), str) or num(e.get("time")) is None:
            continue
        out.append({"time": num(e["time"]), "event": e["event"][:60],
                    "fields": {k: v for k, v in scalars(e).items() if k not in ("time", "event")}})
    return out[-MAX_EVENTS:]


def outages(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The time lost to preemptions: from a ``preempted`` event to the first new step after it
    (``resumed``'s ``seconds_lost`` counts from the outage's first preemption); one still open
    ends ``None``."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for e in evs:
        f = e["fields"]
        if e["event"] == "preempted" and current is None:
            current = {"start": e["time"], "end": None, "preemptions": 1, "step": num(f.get("step"))}
        elif e["event"] == "preempted" and current is not None:
            current["preemptions"] += 1
        elif e["event"] == "resumed" and current is not None:
            lost = num(f.get("seconds_lost"))
            current["end"] = current["start"] + lost if lost is not None else e["time"]
            current["steps_lost"] = num(f.get("steps_lost"))
            out.append(current)
            current = None
        elif e["event"] in ("finished", "gave_up", "stopped") and current is not None:
            current["end"] = e["time"]
            out.append(current)
            current = None
    if current is not None:
        out.append(current)
    return out


def spend(seconds_by_state: Any, hourly_usd: float | None) -> dict[str, Any]:
    """Hours and dollars by state at the run's TPU list price (the supervisor's own measure)."""
    rows = []
    raw = seconds_by_state if isinstance(seconds_by_state, Mapping) else {}
    for state in [*STATES, *sorted(k for k in raw if isinstance(k, str) and k not in STATES)][:12]:
        secs = num(raw.get(state))
        if secs is None or secs <= 0:
            continue
        usd = secs / 3600 * hourly_usd if hourly_usd is not None else None
        rows.append({"state": state[:40], "seconds": round(secs, 1), "usd": round(usd, 4) if usd is not None else None})
    total = sum(r["usd"] for r in rows if r["usd"] is not None) if hourly_usd is not None else None
    return {"by_state": rows, "hourly_usd": hourly_usd, "total_usd": round(total, 4) if total is not None else None}


def curve(raw: Any) -> list[dict[str, Any]]:
    out = []
    for p in raw if isinstance(raw, list) else []:
        if not isinstance(p, Mapping) or num(p.get("step")) is None:
            continue
        point: dict[str, Any] = {"step": num(p["step"]), "t": num(p.get("t"))}
        if num(p.get("loss")) is not None:
            point["loss"] = num(p["loss"])
        m = scalars(p.get("m"), limit=12)
        point["m"] = {k: v for k, v in m.items() if isinstance(v, float)}
        out.append(point)
    return out[-1000:]


def logdir(model_dir: Any) -> str | None:
    """What ``tensorboard --logdir`` is given for a run: its summaries, not its checkpoints."""
    m = text(model_dir, 1000)
    return f"{m.rstrip('/')}/tb" if m else None


def run_summary(rec: Mapping[str, Any]) -> dict[str, Any]:
    p = rec.get("last_progress") if isinstance(rec.get("last_progress"), Mapping) else {}
    return {"run_id": text(rec.get("run_id"), 120), "cluster": text(rec.get("cluster"), 80),
            "job": text(rec.get("job"), 80), "status": text(rec.get("status"), 40),
            "step": num(p.get("step")), "num_train_steps": num(rec.get("num_train_steps")),
            "loss": num(p.get("loss")), "preemptions": num(rec.get("preemptions")),
            "failures": num(rec.get("failures")), "attempts": num(rec.get("attempts")),
            "created_at": num(rec.get("created_at")), "ended_at": num(rec.get("ended_at")),
            "updated_at": num(rec.get("updated_at")), "provider": text(rec.get("provider"), 20)}


def run_document(rec: Mapping[str, Any], raw_events: Iterable[Any], *, hourly_usd: float | None,
                 accelerator_type: str | None, goodput: Any = None) -> dict[str, Any]:
    """The run page: its summary, curve, events and outages, spend, goodput by cause, and estimates
    if present."""
    evs = events(raw_events)
    p = rec.get("last_progress") if isinstance(rec.get("last_progress"), Mapping) else {}
    doc = run_summary(rec)
    doc.update({
        "reason": text(rec.get("reason")), "model_dir": text(rec.get("model_dir"), 1000),
        "logdir": logdir(rec.get("model_dir")), "accelerator_type": text(accelerator_type, 40),
        "zone": text(rec.get("zone"), 60), "steps_lost": num(rec.get("steps_lost")),
        "seconds_lost": num(rec.get("seconds_lost")), "examples_per_sec": num(p.get("examples_per_sec")),
        "metrics": scalars(p.get("metrics"), limit=20), "checkpoint_step": num(p.get("checkpoint_step")),
        "curve": curve(rec.get("curve")), "events": evs, "outages": outages(evs),
        "spend": spend(rec.get("seconds_by_state"), hourly_usd),
        "estimate": estimate(rec.get("estimate")), "pace": pace(rec), "goodput": goodput_block(goodput),
    })
    return doc


def _flag(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def goodput_block(g: Any) -> dict[str, Any] | None:
    """The run's goodput as the page shows it (:func:`provision.runs.goodput.breakdown`): goodput %,
    badput by cause in seconds and dollars, each preemption by phase and the timeline's segments.
    Computed by tpuctl, but from records a bucket writer may fill: every value checked again, only
    the known categories and phases pass, strings bounded."""
    if not isinstance(g, Mapping) or num(g.get("wall_s")) is None:
        return None
    cats = g.get("categories") if isinstance(g.get("categories"), Mapping) else {}
    rows = []
    for key in KEYS:
        c = cats.get(key) if isinstance(cats.get(key), Mapping) else {}
        rows.append({"key": key, "google": GOOGLE[key], "includes": WHAT[key], "seconds": num(c.get("seconds")) or 0.0,
                     "usd": None if g.get("no_tpu_recorded") is True else num(c.get("usd"))})
    pres = []
    for p in (g.get("preemptions") if isinstance(g.get("preemptions"), list) else [])[:50]:
        if not isinstance(p, Mapping):
            continue
        ids = [int(x) for x in (p.get("preemptions") if isinstance(p.get("preemptions"), list) else [])
               if num(x) is not None][:20]
        phases = []
        for ph in (p.get("phases") if isinstance(p.get("phases"), list) else [])[:20]:
            if isinstance(ph, Mapping) and isinstance(ph.get("phase"), str):
                recorded = ph.get("recorded") is True and num(ph.get("seconds")) is not None
                phases.append({"phase": ph["phase"][:80], "recorded": recorded,
                               "seconds": num(ph.get("seconds")) if recorded else None,
                               "from": num(ph.get("from")) if recorded else None,
                               "to": num(ph.get("to")) if recorded else None})
        pres.append({"preemptions": ids, "attempt": num(p.get("attempt")), "detected_at": num(p.get("detected_at")),
                     "notice": _flag(p.get("notice")), "checkpointed_in_notice": _flag(p.get("checkpointed_in_notice")),
                     "steps_redone": num(p.get("steps_redone")), "wasted_s": num(p.get("wasted_s")),
                     "recovery_s": num(p.get("recovery_s")), "cause": text(p.get("cause"), 120), "phases": phases})
    segs = []
    for seg in (g.get("segments") if isinstance(g.get("segments"), list) else [])[-400:]:
        if isinstance(seg, list) and len(seg) == 3 and num(seg[0]) is not None and num(seg[1]) is not None \
                and seg[2] in GOOGLE:
            segs.append([num(seg[0]), num(seg[1]), seg[2]])
    return {"pct": num(g.get("goodput_pct")), "goodput_s": num(g.get("goodput_s")), "wall_s": num(g.get("wall_s")),
            "badput_s": num(g.get("badput_s")), "badput_usd": num(g.get("badput_usd")),
            "total_usd": num(g.get("total_usd")), "start": num(g.get("start")), "end": num(g.get("end")),
            "no_tpu_recorded": g.get("no_tpu_recorded") is True,
            "categories": rows, "preemptions": pres, "segments": segs}


def estimate(raw: Any) -> dict[str, Any] | None:
    """The estimate a run started with, as the page's card reads it: its time and dollars, the TPU
    and tier it priced, where its speed came from and its basis lines, when it was made.

    The record holds :meth:`provision.runs.estimate.Estimate.to_dict` plus ``at``, or ``{"none":
    why, "at"}`` when none could be made. Only those fields pass, each checked: a record with none
    of them gives no card, never a dump of whatever keys a bucket writer put there. An estimate
    under a second (kept from before tpuctl stopped making them) rested on nothing, so it is shown
    as no estimate, as ``tpuctl status`` treats it."""
    if not isinstance(raw, Mapping):
        return None
    at = num(raw.get("at"))
    if "none" in raw:
        return {"made": False, "why": text(raw.get("none")) or "none made", "at": at}
    total_s, total_usd = num(raw.get("total_s")), num(raw.get("total_usd"))
    never = raw.get("total_s", 0) is None and num(raw.get("steps_per_sec")) is not None
    if total_s is None and not never:
        return None
    if total_s is not None and total_s < MIN_ESTIMATE_S:
        return {"made": False, "why": "it came to under a second, too little to rest on anything", "at": at}
    basis = raw.get("basis") if isinstance(raw.get("basis"), list) else []
    source = raw.get("speed_source")
    return {"made": True, "finishes": not never, "total_s": total_s, "total_usd": total_usd if not never else None,
            "accelerator_type": text(raw.get("accelerator_type"), 40), "tier": text(raw.get("tier"), 20),
            "zone": text(raw.get("zone"), 60), "steps": num(raw.get("steps")),
            "steps_per_sec": num(raw.get("steps_per_sec")), "usd_per_hour": num(raw.get("usd_per_hour")),
            "speed_source": source if source in SPEED_SOURCES else None,
            "interruptions": num(raw.get("interruptions")), "overhead_s": num(raw.get("overhead_s")),
            "basis": [x[:MAX_TEXT] for x in basis[:200] if isinstance(x, str) and x][:MAX_BASIS],
            "input_note": text(raw.get("input_note")), "at": at}


def pace(rec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The live projection (ETA and dollars at the end, while the run lives) and the run's hard caps,
    as ``tpuctl status`` shows them; None when the record holds none of them."""
    p = rec.get("pace") if isinstance(rec.get("pace"), Mapping) else {}
    projections = p.get("projections") if isinstance(p.get("projections"), list) else []
    last = projections[-1] if projections and isinstance(projections[-1], Mapping) else {}
    live = rec.get("status") in LIVE
    out = {"eta": num(last.get("eta")) if live else None,
           "projected_usd": num(last.get("projected_usd")) if live else None,
           "budget_usd": num(rec.get("budget_usd")), "deadline": num(rec.get("deadline")),
           "stopped_by": text(rec.get("stopped_by"), 40)}
    return out if any(v is not None for v in out.values()) else None


def sweep_document(rec: Mapping[str, Any], trials: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sweep page: its trials with their parameters and metric, the best one marked."""
    spec = rec.get("spec") if isinstance(rec.get("spec"), Mapping) else {}
    goal = "minimize" if spec.get("goal") == "minimize" else "maximize"
    rows = []
    for t in trials:
        if not isinstance(t, Mapping) or num(t.get("trial")) is None:
            continue
        rows.append({"trial": int(num(t["trial"]) or 0), "state": text(t.get("state"), 40),
                     "metric": num(t.get("metric")), "params": scalars(t.get("params"), limit=16),
                     "steps": num(t.get("steps")), "preemptions": num(t.get("preemptions")),
                     "cost_usd": num(t.get("cost_usd")), "run": text(t.get("run"), 120)})
    scored = [r for r in rows if r["metric"] is not None]
    best = (min if goal == "minimize" else max)(scored, key=lambda r: r["metric"]) if scored else None
    for r in rows:
        r["best"] = best is not None and r["trial"] == best["trial"]
    keys = sorted({k for r in rows for k in r["params"]})
    return {"sweep_id": text(rec.get("sweep_id"), 120), "state": text(rec.get("state"), 40),
            "metric": text(spec.get("metric"), 80), "goal": goal, "method": text(spec.get("method"), 40),
            "reason": text(rec.get("reason")), "max_trials": num(rec.get("max_trials")),
            "budget_usd": num(rec.get("budget_usd")), "created_at": num(rec.get("created_at")),
            "cost_usd": round(sum(r["cost_usd"] or 0 for r in rows), 4), "params": keys[:16],
            "trials": sorted(rows, key=lambda r: r["trial"]), "best": best["trial"] if best else None}
