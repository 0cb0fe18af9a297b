"""Pure recovery policy: what the supervisor does next, given what it observed.

No I/O here: the supervisor observes the TPU (state, health) and the job (phase, exit code), and
this module decides. The rules, in order:

1. The job exited 0: the run is done, whatever happens to the TPU afterwards.
2. The TPU is gone, PREEMPTED or TERMINATED, unhealthy past a grace period, or the job exited 42
   (preempted or infrastructure failure): recreate the TPU (same name, type and range) and restart
   the job, which resumes from its newest checkpoint. This counts as a preemption.
3. The job exited 2: its spec or inputs cannot run (the job said why in one line, before its first
   step). Restarting cannot fix that, and each try bills a TPU: give up at once.
   Likewise when a host's bootstrap failed: no agent will ever start the job there; and when a
   host refused the attempt (exit 2 with its reason: the run is not pinned there, or not as pinned).
4. Any other exit code is a job error: restart on the same TPU, within ``max_failures``; but not
   when it failed before its first progress with the same error line as the attempt before
   (:func:`repeated_failure`): a missing import or data file fails the same way every time, and
   each try bills a TPU.
5. A TPU on its way to READY: wait. A READY, healthy TPU without a job: start it.

Preemptions are expected on preemptible TPUs, so their budget is unbounded unless the user sets
``--max-preemptions``; job errors have a small budget of their own.

An outage is counted once. While a recovery is in progress the TPU may still be missing or dead
because of the outage already counted (the recreate failed, or was cut short): that is recovered
from again but not counted again (``outage_counted``). A second preemption that overlaps the first
recovery (the recreated TPU preempted before the job resumed) is a TPU incarnation of its own and
counts: the supervisor keys each outage by the incarnation it hit (:func:`outage_key`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..cloud.base import DEAD_TPU_STATES, Health, TpuState

EXIT_FINISHED = 0
EXIT_RETRY = 42
EXIT_BAD_SPEC = 2

# A TPU that reports READY but unhealthy may recover on its own (health checks lag); give it this
# long before treating it like a preempted one.
UNHEALTHY_GRACE_S = 120.0
UNHEALTHY = frozenset({Health.TIMEOUT, Health.UNHEALTHY_TENSORFLOW, Health.UNHEALTHY_MAINTENANCE})


class JobPhase(str, enum.Enum):
    NOT_STARTED = "not_started"   # no attempt on the current TPU yet
    RUNNING = "running"
    EXITED = "exited"             # an exit code is known
    LOST = "lost"                 # the process vanished without an exit code (killed with its host)


class Action(str, enum.Enum):
    WAIT = "wait"
    START_JOB = "start_job"
    RECREATE_TPU = "recreate_tpu"
    FINISH = "finish"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class Observed:
    tpu_state: TpuState | None          # None: the TPU does not exist
    tpu_health: Health = Health.HEALTH_UNSPECIFIED
    unhealthy_for_s: float = 0.0
    job: JobPhase = JobPhase.NOT_STARTED
    exit_code: int | None = None
    preemptions: int = 0
    failures: int = 0
    max_preemptions: int | None = None
    max_failures: int = 3
    # why no attempt can ever start on this TPU as it is (a host's bootstrap failed), or None
    blocked: str | None = None
    # the infrastructure problem seen is an outage already counted (a recovery still in progress)
    outage_counted: bool = False
    # why a host refused the attempt it exited 2 for (not pinned there, or not as pinned), or None
    refused: str | None = None
    # the error line of a job error that repeats the attempt before's, both before any progress
    repeated_failure: str | None = None


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    counts_as: str | None = None        # "preemption" or "failure": the caller increments that count


def decide(o: Observed) -> Decision:
    if o.job == JobPhase.EXITED and o.exit_code == EXIT_FINISHED:
        return Decision(Action.FINISH, "the job finished (exit 0)")

    if o.max_preemptions is not None and o.preemptions > o.max_preemptions:
        # counted while recovering (the recreated TPU was preempted too)
        return Decision(Action.GIVE_UP, f"{o.preemptions} preemptions, and --max-preemptions "
                                        f"{o.max_preemptions} is used up")

    infra = _infrastructure_problem(o)
    if infra is not None and o.outage_counted:
        return Decision(Action.RECREATE_TPU, f"{infra}; still recovering from the outage already counted")
    if infra is not None:
        if o.max_preemptions is not None and o.preemptions + 1 > o.max_preemptions:
            return Decision(Action.GIVE_UP, f"{infra}, and --max-preemptions {o.max_preemptions} is used up",
                            counts_as="preemption")
        return Decision(Action.RECREATE_TPU, infra, counts_as="preemption")

    if o.blocked and o.job in (JobPhase.NOT_STARTED, JobPhase.RUNNING, JobPhase.LOST):
        return Decision(Action.GIVE_UP, f"{o.blocked}; nothing can run there until it is fixed "
                                        "(see tpuctl status, then tpuctl down and up again)", counts_as="failure")

    if o.job == JobPhase.EXITED and o.exit_code == EXIT_BAD_SPEC and o.refused:
        return Decision(Action.GIVE_UP, f"a host refused the attempt: {o.refused}", counts_as="failure")

    if o.job == JobPhase.EXITED and o.exit_code == EXIT_BAD_SPEC:
        return Decision(Action.GIVE_UP, "the job's spec or inputs cannot run (exit 2; its log says why): "
                                        "fix the spec and train again", counts_as="failure")

    if o.job == JobPhase.EXITED and o.repeated_failure:
        return Decision(Action.GIVE_UP, f"the job failed twice in a row before its first progress, with the same "
                                        f"error: {o.repeated_failure}; not retried again: fix it and train again",
                        counts_as="failure")

    ready = o.tpu_state == TpuState.READY and o.tpu_health not in UNHEALTHY
    if o.job in (JobPhase.EXITED, JobPhase.LOST) and not ready:
        # decide (and count) once the TPU can take a job again
        return Decision(Action.WAIT, f"the job stopped; waiting for the TPU "
                                     f"({o.tpu_state.value if o.tpu_state else 'missing'}, {o.tpu_health.value})")

    if o.job == JobPhase.EXITED:
        code = o.exit_code
        if o.failures + 1 > o.max_failures:
            return Decision(Action.GIVE_UP, f"the job failed with exit code {code}, and --max-failures "
                                            f"{o.max_failures} is used up", counts_as="failure")
        return Decision(Action.START_JOB, f"the job failed with exit code {code}; restarting it",
                        counts_as="failure")

    if o.job == JobPhase.LOST:
        # The process died without an exit code on a TPU that is still READY and healthy: its host
        # restarted or something killed it. That is an infrastructure event, not a bug in the job.
        if o.max_preemptions is not None and o.preemptions + 1 > o.max_preemptions:
            return Decision(Action.GIVE_UP, "the job vanished without an exit code, and --max-preemptions "
                                            f"{o.max_preemptions} is used up", counts_as="preemption")
        return Decision(Action.START_JOB, "the job vanished without an exit code; restarting it",
                        counts_as="preemption")

    if not ready:
        return Decision(Action.WAIT, f"the TPU is {o.tpu_state.value if o.tpu_state else 'missing'}"
                                     f" ({o.tpu_health.value})")
    if o.job == JobPhase.NOT_STARTED:
        return Decision(Action.START_JOB, "the TPU is READY")
    return Decision(Action.WAIT, "training")


# A job error with no progress source (no step ever reported) counts as early if it came this soon.
EARLY_FAILURE_S = 600.0


def failed_early(*, started_at: float, ended_at: float, progress_at: float | None, reports_progress: bool) -> bool:
    """Whether an attempt failed before its first progress: no step reported since it started, and,
    where the job reports no progress at all, within :data:`EARLY_FAILURE_S` of its start (an hour
    of silent training that then fails is not a program that cannot start)."""
    if progress_at is not None and progress_at >= started_at:
        return False
    return reports_progress or ended_at - started_at <= EARLY_FAILURE_S


def repeated_failure(previous: dict | None, current: dict) -> str | None:
    """The error line when ``current`` (``{"attempt", "error_line", "early"}``) repeats the attempt
    just before it: both failed early with the same error line. None otherwise (a different
    error, a failure after progress, or a preemption between them: that attempt was not a
    failure and breaks the chain)."""
    if not previous or not current.get("early") or not previous.get("early"):
        return None
    line = current.get("error_line")
    if not line or line != previous.get("error_line") or previous.get("attempt") != current.get("attempt", 0) - 1:
        return None
    return str(line)


def _infrastructure_problem(o: Observed) -> str | None:
    if o.tpu_state is None:
        return "the TPU is gone"
    if o.tpu_state in DEAD_TPU_STATES:
        return f"the TPU was {o.tpu_state.value}"
    if o.tpu_state == TpuState.READY and o.tpu_health in UNHEALTHY and o.unhealthy_for_s >= UNHEALTHY_GRACE_S:
        return f"the TPU has been {o.tpu_health.value} for {int(o.unhealthy_for_s)}s"
    if o.job == JobPhase.EXITED and o.exit_code == EXIT_RETRY:
        return "the job exited 42 (preempted or lost its TPU)"
    return None


def outage_key(*, tpu_state: TpuState | None, tpu_health: Health, tpu_created_at: float | None,
               last_tpu_created_at: float | None, attempt: int | None) -> str:
    """What an infrastructure problem hit, so that it is counted once: the TPU incarnation (its
    creation time) when the TPU is dead, unhealthy or gone (gone: the incarnation last seen),
    otherwise the attempt (its job exited 42 or vanished on a healthy TPU)."""
    if tpu_state is None:
        return f"tpu:{last_tpu_created_at}"
    if tpu_state in DEAD_TPU_STATES or (tpu_state == TpuState.READY and tpu_health in UNHEALTHY):
        return f"tpu:{tpu_created_at}"
    return f"attempt:{attempt}"


def hosts_died_with_tpu(tpu_state: TpuState | None, *, job_on_tpu: bool) -> bool:
    """Whether the hosts of an attempt died with its TPU, so that nothing of it can still be at work.

    A TPU that is gone, PREEMPTED or TERMINATED has lost its VMs: the TPU VM workers that ran the
    job (and the local provider's emulated hosts, killed with their "TPU") are dead, and their last
    heartbeats only go stale. Waiting for that before the recreate costs the whole staleness
    window on every preemption. A TPU Node's job runs on the host VM instead (``job_on_tpu``
    false), which the preemption does not touch: that job may still run and must be stopped.
    """
    return job_on_tpu and (tpu_state is None or tpu_state in DEAD_TPU_STATES)


def run_state(*, recovering: bool, job_started: bool) -> str:
    """The state of a live run for ``tpuctl cost`` (``seconds_by_state``), as the supervisor leaves
    it after a look: recovering from an outage is waiting (until the first new step), a job that is
    running or was just started is training, and a run with no job yet is starting."""
    if recovering:
        return "waiting"
    return "training" if job_started else "starting"


def seconds_by_state(state: str, since: float, now: float, resumed_at: float | None = None) -> dict[str, float]:
    """The seconds from the supervisor's last look (``since``) to this one, by state: all of them in
    the state the run was left in then, except when a recovery ended in between, at its first
    new step (``resumed_at``): waiting until then, training after. A first step the supervisor
    notices a look late (``resumed_at`` before ``since``) moves the time already counted as
    waiting since then to training (negative waiting)."""
    if state == "waiting" and resumed_at is not None and resumed_at < now:
        return {"waiting": resumed_at - since, "training": now - resumed_at}
    return {state: max(0.0, now - since)}


def poll_interval(base_s: float, rand: float) -> float:
    """Poll at most every ``base_s`` seconds, with up to 20 % jitter below it (``rand`` in [0, 1))."""
    return base_s * (0.8 + 0.2 * rand)
