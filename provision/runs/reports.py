"""A ``job: command`` program's progress lines, folded into the run's ``progress.json`` (pure).

A program of the user's imports nothing of tpuctl. It may append JSON lines to the local file
``$TPUCTL_PROGRESS_FILE``, one object per line, any of these keys::

    {"step": 120, "loss": 0.42, "metrics": {"accuracy": 0.91}, "checkpoint_step": 100,
     "num_train_steps": 1000, "examples_per_sec": 512.0}

The host agent of worker 0 reads the new lines every few seconds (each dated by when the agent
first saw it: a look at the file's size every half second) and keeps the record the
supervisor, ``status``, ``logs``, the idle reaper, ``cost`` and sweeps read: the same schema the
TensorFlow runner writes (:mod:`jobs.runner.progress`). Its ``time`` is the agent's heartbeat while the
process lives, so a program that reports nothing is never idle while it runs. A line with
``metrics`` is also an evaluation at its step (``evals``: what a sweep's pruner reads); metrics
keep their newest value by name. A line that is not such an object is skipped and counted.

The same objects come from the program's output lines (``progress_pattern``:
:mod:`jobs.command.patterns`) and its TensorBoard scalars (:mod:`provision.host.tbevents`).
``progress_reported`` says whether the run's program has reported any step yet, in any attempt:
until it has, ``step`` is a placeholder, ``status`` says "no progress reported" and a recovery
ends when the new attempt's program runs rather than at a first new step that may never come.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_LINE = 64 << 10
SEEN = "_t"          # an item's key for when its step was first seen (the agent's, not the program's)
MAX_METRICS = 64
MAX_EVALS = 1000
RUNNING, FINISHED, PREEMPTED, FAILED = "running", "finished", "preempted", "failed"


def start(previous: dict[str, Any] | None, *, run_id: str, num_train_steps: int, now: float, pid: int,
          host: str) -> dict[str, Any]:
    """The record of a new attempt: the previous attempt's step, checkpoint, metrics and
    evaluations carried over (a resumed run keeps its curve) until the program reports."""
    prev = previous if isinstance(previous, dict) and previous.get("run_id") in (None, run_id) else {}
    return {"step": _int(prev.get("step")) or 0, "num_train_steps": num_train_steps, "loss": _num(prev.get("loss")),
            "examples_per_sec": None, "steps_per_sec": None, "time": now, "started_at": now, "status": RUNNING,
            "checkpoint_step": _int(prev.get("checkpoint_step")), "resumed_from_step": None, "run_id": run_id,
            "pid": pid, "host": host, "device": {}, "step_time": None, "first_step_time": None,
            "metrics": _metrics(prev.get("metrics")), "message": None,
            "evals": [e for e in (prev.get("evals") or []) if _eval(e)][-MAX_EVALS:],
            "outputs": [], "data_creation": [], "reported": False, "skipped_lines": 0,
            "progress_reported": prev.get("progress_reported") is True,
            "report_every_steps": _int(prev.get("report_every_steps"))}


def fold(record: dict[str, Any], lines: list[bytes], now: float,
         times: list[float | None] | None = None) -> dict[str, Any]:
    """``record`` with the program's new ``lines`` applied (and ``time`` now); ``times``: when
    each line was first seen, where the agent knows (None: now)."""
    items = [_parse(raw) for raw in lines]
    for i, item in enumerate(items):
        if item is not None:
            item.pop(SEEN, None)              # the agent dates a line, never the line itself
            t = times[i] if times is not None and i < len(times) else None
            if t is not None:
                item[SEEN] = t
    return fold_items(record, items, now)


def seen_at(item: dict[str, Any], record: dict[str, Any], now: float) -> float:
    """When ``item``'s step was first seen (its ``_t``: a TensorBoard event's wall time, the look
    that first saw its line), kept within the attempt (from its start until now); else now."""
    t = _num(item.get(SEEN))
    if t is None:
        return now
    start = _num(record.get("started_at"))
    return min(now, max(start, t) if start is not None else t)


def fold_items(record: dict[str, Any], items: list[dict[str, Any] | None], now: float) -> dict[str, Any]:
    """``record`` with progress ``items`` applied (and ``time`` now): the objects of progress lines,
    of ``progress_pattern`` matches or of TensorBoard scalars alike; None is a line skipped. An
    item's step is dated when it was first seen (:func:`seen_at`), finer than the beat."""
    out = {**record, "time": now}
    for item in items:
        if item is None:
            out["skipped_lines"] = out.get("skipped_lines", 0) + 1
            continue
        at = seen_at(item, out, now)
        step = _int(item.get("step"))
        if step is not None and step >= 0:
            if not out.get("reported"):
                # the first step this process reports: it resumed from the checkpoint it named
                # last (carried over from the attempt before), else one reporting interval
                # before it (the steps between the run's last two reports; 1 if unknown)
                ckpt = out.get("checkpoint_step")
                every = out.get("report_every_steps") or 1
                out["resumed_from_step"] = ckpt if ckpt is not None and ckpt <= step else max(0, step - every)
                out["reported"] = out["progress_reported"] = True
            elif step > (out.get("step") or 0):
                out["report_every_steps"] = step - (out.get("step") or 0)
            if step != out.get("step"):
                out["step_time"] = at
            out["step"] = step
            if out.get("first_step_time") is None and step > (out.get("resumed_from_step") or 0):
                out["first_step_time"] = at
        for key in ("loss", "examples_per_sec", "steps_per_sec"):
            if _num(item.get(key)) is not None:
                out[key] = _num(item[key])
        for key in ("checkpoint_step", "num_train_steps"):
            if _int(item.get(key)) is not None and item[key] >= 0:
                out[key] = item[key]
        metrics = _metrics(item.get("metrics"))
        if metrics:
            out["metrics"] = {**out.get("metrics", {}), **metrics}
            if len(out["metrics"]) > MAX_METRICS:
                out["metrics"] = dict(list(out["metrics"].items())[-MAX_METRICS:])
            at = out.get("step") or 0
            evals = [e for e in out.get("evals", []) if e.get("step") != at]
            evals.append({"step": at, "metrics": metrics})
            out["evals"] = sorted(evals, key=lambda e: e["step"])[-MAX_EVALS:]
    return out


def end(record: dict[str, Any], code: int, now: float, message: str | None = None) -> dict[str, Any]:
    """The record as the attempt ends with the exit code the supervisor will see."""
    status = FINISHED if code == 0 else PREEMPTED if code == 42 else FAILED
    return {**record, "time": now, "status": status, "message": message}


def public(record: dict[str, Any]) -> dict[str, Any]:
    """What goes into progress.json: the runner's keys (this module's own bookkeeping left out)."""
    return {k: v for k, v in record.items() if k not in ("reported", "skipped_lines")}


def _parse(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_LINE:
        return None
    try:
        item = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return item if isinstance(item, dict) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 53 else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _metrics(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    out = {str(k)[:100]: _num(v) for k, v in list(value.items())[:MAX_METRICS]}
    return {k: v for k, v in out.items() if v is not None}


def _eval(entry: Any) -> bool:
    return isinstance(entry, dict) and _int(entry.get("step")) is not None and isinstance(entry.get("metrics"), dict)
