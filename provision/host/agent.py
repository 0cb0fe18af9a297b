"""What runs on a host: the attempt wrapper, and the agent daemon of GCP hosts.

No inbound port and no ssh: hosts pull their work from the bucket. The supervisor (on the laptop
or on the host VM) writes ``attempts/<n>/command.json`` and points ``clusters/<c>/current.json``
at it; each host's agent notices and runs the attempt wrapper, which

- fetches the job spec (and the user's workdir) from the bucket, checked against the host's pin,
- runs ``python -m jobs run`` (or a ``job: command`` program: :mod:`provision.host.program`) in
  its process group, its log streamed to ``log-<worker>.txt``,
- writes ``alive-<worker>.json`` every few seconds (the supervisor's "is it still there"),
- turns a ``stop.json`` request into SIGTERM (the job checkpoints and exits 42),
- writes ``exit-<worker>.json`` with the exit code, last.

A preemption kills the wrapper with its job: no exit record and a stale heartbeat is how the
supervisor tells "lost with its host" from "exited".

The local provider runs the same wrapper, started by the supervisor directly (the "VM" is this
machine); on GCP the agent daemon (``tpuctl agent``, started by the host's startup script) does.
The host VM's agent also supervises runs handed over to it and drives sweeps handed to it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..basics.private import UnsafeDirectory, open_append, private_dir
from ..basics.procs import group_members, wait_for_group
from ..runs.store import ALIVE_EVERY_S
from .trust import HostPin

# the only variables a command from the bucket may set for the job (never LD_PRELOAD, PATH, ...;
# the PJRT plug-in path only to the one library the TPU VM images ship): provision.runs.launch
JOB_ENV_KEYS = frozenset({"TPU_NAME", "TPUCTL_TPU_ZONE", "TPUCTL_TPU_PROJECT", "TPUCTL_DEVICE",
                          "TPUCTL_ACCELERATOR_TYPE", "TPUCTL_SLICE_CORES", "TPU_LOAD_LIBRARY",
                          "TPUCTL_WORKER_INDEX", "TPUCTL_NUM_WORKERS", "TPUCTL_COORDINATOR",
                          "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "NEXT_PLUGGABLE_DEVICE_USE_C_API",
                          "TF_PLUGGABLE_DEVICE_LIBRARY_PATH", "TPUCTL_BACKEND"})
FIXED_ENV_VALUES = {"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}
# variables whose value is one of a few words (the Keras backend train resolved: jobs.spec.backends)
CHOSEN_ENV_VALUES = {"TPUCTL_BACKEND": ("jax", "tensorflow")}
STOP_GRACE_S = 60.0
LAUNCH_PIN_WAITS = (1.0, 2.0, 4.0, 8.0)   # seconds between looks at a pin that does not name the launch yet
LEFTOVER_GRACE_S = 5.0     # what a finished job left running gets between SIGTERM and SIGKILL
TAIL_LINES = 12            # of a failed job's output, in its exit record and train's output
_ERROR_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Exit|Interrupt)\b.*|^(FATAL|Fatal|fatal|ERROR|Error|error)\b.*")
LOG_TAIL_BYTES = 4 << 20   # the bucket keeps the last 4 MiB of a log; the host keeps all of it
# between looks at how far a program's progress sources have grown (worker 0 of a job: command):
# a stat each, so its steps are dated to within this rather than to the heartbeat
STEP_LOOK_S = 0.5


def _store(bucket_url: str, provider: str, project: str, run_id: str):
    from ..basics.config import Target
    from ..cloud.storage import open_bucket
    from ..runs.store import RunStore

    target = Target(provider=provider, project=project, zone=None)
    return RunStore(open_bucket(bucket_url, target), run_id)


def host_dir(*parts: str) -> Path:
    """A directory of this host's own under ``$TPUCTL_HOME/host`` (``/var/lib/tpuctl`` on a GCP
    host), private to the agent's user (provision.basics.private): never a predictable path in a
    shared directory another local user could make first."""
    from ..basics.config import home

    return private_dir(home(), "host", *parts)


def run_attempt(bucket_url: str, provider: str, project: str, run_id: str, n: int, worker: str, cluster: str,
                workdir: Path | None = None) -> int:
    """Run attempt ``n`` of ``run_id`` on this host; returns (and records) the job's exit code.

    Only a run pinned on this host (provision.runs.pins) runs, and only with the spec and code
    whose digests were pinned with it (the bootstrap checked the wheel): what is read from the
    bucket is checked against the pin before anything of it is used. A refusal is recorded as exit code 2 (never retried) with
    its reason, in the attempt's log and exit record."""
    from ..runs.pinning import read_host_pin
    from ..runs.pins import sha256

    # when each step of getting the program going ended, in its heartbeats and exit record: a
    # run's startup by phase (provision.runs.startup), at no request of its own
    startup: dict[str, Any] = {"began": round(time.time(), 3)}
    store = _store(bucket_url, provider, project, run_id)
    prefix = store.attempt_prefix(n)
    pin = read_host_pin(provider, cluster)
    refusal = pin.refusal("run", run_id)
    if refusal:
        return refuse(store, n, worker, refusal)
    entry = pin.entry("run", run_id) or {}
    command = store.read_json(f"{prefix}/command.json")
    if command is None:
        print(f"tpuctl agent: attempt {n} of {run_id} has no command", file=sys.stderr)
        return 2
    if not isinstance(command, dict):
        return refuse(store, n, worker, "its command.json is not a JSON object")
    refusal = _launch_refusal(pin, run_id, command, provider, cluster)
    if refusal:       # where the job runs and listens comes from the pin, never from the bucket alone
        return refuse(store, n, worker, refusal)
    mine = (command.get("workers") or {}).get(worker)
    if isinstance(mine, dict) and mine.get("run") is False:
        return serve_attempt(store, n, worker, command)
    # one directory per worker (an emulated slice's workers share this machine), private to this user
    try:
        work = private_dir(Path(workdir)) if workdir else host_dir("work", run_id, worker)
    except UnsafeDirectory as exc:
        return refuse(store, n, worker, exc.one_line())
    spec = store.bucket.read_bytes(f"{store.prefix}/spec.yaml")
    refusal = pin.refusal("run", run_id, {"spec": sha256(spec)})
    if refusal:
        return refuse(store, n, worker, refusal)
    spec_path = work / "spec.yaml"
    spec_path.write_bytes(spec)
    env = dict(os.environ)
    # this worker's own environment (a slice's workers differ), else the attempt's (a TPU Node's host)
    wanted = (mine.get("env") if isinstance(mine, dict) else None) or command.get("env") or {}
    env.update({k: str(v) for k, v in wanted.items()
                if k in JOB_ENV_KEYS and FIXED_ENV_VALUES.get(k, str(v)) == str(v)
                and str(v) in CHOSEN_ENV_VALUES.get(k, (str(v),))})
    # one name and one numbering for every job, the runner's and a program's (jobs.command.CONTRACT)
    env["TPUCTL_RUN"] = run_id
    env["TPUCTL_ATTEMPT"] = str(n - 1)
    job = _spec_mapping(spec)
    code_dir = None
    digest = entry.get("workdir")      # the pin says whether the run has a workdir, not command.json
    if digest:
        code_dir = work / "code"
        problem = _unpack_workdir(store, run_id, str(digest), code_dir)
        if problem:
            return refuse(store, n, worker, problem)
        if job.get("job") != "command":
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code_dir), env.get("PYTHONPATH", "")) if p)
    startup["fetched"] = round(time.time(), 3)
    log_path = work / f"attempt-{n}-{worker}.log"
    log = os.fdopen(open_append(log_path), "ab", buffering=0)  # the attempt process writes to it until it exits
    log.write(f"[tpuctl] attempt {n} of run {run_id} on {socket.gethostname()} (worker {worker})\n".encode())
    program = None
    kept = None                        # a job: command's checkpoint directory (provision.host.checkpoint_dir)
    grace_s = STOP_GRACE_S
    site = None
    if entry.get("requirements"):
        # the run's pinned wheels (a program's requirements; jax[tpu] and its libtpu for the JAX backend)
        from ..runs import wheelhouse

        digest = str(entry["requirements"])
        began = round(time.time(), 3)
        try:
            site = wheelhouse.install(store.bucket, digest, host_dir("envs", digest, worker),
                                      lambda m: log.write(f"[tpuctl] {m}\n".encode()))
        except (ValueError, OSError, UnsafeDirectory) as exc:
            return refuse(store, n, worker, f"the run's requirements: {exc}")
        except Exception as exc:  # noqa: BLE001 - the bucket lost them: nothing to install from
            return refuse(store, n, worker, f"the run's requirements cannot be read from the bucket ({exc})")
        startup["requirements"] = [began, round(time.time(), 3)]
    if job.get("job") == "command":
        from . import program as programs

        try:
            program = programs.prepare(job, env, work=work, code_dir=code_dir, run_id=run_id, n=n, worker=worker,
                                       provider=provider, project=project, site=site)
        except Exception as exc:  # noqa: BLE001 - a pinned spec this tpuctl cannot run: one line, never retried
            return refuse(store, n, worker, f"the run's spec cannot run here: {exc}")
        argv, cwd, env, grace_s = program.argv, program.cwd, program.env, program.grace_s
        if program.checkpoint_dir is not None:
            began = round(time.time(), 3)
            kept, problem = _restore_checkpoint_dir(program.checkpoint_dir, env["TPUCTL_MODEL_DIR"], work, log,
                                                    provider=provider, project=project,
                                                    worker=env.get("TPUCTL_WORKER_INDEX", "0"))
            if problem:       # the bucket is away: an infrastructure failure, retried (never a fresh start)
                return _exit_before_start(store, prefix, worker, log, log_path, 42, problem, startup=startup)
            startup["checkpoint_restore"] = [began, round(time.time(), 3)]
        log.write(f"[tpuctl] running {_shown(argv)} in the workdir, in a process group of its own (SIGTERM to "
                  f"the group is the preemption notice: {grace_s:g} s to save and exit, then SIGKILL)\n".encode())
    else:
        argv, cwd = [sys.executable, "-m", "jobs", "run", str(spec_path)], work
        if site is not None:      # the pinned wheels before the image's packages (its TensorFlow, if any)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)

    # the local provider's bucket is a directory in $TPUCTL_HOME: the job's checkpoints and
    # summaries there are the user's alone (provision.basics.private), whatever the umask
    started_at = log.tell()      # where the job's own output begins, for the error tail
    try:
        # a session of its own: a signal reaches everything the job started (``bash run.sh`` and
        # its python), and what it leaves behind can be found and stopped when the attempt ends
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(cwd),
                                start_new_session=True, umask=0o077 if provider == "local" else -1)
    except OSError as exc:    # the program is not there, or not executable: it cannot run (exit 2)
        reason = f"cannot start {argv[0]}: {exc.strerror or exc} (the command's program must be in the workdir " \
                 f"or on the host's PATH)"
        log.write(f"[tpuctl] {reason}\n".encode())
        return _exit_before_start(store, prefix, worker, log, log_path, 2, reason, startup=startup)
    startup["program_started"] = round(time.time(), 3)
    group = proc.pid                   # the job's process group (start_new_session: its pid)
    if kept is not None:
        kept.start(group)
    sink = program.sink if program is not None else None
    if sink is not None:
        sink.begin(int(job.get("num_train_steps") or 0), run_id, proc.pid, log_path=log_path,
                   event_dirs=[program.checkpoint_dir] if program.checkpoint_dir is not None else [],
                   progress_file=program.progress_file)
    stop_sent = threading.Event()
    kill_at = [0.0]                     # when the grace after SIGTERM runs out (monotonic)
    terminated = threading.Event()      # the program got SIGTERM: whatever it exits with is a preemption
    killed = threading.Event()          # ... and did not exit within the grace period
    done = threading.Event()

    def terminate() -> None:
        """SIGTERM now, SIGKILL after the grace period (once)."""
        if terminated.is_set():
            return
        terminated.set()
        kill_at[0] = time.monotonic() + grace_s
        _signal_group(group, signal.SIGTERM)

        def kill() -> None:
            if proc.poll() is None or group_members(group):
                killed.set()
                _signal_group(group, signal.SIGKILL)

        timer = threading.Timer(grace_s, kill)
        timer.daemon = True
        timer.start()

    def sync() -> None:
        """Heartbeat, log upload, the program's progress and stop requests, until the job ends;
        for worker 0 of a program, a look at how far its progress sources have grown between the
        beats (a ``stat`` each: ProgressSink.look), which dates its steps to within a look."""
        beat_at = time.monotonic() + ALIVE_EVERY_S
        while not done.wait(STEP_LOOK_S if sink is not None else ALIVE_EVERY_S):
            if sink is not None:
                sink.look()
                if time.monotonic() < beat_at:
                    continue
                beat_at = time.monotonic() + ALIVE_EVERY_S
            _upload_log(store, prefix, worker, log_path)
            with contextlib.suppress(Exception):
                store.write_json(f"{prefix}/alive-{worker}.json", {"time": time.time(), "pid": proc.pid,
                                                                     "host": socket.gethostname(),
                                                                     "startup": startup})
            if sink is not None and program is not None:
                sink.beat(program.progress_file)
            if not stop_sent.is_set() and store.read_json(f"{prefix}/stop.json") is not None:
                stop_sent.set()
                terminate()

    with contextlib.suppress(Exception):
        store.write_json(f"{prefix}/alive-{worker}.json", {"time": time.time(), "pid": proc.pid,
                                                            "host": socket.gethostname(), "startup": startup})
    syncer = threading.Thread(target=sync, daemon=True)
    syncer.start()
    if provider == "gcp":
        # Compute Engine's preemption notice (instance/preempted) reaches the job as SIGTERM at once:
        # it checkpoints inside the ~30 s a Spot VM is given (provision/host/preemption.py)
        from .preemption import watch

        watch(lambda: _notify(proc, log, terminate if program is not None else None), done)

    def forward(signum: int, _frame: Any) -> None:
        # a host shutting down (or the supervisor stopping this run) reaches the job as SIGTERM
        if program is not None:
            threading.Thread(target=terminate, daemon=True).start()
            return
        _signal_group(group, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if sink is not None:
        sink.look()          # what it printed last is dated by its exit, not by the final upload below
    left = _stop_leftovers(group, terminated.is_set(), kill_at[0], killed)
    if left:
        log.write(f"[tpuctl] {left} process(es) the job started were still running after it exited: "
                  f"{'killed after the grace period' if killed.is_set() else 'stopped'}\n".encode())
    if kept is not None:
        try:
            kept.finish()          # the final upload, every file taken: the group is gone
        except Exception as exc:  # noqa: BLE001 - the bucket is away: what the scans sent is what is kept
            log.write(f"[tpuctl] checkpoint dir: the final upload failed: {' '.join(str(exc).split())[:300]}\n"
                      .encode())
    done.set()
    syncer.join(timeout=ALIVE_EVERY_S + 5)
    record: dict[str, Any] = {"code": code, "time": time.time(), "host": socket.gethostname(), "startup": startup}
    if code not in (0, 42) and not terminated.is_set():
        record.update(error_tail(log_path, started_at))
    if program is not None and terminated.is_set():
        # the preemption notice was given: however the program ended, the run resumes (exit 42)
        record.update(code=42, program_code=code, after_sigterm=True)
        if killed.is_set():
            record["killed_after_s"] = grace_s
            note = (f"the program did not exit within {grace_s:g} s of SIGTERM: killed (SIGKILL); "
                    f"it resumes from its last checkpoint")
            log.write(f"[tpuctl] {note}\n".encode())
            with contextlib.suppress(Exception):
                store.event("program_killed", attempt=n, worker=worker, grace_s=grace_s, reason=note)
        code = 42
    own = f" (the program's own: {record['program_code']}, after SIGTERM)" if "program_code" in record else ""
    log.write(f"[tpuctl] attempt {n} exited with code {code}{own}\n".encode())
    log.close()
    if sink is not None and program is not None:
        sink.finish(program.progress_file, code, None)
    _upload_log(store, prefix, worker, log_path)
    store.write_json(f"{prefix}/exit-{worker}.json", record)
    return code


def _launch_refusal(pin: Any, run_id: str, command: dict[str, Any], provider: str, cluster: str) -> str | None:
    """Why the attempt's ``command.json`` may not launch here: its environment and worker roles
    (``TF_CONFIG``, ``TPU_NAME``, ``TPUCTL_DEVICE``, the coordinator...) are not those whose digest
    the supervisor pinned with the run (:func:`provision.runs.pins.launch_digest`). The pin is
    written before the command, but a metadata change reaches a guest a moment later: a
    mismatch is looked at again for :data:`LAUNCH_PIN_WAITS` before it is refused."""
    from ..runs.pinning import read_host_pin
    from ..runs.pins import launch_digest

    observed = {"launch": launch_digest(command)}
    refusal = pin.refusal("run", run_id, observed)
    for wait in LAUNCH_PIN_WAITS:
        if refusal is None:
            return None
        time.sleep(wait)
        refusal = read_host_pin(provider, cluster).refusal("run", run_id, observed)
    if refusal is None:
        return None
    return (f"{refusal.removesuffix(': not running it')}: its command.json (where the job runs and listens) "
            f"is not what tpuctl pinned; not running it")


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _stop_leftovers(group: int, noticed: bool, kill_at: float, killed: threading.Event) -> int:
    """Stop what the job left in its process group once it exited (a shell's child, a data
    loader): after the notice they may still be saving until the grace runs out; otherwise
    SIGTERM, a few seconds, then SIGKILL. Nothing of an attempt outlives it, holding the
    accelerator or writing to the model directory. Returns how many there were."""
    left = len(group_members(group))
    if not left:
        return 0
    if not noticed:
        _signal_group(group, signal.SIGTERM)
        kill_at = time.monotonic() + LEFTOVER_GRACE_S
    if not wait_for_group(group, kill_at):
        killed.set()
        _signal_group(group, signal.SIGKILL)
        wait_for_group(group, time.monotonic() + 5)
    return left


def error_tail(log_path: Path, start: int) -> dict[str, Any]:
    """The last lines the job printed and its error line (the last ``...Error: ...`` or
    ``...Exception...`` line, else the last line), redacted: what ``train`` shows of a job that
    failed, and what the supervisor compares across attempts (a failure that repeats before any
    progress is not retried again: provision/runs/policy.py)."""
    from ..basics.redact import redact
    from ..basics.text import printable

    try:
        size = log_path.stat().st_size
        with open(log_path, "rb") as fh:
            fh.seek(max(start, size - 16384))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return {}
    lines = [printable(redact(line.rstrip()))[:300] for line in text.splitlines()
             if line.strip() and not line.startswith("[tpuctl]")][-TAIL_LINES:]
    if not lines:
        return {}
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    return {"tail": lines, "error_line": (errors or lines)[-1]}


def _restore_checkpoint_dir(path: Path, model_dir: str, work: Path, log: Any, *, provider: str, project: str,
                            worker: str) -> tuple[Any, str | None]:
    """This worker's checkpoint directory, restored from the bucket before the program starts
    (its scans and uploads report to the attempt's log); or why it could not be."""
    from .checkpoint_dir import CheckpointDir, part_name

    started = time.monotonic()
    try:
        kept = CheckpointDir.open(model_dir, worker, work, lambda m: log.write(f"[tpuctl] {m}\n".encode()),
                                  provider=provider, project=project)
        files, size = kept.restore()
    except Exception as exc:  # noqa: BLE001 - the bucket is away, or a file would not verify
        return None, (f"the checkpoint directory could not be restored from {part_name(model_dir, worker)}: "
                      f"{' '.join(str(exc).split())[:300]}")
    log.write((f"[tpuctl] TPUCTL_CHECKPOINT_DIR={path}: restored {files} file(s), {size} bytes, from "
               f"{kept.describe()} in {time.monotonic() - started:.1f} s\n" if files else
               f"[tpuctl] TPUCTL_CHECKPOINT_DIR={path}: empty (nothing kept in {kept.describe()} yet)\n").encode())
    return kept, None


def _exit_before_start(store: Any, prefix: str, worker: str, log: Any, log_path: Path, code: int,
                       reason: str, *, startup: dict[str, Any] | None = None) -> int:
    """Record an attempt that ended before its job started (``code`` 2: it cannot run; 42: the
    host could not get it ready, retried), with the reason in its log and exit record."""
    if code != 2:
        log.write(f"[tpuctl] {reason}\n".encode())
    log.close()
    _upload_log(store, prefix, worker, log_path)
    store.write_json(f"{prefix}/exit-{worker}.json", {"code": code, "time": time.time(), "reason": reason,
                                                       "host": socket.gethostname(),
                                                       **({"startup": startup} if startup else {})})
    return code


def _spec_mapping(spec: bytes) -> dict[str, Any]:
    """The pinned spec as a mapping (what the job is); {} if it is not one (the job says why)."""
    import yaml

    try:
        doc = yaml.safe_load(spec)
    except yaml.YAMLError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _unpack_workdir(store: Any, run_id: str, digest: str, code_dir: Path) -> str | None:
    """The pinned workdir archive, checked against its digest and unpacked into ``code_dir``
    (emptied first: exactly what was pinned, nothing left over); why not, or None."""
    import re

    from ..runs.pins import sha256
    from ..staging import workdir

    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        return f"the pinned workdir {digest[:20]!r} is not a sha256"
    try:
        data = store.bucket.read_bytes(workdir.object_name(digest))
    except Exception as exc:  # noqa: BLE001 - gone from the bucket: nothing to run
        return f"the workdir archive {workdir.object_name(digest)} cannot be read ({exc})"
    if sha256(data) != digest:
        return (f"the workdir of run {run_id} in the bucket (sha256 {sha256(data)[:12]}) is not the one pinned in "
                f"this host's metadata (sha256 {digest[:12]}): not running it")
    shutil.rmtree(code_dir, ignore_errors=True)
    code_dir.mkdir(mode=0o700)
    try:
        workdir.unpack(data, code_dir)
    except (workdir.UnsafeArchive, OSError) as exc:
        shutil.rmtree(code_dir, ignore_errors=True)
        return str(exc)
    return None


def _shown(argv: list[str]) -> str:
    import shlex

    text = shlex.join(argv)
    return text if len(text) <= 300 else text[:300] + "..."


def refuse(store: Any, n: int, worker: str, reason: str) -> int:
    """Record that this host will not run attempt ``n`` (exit code 2: a spec or code that cannot
    run, never retried), with the reason in its log and exit record; returns 2."""
    prefix = store.attempt_prefix(n)
    print(f"tpuctl agent: refused attempt {n} of {store.run_id}: {reason}", file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):
        store.bucket.write_bytes(f"{prefix}/log-{worker}.txt", f"[tpuctl] refused: {reason}\n".encode())
    with contextlib.suppress(Exception):
        store.write_json(f"{prefix}/exit-{worker}.json", {"code": 2, "refused": reason, "time": time.time(),
                                                           "host": socket.gethostname()})
    return 2


def _notify(proc: subprocess.Popen, log: Any, terminate: Any = None) -> None:
    """The metadata server's notice reaches the job as SIGTERM; a ``job: command`` program's through
    ``terminate`` (SIGTERM, SIGKILL after its grace), so that however it exits then, it is a preemption."""
    with contextlib.suppress(OSError, ValueError):
        log.write(b"[tpuctl] preemption notice from the metadata server: SIGTERM to the job\n")
    if terminate is not None:
        terminate()
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)


def serve_attempt(store: Any, n: int, worker: str, command: dict[str, Any]) -> int:
    """A worker of a pod slice that runs no job (worker 0's client drives its TPU server): report
    it alive until the job's workers have exited or the attempt is stopped, then exit 0. A lost
    worker is a stale heartbeat, and the supervisor restarts the whole group."""
    prefix = store.attempt_prefix(n)
    job_workers = [w for w, entry in (command.get("workers") or {}).items()
                   if isinstance(entry, dict) and entry.get("run") is not False]
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    beat = {"pid": os.getpid(), "host": socket.gethostname(), "serving": True}
    try:
        while True:
            with contextlib.suppress(Exception):
                store.write_json(f"{prefix}/alive-{worker}.json", {"time": time.time(), **beat})
            try:
                exits = store.exits(n)
                stopped = store.read_json(f"{prefix}/stop.json") is not None
            except Exception:  # noqa: BLE001 - a transient bucket error: look again next beat
                exits, stopped = {}, False
            if stop.is_set() or stopped or (job_workers and all(w in exits for w in job_workers)):
                break
            stop.wait(ALIVE_EVERY_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    store.write_json(f"{prefix}/exit-{worker}.json", {"code": 0, "time": time.time(), "served": True,
                                                       "host": socket.gethostname()})
    return 0


def _upload_log(store: Any, prefix: str, worker: str, path: Path) -> None:
    with contextlib.suppress(Exception):
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size > LOG_TAIL_BYTES:
                fh.seek(size - LOG_TAIL_BYTES)
            data = fh.read()
        store.bucket.write_bytes(f"{prefix}/log-{worker}.txt", data)


# ---- the agent daemon (GCP hosts) ----------------------------------------------------------------

def agent_loop(cluster: str, bucket_url: str, project: str, worker: str, role: str, *, poll_s: float = 5.0,
               once: bool = False, autodown_s: float | None = None) -> None:
    """Run the attempts the cluster's current run asks for; on the host VM, also supervise and reap.

    ``role`` is ``host`` (the always-on VM: takes over supervision on request, enforces autodown)
    or ``worker`` (a TPU VM worker: only runs attempts). The host also runs the controllers of the
    sweeps handed to it (``tpuctl sweep --detach --host``; :func:`watch_sweeps`). Autodown (``autodown_s``, else the VM's
    ``tpuctl-autodown-seconds`` metadata) runs the reaper for this cluster in a background thread.
    """
    from ..basics.config import Target
    from ..cloud.storage import open_bucket
    from ..runs.store import current_name

    target = Target(provider="gcp", project=project, zone=None)
    # the HTTP stack is imported here, in this thread, before the autodown thread starts using it:
    # two threads importing urllib3 at once can see it half-initialised
    bucket = open_bucket(bucket_url, target)
    if role == "host" and not once:
        from .autodown import start_host_autodown

        start_host_autodown(cluster, bucket_url, project, autodown_s)
    trust = HostPin("gcp", cluster)
    running: dict[tuple[str, int], subprocess.Popen] = {}
    supervising: dict[str, subprocess.Popen] = {}
    controllers: dict[str, Controlled] = {}
    data_runs: dict[str, DataRun] = {}
    while True:
        try:
            current = json.loads(bucket.read_bytes(current_name(cluster)))
        except Exception:  # noqa: BLE001 - nothing assigned yet, or a transient read error
            current = None
        if current:
            run_id, n = _checked(current.get("run_id")), _attempt_number(current.get("attempt"))
            runs_here = role == "worker" or current.get("runs_on") == "host"
            key = (run_id, n)
            if run_id and n and runs_here and key not in running:
                store_prefix = f"tpuctl/runs/{run_id}/attempts/{n}"
                started = any(True for _ in bucket.list(f"{store_prefix}/alive-{worker}"))
                refusal = None if started else trust.refusal("run", run_id)
                if refusal:
                    if trust.report_once(f"run {run_id} attempt {n}", refusal):
                        refuse(_store(bucket_url, "gcp", project, run_id), n, worker, refusal)
                elif not started:
                    running[key] = subprocess.Popen(
                        [sys.executable, "-m", "provision.host.agent", "attempt", "--bucket", bucket_url,
                         "--provider", "gcp", "--project", project, "--run", run_id, "--attempt", str(n),
                         "--worker", worker, "--cluster", cluster])
            want = _checked(current.get("supervise_on_host"))
            if role == "host" and want and (want not in supervising or supervising[want].poll() is not None):
                refusal = trust.refusal("run", want)
                if refusal:
                    trust.report_once(f"supervising run {want}", refusal)
                else:
                    supervising[want] = subprocess.Popen(
                        [sys.executable, "-m", "provision", "supervise", want, "--where", "host", "--provider",
                         "gcp", "--project", project, "--bucket", bucket_url])
        if role == "host":
            watch_sweeps(bucket, cluster, project, bucket_url, controllers, trust=trust)
            watch_data(bucket, cluster, ["--provider", "gcp", "--project", project], data_runs, trust=trust)
        for key in [k for k, p in running.items() if p.poll() is not None]:
            running.pop(key)
        if once:
            return
        time.sleep(poll_s)


@dataclass
class Controlled:
    """A sweep controller this agent started."""

    proc: subprocess.Popen
    started_at: float


def sweep_controller_argv(sweep_id: str, project: str, bucket_url: str, cluster: str) -> list[str]:
    """``tpuctl sweep resume`` on this host: it takes the sweep's lease and drives it to its end,
    as pinned in this host's metadata (``--pinned-on``)."""
    return [sys.executable, "-m", "provision", "sweep", "resume", sweep_id, "--where", "host", "--pinned-on", cluster,
            "--provider", "gcp", "--project", project, "--bucket", bucket_url]


def watch_sweeps(bucket: Any, cluster: str, project: str, bucket_url: str, controllers: dict[str, Controlled],
                 now: float | None = None, *, trust: HostPin) -> None:
    """Run the controller of every sweep handed to this host (provision.host.controllers decides)
    and pinned here with its record and job spec as they are in the bucket (provision.runs.pins)."""
    from ..sweeps.store import ENDED, LIVE, SweepStore, controller_alive, host_requests_prefix
    from .controllers import Seen, decide

    now = time.time() if now is None else now
    prefix = host_requests_prefix(cluster)
    seen = []
    try:
        names = [info.name[len(prefix):] for info in bucket.list(prefix)]
    except Exception:  # noqa: BLE001 - a transient listing error: look again next poll
        return
    for rest in names:
        sweep_id = _checked_sweep(rest[:-len(".json")] if rest.endswith(".json") else None)
        if sweep_id is None:
            continue
        store = SweepStore(bucket, sweep_id)
        try:
            rec, lease = store.read_json("sweep.json"), store.controller()
        except Exception:  # noqa: BLE001 - unreadable now: decide next poll
            rec, lease = None, None
        state = rec.get("state") if isinstance(rec, dict) else None
        live = True if state in LIVE else False if state in ENDED else None
        mine = controllers.get(sweep_id)
        running_here = mine is not None and mine.proc.poll() is None
        seen.append(Seen(sweep_id=sweep_id, live=live, held_elsewhere=controller_alive(lease) and not running_here,
                         running_here=running_here, started_at=mine.started_at if mine else None))
    plan = decide(seen, now)
    for sweep_id in plan.start:
        refusal = _sweep_refusal(SweepStore(bucket, sweep_id), trust)
        if refusal:
            trust.report_once(f"sweep {sweep_id}", refusal)
            continue
        print(f"tpuctl agent: starting the controller of sweep {sweep_id}", file=sys.stderr, flush=True)
        controllers[sweep_id] = Controlled(subprocess.Popen(sweep_controller_argv(sweep_id, project, bucket_url,
                                                                                  cluster),
                                                            stdin=subprocess.DEVNULL), now)
    for sweep_id in plan.forget:
        with contextlib.suppress(Exception):
            bucket.delete(f"{prefix}{sweep_id}.json")
        mine = controllers.get(sweep_id)
        if mine is not None and mine.proc.poll() is not None:
            controllers.pop(sweep_id)


def _sweep_refusal(store: Any, trust: HostPin) -> str | None:
    """Why this host will not start the sweep's controller (not pinned, or not as pinned), or None."""
    from ..runs.pins import sha256

    refusal = trust.refusal("sweep", store.sweep_id)
    if refusal:
        return refusal
    try:
        observed = {"record": store.load().digest(), "job": sha256(store.bucket.read_bytes(store.name("job.yaml")))}
    except Exception:  # noqa: BLE001 - unreadable now: not started
        return "its record or job spec cannot be read"
    return trust.refusal("sweep", store.sweep_id, observed)


@dataclass
class DataRun:
    """A ``tpuctl data`` this agent started for a request (tpuctl data --on)."""

    proc: subprocess.Popen
    log: Path
    request: str  # the request object, removed when the run ends


def watch_data(bucket: Any, cluster: str, provider_args: list[str], runs: dict[str, DataRun], *,
               trust: HostPin) -> None:
    """Run each ``tpuctl data`` request handed to this host (provision.host.data_requests) and
    pinned here as it is (provision.runs.pins), one process each; upload its log every poll;
    when it ends, record status.json and drop the request. A request left by an agent that
    stopped (a rebooted VM) is started again, and the run resumes from its manifest."""
    from . import data_requests as dr

    prefix = dr.requests_prefix(cluster)
    try:
        names = [info.name for info in bucket.list(prefix)]
    except Exception:  # noqa: BLE001 - a transient listing error: look again next poll
        names = []
    for name in names:
        rid = name[len(prefix):].removesuffix(".json")
        if rid in runs:
            continue
        try:
            raw = bucket.read_bytes(name)
        except Exception:  # noqa: BLE001, S112 - unreadable now: look again next poll
            continue
        try:
            req = dr.from_json(json.loads(raw))
        except ValueError:
            req = None
        refusal = trust.refusal("data", rid, {"request": dr.digest(req)}) if req is not None and \
            req.request_id == rid else "not a data request this agent runs"
        if refusal:
            trust.report_once(f"data request {rid}", refusal)
            with contextlib.suppress(Exception):
                bucket.delete(name)
            continue
        try:
            log_path = host_dir("data") / f"{rid}.log"
            out = os.fdopen(open_append(log_path), "ab")
        except (UnsafeDirectory, OSError) as exc:      # a directory or symlink another user planted
            trust.report_once(f"data request {rid}", exc.one_line() if isinstance(exc, UnsafeDirectory) else
                              f"cannot open its log {exc.filename}: {exc.strerror}")
            continue
        print(f"tpuctl agent: making the data of request {rid}", file=sys.stderr, flush=True)
        with out:
            proc = subprocess.Popen([sys.executable, "-m", "provision", *dr.data_argv(req), *provider_args],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        runs[rid] = DataRun(proc, log_path, name)
    for rid, run in list(runs.items()):
        code = run.proc.poll()
        with contextlib.suppress(Exception):
            bucket.write_bytes(dr.log_name(rid), _tail(run.log))
        if code is None:
            continue
        with contextlib.suppress(Exception):
            bucket.write_bytes(dr.status_name(rid), json.dumps({"code": code, "time": time.time(),
                                                                "host": socket.gethostname()}).encode())
            bucket.delete(run.request)
            runs.pop(rid)


def _tail(path: Path) -> bytes:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size > LOG_TAIL_BYTES:
            fh.seek(size - LOG_TAIL_BYTES)
        return fh.read()


def _checked_sweep(sweep_id: Any) -> str | None:
    """A sweep id read from the bucket, or None if it is not one (it goes into paths and argv)."""
    from ..sweeps.store import check_id

    return _valid(sweep_id, check_id)


def _checked(run_id: Any) -> str | None:
    """A run id read from the bucket, or None if it is not one (it goes into paths and argv)."""
    from ..basics.validate import run_id as valid_run_id

    return _valid(run_id, valid_run_id)


def _valid(value: Any, check: Any) -> str | None:
    from ..basics.errors import UsageError

    if not isinstance(value, str):
        return None
    try:
        return check(value)
    except UsageError:
        return None


def _attempt_number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1_000_000 else None


def _enter_slice_network(how: str) -> bool:
    """Before anything else (the process must still be single-threaded): this host of an emulated
    slice into the slice's own network, so its TensorFlow server is reachable from nowhere else."""
    from ..cloud import netns

    try:
        if how == "new":
            netns.enter_new()
        else:
            pid, _, inode = how.partition(":")
            netns.join(int(pid), int(inode))
    except (OSError, ValueError) as exc:
        print(f"tpuctl agent: cannot enter the slice's private network ({how}): {exc}; not running the job "
              f"outside it", file=sys.stderr, flush=True)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provision.host.agent")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("attempt", help="run one attempt of a run on this host")
    for name in ("--bucket", "--provider", "--project", "--run", "--worker", "--cluster"):
        a.add_argument(name, required=name != "--worker", default="0" if name == "--worker" else None)
    a.add_argument("--attempt", type=int, required=True)
    a.add_argument("--netns", default=None, metavar="new|PID:INODE",
                   help="local provider, a multi-host slice: run in a new network namespace (the first host), "
                        "or join the first host's (provision.cloud.netns)")
    d = sub.add_parser("daemon", help="the host agent")
    d.add_argument("--cluster", required=True)
    d.add_argument("--bucket", required=True)
    d.add_argument("--project", required=True)
    d.add_argument("--worker", default=socket.gethostname())
    d.add_argument("--role", choices=["host", "worker"], default="host")
    d.add_argument("--poll", type=float, default=5.0, help="seconds between looks at the bucket")
    d.add_argument("--autodown", type=float, default=None, metavar="SECONDS",
                   help="host: delete the cluster's TPU once idle this long (default: the VM's metadata)")
    args = parser.parse_args(argv)
    if args.command == "attempt":
        if args.netns and not _enter_slice_network(args.netns):
            return 2          # no exit record: the supervisor sees the host lost and restarts the group
        return run_attempt(args.bucket, args.provider, args.project, args.run, args.attempt, args.worker,
                           args.cluster)
    agent_loop(args.cluster, args.bucket, args.project, args.worker, args.role, poll_s=args.poll,
               autodown_s=args.autodown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
