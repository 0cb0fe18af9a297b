"""The host agent treats what it reads from the bucket as data: no environment injection."""

import json

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.host.agent import _attempt_number, _checked, run_attempt
from provision.runs.pins import KEY, sha256, updated

SPEC = b"job: bert-finetune\n"            # not runnable: exits 2 at once


def test_command_env_is_limited_to_the_job_keys(tmp_path):
    bucket = local_bucket("agent-test")
    bucket.create("local")
    prefix = "tpuctl/runs/r1-20260101-000000-abcd"
    bucket.write_bytes(f"{prefix}/spec.yaml", SPEC)
    LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur: updated(
        cur, "run", "r1-20260101-000000-abcd", {"cluster": "lab", "spec": sha256(SPEC), "workdir": None}))
    bucket.write_bytes(f"{prefix}/attempts/1/command.json", json.dumps({
        "code": False,
        "env": {"LD_PRELOAD": "/nonexistent/evil.so", "PYTHONSTARTUP": "/nonexistent/evil.py",
                "TPUCTL_DEVICE": "cpu"}}).encode())
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
