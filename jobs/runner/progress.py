"""The progress record a job keeps in ``<model_dir>/progress.json``: its schema and a pure reader.

The supervisor and ``tpuctl status`` read this file to tell a live run from a dead one and to
show step, loss and speed. This module imports only the standard library so the control plane
can use it without TensorFlow (for local paths; for gs:// the control plane fetches the object
with its own storage client and passes the text to :func:`parse`).

The job rewrites the file atomically (temp file + rename) after every host loop, at exit, and
from a heartbeat timer at least every ``HEARTBEAT_SECONDS``, so ``time`` is a liveness signal
even while one host loop (or an XLA compilation) takes minutes. ``step_time`` only moves when
the step does: a fresh ``time`` with an old ``step_time`` means a live process that is stuck.
"""

from __future__ import annotations

import json
import os
import time as _time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

FILENAME = "progress.json"
HEARTBEAT_SECONDS = 20.0  # the reaper treats a run as idle after 60 s without a write

RUNNING, FINISHED, PREEMPTED, FAILED = "running", "finished", "preempted", "failed"
STATUSES = (RUNNING, FINISHED, PREEMPTED, FAILED)


@dataclass
class Progress:
    """One progress record; every key is always present in the JSON (``None`` when unknown)."""

    step: int = 0                      # optimizer steps done (the global step)
    num_train_steps: int = 0           # where the run ends
    loss: float | None = None          # mean training loss of the last host loop
    examples_per_sec: float | None = None
    steps_per_sec: float | None = None
    time: float = 0.0                  # unix seconds of this write (the heartbeat)
    started_at: float = 0.0            # unix seconds when this process started
    status: str = RUNNING              # running | finished | preempted | failed
    checkpoint_step: int | None = None  # newest checkpoint saved in model_dir
    resumed_from_step: int | None = None  # checkpoint this process resumed from (None: fresh)
    run_id: str | None = None          # TPUCTL_RUN of the supervisor's run, if any
    pid: int = 0
    host: str = ""
    device: dict[str, Any] = field(default_factory=dict)  # {"type": "tpu"|"gpu"|"cpu", "count": n}
    step_time: float | None = None     # unix seconds when ``step`` last advanced
    # unix seconds of the first step this process trained past where it started (or resumed):
    # where a recovery ends, however late the supervisor reads this record
    first_step_time: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # last host loop; eval_* at the end
    message: str | None = None         # why the run stopped, when it did not finish
    # every evaluation, by step: [{"step": N, "metrics": {name: value}}] (eval_every_steps and
    # the final one); kept across restarts, so a sweep's pruner sees the whole curve
    evals: list[dict[str, Any]] = field(default_factory=list)
    # what the finished job wrote for its user, relative to model_dir (test_results.tsv,
    # predictions.json, saved_model/ ...): what `tpuctl status` names and `tpuctl stage` fetches
    outputs: list[str] = field(default_factory=list)
    # [start, end] (end None while running) of each time this run made its pretraining data from
    # corpus_files on the TPU host: billed TPU time that `tpuctl cost` counts apart from training
    data_creation: list[list[float | None]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def age(self, now: float | None = None) -> float:
        """Seconds since the job last wrote this record."""
        return (now if now is not None else _time.time()) - self.time

    def is_live(self, now: float | None = None, stale_after: float = 60.0) -> bool:
        """A running record written within ``stale_after`` seconds."""
        return self.status == RUNNING and self.age(now) <= stale_after


def parse(text: str) -> Progress:
    """Parse the JSON text of a progress record; unknown keys are ignored (newer writers)."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("progress record is not a JSON object")  # noqa: TRY004 - bad data
    known = {f.name for f in fields(Progress)}
    record = Progress(**{k: v for k, v in data.items() if k in known})
    if record.status not in STATUSES:
        raise ValueError(f"unknown status {record.status!r} in progress record")
    return record


def clean_evals(evals: Any) -> list[dict[str, Any]]:
    """The well-formed entries of an ``evals`` list (``{"step": int, "metrics": {name:
    number}}``), one per step, by step: a hand-edited or foreign file never crashes a reader."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    out: dict[int, dict[str, Any]] = {}
    for entry in evals if isinstance(evals, list) else ():
        step = entry.get("step") if isinstance(entry, dict) else None
        metrics = entry.get("metrics") if isinstance(entry, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and isinstance(metrics, dict):
            out[step] = {"step": step, "metrics": {str(k): float(v) for k, v in metrics.items()
                                                   if number(v)}}
    return [out[step] for step in sorted(out)]


def metric_curve(evals: Any, metric: str) -> list[tuple[int, float]]:
    """(step, value) of ``metric`` over a record's ``evals`` (a :class:`Progress`'s, or the list
    from the raw JSON), by step: what a sweep's pruner reads."""
    return [(e["step"], e["metrics"][metric]) for e in clean_evals(evals) if metric in e["metrics"]]


def path_in(model_dir: str) -> str:
    return os.path.join(model_dir, FILENAME)


def read(model_dir_or_file: str) -> Progress | None:
    """The record of a local model_dir (or progress.json path); ``None`` if absent or unreadable.

    A half-written file cannot be seen (the writer renames), but a hand-edited or foreign file
    could be malformed: that reads as ``None`` rather than crashing a status command.
    """
    path = model_dir_or_file
    if os.path.isdir(path):
        path = path_in(path)
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read())
    except (OSError, ValueError, TypeError):
        return None
