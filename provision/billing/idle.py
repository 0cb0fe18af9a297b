"""Pure idle policy: is this TPU training, or is it billing for nothing?

Idle means "no live run heartbeat", not "no ssh session": a run's progress record (written by the
job at least every minute) is its heartbeat. A TPU has been idle since the latest of its creation,
its run's end, and its run's last heartbeat; it is reaped once idle for ``idle_for``. PREEMPTED and
TERMINATED nodes bill nothing but hold quota, so they go too, unless a live supervisor is about to
recreate them. A node labelled ``tpuctl-keep=true`` is never touched.

A queued resource without a node is judged too (:func:`judge_queued`): a FAILED or SUSPENDED one
never provisions again but holds its quota until deleted, so it goes; one that is still waiting
for capacity is kept while its cluster has anything else (a host VM, a TPU, a local record), and
goes once it has waited ``idle_for`` with nothing else left of its cluster (it would become a billed
TPU nobody is waiting for).

Where Cloud Monitoring is reachable, the TPU's duty cycle is an extra signal (``--min-duty-cycle``):
a node the progress record calls idle is kept while its duty cycle reached the minimum within
``idle_for`` (something outside tpuctl computes on it), and a node whose run keeps reporting is
idle once its duty cycle stayed under the minimum for the whole of ``idle_for`` (the job is alive
but the TPU does nothing). Without duty-cycle samples the progress record decides alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..cloud.base import (
    PENDING_TPU_STATES,
    DutyCycle,
    QueuedRequest,
    QueuedState,
    TpuNode,
    TpuState,
)

# A supervisor that has not written its heartbeat for this long is not about to recreate anything.
SUPERVISOR_STALE_S = 120.0
LIVE_RUN_STATES = frozenset({"starting", "running", "recovering"})


@dataclass(frozen=True)
class RunView:
    """What the reaper knows of the run attached to a TPU (from the run ledger and progress record)."""

    run_id: str
    status: str                        # starting, running, recovering, finished, failed, gave_up, stopped
    heartbeat_at: float | None = None  # the job's progress record time
    ended_at: float | None = None
    supervisor_heartbeat_at: float | None = None   # None also when not read (see needs_supervisor)

    @property
    def live(self) -> bool:
        return self.status in LIVE_RUN_STATES


@dataclass(frozen=True)
class SweepView:
    """The sweep whose pool a TPU belongs to (label ``tpuctl-sweep``): is its controller alive?"""

    sweep_id: str
    alive: bool                        # a fresh controller heartbeat on a running sweep
    state: str = "unknown"


# How far the first duty-cycle sample may lie inside a window that it still "covers".
DUTY_SAMPLE_SLACK_S = 120.0


@dataclass(frozen=True)
class Verdict:
    delete: bool
    reason: str
    idle_since: float | None = None


def judge(node: TpuNode, run: RunView | None, *, now: float, idle_for: float,
          duty: DutyCycle | None = None, min_duty_cycle: float | None = None,
          sweep: SweepView | None = None) -> Verdict:
    """Delete or keep ``node``: the progress record decides, the duty cycle (when given) refines.

    A TPU of a sweep's pool is decided by its sweep: a live controller is about to start the next
    trial on it (between trials it has no run), so it stays; a dead controller's pool goes, whatever
    its last run says (nothing will supervise or reuse it).
    """
    if sweep is not None and not node.keep and node.state != TpuState.DELETING:
        if sweep.alive:
            return Verdict(False, f"in the pool of live sweep {sweep.sweep_id} (its controller's heartbeat is fresh)")
        return Verdict(True, f"in the pool of sweep {sweep.sweep_id}, whose controller is gone ({sweep.state}); "
                             f"tpuctl sweep resume {sweep.sweep_id} would create what it needs", node.created_at)
    verdict = _by_progress(node, run, now=now, idle_for=idle_for)
    if duty is None or min_duty_cycle is None or not duty.points or node.keep or node.dead \
            or node.state != TpuState.READY:
        return verdict
    busy_at = duty.last_busy(min_duty_cycle)
    pct = f"{min_duty_cycle:g}%"
    if verdict.delete:
        if busy_at is not None and now - busy_at < idle_for:
            return Verdict(False, f"{verdict.reason}, but its duty cycle reached {pct} {_human(now - busy_at)} ago "
                                  f"(--min-duty-cycle): something outside tpuctl computes on it",
                           max(verdict.idle_since or busy_at, busy_at))
        return verdict
    training = run is not None and run.live and run.heartbeat_at is not None
    created = node.created_at or now
    window_start = now - idle_for
    covered = duty.first is not None and duty.first <= window_start + DUTY_SAMPLE_SLACK_S
    if training and created <= window_start and covered and (busy_at is None or busy_at <= window_start):
        since = max(busy_at or duty.first or created, created)
        return Verdict(True, f"run {run.run_id} reports progress, but the TPU's duty cycle stayed under {pct} "
                             f"for {_human(now - since)}", since)
    return verdict


def _by_progress(node: TpuNode, run: RunView | None, *, now: float, idle_for: float) -> Verdict:
    if node.keep:
        return Verdict(False, "labelled tpuctl-keep=true")
    if node.state == TpuState.DELETING:
        return Verdict(False, "already being deleted")

    supervised = (run is not None and run.live and run.supervisor_heartbeat_at is not None
                  and now - run.supervisor_heartbeat_at < SUPERVISOR_STALE_S)

    if node.dead:
        if supervised:
            return Verdict(False, f"{node.state.value}, but run {run.run_id}'s supervisor is recreating it")
        return Verdict(True, f"{node.state.value}: holds quota and will never train again", node.created_at)

    if node.state in PENDING_TPU_STATES and supervised:
        return Verdict(False, f"{node.state.value} for run {run.run_id}")

    marks = [t for t in (node.created_at,) if t]
    if run is not None:
        marks += [t for t in (run.heartbeat_at, run.ended_at) if t]
        if run.live and run.heartbeat_at is None and supervised:
            # the job has not written its first progress record yet: the supervisor vouches for it
            marks.append(run.supervisor_heartbeat_at)
    idle_since = max(marks) if marks else now
    quiet = now - idle_since

    if run is None:
        why = "no run attached"
    elif not run.live:
        why = f"run {run.run_id} {run.status}"
    else:
        why = f"run {run.run_id} has not reported progress"
    if quiet >= idle_for:
        return Verdict(True, f"{why} for {_human(quiet)}", idle_since)
    if run is not None and run.live and run.heartbeat_at:
        return Verdict(False, f"training (run {run.run_id}, last progress {_human(quiet)} ago)", idle_since)
    return Verdict(False, f"{why} for {_human(quiet)}, under --idle-for {_human(idle_for)}", idle_since)


def judge_queued(req: QueuedRequest, *, now: float, idle_for: float, cluster_has_more: bool) -> Verdict:
    """Delete or keep a queued resource that has no node (a request with a node is judged as its TPU).

    ``cluster_has_more``: its cluster still has a host VM, a TPU or a local record somewhere tpuctl sees.
    """
    if req.keep:
        return Verdict(False, "labelled tpuctl-keep=true")
    if req.state == QueuedState.DELETING:
        return Verdict(False, "already being deleted")
    if req.dead:
        why = f" ({req.error})" if req.error else ""
        return Verdict(True, f"{req.state.value}{why}: never provisions again, and holds its quota until deleted",
                       req.created_at)
    if req.holds_nodes:
        return Verdict(False, f"{req.state.value}: its TPU is judged on its own")
    waited = max(0.0, now - req.created_at) if req.created_at else 0.0
    state = f"{req.state.value} for {_human(waited)}"
    if cluster_has_more:
        return Verdict(False, f"{state}: asked for by cluster {req.cluster}, which still exists", req.created_at)
    alone = f"and cluster {req.cluster} has nothing else left (no host VM, TPU or local record)"
    if waited >= idle_for:
        return Verdict(True, f"{state}, {alone}: it would become a billed TPU nobody waits for", req.created_at)
    return Verdict(False, f"{state}, under --idle-for {_human(idle_for)}, {alone}", req.created_at)


def needs_supervisor(node: TpuNode, run: RunView) -> bool:
    """Whether :func:`judge` of ``node`` can depend on its run's supervisor (the lease's heartbeat):
    only a PREEMPTED/TERMINATED node (recreated by a live supervisor), a pending one (being created
    for it) and a live run whose job has not reported yet (the supervisor vouches for it). For any
    other node the lease changes nothing the reaper says, so a fleet's reaper need not read it
    (``run``: the view without the lease)."""
    return node.dead or node.state in PENDING_TPU_STATES or (run.live and run.heartbeat_at is None)


# How much fresher than --idle-for a run record's own last progress must be for the reaper to judge
# its TPU without the job's progress file: the time between reading and judging, with room to spare.
PROGRESS_MARGIN_S = 60.0


def needs_progress(run: RunView, *, now: float, idle_for: float) -> bool:
    """Whether :func:`judge` can depend on the job's progress file (``progress.json``) beyond the
    run record (``run``: the view of the record alone).

    The file only adds what is newer than the record's copy of it: a later heartbeat, or a final
    status written at that later time. So when the record shows a live run whose last progress is
    well inside ``idle_for``, the TPU is kept whatever the file says, and a fleet's reaper need not
    read it; the kept TPU's "last progress" is then the record's (the supervisor copies the file into
    it every poll). Anything else (an ended run, no progress yet, a quiet one) reads the file.
    """
    if not run.live or run.heartbeat_at is None or run.ended_at is not None:
        return True
    return now - run.heartbeat_at + PROGRESS_MARGIN_S >= idle_for


def view_of(record: dict[str, Any], progress: dict[str, Any] | None = None,
            lease: dict[str, Any] | None = None) -> RunView:
    """What the reaper needs of a run, from its record (run.json), the job's progress record and
    the supervisor's lease (supervisor.json).

    The heartbeat is the newest progress time the run has seen (the record's copy or a fresh read
    of the job's file, if that file belongs to this run). A job that wrote a final record
    (finished, failed, preempted) ended at that write, even before its supervisor noticed: the TPU
    is idle from that moment. A released lease means nobody supervises the run any more.
    """
    run_id = str(record.get("run_id") or "?")
    beats = []
    last = record.get("last_progress") or {}
    if last.get("time"):
        beats.append(float(last["time"]))
    ended = record.get("ended_at")
    if progress and progress.get("run_id") in (None, run_id) and progress.get("time"):
        beats.append(float(progress["time"]))
        if progress.get("status") in ("finished", "failed", "preempted"):
            final = float(progress["time"])
            ended = min(float(ended), final) if ended else final
    sup = None
    if lease and not lease.get("released") and lease.get("heartbeat_at"):
        sup = float(lease["heartbeat_at"])
    return RunView(run_id=run_id, status=str(record.get("status") or "starting"),
                   heartbeat_at=max(beats) if beats else None, ended_at=float(ended) if ended else None,
                   supervisor_heartbeat_at=sup)


def _human(seconds: float) -> str:
    from ..basics.validate import format_duration

    return format_duration(max(0.0, seconds))
