"""The idle policy with the duty-cycle signal, and the run view the reaper builds (pure, no I/O)."""

from provision.billing.idle import DutyCycle, RunView, judge, view_of
from provision.cloud.base import Arch, Health, TpuNode, TpuState

NOW = 1_000_000.0
HOUR = 3600.0
IDLE = 1800.0


def node(state=TpuState.READY, created=NOW - 10 * HOUR, **labels):
    return TpuNode(name="n", zone="us-central1-b", arch=Arch.VM, accelerator_type="v2-8", state=state,
                   health=Health.HEALTHY, preemptible=True, created_at=created,
                   labels={"tpuctl-cluster": "n", **labels})


def run(status="running", heartbeat=NOW - 60, ended=None, sup=NOW - 5):
    return RunView("r1", status, heartbeat_at=heartbeat, ended_at=ended, supervisor_heartbeat_at=sup)


def samples(value_at, start=NOW - 2 * HOUR, step=60.0):
    """One sample a minute from ``start`` to NOW, valued by ``value_at(t)``."""
    out, t = [], start
    while t <= NOW:
        out.append((t, float(value_at(t))))
        t += step
    return DutyCycle(tuple(out))


def test_without_duty_samples_the_progress_record_decides():
    for duty in (None, DutyCycle(())):
        assert judge(node(), None, now=NOW, idle_for=IDLE, duty=duty, min_duty_cycle=5).delete
        assert not judge(node(), run(), now=NOW, idle_for=IDLE, duty=duty, min_duty_cycle=5).delete
    # and a duty table without --min-duty-cycle changes nothing
    busy = samples(lambda t: 90)
    assert judge(node(), None, now=NOW, idle_for=IDLE, duty=busy).delete


def test_a_busy_tpu_with_no_run_is_kept_while_its_duty_cycle_is_high():
    busy_recently = samples(lambda t: 80 if t > NOW - 600 else 0)
    v = judge(node(), None, now=NOW, idle_for=IDLE, duty=busy_recently, min_duty_cycle=5)
    assert not v.delete and "duty cycle reached 5%" in v.reason and "outside tpuctl" in v.reason
    # busy only before the window: idle
    busy_long_ago = samples(lambda t: 80 if t < NOW - IDLE - 60 else 1)
    assert judge(node(), None, now=NOW, idle_for=IDLE, duty=busy_long_ago, min_duty_cycle=5).delete


def test_a_reporting_run_whose_tpu_does_nothing_is_idle():
    flat = samples(lambda t: 0.5)
    v = judge(node(), run(), now=NOW, idle_for=IDLE, duty=flat, min_duty_cycle=5)
    assert v.delete and "reports progress, but the TPU's duty cycle stayed under 5%" in v.reason
    working = samples(lambda t: 70)
    assert not judge(node(), run(), now=NOW, idle_for=IDLE, duty=working, min_duty_cycle=5).delete
    # it stopped computing only 10 minutes ago: not yet
    stopped = samples(lambda t: 70 if t < NOW - 600 else 0)
    assert not judge(node(), run(), now=NOW, idle_for=IDLE, duty=stopped, min_duty_cycle=5).delete


def test_low_duty_needs_samples_covering_the_whole_window_and_an_old_enough_node():
    short = samples(lambda t: 0, start=NOW - 600)         # Monitoring has 10 minutes only
    assert not judge(node(), run(), now=NOW, idle_for=IDLE, duty=short, min_duty_cycle=5).delete
    young = node(created=NOW - 900)                         # XLA compiling on a fresh TPU
    assert not judge(young, run(), now=NOW, idle_for=IDLE, duty=samples(lambda t: 0), min_duty_cycle=5).delete


def test_duty_never_overrides_keep_dead_or_pending():
    flat, busy = samples(lambda t: 0), samples(lambda t: 99)
    assert not judge(node(**{"tpuctl-keep": "true"}), run(), now=NOW, idle_for=IDLE, duty=flat,
                     min_duty_cycle=5).delete
    assert judge(node(TpuState.PREEMPTED), None, now=NOW, idle_for=IDLE, duty=busy, min_duty_cycle=5).delete
    creating = node(TpuState.CREATING, created=NOW - 3 * HOUR)
    assert not judge(creating, run("recovering", heartbeat=NOW - 3 * HOUR), now=NOW, idle_for=IDLE, duty=flat,
                     min_duty_cycle=5).delete


def test_duty_cycle_helpers():
    d = DutyCycle(((10.0, 3.0), (20.0, 50.0), (30.0, 4.0)))
    assert d.last_busy(5) == 20.0 and d.last_busy(60) is None
    assert d.first == 10.0 and d.latest == (30.0, 4.0)


# ---- view_of: what the reaper makes of run.json, progress.json and supervisor.json ----------------

def record(**kw):
    base = {"run_id": "r1", "status": "running", "ended_at": None, "last_progress": {"time": NOW - 300}}
    base.update(kw)
    return base


def test_view_takes_the_newest_heartbeat_of_this_run_only():
    v = view_of(record(), {"run_id": "r1", "time": NOW - 10, "status": "running"}, None)
    assert v.heartbeat_at == NOW - 10 and v.live and v.supervisor_heartbeat_at is None
    stale_file = view_of(record(), {"run_id": "r1", "time": NOW - 900, "status": "running"}, None)
    assert stale_file.heartbeat_at == NOW - 300
    other_run = view_of(record(), {"run_id": "r0", "time": NOW - 1, "status": "running"}, None)
    assert other_run.heartbeat_at == NOW - 300
    nothing = view_of({"run_id": "r2", "status": "starting"}, None, None)
    assert nothing.heartbeat_at is None and nothing.ended_at is None


def test_a_final_progress_record_ends_the_run_before_the_supervisor_notices():
    v = view_of(record(), {"run_id": "r1", "time": NOW - 100, "status": "finished"}, None)
    assert v.ended_at == NOW - 100
    later = view_of(record(status="finished", ended_at=NOW - 90), {"run_id": "r1", "time": NOW - 100,
                                                                   "status": "finished"}, None)
    assert later.ended_at == NOW - 100 and not later.live
    # the job ended at its final write: the TPU has been idle since then
    verdict = judge(node(), v, now=NOW, idle_for=60)
    assert verdict.delete and verdict.idle_since == NOW - 100


def test_a_released_lease_vouches_for_nothing():
    live = view_of(record(), None, {"heartbeat_at": NOW - 4, "owner": "x"})
    assert live.supervisor_heartbeat_at == NOW - 4
    released = view_of(record(), None, {"heartbeat_at": NOW - 4, "released": True})
    assert released.supervisor_heartbeat_at is None
    # a preempted node is kept only while a live supervisor is about to recreate it
    dead = node(TpuState.PREEMPTED)
    assert not judge(dead, view_of(record(status="recovering"), None, {"heartbeat_at": NOW - 4}),
                     now=NOW, idle_for=IDLE).delete
    assert judge(dead, view_of(record(status="recovering"), None, {"heartbeat_at": NOW - 4, "released": True}),
                 now=NOW, idle_for=IDLE).delete
