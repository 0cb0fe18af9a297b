"""The host agent treats what it reads from the bucket as data: no environment injection."""

import json

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.host.agent import _attempt_number, _checked, run_attempt
from provision.runs.pins import KEY, launch_digest, sha256, updated

SPEC = b"job: bert-finetune\n"            # not runnable: exits 2 at once


RUN = "r1-20260101-000000-abcd"
PREFIX = f"tpuctl/runs/{RUN}"


def _pinned_run(command: dict, *, launch: dict | None = None):
    """A run pinned on this (local) host with the launch of ``launch`` (default: ``command``), and
    ``command`` in the bucket as its attempt 1: what a bucket writer may have replaced."""
    bucket = local_bucket("agent-test")
    if not bucket.exists():
        bucket.create("local")
    bucket.write_bytes(f"{PREFIX}/spec.yaml", SPEC)
    LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur: updated(
        cur, "run", RUN, {"cluster": "lab", "spec": sha256(SPEC), "workdir": None,
                          "launch": launch_digest(launch if launch is not None else command)}))
    bucket.write_bytes(f"{PREFIX}/attempts/1/command.json", json.dumps(command).encode())
    return bucket


def test_command_env_is_limited_to_the_job_keys(tmp_path):
    command = {"code": False, "env": {"LD_PRELOAD": "/nonexistent/evil.so", "PYTHONSTARTUP": "/nonexistent/evil.py",
                                      "TPUCTL_DEVICE": "cpu"}}
    bucket = _pinned_run(command)        # even a launch pinned as it is passes only the job's keys
    prefix = PREFIX
    code = run_attempt("gs://agent-test", "local", "local", "r1-20260101-000000-abcd", 1, "0", "lab",
                       workdir=tmp_path / "work")
    assert code == 2
    log = bucket.read_bytes(f"{prefix}/attempts/1/log-0.txt").decode()
    assert "tpuctl: error" in log and "refused" not in log       # the job ran, and exited 2 itself
    assert "ld.so" not in log and "evil" not in log
    assert json.loads(bucket.read_bytes(f"{prefix}/attempts/1/exit-0.json"))["code"] == 2


def test_run_ids_and_attempts_from_the_bucket_are_checked():
    assert _checked("lab-20261122-114348-a07a") == "lab-20261122-114348-a07a"
    for bad in ("../../etc", "a b", "x;rm -rf /", "", None, 7, "A"):
        assert _checked(bad) is None
    assert _attempt_number(3) == 3
    for bad in (0, -1, "3", True, 1.5, None, 10**9):
        assert _attempt_number(bad) is None


def test_run_attempt_gives_back_the_signal_handlers_it_borrowed(tmp_path):
    import signal

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    test_command_env_is_limited_to_the_job_keys(tmp_path)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# What a bucket writer did in round 1's review: TPUCTL_DEVICE=cpu and a TF_CONFIG naming this host, so
# that the built-in job starts TensorFlow's gRPC server on every interface on a port of the writer's
# choosing (reading and writing files as root for whoever reaches it), or TPU_NAME pointing the
# job's TPU client at the writer's server. The launch is pinned: none of it reaches a job.
TAMPERED = [
    {"TPUCTL_DEVICE": "cpu", "TF_CONFIG": json.dumps({"cluster": {"worker": ["0.0.0.0:2222", "10.0.0.9:2222"]},
                                                      "task": {"type": "worker", "index": 0}})},
    {"TPU_NAME": "grpc://203.0.113.7:8470"},
    {"TPUCTL_COORDINATOR": "203.0.113.7:8482", "TPUCTL_WORKER_INDEX": "0", "TPUCTL_NUM_WORKERS": "2"},
]


def test_a_bucket_writers_command_cannot_change_where_the_job_runs_or_listens(tmp_path, monkeypatch):
    from provision.host import agent

    monkeypatch.setattr(agent, "LAUNCH_PIN_WAITS", (0.01,))        # no metadata propagation to wait for here
    planned = {"code": False, "env": {"TPUCTL_ACCELERATOR_TYPE": "v2-8", "TPUCTL_DEVICE": "gpu"},
               "workers": {"0": {"run": True, "env": {"TPUCTL_ACCELERATOR_TYPE": "v2-8"}}}}
    for env in TAMPERED:
        for where in ("env", "worker"):
            tampered = json.loads(json.dumps(planned))
            (tampered["env"] if where == "env" else tampered["workers"]["0"]["env"]).update(env)
            bucket = _pinned_run(tampered, launch=planned)
            code = run_attempt("gs://agent-test", "local", "local", RUN, 1, "0", "lab", workdir=tmp_path / "work")
            assert code == 2
            log = bucket.read_bytes(f"{PREFIX}/attempts/1/log-0.txt").decode()
            assert log.startswith("[tpuctl] refused: the launch of run ") and \
                "its command.json (where the job runs and listens) is not what tpuctl pinned" in log, log
            exit_record = json.loads(bucket.read_bytes(f"{PREFIX}/attempts/1/exit-0.json"))
            assert exit_record["code"] == 2 and "refused" in exit_record
    # a worker's role too: one told to run that the plan kept idle (or the reverse)
    flipped = json.loads(json.dumps(planned))
    flipped["workers"]["0"]["run"] = False
    _pinned_run(flipped, launch=planned)
    assert run_attempt("gs://agent-test", "local", "local", RUN, 1, "0", "lab", workdir=tmp_path / "work") == 2
    # a launch pinned by an older tpuctl that pinned none is refused, not trusted
    bucket = _pinned_run(planned)
    LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur: updated(
        cur, "run", RUN, {"cluster": "lab", "spec": sha256(SPEC), "workdir": None}))
    assert run_attempt("gs://agent-test", "local", "local", RUN, 1, "0", "lab", workdir=tmp_path / "work") == 2
    assert "has no pinned launch" in bucket.read_bytes(f"{PREFIX}/attempts/1/log-0.txt").decode()
    # the planned command itself runs: the job starts (and exits 2 on its unrunnable spec)
    bucket = _pinned_run(planned)
    assert run_attempt("gs://agent-test", "local", "local", RUN, 1, "0", "lab", workdir=tmp_path / "work") == 2
    log = bucket.read_bytes(f"{PREFIX}/attempts/1/log-0.txt").decode()
    assert "refused" not in log and "tpuctl: error" in log, log


def test_the_launch_digest_is_of_the_environment_and_roles_not_of_key_order_or_the_attempt():
    a = {"env": {"A": "1", "B": "2"}, "workers": {"0": {"run": True, "env": {"X": "y"}}}, "attempt": 1}
    b = {"attempt": 7, "workers": {"0": {"env": {"X": "y"}, "run": True}}, "env": {"B": "2", "A": "1"}}
    assert launch_digest(a) == launch_digest(b)
    assert launch_digest(a) != launch_digest({**a, "env": {"A": "1", "B": "3"}})
    assert launch_digest(a) != launch_digest({**a, "workers": {"0": {"run": False, "env": {"X": "y"}}}})
