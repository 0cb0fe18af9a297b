"""A ``job: command`` attempt on a host: the program's argv, directory and environment, and its
progress lines folded into the run's ``progress.json`` (docs/own-code.md).

The attempt wrapper (:func:`provision.host.agent.run_attempt`) runs the program instead of
``python -m jobs run``, with the same heartbeats, log upload and exit record, so the supervisor,
its policy and the idle reaper work unchanged. What differs is here: the program runs in the
unpacked workdir with the contract's environment (:data:`jobs.command.CONTRACT`), ``python`` on
its ``PATH`` is the host's Python that runs this agent (the image's packages, and the run's
requirements before them), and worker 0's agent keeps ``progress.json`` from the program's lines
(:mod:`provision.runs.reports`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..basics.private import opener
from ..runs import reports


@dataclass
class Program:
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    grace_s: float                    # SIGTERM to SIGKILL, stated in the log and the event log
    progress_file: Path
    sink: ProgressSink | None         # worker 0's: the run's progress.json
    checkpoint_dir: Path | None = None    # TPUCTL_CHECKPOINT_DIR (provision.host.checkpoint_dir)


def prepare(spec: dict[str, Any], env: dict[str, str], *, work: Path, code_dir: Path | None, run_id: str, n: int,
            worker: str, provider: str, project: str, site: Path | None = None) -> Program:
    """The program of the pinned spec ``spec`` (a ``job: command`` mapping), ready to start:
    ``env`` is the attempt's (this worker's launch environment applied); ``site``: the run's
    requirements, installed for this host (:func:`provision.runs.wheelhouse.install`)."""
    from jobs import spec as jobspec

    checked = jobspec.from_dict(spec, source="the run's spec")
    out = dict(env)
    progress_file = work / f"progress-{n}.jsonl"
    with contextlib.suppress(FileNotFoundError):
        progress_file.unlink()
    from .checkpoint_dir import FOLDER

    checkpoint_dir = work / FOLDER
    out.update({"TPUCTL_MODEL_DIR": checked.model_dir, "TPUCTL_CHECKPOINT_DIR": str(checkpoint_dir),
                "TPUCTL_RUN": run_id, "TPUCTL_ATTEMPT": str(n - 1),      # as the agent sets them for every job
                "TPUCTL_PROGRESS_FILE": str(progress_file),
                "TPUCTL_PARAMS": json.dumps(checked.params, sort_keys=True),
                "TPUCTL_EVAL_EVERY_STEPS": str(checked.eval_every_steps)})
    out.setdefault("TPUCTL_WORKER_INDEX", worker if worker.isdigit() else "0")
    out.setdefault("TPUCTL_NUM_WORKERS", "1")
    out.setdefault("PYTHONUNBUFFERED", "1")      # the log shows the program's lines as it prints them
    path = [str(Path(sys.executable).parent)]
    if site is not None:
        path.insert(0, str(site / "bin"))
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), out.get("PYTHONPATH", "")) if p)
    out["PATH"] = os.pathsep.join([*path, out.get("PATH") or os.defpath])
    sink = ProgressSink(checked.model_dir, provider, project, pattern=checked.progress_pattern) \
        if out["TPUCTL_WORKER_INDEX"] == "0" else None
    return Program(argv=checked.argv(), cwd=code_dir or work, env=out, grace_s=float(checked.stop_grace_seconds),
                   progress_file=progress_file, sink=sink, checkpoint_dir=checkpoint_dir)


@dataclass
class ProgressSink:
    """Worker 0's ``progress.json`` in the model directory: a local directory (the local
    provider) or a bucket path; written whole each time, as the runner writes it."""

    model_dir: str
    provider: str
    project: str
    pattern: str | None = None   # the spec's progress_pattern (jobs.command.patterns)
    record: dict[str, Any] = field(default_factory=dict)
    sources: Any = None          # this attempt's other progress sources (provision.host.progress_sources)
    arrivals: Any = None         # when the progress file's lines were first seen (progress_sources.Arrivals)
    _offset: int = 0
    _partial: bytes = b""
    _bucket: Any = None          # the model directory's bucket, opened once
    _lock: Any = field(default_factory=threading.Lock)    # the looks (a thread of their own) and the reads

    def begin(self, num_train_steps: int, run_id: str, pid: int, *, log_path: Path | None = None,
              event_dirs: list[Path] | None = None, progress_file: Path | None = None) -> None:
        """A new attempt's record; ``log_path`` is the program's output (for ``progress_pattern``),
        ``event_dirs`` where its TensorBoard event files may be (a local model directory too),
        ``progress_file`` its ``$TPUCTL_PROGRESS_FILE`` (its lines dated by :meth:`look`)."""
        from ..runs.supervisor import read_progress
        from .progress_sources import Arrivals, open_sources

        remote = self.model_dir.startswith("gs://")
        roots = [*(event_dirs or []), *([] if remote else [Path(self.model_dir)])]
        self.sources = open_sources(pattern=self.pattern, log_path=log_path, event_roots=roots,
                                    event_bucket=(self.model_dir, self._open_bucket) if remote else None)
        self.arrivals = Arrivals(progress_file) if progress_file is not None else None

        previous = read_progress(self.model_dir, self.provider, self.project)
        self.record = reports.start(previous, run_id=run_id, num_train_steps=num_train_steps, now=time.time(),
                                    pid=pid, host=socket.gethostname())
        self.write()

    def look(self) -> None:
        """How far the progress file and the log have grown, now (a ``stat`` each, no read): what
        dates each step to within a look (:data:`provision.host.agent.STEP_LOOK_S`), where
        the beat reads them only every few seconds."""
        now = time.time()
        with self._lock:
            if self.arrivals is not None:
                self.arrivals.look(now)
            if self.sources is not None:
                self.sources.look(now)

    def beat(self, progress_file: Path) -> None:
        """Fold the program's new whole lines in and write the record (its ``time`` is now)."""
        with self._lock:
            lines, times = self._new_lines(progress_file)
            self.record = reports.fold(self.record, lines, time.time(), times=times)
            self._fold_sources(final=False)
        self.write()

    def finish(self, progress_file: Path, code: int, message: str | None) -> None:
        with self._lock:
            lines, times = self._new_lines(progress_file)
            if self._partial:            # a last line without its newline: the program has exited
                lines.append(self._partial)
                times.append(self.arrivals.at(self._offset) if self.arrivals is not None else None)
            self.record = reports.fold(self.record, lines, time.time(), times=times)
            self._fold_sources(final=True)
            self.record = reports.end(self.record, code, time.time(), message)
        self.write()

    def _fold_sources(self, *, final: bool) -> None:
        items = self.sources.read(final=final) if self.sources is not None else []
        if items:
            self.record = reports.fold_items(self.record, items, time.time())

    def _new_lines(self, path: Path) -> tuple[list[bytes], list[float | None]]:
        """The program's new whole lines, each with when it was first seen (None: not by a look)."""
        try:
            with open(path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(4 << 20)
        except OSError:
            return [], []
        pos = self._offset - len(self._partial)
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > reports.MAX_LINE:
            self._partial = b""
        out, times = [], []
        for line in lines:
            pos += len(line) + 1
            if line.strip():
                out.append(line)
                times.append(self.arrivals.at(pos) if self.arrivals is not None else None)
        if self.arrivals is not None:
            self.arrivals.consumed(self._offset - len(self._partial))
        return out, times

    def _open_bucket(self) -> Any:
        """The model directory's bucket (its progress.json, its event files), opened once."""
        if self._bucket is None:
            from ..basics.config import Target
            from ..cloud.storage import open_bucket

            self._bucket = open_bucket(self.model_dir, Target(provider=self.provider, project=self.project, zone=None))
        return self._bucket

    def write(self) -> None:
        text = json.dumps(reports.public(self.record), sort_keys=True).encode()
        try:
            if self.model_dir.startswith("gs://"):
                from ..basics.validate import bucket_url

                url = bucket_url(self.model_dir)
                self._open_bucket().write_bytes(f"{url.prefix}/progress.json" if url.prefix else "progress.json", text)
                return
            directory = Path(self.model_dir)
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = directory / f"progress.json.tmp-{os.getpid()}"
            with open(tmp, "wb", opener=opener) as fh:
                fh.write(text)
            os.replace(tmp, directory / "progress.json")
        except Exception as exc:  # noqa: BLE001 - a missed write is retried at the next beat
            print(f"tpuctl agent: could not write the progress of {self.model_dir}: {exc}", file=sys.stderr,
                  flush=True)
