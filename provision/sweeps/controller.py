"""The sweep controller: ask Optuna, run each trial as a supervised run on a pool TPU, prune, tell.

One controller drives a sweep at a time; it holds ``controller.json`` in the sweep's directory
(renewed every few seconds; the reaper reads it to keep a live sweep's TPUs). Each running trial
is an ordinary ``tpuctl train`` run (``runs.training.prepare``/``stage_run``) supervised by a
:class:`~provision.runs.supervisor.Supervisor` in a thread of this process, so a trial survives
preemption exactly as ``train`` does. The main loop, the only caller of Optuna, reads each
trial's ``progress.json`` for new evaluations, reports them, and stops a trial the pruner gives
up on (its TPU goes back to the pool).

A killed controller loses nothing: the study's journal is in the bucket (:mod:`.study`), each
trial record names its run, and the runs' jobs keep training (they run in their own session
here, or on the TPU hosts). ``tpuctl sweep resume`` starts a controller that adopts every
running trial's run (its supervisor takes the run's lease over), starts the trials that were
asked but never started, and never asks for a finished trial again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..basics.config import Target
from ..basics.errors import TpuctlError, UsageError
from ..cloud.base import Arch, ClusterSpec, Provider
from ..runs import store as runs
from ..runs import training
from ..runs.lease import Lease
from ..runs.supervisor import Supervisor, read_progress
from . import budget, pool
from . import spec as sweepspec
from .create import local_job_file
from .store import (
    CONTROLLER_LEASE,
    HEARTBEAT_S,
    SWEEP_LABEL,
    SweepRecord,
    SweepStore,
    TrialRecord,
    controller_alive,
    controller_identity,
)
from .view import best

Log = Callable[[str], None]
# How long a pruned or stopped trial's job gets to write its checkpoint after SIGTERM.
STOP_GRACE_S = 15.0


@dataclass
class Active:
    trial: TrialRecord
    sup: Supervisor | None = None
    thread: threading.Thread | None = None
    error: str | None = None
    progress: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()



class Controller:
    def __init__(self, provider: Provider, target: Target, store: SweepStore, *, where: str, log: Log,
                 pinned_on: str | None = None):
        self.provider = provider
        self.target = target
        self.store = store
        self.log = log
        # a host VM's agent started this controller: drive only the sweep pinned in its metadata
        self.pinned_on = pinned_on
        self.rec: SweepRecord = store.load()
        self.job_file = local_job_file(store)
        self._check_pinned()
        self.spec = sweepspec.from_dict(self.rec.spec)
        self.identity = controller_identity(where)
        self.lease = controller_lease(store, self.identity)
        self.study: Any = None               # the Study, read once the lease is ours (_acquire)
        self.trials: dict[int, TrialRecord] = {}
        self.active: dict[int, Active] = {}
        self.pending: list[TrialRecord] = []
        self.pool: dict[str, int | None] = {}       # cluster -> trial number running on it
        self.budget_reason: str | None = None
        self._stop = threading.Event()
        self.notifier = _notifier(self.rec, log)

    def _check_pinned(self) -> None:
        """On a host VM: the sweep's record and job spec must be the ones pinned there
        (provision.runs.pins), or a bucket writer could make the host stage and pin any run."""
        if not self.pinned_on:
            return
        from pathlib import Path

        from ..runs.pinning import read_host_pin
        from ..runs.pins import sha256

        observed = {"record": self.rec.digest(), "job": sha256(Path(self.job_file).read_bytes())}
        refusal = read_host_pin(self.target.provider, self.pinned_on).refusal("sweep", self.rec.sweep_id, observed)
        if refusal:
            raise UsageError(refusal, hint=f"hand it over again: tpuctl sweep resume {self.rec.sweep_id} --detach "
                                           f"--host {self.pinned_on}")

    # ---- the lease ------------------------------------------------------------------------------
    def _acquire(self) -> None:
        """Take the lease, then read the sweep: whatever a holder before us wrote (a `sweep stop`
        that ended it, journal batches) is what this controller starts from, never a copy read
        before it held the sweep."""
        from .study import Study

        take_controller_lease(self.lease, self.rec.sweep_id)
        self.rec = self.store.load()
        self._check_pinned()
        try:
            self.study = Study(self.store, self.spec, eval_every=self.rec.eval_every_steps or 0,
                               num_train_steps=self.rec.num_train_steps)
        except TpuctlError as exc:
            # a journal no controller can replay: say so, and leave the sweep to the next resume
            self.lease.release(exc.one_line())
            raise
        self.trials = {t.trial: t for t in self.store.trials()}

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if not self.lease.renew():
                    self.log("another controller took the sweep over; stopping here")
                    self._stop.set()
                    return
            except Exception as exc:  # noqa: BLE001 - a missed heartbeat is retried next tick
                self.log(f"sweep heartbeat failed: {exc}")

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> SweepRecord:
        self._acquire()
        rec = self.rec
        if not rec.live:
            # ended while this controller was starting (`sweep stop` right after `sweep resume`)
            self.log(f"sweep {rec.sweep_id} is {rec.state}; nothing to do")
            self.lease.release(rec.state)
            return rec
        beat = threading.Thread(target=self._heartbeat, daemon=True)
        beat.start()
        try:
            rec.state, rec.reason = "running", None
            self.store.save(rec)
            self._find_pool()
            if not self.store.stop_requested():
                self._reconcile()
            else:
                self._stop_unstarted()
            while not self._stop.is_set():
                if self.store.stop_requested():
                    self._stop_all("stopped by tpuctl sweep stop")
                    rec.state, rec.reason = "stopped", "stopped by tpuctl sweep stop"
                    break
                self._poll_active()
                more = self._start_more()
                if not more and not self.active:
                    rec.state = "finished" if any(t.state == "finished" for t in self.trials.values()) else "failed"
                    rec.reason = self.budget_reason or rec.reason
                    if rec.state == "failed" and not rec.reason:
                        rec.reason = "no trial finished"
                    break
                self._stop.wait(min(self.rec.poll_s, 2.0))
        except KeyboardInterrupt:
            self._stop_all("stopped by the user (Ctrl-C)")
            rec.state, rec.reason = "stopped", "stopped by the user (Ctrl-C)"
        except Exception as exc:
            self._stop_all("the controller failed", state="failed")
            rec.state = "failed"
            rec.reason = exc.one_line() if isinstance(exc, TpuctlError) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            if rec.state in ("finished", "stopped", "failed"):
                self._finish()
            self._stop.set()
            self.lease.release(rec.reason or rec.state)
        return rec

    def _finish(self) -> None:
        rec = self.rec
        self._drain_pool(keep=0)
        top = best(list(self.trials.values()), self.spec.goal)
        rec.best = {"trial": top.trial, "params": top.params, "metric": top.metric, "run": top.run,
                    "model_dir": top.model_dir} if top else None
        rec.ended_at = time.time()
        self.store.save(rec)
        self.log(f"sweep {rec.sweep_id} {rec.state}" + (f": {rec.reason}" if rec.reason else "")
                 + (f"; best trial {top.trial} {self.spec.metric} {top.metric:.4f}" if top else ""))
        self._notify("sweep_ended", top)
        if self.notifier is not None:
            self.notifier.close()

    def _notify(self, kind: str, trial: TrialRecord | None) -> None:
        if self.notifier is None:
            return
        from ..notify.messages import sweep_notice

        self.notifier.notice(sweep_notice(kind, self.rec.sweep_id, metric_name=self.spec.metric,
                                          metric=trial.metric if trial else None, trial=trial.trial if trial else None,
                                          params=trial.params if trial else None, when=time.time(),
                                          state=self.rec.state, reason=self.rec.reason))

    # ---- the pool ---------------------------------------------------------------------------------
    def _find_pool(self) -> None:
        for node in self.provider.list_tpus(None, {SWEEP_LABEL: self.rec.sweep_id}):
            if node.cluster and pool.index_of(self.rec.sweep_id, node.cluster) is not None:
                self.pool.setdefault(node.cluster, None)

    def _cluster_spec(self, name: str) -> ClusterSpec:
        return pool_spec(self.rec, name)

    def _take_cluster(self) -> tuple[str, Any] | None:
        from .. import cluster as clusters

        choice = pool.choose(self.rec.sweep_id, [pool.Slot(c, n is not None) for c, n in self.pool.items()],
                             self.rec.max_concurrent)
        if choice.cluster is None:
            return None
        spec = self._cluster_spec(choice.cluster)
        tpu = clusters.find(self.provider, choice.cluster).tpu
        if choice.create or tpu is None:
            self.log(f"pool: creating {choice.cluster} ({spec.accelerator_type})")
            result = clusters.up(self.provider, spec, log=lambda m: self.log(f"  {m}"))
            tpu = result.tpu
        else:
            self.log(f"pool: reusing {choice.cluster}")
        self.pool[choice.cluster] = -1
        return choice.cluster, tpu

    def _drain_pool(self, keep: int) -> None:
        from .. import cluster as clusters

        for name in pool.surplus([pool.Slot(c, n is not None) for c, n in self.pool.items()], still_to_start=keep):
            self.log(f"pool: deleting {name}")
            try:
                clusters.down(self.provider, name, log=lambda m: self.log(f"  {m}"))
            except TpuctlError as exc:
                self.log(f"pool: deleting {name} failed: {exc.one_line()}")
                continue
            self.pool.pop(name, None)

    # ---- resuming ---------------------------------------------------------------------------------
    def _reconcile(self) -> None:
        """Bring trial records and the journal together; adopt runs still live; queue the unstarted."""
        states = self.study.states()
        for n in sorted(states):
            t = self.trials.get(n) or TrialRecord(trial=n, params=self.study.params(n))
            self.trials[n] = t
            jstate = states[n]
            if jstate != "running":
                if t.state != jstate and not (jstate == "failed" and t.state == "stopped"):
                    t.state = jstate      # (a stopped trial is a failed one to Optuna)
                    if jstate == "finished":
                        t.metric = self.study.value(n)
                    t.ended_at = t.ended_at or time.time()
                    self.store.save_trial(t)
                continue
            if t.run:
                self._adopt(t)
            else:
                t.state = "queued"
                self.store.save_trial(t)
                self.pending.append(t)

    def _adopt(self, t: TrialRecord) -> None:
        store = runs.RunStore(self.store.bucket, t.run)
        try:
            rec = store.load()
        except TpuctlError:
            self.log(f"trial {t.trial}: its run {t.run} has no record; starting it again")
            t.run, t.state = None, "queued"
            self.store.save_trial(t)
            self.pending.append(t)
            return
        if t.cluster:
            self.pool[t.cluster] = t.trial
        act = Active(trial=t)
        self.active[t.trial] = act
        if rec.live:
            self.log(f"trial {t.trial}: adopting run {t.run} on {t.cluster}")
            self._supervise(act, store, rec.cluster, take_over=True)

    # ---- starting trials -------------------------------------------------------------------------
    def _start_more(self) -> bool:
        """Start trials while TPUs and budget allow; False when no trial is left to start."""
        while True:
            more_to_ask = self.study.count < self.rec.max_trials and self.budget_reason is None
            if not self.pending and not more_to_ask:
                self._drain_pool(keep=0)
                return False
            if not self.pending:
                decision = budget.may_start(
                    self.rec.budget_usd, hourly_usd=self.rec.hourly_usd,
                    ended_seconds=[t.seconds for t in self.trials.values() if t.state in ("finished", "pruned", "failed")],
                    running_seconds=[a.trial.seconds for a in self.active.values()])
                if not decision.start:
                    self.budget_reason = f"budget: {decision.reason}"
                    self.log(f"not starting more trials: {decision.reason}")
                    continue
            if sum(1 for n in self.pool.values() if n is not None) >= self.rec.max_concurrent:
                return True
            taken = self._take_cluster()
            if taken is None:
                return True
            name, tpu = taken
            if self.pending:
                t = self.pending.pop(0)
            else:
                asked = self.study.ask()
                t = TrialRecord(trial=asked.number, params=asked.params)
                self.trials[t.trial] = t
                self.store.save_trial(t)     # before the run exists: a resume knows its parameters
            self._start(t, name, tpu)

    def _start(self, t: TrialRecord, cluster: str, tpu: Any) -> None:
        spec = self._cluster_spec(cluster)
        model_dir = self.store.model_dir_url(self.rec.bucket, t.trial)
        if self.rec.provider == "local":
            model_dir = training.local_path_for(model_dir)
        sets = [(k, _as_set(v)) for k, v in t.params.items()] + [("model_dir", model_dir)]
        if self.rec.eval_every_steps is not None:
            sets.append(("eval_every_steps", str(self.rec.eval_every_steps)))
        self.pool[cluster] = t.trial
        t.cluster, t.model_dir, t.state, t.started_at, t.reason = cluster, model_dir, "running", time.time(), None
        act = Active(trial=t)
        self.active[t.trial] = act
        try:
            outside = sweepspec.outside(self.spec, t.params)
            if outside:     # read back from the bucket: only points of the sweep's space become --set values
                raise UsageError(f"parameters outside the sweep's space: {outside}")
            prep = training.prepare(self.provider, self.target, spec, tpu, job_spec=self.job_file, sets=sets,
                                    bucket=self.rec.bucket, code=None, max_preemptions=None,
                                    max_failures=self.rec.max_failures, workdir_digest=self.rec.workdir)
            store = training.open_store(prep.record, self.target)
            pin = training.stage_run(store, prep, lambda m: self.log(f"trial {t.trial}: {m}"), self.provider)
        except TpuctlError as exc:
            self.log(f"trial {t.trial} could not start: {exc.one_line()}")
            act.error = exc.one_line()
            self.store.save_trial(t)
            return
        if hasattr(self.provider, "point_hosts_at"):
            self.provider.point_hosts_at(spec, self.rec.bucket)
        t.run = prep.record.run_id
        self.store.save_trial(t)
        self.log(f"trial {t.trial} ({_params(t.params)}) starts as run {t.run} on {cluster}")
        self._supervise(act, store, cluster, take_over=False, pin=pin)

    def _supervise(self, act: Active, store: runs.RunStore, cluster: str, *, take_over: bool,
                   pin: dict[str, str | None] | None = None) -> None:
        from .. import cluster as clusters

        rec = store.load()
        tpu = clusters.find(self.provider, cluster).tpu
        spec = training.cluster_spec_for(self.provider, cluster, tpu, bucket=rec.bucket)
        executor = training.make_executor(self.provider, store, spec.arch)
        n = act.trial.trial
        sup = Supervisor(self.provider, spec, store, executor, training.attempt_command,
                         where=f"sweep {self.rec.sweep_id} trial {n}", poll_s=min(self.rec.poll_s, 10.0),
                         log=lambda m: self.log(f"trial {n}: {m.strip()}") if not m.startswith("  step") else None,
                         pin=pin)
        act.sup = sup

        def body() -> None:
            try:
                sup.run(take_over=take_over)
            except Exception as exc:  # noqa: BLE001 - the trial fails, the sweep goes on
                act.error = exc.one_line() if isinstance(exc, TpuctlError) else f"{type(exc).__name__}: {exc}"

        act.thread = threading.Thread(target=body, daemon=True, name=f"trial-{n}")
        act.thread.start()

    # ---- watching trials ---------------------------------------------------------------------------
    def _poll_active(self) -> None:
        for n, act in list(self.active.items()):
            t = act.trial
            run = act.sup.rec if act.sup else self._load_run(t)
            if t.model_dir:
                p = read_progress(t.model_dir, self.rec.provider, self.rec.project)
                if p and p.get("run_id") in (None, t.run):
                    act.progress = p
            p = act.progress
            t.steps = int(p.get("step") or (run.step if run else 0) or 0)
            if run is not None:
                t.preemptions = run.preemptions
            t.cost_usd = budget.trial_usd(self.rec.hourly_usd, t.seconds)
            if self._report_evals(act):
                self._prune(act)
                continue
            if act.done:
                self._ended(act, run)
            else:
                self.store.save_trial(t)

    def _report_evals(self, act: Active) -> bool:
        """Tell Optuna every new evaluation; True when the pruner stops the trial."""
        t = act.trial
        for e in act.progress.get("evals") or []:
            step, metrics = e.get("step"), e.get("metrics") or {}
            value = metrics.get(self.spec.metric)
            if not isinstance(step, int) or not isinstance(value, (int, float)):
                continue
            if t.reported_step is not None and step <= t.reported_step:
                continue
            t.reported_step = step
            t.metric = float(value)
            prune = self.study.report(t.trial, float(value), step)
            self.store.save_trial(t)
            if prune and step < self.rec.num_train_steps:
                t.reason = f"pruned at step {step} ({self.spec.metric} {value:.4f})"
                return True
        return False

    def _load_run(self, t: TrialRecord) -> Any:
        if not t.run:
            return None
        try:
            return runs.RunStore(self.store.bucket, t.run).load()
        except TpuctlError:
            return None

    def _stop_run(self, act: Active, reason: str) -> None:
        """Stop a trial's run as train's Ctrl-C does: the job checkpoints, the run says stopped."""
        sup = act.sup
        if sup is not None:
            sup.stop_loop()
            if act.thread is not None:
                act.thread.join(timeout=60)
        store = sup.store if sup else (runs.RunStore(self.store.bucket, act.trial.run) if act.trial.run else None)
        if store is None:
            return
        try:
            rec = sup.rec if sup else store.load()
            if not rec.live:
                return
            if rec.attempt:
                executor = sup.executor if sup else training.make_executor(self.provider, store, Arch.VM)
                executor.stop(rec, rec.attempt["n"], grace=STOP_GRACE_S)
            rec.status, rec.reason, rec.ended_at = "stopped", reason, time.time()
            store.event("stopped", step=rec.step, reason=reason)
            store.save(rec)
            cur = store.read_json(runs.current_name(rec.cluster))
            if cur and cur.get("run_id") == rec.run_id:
                store.write_current(rec.cluster, {"run_id": None, "ended": rec.run_id, "time": time.time()})
            if sup:
                sup.lease.release(reason)
        except TpuctlError as exc:
            self.log(f"trial {act.trial.trial}: stopping run {act.trial.run} failed: {exc.one_line()}")

    def _prune(self, act: Active) -> None:
        t = act.trial
        self.log(f"trial {t.trial} {t.reason}: stopping run {t.run}; its TPU goes back to the pool")
        self._stop_run(act, f"pruned by sweep {self.rec.sweep_id}: {t.reason}")
        self.study.prune(t.trial)
        t.state, t.ended_at = "pruned", time.time()
        self._release(act)

    def _ended(self, act: Active, run: Any) -> None:
        t = act.trial
        metrics = (act.progress.get("metrics") if act.progress.get("status") == "finished" else None) or \
            ((run.last_progress or {}).get("metrics") if run is not None else None) or {}
        value = metrics.get(self.spec.metric)
        if run is not None and run.status == "finished" and isinstance(value, (int, float)):
            t.metric = float(value)
            self.study.finish(t.trial, t.metric)
            leader = best([x for x in self.trials.values() if x.trial != t.trial], self.spec.goal)
            t.state = "finished"
            self.log(f"trial {t.trial} finished: {self.spec.metric} {t.metric:.4f}")
            if best([*(x for x in (leader,) if x), t], self.spec.goal) is t:
                self._notify("sweep_best", t)
        else:
            why = act.error or (run.reason if run is not None else None) or \
                (f"the job reported no {self.spec.metric}" if run is not None and run.status == "finished" else
                 "its run ended")
            t.reason = why
            self.study.fail(t.trial)
            t.state = "failed"
            self.log(f"trial {t.trial} failed: {why}")
        t.ended_at = time.time()
        self._release(act)

    def _release(self, act: Active) -> None:
        t = act.trial
        t.cost_usd = budget.trial_usd(self.rec.hourly_usd, t.seconds)
        self.store.save_trial(t)
        self.active.pop(t.trial, None)
        if t.cluster in self.pool:
            self.pool[t.cluster] = None

    def _stop_all(self, reason: str, state: str = "stopped") -> None:
        """End every trial not ended yet: "stopped" when asked to (sweep stop, Ctrl-C), not "failed"
        (a trial stopped at its last step read as a failure); Optuna has no such state: fail there."""
        for act in list(self.active.values()):
            self._stop_run(act, reason)
            t = act.trial
            self.study.fail(t.trial)
            t.state, t.reason, t.ended_at = state, reason, time.time()
            self._release(act)
        for t in self.pending:
            t.state, t.reason = state, reason
            self.study.fail(t.trial)
            self.store.save_trial(t)
        self.pending = []


    def _stop_unstarted(self) -> None:
        """Asked to stop before anything was adopted: every trial not ended is to be stopped."""
        for t in self.trials.values():
            if t.state in ("running", "queued"):
                self.active[t.trial] = Active(trial=t)

    def stop_here(self, reason: str) -> SweepRecord:
        """Stop a sweep whose controller is gone: stop its trials' runs, delete its pool."""
        self._acquire()
        if not self.rec.live:
            self.lease.release(self.rec.state)
            return self.rec
        self._find_pool()
        self._stop_unstarted()
        self._stop_all(reason)
        states = self.study.states()
        for n, s in states.items():
            if s == "running":
                self.study.fail(n)
        self.rec.state, self.rec.reason = "stopped", reason
        self._finish()
        self.lease.release(reason)
        return self.rec


def _notifier(rec: SweepRecord, log: Log) -> Any:
    """The sweep's notifier (its record's channels), or None."""
    if not rec.notify:
        return None
    from ..notify.notifier import Notifier
    from ..notify.settings import from_dict

    settings = from_dict(rec.notify)
    return Notifier(settings, log=log) if settings is not None and settings.channels else None


def pool_spec(r: SweepRecord, name: str) -> ClusterSpec:
    """A pool TPU of the sweep: a TPU VM labelled with the sweep, running as its service account."""
    types = tuple(r.accelerator_type.split(","))        # one type, or several that would all do
    return ClusterSpec(name=name, accelerator_type=types[0], accelerator_types=types, zones=tuple(r.zones),
                       provider=r.provider,
                       project=r.project or None, arch=Arch.VM, preemptible=r.preemptible, spot=r.spot,
                       machine_type=None, bucket=r.bucket, labels={SWEEP_LABEL: r.sweep_id},
                       service_account=r.service_account)


def controller_lease(store: SweepStore, identity: dict[str, Any]) -> Lease:
    return Lease(store.bucket, store.name(CONTROLLER_LEASE), identity)


def take_controller_lease(lease: Lease, sweep_id: str) -> None:
    """Hold the sweep's lease, or LeaseBusy naming the live controller that does."""
    lease.acquire(
        lambda cur: not controller_alive(cur),
        busy=lambda cur: (f"sweep {sweep_id} already has a controller ({cur.get('where')} on "
                          f"{cur.get('host')}, pid {cur.get('pid')})"),
        hint=f"follow it with tpuctl sweep status {sweep_id}")


def _as_set(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
