"""Writes ``<model_dir>/progress.json``: after every host loop, at exit, and from a timer.

The timer matters because one host loop can outlast the idle reaper's patience: 1000 steps of
BERT-large on a v2-8, or the first XLA compilation, take minutes, and a run that says nothing
for 60 s looks dead. A daemon thread rewrites the record every ``interval`` seconds with a
fresh ``time``, and with the step reached inside the running host loop (a host-side counter the
loop bumps after each step; ``step_time`` says when the step last moved, so a live but stuck
process shows as a fresh ``time`` with an old ``step_time``).
Writes go through ``tf.io.gfile`` (gs:// works) as temp file + rename, so readers never see
half a record; a failed write is logged and retried at the next beat, never fatal.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

import tensorflow as tf

from . import progress as progress_lib
from .progress import Progress


class ProgressWriter:
    def __init__(self, model_dir: str, num_train_steps: int, interval: float | None = None,
                 enabled: bool = True):
        self.enabled = enabled  # one writer per run: the other workers of a multi-worker job keep quiet
        self.path = model_dir.rstrip("/") + "/" + progress_lib.FILENAME
        if interval is None:  # TPUCTL_HEARTBEAT_SECONDS: shorter beats for tests and demos
            interval = float(os.environ.get("TPUCTL_HEARTBEAT_SECONDS")
                             or progress_lib.HEARTBEAT_SECONDS)
        self.interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.live_step = None  # callable: the step reached inside the current host loop
        now = time.time()
        self.record = Progress(num_train_steps=num_train_steps, started_at=now, time=now,
                               run_id=os.environ.get("TPUCTL_RUN") or None, pid=os.getpid(),
                               host=socket.gethostname())
        previous = self._read_previous()
        if previous is not None:  # until we restore, the last known position is the best guess
            self.record.step = previous.step
            self.record.checkpoint_step = previous.checkpoint_step
            self.record.loss = previous.loss
            self.record.evals = progress_lib.clean_evals(previous.evals)  # resumes keep the curve
            self.record.data_creation = [list(x) for x in previous.data_creation
                                         if isinstance(x, list) and len(x) == 2]

    def _read_previous(self) -> Progress | None:
        try:
            with tf.io.gfile.GFile(self.path) as f:
                return progress_lib.parse(f.read())
        except (tf.errors.OpError, ValueError, TypeError):
            return None

    def update(self, **fields) -> None:
        """Change fields and write the record now."""
        with self._lock:
            if "step" in fields and fields["step"] != self.record.step:
                self.record.step_time = time.time()
            for key, value in fields.items():
                setattr(self.record, key, value)
            self._note_first_step()
        self.write()

    def _note_first_step(self) -> None:
        """Date the first step trained past the one this process started from (with the lock held)."""
        r = self.record
        if r.first_step_time is None and r.step_time is not None and r.step > (r.resumed_from_step or 0):
            r.first_step_time = r.step_time

    def add_eval(self, step: int, metrics: dict[str, float]) -> None:
        """Record an evaluation at ``step`` (replacing an earlier one of the same step, which a
        resumed run redoes) and write now."""
        with self._lock:
            evals = [e for e in self.record.evals if e["step"] != step]
            evals.append({"step": int(step), "metrics": {k: float(v) for k, v in metrics.items()}})
            self.record.evals = sorted(evals, key=lambda e: e["step"])
        self.write()

    def write(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.record.time = time.time()
            text = self.record.to_json()
            tmp = f"{self.path}.tmp-{os.getpid()}"
            try:
                tf.io.gfile.makedirs(os.path.dirname(self.path) or ".")
                with tf.io.gfile.GFile(tmp, "w") as f:
                    f.write(text)
                tf.io.gfile.rename(tmp, self.path, overwrite=True)
            except (tf.errors.OpError, OSError) as exc:
                print(f"jobs: warning: could not write {self.path}: {exc}", file=sys.stderr)

    def start(self) -> ProgressWriter:
        self.write()
        self._thread = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            live = None
            if self.live_step is not None:
                try:
                    live = int(self.live_step())
                except Exception:  # noqa: BLE001 - the loop may be tearing down; next beat tells
                    live = None
            with self._lock:
                if live is not None and live > self.record.step:
                    self.record.step = live
                    self.record.step_time = time.time()
                    self._note_first_step()
            self.write()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
