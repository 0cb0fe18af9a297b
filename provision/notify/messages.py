"""What is worth a message, and what it says: pure functions of an event and what it concerns.

An event is one line of a run's ``events.jsonl`` (provision.runs.store), or one the sweep
controller or the reaper announces. :func:`notice_for` returns the :class:`Notice` to send, or
None for events nobody is paged for (``attempt_started``, the notifier's own ``notify_*``).
Records come from a bucket anyone with write access may fill: every field is read defensively
(a missing or odd value is left out, never an error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..basics.text import printable

# the kinds of notice, as ``events`` in the settings and ``kind`` in the webhook's JSON name them
KINDS = ("preempted", "recreated", "resumed", "stalled", "failed", "finished", "budget_warning",
         "budget_stop", "deadline_stop", "reaped", "sweep_best", "sweep_ended")
# the events that end something: their notices are never held back by the rate limit
FINAL_EVENTS = frozenset({"gave_up", "finished", "budget_stop", "deadline_stop", "sweep_ended"})

# run events -> notice kind (job_failed: a job error the run restarts from; gave_up: the run stops)
_RUN_EVENTS = {"preempted": "preempted", "recreated": "recreated", "resumed": "resumed", "stalled": "stalled",
               "job_failed": "failed", "gave_up": "failed", "finished": "finished",
               "budget_warning": "budget_warning", "budget_stop": "budget_stop", "deadline_stop": "deadline_stop"}
SEVERITY = {"preempted": "warning", "recreated": "info", "resumed": "info", "stalled": "warning",
            "failed": "error", "finished": "success", "budget_warning": "warning", "budget_stop": "error",
            "deadline_stop": "error", "reaped": "info", "sweep_best": "info", "sweep_ended": "success"}


@dataclass(frozen=True)
class Notice:
    """One message: what happened (``kind``), to what (``subject``: a run id, sweep id or cluster),
    a one-line ``title``, a ``text`` for people, and ``fields`` for machines (the webhook's JSON)."""

    kind: str
    subject: str
    title: str
    text: str
    time: float
    cluster: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    # notices of this kind the rate limit held back and this one stands for (0: none)
    held: int = 0
    # it ends a run or sweep: never held back, and waited for before the process exits
    final: bool = False

    @property
    def severity(self) -> str:
        return SEVERITY.get(self.kind, "info")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "subject": self.subject, "cluster": self.cluster,
                "title": self.title, "text": self.text, "time": self.time, "fields": dict(self.fields),
                "held_back": self.held, "final": self.final}


@dataclass(frozen=True)
class RunContext:
    """What a run's notices quote beside the event: its id, cluster, job and last progress."""

    run_id: str
    cluster: str = ""
    job: str = ""
    num_train_steps: int | None = None
    last_progress: Mapping[str, Any] | None = None
    preemptions: int = 0
    seconds_lost: float = 0.0
    steps_lost: int = 0


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def _text(value: Any, limit: int = 200) -> str | None:
    """A string from a bucket record on its way into a notification: the same filter as a
    terminal's (docs/security.md, Output), one line, bounded."""
    if value is None or isinstance(value, (dict, list)):
        return None
    s = printable(" ".join(str(value).split()))
    return s[:limit] + ("..." if len(s) > limit else "")


def duration_words(seconds: float | None) -> str:
    """``95`` -> ``1m35s``: how long, for a person."""
    if seconds is None:
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return "".join(parts[:2])


def final_metrics(progress: Mapping[str, Any] | None) -> dict[str, float]:
    """The loss and the job's metrics (``eval_*`` included) of a run's last progress record."""
    p = progress if isinstance(progress, Mapping) else {}
    out: dict[str, float] = {}
    loss = _num(p.get("loss"))
    if loss is not None:
        out["loss"] = loss
    metrics = p.get("metrics")
    if isinstance(metrics, Mapping):
        for name, value in sorted(metrics.items())[:20]:
            v = _num(value)
            if isinstance(name, str) and v is not None:
                out[name[:60]] = v
    return out


def _step_of(run: RunContext, step: Any) -> str:
    s = _int(step)
    total = run.num_train_steps
    if s is None:
        return "step ?"
    return f"step {s}/{total}" if total else f"step {s}"


def notice_for(event: Mapping[str, Any], run: RunContext) -> Notice | None:
    """The notice of one of a run's events, or None if it is not one people are told about."""
    name = event.get("event")
    kind = _RUN_EVENTS.get(name) if isinstance(name, str) else None
    if kind is None:
        return None
    when = _num(event.get("time")) or 0.0
    rid = run.run_id
    fields: dict[str, Any] = {"run_id": rid, "event": name}
    step = event.get("step")
    if name == "preempted":
        n = _int(event.get("preemption"))
        ckpt = _int(event.get("checkpoint_step"))
        cause = _text(event.get("cause"))
        title = f"run {rid} preempted" + (f" (preemption {n})" if n else "")
        text = f"{title} at {_step_of(run, step)}" + (f"; last checkpoint {ckpt}" if ckpt is not None else "") \
            + (f"; {cause}" if cause else "") + "; tpuctl is recreating the TPU"
        fields.update(preemption=n, step=_int(step), checkpoint_step=ckpt, cause=cause)
    elif name == "recreated":
        zone, secs = _text(event.get("zone"), 60), _num(event.get("seconds"))
        title = f"run {rid}: TPU recreated" + (f" in {zone}" if zone else "")
        text = title + (f" after {duration_words(secs)}" if secs is not None else "") + "; the job restarts"
        fields.update(zone=zone, seconds=secs)
    elif name == "resumed":
        lost_steps, lost_s = _int(event.get("steps_lost")), _num(event.get("seconds_lost"))
        title = f"run {rid} resumed at {_step_of(run, step)}"
        text = title + (f"; lost {lost_steps} step(s) and {duration_words(lost_s)}" if lost_steps is not None else "")
        fields.update(step=_int(step), steps_lost=lost_steps, seconds_lost=lost_s)
    elif name == "stalled":
        secs = _num(event.get("seconds"))
        title = f"run {rid} stalled at {_step_of(run, step)}"
        text = f"{title}: no new step for {duration_words(secs)} while the TPU bills"
        fields.update(step=_int(step), seconds=secs)
    elif name in ("job_failed", "gave_up"):
        reason = _text(event.get("reason"))
        code = _int(event.get("exit_code"))
        if name == "gave_up":
            title = f"run {rid} failed"
            text = f"{title}: {reason or 'it stopped'}; checkpoints are kept"
        else:
            title = f"run {rid}: job error" + (f" (exit code {code})" if code is not None else "")
            text = f"{title}; restarting from the last checkpoint" + (f" ({reason})" if reason else "")
        fields.update(reason=reason, exit_code=code, final=name == "gave_up")
    elif name == "finished":
        metrics = final_metrics(run.last_progress)
        title = f"run {rid} finished at {_step_of(run, step)}"
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
        text = title + (f": {shown}" if shown else "") + \
            (f"; {run.preemptions} preemption(s) cost {duration_words(run.seconds_lost)}" if run.preemptions else "")
        fields.update(step=_int(step), metrics=metrics, preemptions=run.preemptions,
                      seconds_lost=round(run.seconds_lost, 1))
    else:       # budget and deadline events (their writer's fields, passed on as they are)
        words = {"budget_warning": "budget warning", "budget_stop": "stopped by its budget",
                 "deadline_stop": "stopped by its deadline"}[name]
        title = f"run {rid} {words}" if name != "budget_warning" else f"run {rid}: budget warning"
        detail = ", ".join(f"{k} {_text(v, 60)}" for k, v in sorted(event.items())
                           if k not in ("time", "event") and _text(v, 60) is not None)
        text = title + (f": {detail}" if detail else "")
        fields.update({k: v for k, v in event.items() if k not in ("time", "event") and _scalar(v)})
    return Notice(kind=kind, subject=rid, title=title, text=text, time=when, cluster=run.cluster or None,
                  fields={k: v for k, v in fields.items() if v is not None}, final=name in FINAL_EVENTS)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 200)


def reaped_notice(cluster: str, tpu: str, zone: str, accelerator_type: str, saves_usd_per_hour: float | None,
                  reason: str, when: float) -> Notice:
    """An idle or dead TPU the reaper deleted, and what that saves per hour at list price (None:
    its price is unknown, and the notice says so rather than $0.00)."""
    title = f"cluster {cluster}: TPU {tpu} deleted"
    saves = (f"saves ${saves_usd_per_hour:.2f}/hour at list price" if saves_usd_per_hour is not None
             else "its price is unknown")
    text = f"{title} ({accelerator_type} in {zone}): {_text(reason) or 'idle'}; {saves}"
    return Notice(kind="reaped", subject=cluster, title=title, text=text, time=when, cluster=cluster,
                  fields={"tpu": tpu, "zone": zone, "accelerator_type": accelerator_type,
                          "saves_usd_per_hour": round(saves_usd_per_hour, 4) if saves_usd_per_hour is not None
                          else None, "reason": _text(reason)})


def sweep_notice(kind: str, sweep_id: str, *, metric_name: str, metric: float | None, trial: int | None,
                 params: Mapping[str, Any] | None, when: float, state: str | None = None,
                 reason: str | None = None) -> Notice:
    """A sweep's new best trial (``sweep_best``) or its end (``sweep_ended``)."""
    shown = ", ".join(f"{k}={_text(v, 40)}" for k, v in sorted((params or {}).items())[:12])
    best = (f"trial {trial} {metric_name} {metric:.4g}" if trial is not None and metric is not None else None)
    if kind == "sweep_best":
        title = f"sweep {sweep_id}: new best " + (best or "trial")
        text = title + (f" ({shown})" if shown else "")
    else:
        title = f"sweep {sweep_id} {state or 'ended'}"
        text = title + (f": {_text(reason)}" if reason else "") + (f"; best {best}" if best else "; no trial reported")
    return Notice(kind=kind, subject=sweep_id, title=title, text=text, time=when, final=kind == "sweep_ended",
                  fields={k: v for k, v in {"sweep_id": sweep_id, "trial": trial, "metric_name": metric_name,
                                            "metric": metric, "params": dict(params or {}) or None,
                                            "state": state}.items() if v is not None})
