"""The supervisor's recovery policy, exhaustively over states, health, exit codes and budgets."""

import itertools

import pytest

from provision.cloud.base import Health, TpuState
from provision.runs.policy import (
    UNHEALTHY_GRACE_S,
    Action,
    JobPhase,
    Observed,
    decide,
    hosts_died_with_tpu,
    outage_key,
    poll_interval,
    run_state,
    seconds_by_state,
)


def obs(**kw):
    base = {"tpu_state": TpuState.READY, "tpu_health": Health.HEALTHY, "job": JobPhase.RUNNING}
    base.update(kw)
    return Observed(**base)


def test_finished_wins_over_everything():
    for state in list(TpuState) + [None]:
        d = decide(obs(tpu_state=state, job=JobPhase.EXITED, exit_code=0))
        assert d.action == Action.FINISH


@pytest.mark.parametrize("state", [None, TpuState.PREEMPTED, TpuState.TERMINATED])
def test_dead_or_missing_tpu_is_recreated_and_counts_as_preemption(state):
    d = decide(obs(tpu_state=state))
    assert d.action == Action.RECREATE_TPU and d.counts_as == "preemption"


def test_exit_42_recreates_the_tpu():
    d = decide(obs(job=JobPhase.EXITED, exit_code=42))
    assert (d.action, d.counts_as) == (Action.RECREATE_TPU, "preemption")


def test_unhealthy_tpu_gets_a_grace_period():
    sick = {"tpu_health": Health.UNHEALTHY_MAINTENANCE}
    assert decide(obs(**sick, unhealthy_for_s=UNHEALTHY_GRACE_S - 1)).action == Action.WAIT
    assert decide(obs(**sick, unhealthy_for_s=UNHEALTHY_GRACE_S)).action == Action.RECREATE_TPU


def test_preemptions_are_unbounded_by_default_and_bounded_on_request():
    assert decide(obs(tpu_state=TpuState.PREEMPTED, preemptions=10_000)).action == Action.RECREATE_TPU
    assert decide(obs(tpu_state=TpuState.PREEMPTED, preemptions=1, max_preemptions=2)).action == Action.RECREATE_TPU
    d = decide(obs(tpu_state=TpuState.PREEMPTED, preemptions=2, max_preemptions=2))
    assert d.action == Action.GIVE_UP and "--max-preemptions 2" in d.reason


def test_job_errors_restart_within_their_budget():
    d = decide(obs(job=JobPhase.EXITED, exit_code=1, failures=0, max_failures=2))
    assert (d.action, d.counts_as) == (Action.START_JOB, "failure")
    assert decide(obs(job=JobPhase.EXITED, exit_code=1, failures=1, max_failures=2)).action == Action.START_JOB
    d = decide(obs(job=JobPhase.EXITED, exit_code=3, failures=2, max_failures=2))
    assert d.action == Action.GIVE_UP and "exit code 3" in d.reason
    assert decide(obs(job=JobPhase.EXITED, exit_code=1, max_failures=0)).action == Action.GIVE_UP


def test_a_job_error_on_a_preempted_tpu_is_a_preemption_not_a_failure():
    # SIGKILL by a preemption leaves exit code -9; the TPU state explains it.
    d = decide(obs(tpu_state=TpuState.PREEMPTED, job=JobPhase.EXITED, exit_code=-9, max_failures=0))
    assert (d.action, d.counts_as) == (Action.RECREATE_TPU, "preemption")


def test_pending_tpu_waits_and_ready_tpu_starts_the_job():
    for state in (TpuState.CREATING, TpuState.REPAIRING, TpuState.RESTARTING, TpuState.STARTING):
        assert decide(obs(tpu_state=state, job=JobPhase.NOT_STARTED)).action == Action.WAIT
    assert decide(obs(job=JobPhase.NOT_STARTED)).action == Action.START_JOB
    assert decide(obs()).action == Action.WAIT


def test_a_spec_that_cannot_run_stops_at_once_whatever_the_failure_budget():
    """Exit 2 on a billed TPU: a retry cannot fix a spec, and each one bills."""
    for failures, budget in ((0, 3), (0, 100), (2, 3)):
        d = decide(obs(job=JobPhase.EXITED, exit_code=2, failures=failures, max_failures=budget))
        assert (d.action, d.counts_as) == (Action.GIVE_UP, "failure")
        assert "fix the spec" in d.reason
    # even while the TPU is still coming back from something else, waiting would not help
    assert decide(obs(tpu_state=TpuState.CREATING, job=JobPhase.EXITED, exit_code=2)).action == Action.GIVE_UP
    # but a TPU that died under the job is still a preemption (the job's exit code says nothing then)
    assert decide(obs(tpu_state=TpuState.PREEMPTED, job=JobPhase.EXITED, exit_code=2)).action == Action.RECREATE_TPU


def test_lost_job_on_healthy_tpu_restarts():
    d = decide(obs(job=JobPhase.LOST))
    assert (d.action, d.counts_as) == (Action.START_JOB, "preemption")


def test_every_combination_yields_a_decision_with_a_reason():
    codes = [None, 0, 1, 2, 42, -9, 137]
    for state, health, job, code in itertools.product(list(TpuState) + [None], list(Health), list(JobPhase), codes):
        d = decide(Observed(tpu_state=state, tpu_health=health, job=job, exit_code=code, unhealthy_for_s=999))
        assert d.reason
        if job == JobPhase.EXITED and code == 0:
            assert d.action == Action.FINISH
        if d.action == Action.START_JOB:
            assert state == TpuState.READY and health not in (Health.TIMEOUT, Health.UNHEALTHY_TENSORFLOW,
                                                               Health.UNHEALTHY_MAINTENANCE)


def test_poll_interval_never_exceeds_the_base():
    assert poll_interval(10, 0.0) == 8.0 and poll_interval(10, 0.999) < 10


def test_multi_host_exit_codes_combine_as_a_group():
    from provision.runs.executors import combine_exits

    assert combine_exits({"w0": {"code": 0}}, expected=2) is None            # still waiting for w1
    assert combine_exits({"w0": {"code": 0}, "w1": {"code": 0}}, expected=2) == 0
    assert combine_exits({"w0": {"code": 0}, "w1": {"code": 1}}, expected=4) == 1   # one failure fails all
    assert combine_exits({"w0": {"code": 1}, "w1": {"code": 42}}, expected=2) == 42  # infrastructure first


def test_a_host_that_cannot_bootstrap_ends_a_waiting_run():
    why = "host bootstrap failed: worker-1 at pip: pip install failed 3 times"
    for job in (JobPhase.RUNNING, JobPhase.LOST):
        d = decide(obs(job=job, blocked=why))
        assert (d.action, d.counts_as) == (Action.GIVE_UP, "failure") and why in d.reason
    # a job that already ended says more than a host's old bootstrap status
    assert decide(obs(job=JobPhase.EXITED, exit_code=0, blocked=why)).action == Action.FINISH
    assert decide(obs(job=JobPhase.EXITED, exit_code=42, blocked=why)).action == Action.RECREATE_TPU


def test_a_host_that_refused_the_attempt_ends_the_run_with_its_reason():
    why = "the code of run lab-1 in the bucket (sha256 0123456789ab) is not the one pinned in this host's metadata"
    d = decide(obs(job=JobPhase.EXITED, exit_code=2, refused=why))
    assert (d.action, d.counts_as) == (Action.GIVE_UP, "failure") and d.reason == f"a host refused the attempt: {why}"
    assert "fix the spec" in decide(obs(job=JobPhase.EXITED, exit_code=2)).reason    # the job's own exit 2


@pytest.mark.parametrize("state", [None, TpuState.PREEMPTED, TpuState.TERMINATED])
def test_an_outage_already_counted_is_recovered_from_again_but_not_counted_again(state):
    d = decide(obs(tpu_state=state, preemptions=1, max_preemptions=1, outage_counted=True))
    assert (d.action, d.counts_as) == (Action.RECREATE_TPU, None)      # not given up: nothing new happened


def test_preemptions_counted_during_a_recovery_beyond_the_budget_give_up():
    d = decide(obs(tpu_state=None, preemptions=2, max_preemptions=1, outage_counted=True))
    assert d.action == Action.GIVE_UP and "--max-preemptions 1" in d.reason


def test_an_outage_is_keyed_by_the_tpu_incarnation_it_hit_or_else_by_the_attempt():
    def key(state, health=Health.HEALTHY, created=2.0, last=1.0, attempt=3):
        return outage_key(tpu_state=state, tpu_health=health, tpu_created_at=created, last_tpu_created_at=last,
                          attempt=attempt)

    assert key(TpuState.PREEMPTED) == "tpu:2.0"
    assert key(None) == "tpu:1.0"                                  # gone: the incarnation last seen
    assert key(TpuState.READY, Health.UNHEALTHY_MAINTENANCE) == "tpu:2.0"
    assert key(TpuState.READY) == "attempt:3"                      # exit 42 or a vanished job


def test_only_a_dead_or_missing_tpu_took_the_hosts_that_ran_on_it():
    """Recovery skips waiting for heartbeats exactly when the hosts cannot be alive: a TPU gone,
    PREEMPTED or TERMINATED, whose job ran on the TPU's own hosts (not a Node's host VM)."""
    for state, on_tpu in itertools.product([*TpuState, None], (True, False)):
        dead = hosts_died_with_tpu(state, job_on_tpu=on_tpu)
        assert dead == (on_tpu and state in (None, TpuState.PREEMPTED, TpuState.TERMINATED)), (state, on_tpu)


def test_time_between_two_looks_counts_in_the_state_the_run_was_left_in():
    assert run_state(recovering=True, job_started=True) == "waiting"
    assert run_state(recovering=False, job_started=True) == "training"
    assert run_state(recovering=False, job_started=False) == "starting"
    assert seconds_by_state("training", 100.0, 110.0) == {"training": 10.0}
    assert seconds_by_state("starting", 100.0, 99.0) == {"starting": 0.0}       # a clock step back
    # a recovery that ended in between: waiting until its first new step, training after
    assert seconds_by_state("waiting", 100.0, 110.0, resumed_at=104.0) == {"waiting": 4.0, "training": 6.0}
    # noticed a look late: the waiting already counted since that step moves to training
    assert seconds_by_state("waiting", 100.0, 110.0, resumed_at=97.0) == {"waiting": -3.0, "training": 13.0}
    assert seconds_by_state("training", 100.0, 110.0, resumed_at=104.0) == {"training": 10.0}


# ---- a job error that repeats before any progress (a missing import, a missing data file) ----------

def test_a_failure_repeating_the_attempt_before_before_any_progress_gives_up_with_its_error_line():
    from provision.runs.policy import repeated_failure

    line = "ModuleNotFoundError: No module named 'numpy_x'"
    first = {"attempt": 1, "error_line": line, "early": True}
    second = {"attempt": 2, "error_line": line, "early": True}
    assert repeated_failure(first, second) == line
    d = decide(Observed(tpu_state=TpuState.READY, job=JobPhase.EXITED, exit_code=1, failures=1,
                        repeated_failure=line))
    assert d.action == Action.GIVE_UP and line in d.reason and d.counts_as == "failure"
    # otherwise the job error is retried within its budget, as before
    for previous, current in [
            (None, second),                                                       # the first failure
            ({**first, "error_line": "OSError: disk full"}, second),             # another error
            ({**first, "early": False}, second),                                 # it trained before
            (first, {**second, "early": False}),
            (first, {**second, "attempt": 3}),                                   # a preemption between
            ({**first, "error_line": None}, {**second, "error_line": None})]:     # nothing to compare
        assert repeated_failure(previous, current) is None


def test_an_attempt_failed_early_when_it_reported_no_step_and_a_silent_one_only_within_ten_minutes():
    from provision.runs.policy import EARLY_FAILURE_S, failed_early

    assert failed_early(started_at=100, ended_at=5000, progress_at=None, reports_progress=True)
    assert not failed_early(started_at=100, ended_at=200, progress_at=150, reports_progress=True)
    assert failed_early(started_at=100, ended_at=200, progress_at=50, reports_progress=True)    # an earlier attempt's
    assert failed_early(started_at=100, ended_at=100 + EARLY_FAILURE_S, progress_at=None, reports_progress=False)
    assert not failed_early(started_at=100, ended_at=101 + EARLY_FAILURE_S, progress_at=None, reports_progress=False)
