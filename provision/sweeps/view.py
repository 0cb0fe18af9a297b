"""Pure views of a sweep: which trial is best, the status document and the table rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..catalog.prices import usd_text
from .store import SweepRecord, TrialRecord

HEADERS = ("", "TRIAL", "PARAMETERS", "STATE", "METRIC", "STEPS", "PREEMPTIONS", "COST", "RUN", "CLUSTER")


def best(trials: Sequence[TrialRecord], goal: str) -> TrialRecord | None:
    """The finished trial with the best metric (a pruned trial never wins: it never finished)."""
    done = [t for t in trials if t.state == "finished" and t.metric is not None]
    if not done:
        return None
    pick = max if goal == "maximize" else min
    return pick(done, key=lambda t: (t.metric, -t.trial) if goal == "maximize" else (t.metric, t.trial))


def document(rec: SweepRecord, trials: Sequence[TrialRecord], *, controller: dict[str, Any] | None = None,
             alive: bool = False) -> dict[str, Any]:
    """``tpuctl sweep status --json``: the shape scripts read (each trial's
    params, state, metric and cost; the best trial and its model_dir), plus where the sweep lives."""
    spec = rec.spec
    top = best(trials, spec["goal"])
    state = rec.state if rec.state != "starting" else "running"
    return {
        "sweep": rec.sweep_id, "state": state, "metric": spec["metric"], "goal": spec["goal"],
        "method": spec["method"], "pruner": spec["pruner"], "reason": rec.reason,
        "trials": [{"trial": t.trial, "params": t.params, "state": t.state, "metric": t.metric, "steps": t.steps,
                    "preemptions": t.preemptions, "cost_usd": round(t.cost_usd, 6), "run": t.run,
                    "cluster": t.cluster} for t in trials],
        "best": {"trial": top.trial, "params": top.params, "metric": top.metric, "model_dir": top.model_dir}
        if top else None,
        "bucket": rec.bucket, "host": rec.host, "max_trials": rec.max_trials, "max_concurrent": rec.max_concurrent,
        "budget_usd": rec.budget_usd, "cost_usd": round(sum(t.cost_usd for t in trials), 6),
        "hourly_usd": rec.hourly_usd, "price": rec.price,
        "controller": {"alive": alive, "where": (controller or {}).get("where"),
                       "host": (controller or {}).get("host"), "heartbeat_at": (controller or {}).get("heartbeat_at")},
    }


def rows(doc: dict[str, Any]) -> list[list[Any]]:
    """Table rows, the best trial marked with ``*``."""
    best_n = (doc.get("best") or {}).get("trial")
    out = []
    for t in doc["trials"]:
        params = ", ".join(f"{k}={_short(v)}" for k, v in sorted(t["params"].items()))
        metric = f"{t['metric']:.4f}" if isinstance(t["metric"], (int, float)) else None
        out.append(["*" if t["trial"] == best_n else "", t["trial"], params, t["state"], metric, t["steps"],
                    t["preemptions"], f"${t['cost_usd']:.4f}", t["run"], t["cluster"]])
    return out


def headline(doc: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for t in doc["trials"]:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials yet"
    line = (f"sweep {doc['sweep']} {doc['state']}: {doc['goal']} {doc['metric']} ({doc['method']}, pruner "
            f"{doc['pruner']}); {parts} of at most {doc['max_trials']}; ${doc['cost_usd']:.4f}")
    p = doc.get("price")
    if p:
        line += (f" at {usd_text(p.get('usd_per_hour'))}/hour per TPU ({p['region']} {p['tier']}, {p['source']}, "
                 f"{p['date']})")
    if doc.get("reason"):
        line += f"; {doc['reason']}"
    return line


def best_line(doc: dict[str, Any]) -> str | None:
    b = doc.get("best")
    if not b:
        return None
    params = ", ".join(f"{k}={_short(v)}" for k, v in sorted(b["params"].items()))
    return f"best: trial {b['trial']} ({params}) {doc['metric']} {b['metric']:.4f}; its export is in {b['model_dir']}"


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
