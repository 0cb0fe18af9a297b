"""The reaper's idle policy: what a user would expect to be deleted, and what never is."""

from provision.billing.idle import RunView, judge
from provision.cloud.base import Arch, Health, TpuNode, TpuState

NOW = 1_000_000.0
HOUR = 3600.0


def node(state=TpuState.READY, created=NOW - 10 * HOUR, **labels):
    return TpuNode(name="n", zone="us-central1-b", arch=Arch.VM, accelerator_type="v2-8", state=state,
                   health=Health.HEALTHY, preemptible=True, created_at=created,
                   labels={"tpuctl-cluster": "n", **labels})


def run(status="running", heartbeat=NOW - 60, ended=None, sup=NOW - 5):
    return RunView("r1", status, heartbeat_at=heartbeat, ended_at=ended, supervisor_heartbeat_at=sup)


def test_a_training_tpu_is_kept():
    v = judge(node(), run(), now=NOW, idle_for=1800)
    assert not v.delete and "training" in v.reason


def test_no_run_is_idle_since_creation():
    assert judge(node(created=NOW - 3600), None, now=NOW, idle_for=1800).delete
    fresh = judge(node(created=NOW - 60), None, now=NOW, idle_for=1800)
    assert not fresh.delete and "no run attached" in fresh.reason


def test_finished_and_failed_runs_are_idle_since_they_ended():
    for status in ("finished", "failed", "gave_up"):
        v = judge(node(), run(status, ended=NOW - 1900, heartbeat=NOW - 1900), now=NOW, idle_for=1800)
        assert v.delete and status in v.reason and v.idle_since == NOW - 1900
    assert not judge(node(), run("finished", ended=NOW - 100), now=NOW, idle_for=1800).delete


def test_a_run_whose_heartbeat_stopped_is_idle():
    v = judge(node(), run(heartbeat=NOW - 2 * HOUR, sup=NOW - 2 * HOUR), now=NOW, idle_for=1800)
    assert v.delete and "has not reported progress" in v.reason


def test_preempted_nodes_go_unless_a_live_supervisor_recreates_them():
    for state in (TpuState.PREEMPTED, TpuState.TERMINATED):
        assert judge(node(state), None, now=NOW, idle_for=1800).delete
        assert judge(node(state), run("recovering", sup=NOW - 300), now=NOW, idle_for=1800).delete
        kept = judge(node(state), run("recovering", sup=NOW - 10), now=NOW, idle_for=1800)
        assert not kept.delete and "recreating" in kept.reason


def test_keep_label_and_deleting_nodes_are_never_touched():
    assert not judge(node(TpuState.PREEMPTED, **{"tpuctl-keep": "true"}), None, now=NOW, idle_for=0).delete
    assert not judge(node(TpuState.DELETING), None, now=NOW, idle_for=0).delete


def test_creating_node_of_a_live_run_is_kept():
    v = judge(node(TpuState.CREATING, created=NOW - 3 * HOUR), run("recovering", heartbeat=NOW - 3 * HOUR),
              now=NOW, idle_for=1800)
    assert not v.delete


def test_a_job_that_has_not_reported_yet_is_vouched_for_by_its_supervisor():
    v = judge(node(created=NOW - 3 * HOUR), run("starting", heartbeat=None, sup=NOW - 3), now=NOW, idle_for=1800)
    assert not v.delete


def test_the_lease_is_skipped_only_where_no_verdict_depends_on_it():
    """A fleet's reaper does not read a run's supervisor lease where ``needs_supervisor`` says the
    verdict cannot depend on it: for every state, run status, heartbeat, idle window and keep label,
    judging with any lease (fresh, stale, released) gives the verdict judging without it gives."""
    import itertools

    from provision.billing.idle import needs_supervisor

    skipped = 0
    for state, status, beat, ended, created, keep in itertools.product(
            TpuState, ("starting", "running", "recovering", "finished", "failed", "gave_up", "stopped"),
            (None, NOW - 60, NOW - 2 * HOUR), (None, NOW - 100, NOW - 2 * HOUR), (NOW - 60, NOW - 10 * HOUR),
            (False, True)):
        n = node(state, created, **({"tpuctl-keep": "true"} if keep else {}))
        without = run(status, heartbeat=beat, ended=ended, sup=None)
        if needs_supervisor(n, without):
            continue
        skipped += 1
        want = judge(n, without, now=NOW, idle_for=1800)
        for sup in (NOW - 5, NOW - 300, NOW - 2 * HOUR):
            assert judge(n, run(status, heartbeat=beat, ended=ended, sup=sup), now=NOW, idle_for=1800) == want, \
                (state, status, beat, ended, created, keep, sup)
    assert skipped > 1000      # the common case (a READY TPU whose job reports) reads no lease
    # where it decides, it is read: a PREEMPTED TPU whose supervisor recreates it, a run not yet reporting
    assert needs_supervisor(node(TpuState.PREEMPTED), run())
    assert needs_supervisor(node(TpuState.CREATING), run())
    assert needs_supervisor(node(), run(heartbeat=None))
    assert not needs_supervisor(node(), run())


def test_the_progress_file_is_skipped_only_where_no_verdict_depends_on_it():
    """A fleet's reaper does not read a job's progress file where ``needs_progress`` says the verdict
    cannot depend on it (a live run whose record shows progress well inside --idle-for): for every
    state, run status, record heartbeat, progress file (none, newer, final, another run's, older)
    and lease, judging with the file gives the delete/keep judging without it gives."""
    import itertools

    from provision.billing.idle import needs_progress, view_of

    skipped = 0
    files = (None, {"run_id": "r1", "time": NOW - 5, "status": "running"},
             {"run_id": "r1", "time": NOW - 5, "status": "finished"},
             {"run_id": "r1", "time": NOW - 1700, "status": "failed"},
             {"run_id": "other", "time": NOW - 5, "status": "running"})
    for state, status, beat, ended, idle_for, lease, keep in itertools.product(
            TpuState, ("starting", "running", "recovering", "finished", "failed", "stopped"),
            (None, NOW - 30, NOW - 1700, NOW - 2 * HOUR), (None, NOW - 100), (0.0, 120.0, 1800.0),
            (None, {"heartbeat_at": NOW - 5}, {"heartbeat_at": NOW - 2 * HOUR}), (False, True)):
        n = node(state, NOW - 10 * HOUR, **({"tpuctl-keep": "true"} if keep else {}))
        record = {"run_id": "r1", "status": status, "ended_at": ended,
                  "last_progress": {"time": beat} if beat else None}
        if needs_progress(view_of(record), now=NOW, idle_for=idle_for):
            continue
        skipped += 1
        want = judge(n, view_of(record, None, lease), now=NOW, idle_for=idle_for).delete
        for f in files[1:]:
            if f["run_id"] == "r1" and beat and f["time"] < beat:
                continue    # a job's file is never older than the record's copy of it
            assert judge(n, view_of(record, f, lease), now=NOW, idle_for=idle_for).delete == want, \
                (state, status, beat, ended, idle_for, lease, keep, f)
    assert skipped > 200        # the common case (a live run reporting) reads no progress file
    live = {"run_id": "r1", "status": "running", "last_progress": {"time": NOW - 30}}
    assert not needs_progress(view_of(live), now=NOW, idle_for=1800)
    # where it can decide, it is read: an ended run, one not reporting yet, a quiet one, --idle-for 0
    assert needs_progress(view_of({**live, "status": "finished"}), now=NOW, idle_for=1800)
    assert needs_progress(view_of({**live, "last_progress": None}), now=NOW, idle_for=1800)
    assert needs_progress(view_of({**live, "last_progress": {"time": NOW - 1790}}), now=NOW, idle_for=1800)
    assert needs_progress(view_of(live), now=NOW, idle_for=0)


def test_a_fleet_is_judged_in_shares_in_its_own_order():
    """The reaper's shares (provision/billing/reaper.py) give every cluster's verdict back in the
    fleet's order, whatever the fleet's size against the number of shares."""
    from concurrent.futures import ThreadPoolExecutor

    from provision.billing import reaper

    with ThreadPoolExecutor(4) as pool:
        for n in (0, 1, 3, reaper.SHARES - 1, reaper.SHARES, reaper.SHARES + 1, 2001):
            items = list(range(n))
            assert reaper.in_shares(pool, lambda x: x * 10, items) == [x * 10 for x in items]
