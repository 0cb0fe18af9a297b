"""The supervisor: observe the TPU and the job, let :mod:`provision.runs.policy` decide, act, repeat.

It polls at most every ``poll_s`` seconds (10 by default, with jitter below it), recreates the
TPU after a preemption (same name, type and range; zone failover as in ``up``), restarts the job
(which resumes from its newest checkpoint), and writes every event to the run's event log:
preempted, recreated, resumed at step N, steps and seconds lost.

Exactly one supervisor drives a run. It holds a lease in ``supervisor.json`` (separate from
run.json, so the heartbeat thread never races the main loop's writes), renewed every few seconds;
another supervisor takes over only when the lease is released (a handover to the host VM) or
stale. The lease is taken and renewed by compare-and-swap (:mod:`.lease`): of supervisors started at
the same moment exactly one holds it, and a holder whose lease was taken learns so at its next
renewal or poll and stops. The same code runs in the foreground of ``tpuctl train`` on a laptop, detached on the
host VM, and on the local provider.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import cluster as clusters
from ..basics.errors import TpuctlError
from ..cloud.base import DEAD_TPU_STATES, ClusterSpec, Health, Provider, TpuNode, TpuState
from . import caps, curve, goodput, pace, pinning
from .executors import Executor
from .lease import Lease
from .policy import (
    Action,
    Decision,
    JobPhase,
    Observed,
    decide,
    failed_early,
    hosts_died_with_tpu,
    outage_key,
    poll_interval,
    repeated_failure,
    run_state,
    seconds_by_state,
)
from .stall import since_progress, stalled
from .store import RunRecord, RunStore, current_name, supervisor_identity, usable_progress

LEASE_RENEW_S = 5.0
# a lease not renewed for this long belongs to a dead supervisor (it renews every 5 s)
LEASE_STALE_S = 30.0
LEASE_NAME = "supervisor.json"
# outage keys a run record keeps (to count each once); only the current recovery's matter
OUTAGES_KEPT = 16


class RunLease(Lease):
    """The run's lease, ``supervisor.json``: free when never taken, released, or stale."""

    def __init__(self, store: RunStore, identity: dict[str, Any]):
        super().__init__(store.bucket, f"{store.prefix}/{LEASE_NAME}", identity)
        self.store = store

    def acquire(self, *, force: bool = False, wait: float = 0.0,  # type: ignore[override]
                log: Callable[[str], None] | None = None) -> None:
        """Take the lease: free, released, stale, or ``force``; ``wait`` for a lease that may be a dead one's."""
        run_id = self.store.run_id

        def age(cur: dict[str, Any]) -> float:
            return time.time() - float(cur.get("heartbeat_at") or 0)

        super().acquire(
            free_run_lease, force=force, wait=wait, log=log,
            busy=lambda cur: (f"run {run_id} is already supervised by {cur.get('where')} on {cur.get('host')} "
                              f"(pid {cur.get('pid')}, heartbeat {int(age(cur))}s ago)"),
            waiting=lambda cur: (f"run {run_id} was supervised by {cur.get('where')} on {cur.get('host')} "
                                 f"{int(age(cur))}s ago; waiting up to {int(LEASE_STALE_S - age(cur))}s "
                                 f"to be sure it is gone"),
            hint=f"follow it with tpuctl logs {run_id} -f")

    def still_ours(self) -> bool:
        return self.held()


def free_run_lease(cur: dict[str, Any] | None, now: float | None = None) -> bool:
    """A run's lease may be taken: never taken, released, or not renewed for LEASE_STALE_S."""
    if not cur or cur.get("released"):
        return True
    return (now or time.time()) - float(cur.get("heartbeat_at") or 0) >= LEASE_STALE_S


class _Watching:
    """The provider as a recreate sees it, noting every incarnation of the cluster's TPU that it
    found dead: one preempted while being created makes the recreate fail (and roll it back), and
    would otherwise never be seen by the supervisor."""

    def __init__(self, provider: Provider, cluster: str):
        self._provider = provider
        self._cluster = cluster
        self.dead: list[TpuNode] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    def _note(self, node: TpuNode | None) -> None:
        if node is not None and node.dead and node.name == self._cluster and \
                all(n.created_at != node.created_at for n in self.dead):
            self.dead.append(node)

    def get_tpu(self, zone: str, name: str) -> TpuNode | None:
        node = self._provider.get_tpu(zone, name)
        self._note(node)
        return node

    def list_tpus(self, *args: Any, **kwargs: Any) -> list[TpuNode]:
        nodes = self._provider.list_tpus(*args, **kwargs)
        for node in nodes:
            self._note(node)
        return nodes


def read_progress(model_dir: str, provider_name: str, project: str) -> dict[str, Any] | None:
    """The job's progress record, from a local model_dir or a bucket."""
    import json

    if model_dir.startswith("gs://"):
        from ..basics.config import Target
        from ..basics.validate import bucket_url
        from ..cloud.storage import open_bucket

        url = bucket_url(model_dir)
        bucket = open_bucket(url, Target(provider=provider_name, project=project, zone=None))
        try:
            raw = bucket.read_bytes(f"{url.prefix}/progress.json" if url.prefix else "progress.json")
        except Exception:  # noqa: BLE001 - not written yet, or a transient read: no progress this poll
            return None
    else:
        from pathlib import Path

        try:
            raw = (Path(model_dir) / "progress.json").read_bytes()
        except OSError:
            return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return usable_progress(data)


def left_out_named(left_out: list[dict[str, str]], lines: list[str]) -> dict[str, str] | None:
    """The workdir file the rules left out that a failure's output names, or None: a directory
    (``data/``) named with something inside it (``data/train.csv``), a file by its path or, where
    distinctive, its name, as words (``data`` in "loading data" is not the folder)."""
    import re

    text = "\n".join(lines)
    for entry in left_out or []:
        path = str(entry.get("path") or "")
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if not base:
            continue
        if path.endswith("/"):
            found = re.search(rf"(?<![\w.-]){re.escape(path)}", text)
        else:
            found = re.search(rf"(?<![\w.-]){re.escape(path)}(?![\w-])", text) or (
                len(base) >= 5 and re.search(rf"(?<![\w.-]){re.escape(base)}(?![\w-])", text))
        if found:
            return {"path": path, "why": str(entry.get("why") or "left out")}
    return None


def step_said(p: dict[str, Any], step: Any = None) -> Any:
    """The step an event names: ``unknown`` while the program has reported none (a placeholder 0
    would claim progress nobody reported), else ``step`` or the record's."""
    if p.get("progress_reported") is False:
        return "unknown"
    return p.get("step") if step is None else step


def progress_line(p: dict[str, Any]) -> str:
    if p.get("progress_reported") is False:
        return "  no progress reported (the program runs; it has reported no step)"
    parts = [f"step {p.get('step')}/{p.get('num_train_steps')}"]
    if p.get("loss") is not None:
        parts.append(f"loss {p['loss']:.4f}")
    if p.get("examples_per_sec"):
        parts.append(f"{p['examples_per_sec']:.1f} examples/s")
    if p.get("checkpoint_step") is not None:
        parts.append(f"checkpoint {p['checkpoint_step']}")
    return "  " + ", ".join(parts)


class Supervisor:
    def __init__(self, provider: Provider, spec: ClusterSpec, store: RunStore, executor: Executor,
                 command: Callable[[RunRecord, int, TpuNode], dict[str, Any]], *, where: str,
                 poll_s: float = 10.0, log: Callable[[str], None] = print,
                 rand: Callable[[], float] = random.random, clock: Callable[[], float] = time.time,
                 pin: dict[str, str | None] | None = None, notifier: Any = None,
                 stall_after_s: float | None = None):
        self.provider = provider
        self.spec = spec
        self.store = store
        self.executor = executor
        self.command = command
        self.poll_s = poll_s
        self.log = log
        self.rand = rand
        self.lease = RunLease(store, supervisor_identity(where))
        self.rec = store.load()
        self._stop = threading.Event()
        # set to look again before the poll interval is up: by an executor that sees its job die,
        # by stop_loop(), and after an action whose outcome should be acted on at once
        self._wake = threading.Event()
        if hasattr(executor, "wake"):
            executor.wake = self._wake
        self._unhealthy_since: float | None = None
        # time by state (tpuctl cost): the state the run was left in at the last look, since when,
        # and the first new step of a recovery that ended since
        self.clock = clock
        self._last_tick = clock()
        self._state = run_state(recovering=bool(self.rec.recovering), job_started=bool(self.rec.attempt))
        self._resumed_at: float | None = None
        self._failure: dict[str, Any] | None = None     # the failed attempt being acted on (_failed_attempt)
        # whether the TPU billed at the last look (gone, PREEMPTED or TERMINATED: it did not), for
        # the spend the caps count (provision.runs.caps)
        self._billing = False
        # what the run's hosts may run (provision.runs.pins): from whoever staged it, else found
        # where bucket writers cannot change it, before the first attempt this supervisor starts
        self.pin = pin
        # hears every event this supervisor writes (provision.notify.notifier.Notifier), and says
        # how long a run may go without a new step while its TPU bills (a "stalled" event)
        self.notifier = notifier
        self.stall_after_s = stall_after_s if stall_after_s is not None else \
            getattr(notifier, "stall_after_s", None)
        self._stall_said: tuple[Any, Any] | None = None
        # how the TPU last seen is paid for (spot, flex-start, on-demand, reservation): the run's
        # goodput summary says it, for a fleet's view by capacity
        self._capacity: str | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def run(self, *, take_over: bool = False, wait_for_lease: float = 0.0) -> RunRecord:
        self.lease.acquire(force=take_over, wait=wait_for_lease, log=self.log)
        self.rec.supervisor = dict(self.lease.identity)
        beat = threading.Thread(target=self._heartbeat, daemon=True)
        beat.start()
        try:
            while True:
                if self.step():
                    return self.rec
                self._wake.wait(poll_interval(self.poll_s, self.rand()))
                self._wake.clear()
                if self._stop.is_set():
                    return self.rec
        finally:
            self._stop.set()
            if self.notifier is not None:
                self.notifier.close()

    def stop_loop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _heartbeat(self) -> None:
        while not self._stop.wait(LEASE_RENEW_S):
            try:
                if not self.lease.renew():
                    self.log(f"run {self.rec.run_id} was taken over by another supervisor; stopping here")
                    self._stop.set()
                    self._wake.set()
                    return
            except Exception as exc:  # noqa: BLE001 - a missed heartbeat is retried next tick
                self.log(f"supervisor heartbeat failed: {exc}")

    # ---- one observation and one action ----------------------------------------------------------
    def observe(self) -> tuple[TpuNode | None, JobPhase, int | None]:
        rec = self.rec
        tpu = self.provider.get_tpu(rec.zone, rec.cluster)
        att = rec.attempt
        if att is None:
            return tpu, JobPhase.NOT_STARTED, None
        phase, code = self.executor.poll(rec, att["n"])
        if tpu is not None and not tpu.dead and att.get("tpu_created_at") not in (None, tpu.created_at):
            # the attempt ran on an earlier incarnation of this TPU
            return tpu, JobPhase.NOT_STARTED, None
        return tpu, phase, code

    def step(self) -> bool:
        """One poll; True when the run has ended (finished or given up)."""
        if not self.lease.still_ours():
            self.log(f"run {self.rec.run_id} was taken over by another supervisor; stopping here")
            return True
        tpu, phase, code = self.observe()
        self._note_capacity(tpu)
        self._failure = None
        self._read_progress()
        self._account()
        stop = self._pace(tpu, finished=phase == JobPhase.EXITED and code == 0)
        if stop is not None:
            return self._cap_stop(stop, tpu)
        health = tpu.health if tpu else Health.HEALTH_UNSPECIFIED
        sick = tpu is not None and health in (Health.TIMEOUT, Health.UNHEALTHY_TENSORFLOW,
                                              Health.UNHEALTHY_MAINTENANCE)
        now = time.time()
        self._unhealthy_since = (self._unhealthy_since or now) if sick else None
        rec = self.rec
        self._outage = outage_key(tpu_state=tpu.state if tpu else None, tpu_health=health,
                                  tpu_created_at=tpu.created_at if tpu else None,
                                  last_tpu_created_at=rec.tpu_seen, attempt=(rec.attempt or {}).get("n"))
        if tpu is not None:
            rec.tpu_seen = tpu.created_at
        obs = Observed(tpu_state=tpu.state if tpu else None, tpu_health=health,
                       unhealthy_for_s=now - self._unhealthy_since if self._unhealthy_since else 0.0,
                       job=phase, exit_code=code, preemptions=rec.preemptions, failures=rec.failures,
                       max_preemptions=rec.max_preemptions, max_failures=rec.max_failures,
                       outage_counted=self._outage in rec.outages)
        if phase in (JobPhase.RUNNING, JobPhase.LOST):
            # started: can a host that has not taken it up yet never do so?
            obs = dataclasses.replace(obs, blocked=self.executor.blocked(rec))
        elif phase == JobPhase.EXITED and code == 2 and rec.attempt:
            # a host that would not run it (provision.runs.pins) says why in its exit record
            refused = [e["refused"] for e in self.store.exits(rec.attempt["n"]).values() if e.get("refused")]
            obs = dataclasses.replace(obs, refused=str(refused[0]) if refused else None)
        elif phase == JobPhase.EXITED and code not in (0, 2, 42, None) and rec.attempt:
            self._failure = self._failed_attempt(rec.attempt)
            obs = dataclasses.replace(obs, repeated_failure=repeated_failure(rec.last_failure, self._failure))
        self._check_stall(tpu, phase, now)
        d = decide(obs)
        if d.action == Action.WAIT:
            ended = False
            self.store.save(rec)
        else:
            ended = self._act(d, tpu, code)
        self._state = run_state(recovering=bool(rec.recovering), job_started=bool(rec.attempt) and (
            d.action == Action.START_JOB or phase == JobPhase.RUNNING))
        return ended

    def _note_capacity(self, tpu: TpuNode | None) -> None:
        """How the TPU seen is paid for (spot, flex-start, on-demand, reservation), kept with the
        run's price (``pricing.capacity``) for its goodput summary: a fleet's view by capacity."""
        if tpu is None:
            return
        try:
            self._capacity = tpu.paid_as.value
        except (AttributeError, ValueError):      # a capacity this tpuctl does not know: none said
            return
        rec = self.rec
        if rec.pricing and rec.pricing.get("capacity") != self._capacity:
            rec.pricing = {**rec.pricing, "capacity": self._capacity}

    def _act(self, d: Decision, tpu: TpuNode | None, code: int | None) -> bool:
        rec = self.rec
        if d.counts_as == "preemption":
            self._count_outage(self._outage)
            rec.last_failure = None          # a preemption between two failures breaks their chain
        elif d.counts_as == "failure":
            rec.failures += 1
            if self._failure is not None:
                rec.last_failure = {k: self._failure.get(k) for k in ("attempt", "error_line", "early")}
                self._show_failure(self._failure)
        if d.action == Action.FINISH:
            if rec.recovering:
                # finished without a new step (it resumed at the last checkpoint, the final step)
                p = rec.last_progress or {}
                self._close_recovery(p, p.get("time") or time.time(), summarize=False)
            rec.status, rec.ended_at = "finished", time.time()
            self._event("finished", step=step_said(rec.last_progress or {}, rec.step), reason=d.reason)
            self._clear_current()
            self._summarize(final=True)
            self.store.save(rec)
            return True
        if d.action == Action.GIVE_UP:
            rec.status, rec.ended_at, rec.reason = "gave_up", time.time(), d.reason
            self._stop_attempt(tpu)
            failure = self._failure or {}
            self._event("gave_up", reason=d.reason, exit_code=code, preemptions=rec.preemptions,
                        failures=rec.failures, **{k: failure[k] for k in ("error_line", "left_out") if failure.get(k)})
            self._clear_current()
            self._summarize(final=True)
            self.store.save(rec)
            return True
        if d.action == Action.RECREATE_TPU:
            if d.counts_as == "preemption":
                self._begin_recovery(d.reason, tpu)
            # the incarnation deleted now is this outage's, whatever hit it (the job's exit 42)
            self._remember_outage(f"tpu:{rec.tpu_seen}")
            self._stop_attempt(tpu)
            rec.attempt = None
            self.store.save(rec)
            started = time.time()
            watched = _Watching(self.provider, rec.cluster)
            try:
                result = clusters.recreate_tpu(watched, self.spec.with_zone(rec.zone),
                                               log=lambda m: self.log(f"  {m}"))
            except TpuctlError as exc:
                # stockouts in every zone, quota: keep the run and try again next poll
                self._count_overlapping(watched)
                self._event("recreate_failed", error=exc.one_line())
                self.log(f"recreating the TPU failed: {exc.one_line()}; retrying")
                self.store.save(rec)
                return False
            self._count_overlapping(watched)
            if result.tpu is not None:
                rec.tpu_seen = result.tpu.created_at
            rec.zone = result.zone or rec.zone
            self._event("recreated", zone=rec.zone, cidr=result.cidr, seconds=round(time.time() - started, 1),
                        tpu_created_at=result.tpu.created_at if result.tpu is not None else None)
            self.store.save(rec)
            self._wake.set()    # the TPU is READY: start the job now, not a poll later
            return False
        if d.action == Action.START_JOB:
            if d.counts_as == "failure":
                self._event("job_failed", attempt=(rec.attempt or {}).get("n"), exit_code=code, reason=d.reason,
                            **({"error_line": self._failure["error_line"]}
                               if self._failure and self._failure.get("error_line") else {}))
            elif d.counts_as == "preemption":
                self._begin_recovery(d.reason, tpu)
            assert tpu is not None
            # the whole group restarts: on a multi-host slice the other workers of the failed
            # attempt may still be running (xpk restarts a job the same way)
            self._stop_attempt(tpu)
            n = rec.attempts + 1
            rec.attempts = n
            # a TPU VM recreated after a preemption has no pin: it would refuse the attempt; and the
            # attempt's launch (where its job runs and listens) is pinned with the run, never taken
            # from the bucket alone (provision.runs.pins.launch_digest)
            if self.pin is None:
                self.pin = pinning.trusted_run_entry(self.provider, rec.cluster, rec.run_id)
            command = self.command(rec, n, tpu)
            pinning.pin_attempt(self.provider, rec.cluster, rec.run_id, self.pin, command, self.log, record=rec)
            # every worker of a slice reports (those that run no job only that they are alive)
            rec.attempt = {"n": n, "tpu_created_at": tpu.created_at, "started_at": time.time(), "zone": tpu.zone,
                           "workers": len(command.get("workers") or {}) or 1}
            rec.status = "recovering" if rec.recovering else "running"
            self.executor.start(rec, n, tpu, command)
            # the TPU it runs on, by its creation: what a run's goodput summary prices (goodput.billed_from_run)
            self._event("attempt_started", attempt=n, zone=tpu.zone, tpu_created_at=tpu.created_at)
            self.store.save(rec)
            return False
        return False

    def _failed_attempt(self, attempt: dict[str, Any]) -> dict[str, Any]:
        """What the hosts' exit records say of a failed attempt: its error line and last lines
        (the attempt wrapper's ``error_tail``; worker 0's first), and whether it failed before
        its first progress."""
        exits = self.store.exits(attempt["n"])
        first = next((exits[w] for w in sorted(exits, key=lambda w: (w != "0", w)) if exits[w].get("error_line")), {})
        p = self.rec.last_progress or {}
        progress_at = p.get("step_time") or (p.get("time") if p.get("step") else None)
        ended = max([e.get("time") or 0 for e in exits.values()] or [time.time()])
        reports = p.get("progress_reported") is not False
        return {"attempt": attempt["n"], "error_line": first.get("error_line"),
                "tail": [str(line) for line in first.get("tail") or []][-12:],
                "early": failed_early(started_at=attempt.get("started_at") or 0, ended_at=ended,
                                      progress_at=progress_at, reports_progress=reports)}

    def _show_failure(self, failure: dict[str, Any]) -> None:
        """The failed attempt's last lines, where train prints: the exception line without
        ``tpuctl logs``."""
        if not failure.get("tail"):
            return
        self.log(f"attempt {failure['attempt']} failed; the last lines of its output:")
        for line in failure["tail"]:
            self.log(f"  | {line}")
        named = left_out_named(self.rec.left_out, failure["tail"])
        if named:
            self.log(f"its output names {named['path']}, which the workdir left out ({named['why']}): add the line "
                     f"!{named['path']} to the workdir's .tpuctlignore to ship it")
            failure["left_out"] = named["path"]

    def _check_stall(self, tpu: TpuNode | None, phase: JobPhase, now: float) -> None:
        """A ``stalled`` event once per step a running job is stuck at while its TPU bills."""
        rec = self.rec
        att = rec.attempt or {}
        # a program that reports no step cannot be seen to stall: its silence is all it says
        quiet = stalled(now=now, last_moved=since_progress(rec.last_progress, att.get("started_at")),
                        job_running=phase == JobPhase.RUNNING and
                        (rec.last_progress or {}).get("progress_reported") is not False, tpu_billing=tpu is not None and tpu.state == TpuState.READY,
                        stall_after=self.stall_after_s)
        key = (att.get("n"), rec.step)
        if quiet is not None and self._stall_said != key:
            self._stall_said = key
            self._event("stalled", step=rec.step, attempt=att.get("n"), seconds=round(quiet, 1))

    def _stop_attempt(self, tpu: TpuNode | None) -> None:
        """Stop every host of the current attempt still at work, waiting for them only where they
        can be alive: hosts that ran on a TPU now gone, PREEMPTED or TERMINATED died with it."""
        rec = self.rec
        if not rec.attempt:
            return
        dead = hosts_died_with_tpu(tpu.state if tpu else None, job_on_tpu=self.executor.job_on_tpu)
        self.executor.stop(rec, rec.attempt["n"], grace=30, hosts_dead=dead)

    def _count_outage(self, key: str) -> None:
        self.rec.preemptions += 1
        self._remember_outage(key)

    def _remember_outage(self, key: str) -> None:
        if key not in self.rec.outages:
            self.rec.outages = [*self.rec.outages, key][-OUTAGES_KEPT:]

    def _count_overlapping(self, watched: _Watching) -> None:
        """A TPU incarnation that the recreate made and saw die (preempted while it was created)
        is one more preemption, overlapping the recovery in progress."""
        for node in watched.dead:
            key = f"tpu:{node.created_at}"
            if node.created_at is None or key in self.rec.outages:
                continue
            self._count_outage(key)
            self._begin_recovery(f"the TPU was {node.state.value} while it was being recreated", node)

    def _begin_recovery(self, reason: str, tpu: TpuNode | None) -> None:
        """Open an outage (or add a preemption to the one in progress: they overlap)."""
        rec = self.rec
        p = rec.last_progress or {}
        overlapping = rec.recovering is not None
        if rec.recovering is None:
            rec.recovering = {"detected_at": time.time(), "step": p.get("step") or 0,
                              "checkpoint_step": p.get("checkpoint_step") or 0, "cause": reason,
                              "preemptions": []}
        rec.recovering["preemptions"] = [*rec.recovering.get("preemptions", []), rec.preemptions]
        rec.status = "recovering"
        # when the hit attempt's program started, trained its first step and its last one (its
        # progress record is replaced by the next attempt's): what goodput dates (provision.runs.goodput)
        self._event("preempted", preemption=rec.preemptions, cause=reason,
                    tpu_state=tpu.state.value if tpu else "missing", step=step_said(p),
                    checkpoint_step=p.get("checkpoint_step"), during_recovery=True if overlapping else None,
                    attempt=(rec.attempt or {}).get("n"), program_started_at=p.get("started_at"),
                    first_step_at=p.get("first_step_time"), step_at=p.get("step_time"))

    def _read_progress(self) -> None:
        rec = self.rec
        p = read_progress(rec.model_dir, rec.provider, rec.project)
        if not p or (p.get("run_id") not in (None, rec.run_id)):
            return
        before = rec.last_progress or {}
        rec.last_progress = {k: p.get(k) for k in ("step", "num_train_steps", "loss", "examples_per_sec",
                                                    "steps_per_sec", "time", "started_at", "status",
                                                    "checkpoint_step", "resumed_from_step", "step_time",
                                                    "first_step_time", "progress_reported",
                                                    "metrics", "evals", "outputs", "data_creation")}
        r = rec.recovering
        # resumed = a process started after the outage has trained a step (its record carries
        # the previous run's step until it restores, so the step alone says nothing); said
        # before the step it has reached since
        started = p.get("started_at") or 0
        if r and started > r["detected_at"] and (p.get("step_time") or 0) >= started and \
                (p.get("step") or 0) > (p.get("resumed_from_step") or 0):
            self._close_recovery(p, p.get("first_step_time") or p["step_time"])
        elif r and started > r["detected_at"] and p.get("progress_reported") is False:
            # a program that has never reported a step: no first new step will say it resumed,
            # so the recovery ends when the new attempt's program runs
            self._close_recovery(p, started)
        # a line when the step moves, and when the checkpoint catches up with it (the job saves
        # a checkpoint just after it reports the step)
        moved = (p.get("step"), p.get("checkpoint_step")) != (before.get("step"), before.get("checkpoint_step"))
        if moved and p.get("step") is not None:
            self.log(progress_line(rec.last_progress))
            rec.curve = curve.added(rec.curve, curve.point(rec.last_progress))

    def _close_recovery(self, p: dict[str, Any], first_step_at: float, *, summarize: bool = True) -> None:
        """The outage is over: count the steps and seconds it cost, and say so in the event log
        (and, unless the run is ending, which summarizes it then, in its goodput summary)."""
        rec = self.rec
        r = rec.recovering
        unknown = p.get("progress_reported") is False
        started = p.get("started_at") or 0
        if unknown and started > r["detected_at"]:
            # nothing reported: the program of the new attempt running is all there is to date
            first_step_at = min(first_step_at, started)
        resumed = p.get("resumed_from_step") or 0
        lost_steps = max(0, (r.get("step") or 0) - resumed)
        lost_s = max(0.0, first_step_at - r["detected_at"])
        rec.steps_lost += 0 if unknown else lost_steps
        rec.seconds_lost += lost_s
        rec.recovering = None
        rec.status = "running"
        self._resumed_at = first_step_at
        # one resume ends every preemption of an outage (more than one when they overlapped);
        # seconds_lost dates its first new step (or, for a program that reports none, its
        # start), where tpuctl cost ends the waiting
        if unknown:
            self._event("resumed", step="unknown", seconds_lost=round(lost_s, 1), preemptions=r.get("preemptions"),
                        program_started_at=started or None)
        else:
            self._event("resumed", step=resumed, steps_lost=lost_steps, seconds_lost=round(lost_s, 1),
                        preemptions=r.get("preemptions"), program_started_at=started or None)
        if summarize:
            self._summarize(final=False)

    def _summarize(self, *, final: bool) -> None:
        """The run's goodput summary in its record (:func:`provision.runs.goodput.summary`), from its
        events, its hosts' exit records and the TPUs its attempts ran on at its price: at the end of
        each recovery and of the run, so a fleet's view and ``estimate`` read one listed object per
        run. A summary that cannot be made is left as it was: it never stops the run."""
        rec = self.rec
        try:
            events = self.store.events()
            exits: dict[int, Any] = {}
            for n in range(1, rec.attempts + 1):
                try:
                    exits[n] = self.store.exits(n)
                except Exception:  # noqa: BLE001, S112 - a bad exit record costs its attempt's exit time
                    continue
            data = rec.to_dict()
            now = time.time()
            price = (rec.pricing or {}).get("usd_per_hour")
            price = float(price) if isinstance(price, (int, float)) and not isinstance(price, bool) else None
            billed = goodput.billed_from_run(data, events, usd_per_hour=price, now=now)
            g = goodput.breakdown(data, events, now=now, exits=exits, billed=billed)
            rec.goodput = goodput.summary(g, record=data, final=final, priced=price is not None,
                                          capacity=self._capacity)
        except Exception as exc:  # noqa: BLE001 - see docstring
            self.log(f"run {rec.run_id}: its goodput summary was not updated ({type(exc).__name__}: {exc})")

    def _account(self) -> None:
        """Count the time since the last look in the state the run was left in then (a job that
        finished or was preempted in between trained until then), split at the first new step
        of a recovery that ended in between."""
        now = self.clock()
        since, self._last_tick = self._last_tick, now
        resumed, self._resumed_at = self._resumed_at, None
        spent = self.rec.seconds_by_state
        hourly = float((self.rec.pricing or {}).get("usd_per_hour") or 0.0) if self._billing else 0.0
        usd = self.rec.pace.setdefault("usd_by_state", {})
        for state, dt in seconds_by_state(self._state, since, now, resumed).items():
            spent[state] = round(max(0.0, spent.get(state, 0.0) + dt), 2)
            usd[state] = round(max(0.0, usd.get(state, 0.0) + math.copysign(caps.usd(hourly, abs(dt)), dt)), 6)

    def _pace(self, tpu: TpuNode | None, *, finished: bool) -> caps.Decision | None:
        """The run's pace and caps at this look (:func:`provision.runs.pace.look`): its events logged,
        the caps' stop returned. The price follows the TPU when a recreate changed its type or zone."""
        rec = self.rec
        if tpu is not None and rec.pricing and (tpu.accelerator_type, tpu.zone) != \
                (rec.pricing.get("accelerator_type"), rec.pricing.get("zone")):
            price = clusters.tpu_price(tpu, self.provider.price_book())
            rec.pricing = {**rec.pricing, "accelerator_type": tpu.accelerator_type, "zone": tpu.zone,
                           "usd_per_hour": price.usd_per_hour, "price": price.to_dict()}
        self._billing = tpu is not None and tpu.state not in DEAD_TPU_STATES
        rec.pace, events, stop = pace.look(rec, now=self.clock(), finished=finished,
                                           stop_s=caps.STOP_S + self.poll_s)
        for kind, data in events:
            self._event(kind, **data)
        return stop

    def _cap_stop(self, d: caps.Decision, tpu: TpuNode | None) -> bool:
        """A cap is reached: the graceful stop (SIGTERM, a checkpoint, exit 42) with no recreate, then
        the TPU's deletion; the host VM is left to its autodown rule."""
        rec = self.rec
        self._event("cap_reached", cap=d.kind, reason=d.reason, step=rec.step)
        if rec.attempt:
            self.log(f"stopping attempt {rec.attempt['n']}: the job writes a checkpoint first")
            self._stop_attempt(tpu)
            self._read_progress()
        try:
            deleted = clusters.delete_tpu(self.provider, rec.cluster, by=f"{d.kind} cap", bucket=self.store.bucket,
                                          run_id=rec.run_id, log=lambda m: self.log(f"  {m}"))
        except TpuctlError as exc:
            deleted = []
            self._event("tpu_delete_failed", error=exc.one_line())
        self._account()
        rec.status, rec.reason, rec.stopped_by, rec.ended_at = "stopped", d.reason, d.kind, time.time()
        self._event("stopped", step=rec.step, checkpoint_step=(rec.last_progress or {}).get("checkpoint_step"),
                    stopped_by=d.kind, reason=d.reason, deleted=", ".join(deleted) or None)
        self._clear_current()
        self._summarize(final=True)
        self.store.save(rec)
        return True

    def _event(self, kind: str, **data: Any) -> None:
        entry = self.store.event(kind, **{k: v for k, v in data.items() if v is not None})
        details = " ".join(f"{k}={v}" for k, v in entry.items() if k not in ("time", "event"))
        self.log(f"[{self.rec.run_id}] {kind} {details}".rstrip())
        if self.notifier is not None:
            self.notifier.run_event(entry, self.rec)

    def _clear_current(self) -> None:
        name = current_name(self.rec.cluster)
        cur = self.store.read_json(name)
        if cur and cur.get("run_id") == self.rec.run_id:
            self.store.write_current(self.rec.cluster, {"run_id": None, "ended": self.rec.run_id, "time": time.time()})
