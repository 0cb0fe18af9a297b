"""Starting and watching a run's attempts on the cluster's hosts.

Both executors speak the same bucket protocol (:mod:`provision.host.agent`): a command goes into the
run directory, hosts write heartbeats and exit records next to it. They differ in who starts the
wrapper: on the local provider the supervisor does (this machine is the host), on GCP the agent
daemon of each host does, having noticed ``clusters/<c>/current.json`` change.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..basics import private
from ..basics.procs import child_groups
from ..cloud.base import Arch, TpuNode
from ..cluster import bootstrap
from .policy import JobPhase
from .store import ALIVE_EVERY_S, RunRecord, RunStore, current_name

# A host heartbeat older than this means the wrapper died with its host.
ALIVE_STALE_S = 6 * ALIVE_EVERY_S
# A GCP host may need minutes to boot, install the wheel and notice the command.
GCP_START_GRACE_S = 900.0
LOCAL_START_GRACE_S = 60.0


class Executor(Protocol):
    # the job runs on the TPU's own hosts (TPU VM workers, the local provider's emulated hosts),
    # which die with it; a TPU Node's job runs on the host VM, which outlives the TPU
    job_on_tpu: bool

    def start(self, rec: RunRecord, n: int, tpu: TpuNode, command: dict[str, Any]) -> None: ...
    def poll(self, rec: RunRecord, n: int) -> tuple[JobPhase, int | None]: ...
    def stop(self, rec: RunRecord, n: int, grace: float = 60.0, *, hosts_dead: bool = False) -> None: ...
    def blocked(self, rec: RunRecord) -> str | None: ...


def combine_exits(exits: dict[str, dict[str, Any]], expected: int) -> int | None:
    """One exit code for a multi-host attempt: any failure wins, 42 first; 0 only when all are 0."""
    codes = [e.get("code") for e in exits.values()]
    if 42 in codes:
        return 42
    bad = [c for c in codes if c not in (0, None)]
    if bad:
        return bad[0]
    if len(codes) >= expected and codes:
        return 0
    return None


def private_slice_network(accelerator_type: str) -> bool:
    """Whether this machine runs an emulated slice of ``accelerator_type`` in a network of its own
    (:func:`provision.runs.launch.slice_network` with this machine's answers); UsageError where
    it cannot and the user did not accept the exposure."""
    from ..catalog.accelerators import parse
    from ..cloud import netns
    from .launch import SLICE_OPT_IN, slice_network

    if not parse(accelerator_type).multi_host:
        return False
    return slice_network(accelerator_type, private_possible=netns.available(),
                         exposed_ok=os.environ.get(SLICE_OPT_IN, "").strip() == "1")


class _BucketWatcher:
    """What both executors read back: exit records and heartbeats.

    Time comes from ``clock`` and waits go through ``sleep`` (the system's unless a test gives
    its own), so how long a stop waits can be checked on a simulated clock."""

    store: RunStore
    start_grace_s: float
    job_on_tpu: bool = True
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    taken_up: bool = False      # the last poll saw a heartbeat of the current attempt
    # how long stop() waits for the rest of a group one host has left: its agents see stop.json
    # within a heartbeat (and kill a job that ignores SIGTERM after the agent's grace)
    broken_wait_s: float = 2 * ALIVE_EVERY_S

    def _expected(self, rec: RunRecord) -> int:
        return int((rec.attempt or {}).get("workers", 1))

    def _phase_from_bucket(self, rec: RunRecord, n: int) -> tuple[JobPhase, int | None]:
        exits = self.store.exits(n)
        code = combine_exits(exits, self._expected(rec))
        if code is not None:
            return JobPhase.EXITED, code
        alive = self.store.alive(n)
        self.taken_up = bool(alive)
        now = self.clock()
        started = (rec.attempt or {}).get("started_at", now)
        # every worker still at work must beat: one lost host of a slice loses the attempt
        beating = [a.get("time", 0) for w, a in alive.items() if w not in exits]
        if beating and now - min(beating) >= ALIVE_STALE_S:
            return JobPhase.LOST, None
        missing = len(set(alive) | set(exits)) < self._expected(rec)
        if missing and now - started >= self.start_grace_s:
            return JobPhase.LOST, None
        if beating or missing:
            return JobPhase.RUNNING, None
        return JobPhase.LOST, None

    def stop(self, rec: RunRecord, n: int, grace: float = 60.0, *, hosts_dead: bool = False) -> None:
        """Ask every host of the attempt still at work to stop (SIGTERM: the job checkpoints, exits
        42) and wait for their exits. One host's exit already decides the attempt (42 wins), but
        the others of a slice may still run -- blocked in an all-reduce with a dead peer, holding
        their TPU -- so the attempt is over only when no host of it is at work.

        ``hosts_dead``: the hosts died with their TPU (:func:`provision.runs.policy.hosts_died_with_tpu`).
        Their heartbeats look fresh until they go stale, which says nothing more: the stop is
        written (for any host that did survive) and not waited for."""
        if not self._at_work(rec, n):
            return
        self.store.write_json(f"{self.store.attempt_prefix(n)}/stop.json", {"time": self.clock()})
        if hosts_dead:
            return
        # a group one host has left cannot checkpoint (the stop is agreed in an all-reduce): no grace
        wait = self.broken_wait_s if self.store.exits(n) else grace + 2 * ALIVE_EVERY_S
        deadline = self.clock() + wait
        while self.clock() < deadline and self._at_work(rec, n):
            self.sleep(1.0)

    def _at_work(self, rec: RunRecord, n: int) -> list[str]:
        """Hosts of attempt ``n`` with a fresh heartbeat and no exit record."""
        exits = self.store.exits(n)
        if len(exits) >= self._expected(rec):
            return []
        now = self.clock()
        return [w for w, a in self.store.alive(n).items()
                if w not in exits and now - float(a.get("time") or 0) < ALIVE_STALE_S]

    def poll(self, rec: RunRecord, n: int) -> tuple[JobPhase, int | None]:  # pragma: no cover - overridden
        return self._phase_from_bucket(rec, n)

    def blocked(self, rec: RunRecord) -> str | None:
        """This machine starts the attempts itself: nothing to bootstrap."""
        return None


class LocalExecutor(_BucketWatcher):
    """This machine is the host: the supervisor starts the attempt wrapper in a session of its own."""

    start_grace_s = LOCAL_START_GRACE_S
    broken_wait_s = 0.0         # stop() kills what is left of the group at once

    def __init__(self, provider: Any, store: RunStore, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.provider = provider
        self.store = store
        self.clock, self.sleep = clock, sleep
        self.procs: dict[int, dict[str, subprocess.Popen]] = {}   # attempt -> worker -> wrapper
        self.wake: threading.Event | None = None   # set by the supervisor: signalled when a job ends

    def start(self, rec: RunRecord, n: int, tpu: TpuNode, command: dict[str, Any]) -> None:
        """One wrapper per host of the (emulated) slice, each in a session of its own, all
        registered on the "TPU": a preemption kills the whole group, as losing a real slice does.
        A multi-host slice's hosts share a network of their own (:mod:`provision.cloud.netns`):
        the first makes it, the others join it."""
        from ..cloud import netns

        self.store.write_json(f"{self.store.attempt_prefix(n)}/command.json", command)
        log_dir = self.provider.root / "jobs" / "logs"
        private.make_dirs(log_dir)
        workers = sorted(command.get("workers") or {"0": {}}, key=int)
        network = "new" if len(workers) > 1 and private_slice_network(tpu.accelerator_type) else None
        procs: dict[str, subprocess.Popen] = {}
        for worker in workers:
            with open(log_dir / f"{rec.run_id}-{n}-{worker}.wrapper.log", "ab", opener=private.opener) as err:
                proc = procs[worker] = subprocess.Popen(
                    [sys.executable, "-m", "provision.host.agent", "attempt", "--bucket", rec.bucket,
                     "--provider", "local", "--project", rec.project, "--run", rec.run_id, "--attempt", str(n),
                     "--worker", worker, "--cluster", rec.cluster, *(["--netns", network] if network else [])],
                    stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
            if network == "new":
                inode = netns.wait_for_new(proc)
                if inode is None:
                    break      # the first host died before its network existed: the attempt is lost
                network = f"{proc.pid}:{inode}"
        self.procs[n] = procs
        pids = [p.pid for p in procs.values()]
        self.provider.register_job(tpu.zone, tpu.name, pids[0], rec.run_id, others=pids[1:])
        for proc in procs.values():
            threading.Thread(target=self._watch, args=(proc,), daemon=True).start()

    def _watch(self, proc: subprocess.Popen) -> None:
        """A job that ends (finished, failed, or killed with its TPU) wakes the supervisor at once."""
        proc.wait()
        if self.wake is not None:
            self.wake.set()

    def poll(self, rec: RunRecord, n: int) -> tuple[JobPhase, int | None]:
        procs = self.procs.get(n) or {}
        if procs and all(p.poll() is None for p in procs.values()):
            return JobPhase.RUNNING, None
        phase, code = self._phase_from_bucket(rec, n)
        if phase == JobPhase.RUNNING and procs:
            # a host whose wrapper is gone without an exit record is lost now, not when its
            # heartbeat goes stale: the other hosts of the slice wait for it in an all-reduce
            exits = self.store.exits(n)
            lost = any(p.poll() is not None and w not in exits for w, p in procs.items())
            return (JobPhase.LOST, None) if lost else (JobPhase.RUNNING, None)
        if phase == JobPhase.RUNNING:
            # a supervisor that took over: the wrapper is not its child; trust its pid record
            zone = (rec.attempt or {}).get("zone", rec.zone)
            job = self.provider.job(zone, rec.cluster)
            if job is None or job.get("run_id") != rec.run_id:
                alive = self.store.alive(n)
                if alive or self.clock() - (rec.attempt or {}).get("started_at", 0) > self.start_grace_s:
                    return JobPhase.LOST, None
        return phase, code

    def stop(self, rec: RunRecord, n: int, grace: float = 60.0, *, hosts_dead: bool = False) -> None:
        """The bucket's stop, then a kill of every process still registered on the "TPU": no host
        of the attempt is left, whether or not it was dead already."""
        super().stop(rec, n, grace, hosts_dead=hosts_dead)
        zone = (rec.attempt or {}).get("zone", rec.zone)
        job = self.provider.job(zone, rec.cluster)
        if job and job.get("run_id") == rec.run_id:
            wrappers = [p for p in job.get("pgids") or [job.get("pgid")] if p]
            # the jobs' own sessions under the wrappers too (found while the wrappers still live)
            for pgid in [*wrappers, *child_groups(wrappers)]:
                if pgid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, signal.SIGKILL)
        for proc in (self.procs.get(n) or {}).values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


class BucketExecutor(_BucketWatcher):
    """GCP: the hosts' agents run the attempt; the supervisor only writes and reads the bucket."""

    start_grace_s = GCP_START_GRACE_S

    def __init__(self, store: RunStore, arch: Arch, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.store = store
        self.arch = arch
        self.job_on_tpu = arch != Arch.NODE     # a Node's job runs on the host VM
        self.clock, self.sleep = clock, sleep

    def start(self, rec: RunRecord, n: int, tpu: TpuNode, command: dict[str, Any]) -> None:
        self.store.write_json(f"{self.store.attempt_prefix(n)}/command.json", command)
        current = self.store.read_json(current_name(rec.cluster)) or {}
        current.update({"run_id": rec.run_id, "attempt": n, "tpu_created_at": tpu.created_at,
                        "runs_on": "host" if self.arch == Arch.NODE else "workers", "time": time.time()})
        self.store.write_current(rec.cluster, current)

    def poll(self, rec: RunRecord, n: int) -> tuple[JobPhase, int | None]:
        return self._phase_from_bucket(rec, n)

    def blocked(self, rec: RunRecord) -> str | None:
        """A host whose bootstrap failed will never start the attempt: say so instead of waiting
        out the start grace (15 minutes of a billed TPU). Read only until a host has taken the
        attempt up (the last poll saw its heartbeat)."""
        if self.taken_up:
            return None
        since = (rec.attempt or {}).get("tpu_created_at")
        try:
            down = bootstrap.failed(bootstrap.read(self.store.bucket, rec.cluster), workers_since=since)
        except Exception:  # noqa: BLE001 - an unreadable bucket is judged by the heartbeats as before
            return None
        return "; ".join(s.line() for s in down) or None
