"""`tpuctl simulate preempt` does what the cloud does, on the local provider: the notice first
(SIGTERM to the program through its attempt wrapper, as the host agent passes on the metadata
server's `instance/preempted`), then the power-off after the grace period. A program that saves
on SIGTERM has saved, says so in its own log, and its run resumes from there and finishes,
counted as one preemption. `--no-notice` and `--grace 0` are the hard kill: no SIGTERM, the run
resumes from the last periodic checkpoint. All through the installed tpuctl.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("command-e2e")]

# A training loop as people write it: a checkpoint every EVERY steps, and one when SIGTERM comes.
PROGRAM = r'''
import json, os, signal, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
steps, every = int(sys.argv[1]), int(sys.argv[2])
print(f"resumed at step {step}", flush=True)
def save():
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
def term(*_):
    save()
    print(f"saved at step {step}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
report = open(os.environ["TPUCTL_PROGRESS_FILE"], "a", buffering=1)
while step < steps:
    time.sleep(0.05)
    step += 1
    report.write(json.dumps({"step": step}) + "\n")
    if step % every == 0:
        save()
save()
'''
STEPS, EVERY = 160, 50
# the power-off, seen first by the command or by the supervisor that recovers the run
GONE = ("TPU lab in us-central1-b is now PREEMPTED (",
        "TPU lab in us-central1-b is already being recreated by its supervisor: the job exited after the notice")


def _home() -> Path:
    return Path(os.environ["TPUCTL_HOME"])


def _state(run_id: str) -> dict:
    path = _home() / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "model" / "state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _run_id() -> str | None:
    runs = sorted((_home() / "runs").glob("*.json")) if (_home() / "runs").is_dir() else []
    return json.loads(runs[-1].read_text())["run_id"] if runs else None


def _wait(what, proc: subprocess.Popen, timeout: float = 60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = what()
        if got:
            return got
        assert proc.poll() is None, f"tpuctl train ended first: {proc.stderr.read()[-3000:]}"
        time.sleep(0.05)
    raise AssertionError("timed out")


def _train_and_preempt(tmp_path: Path, *flags: str) -> tuple[dict, str, str]:
    """Train, preempt once the program is past its first periodic checkpoint; (the run, the
    simulate command's output, the program's log)."""
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text(f'job: command\ncommand: [python, train.py, "{STEPS}", "{EVERY}"]\n'
                                    f"num_train_steps: {STEPS}\n")
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1",
                             "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = _wait(_run_id, proc)
    _wait(lambda: _state(run_id).get("step", 0) >= EVERY, proc)
    time.sleep(0.5)                                     # a few steps past the checkpoint
    sim = run_tpuctl_process("simulate", "preempt", "lab", *flags)
    assert sim.code == 0, sim.err
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["last_progress"]["step"], run["preemptions"], run["attempts"]) == \
        ("finished", STEPS, 1, 2), err[-3000:]
    return run, sim.out, run_tpuctl_process("logs", run_id).out


def test_the_notice_lets_the_program_save_then_the_tpu_goes_and_the_run_resumes_from_the_save(tmp_path):
    started = time.monotonic()
    run, said, log = _train_and_preempt(tmp_path, "--grace", "3")
    lines = said.splitlines()
    assert lines[-2] == ("TPU lab in us-central1-b: preemption notice given; its job gets SIGTERM and has 3 s "
                         "to save before the power-off"), said
    # the power-off, once the program had saved and exited (or the grace had passed)
    assert lines[-1].startswith(GONE), said
    saved = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("saved at step ")]
    resumed = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("resumed at step ")]
    assert len(saved) == 1 and saved[0] % EVERY != 0, log     # saved at the notice, between checkpoints
    assert resumed == [0, saved[0]], log                      # and resumed from exactly there
    assert "exited with code 42 (the program's own: 0, after SIGTERM)" in log, log
    events = run_tpuctl_process("logs", run["run_id"], "--events").out
    assert events.count(" preempted ") == 1 and events.count(" resumed ") == 1, events
    assert time.monotonic() - started < 90


@pytest.mark.parametrize("flags", [["--no-notice"], ["--grace", "0"]], ids=["no-notice", "grace-0"])
def test_without_a_notice_the_program_is_killed_at_once_and_resumes_from_its_last_checkpoint(tmp_path, flags):
    _run, said, log = _train_and_preempt(tmp_path, *flags)
    assert said.splitlines()[-1] == ("TPU lab in us-central1-b is now PREEMPTED "
                                     "(no notice: its job was killed at once)"), said
    assert "saved at step" not in log, log                      # no SIGTERM reached it
    resumed = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("resumed at step ")]
    assert resumed[-1] >= EVERY and resumed[-1] % EVERY == 0, log    # from its last periodic checkpoint
    assert not _programs_left(), "the killed attempt's program outlived its TPU"


def _programs_left() -> list[int]:
    """This test's programs still running (the program runs in a session of its own, apart from
    its attempt wrapper: the power-off must take it too)."""
    left = []
    for entry in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if cwd.startswith(str(_home())) and b"train.py" in cmd:
            left.append(int(entry))
    return left


def test_bad_grace_is_refused_before_anything_happens(tmp_path):
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    for flags, says in ((["--grace", "-1"], "--grace -1 is not a number of seconds"),
                        (["--no-notice", "--grace", "5"], "--no-notice kills at once")):
        r = run_tpuctl_process("simulate", "preempt", "lab", *flags)
        assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err
    st = run_tpuctl_process("status", "--json").json()["clusters"][0]
    assert st["tpu"]["state"] == "READY"
