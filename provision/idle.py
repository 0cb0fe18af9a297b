"""Pure idle policy: is this TPU training, or is it billing for nothing?

Idle means "no live run heartbeat", not "no ssh session": a run's progress record (written by the
job at least every minute) is its heartbeat. A TPU has been idle since the latest of its creation,
its run's end, and its run's last heartbeat; it is reaped once idle for ``idle_for``. PREEMPTED and
TERMINATED nodes bill nothing but hold quota, so they go too, unless a live supervisor is about to
recreate them. A node labelled ``tpuctl-keep=true`` is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from .providers.base import PENDING_TPU_STATES, TpuNode, TpuState

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
    supervisor_heartbeat_at: float | None = None

    @property
    def live(self) -> bool:
        return self.status in LIVE_RUN_STATES


@dataclass(frozen=True)
class Verdict:
    delete: bool
    reason: str
    idle_since: float | None = None


def judge(node: TpuNode, run: RunView | None, *, now: float, idle_for: float) -> Verdict:
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


def _human(seconds: float) -> str:
    from .validate import format_duration

    return format_duration(max(0.0, seconds))
