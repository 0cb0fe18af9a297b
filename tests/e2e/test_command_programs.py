"""Programs as people write them, under `tpuctl train` on the local provider (through the installed
tpuctl): a shell command line with `$TPUCTL_*` variables (run by `bash -c`), a shell that starts
its program without `exec`, and what a program leaves running when it ends.

The job runs in a process group of its own: the notice reaches the program a shell started, and
nothing the program started outlives its attempt (holding the accelerator, writing to the model
directory), whether it ignores SIGTERM or not.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from provision.basics.procs import alive
from tests.conftest import run_tpuctl_process
from tests.e2e.local_runs import home, latest_run_id, start_train, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("command-e2e")]

# The program leaves two processes behind: one that would go on SIGTERM, one that ignores it.
RUN = r'''
sleep 300 &
echo "left $!"
python -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print("ready", flush=True); time.sleep(300)' &
echo "stubborn $!"
sleep 0.5
python train.py --out-dir "$TPUCTL_CHECKPOINT_DIR" --lr {params.lr}
'''

TRAIN = r'''
import argparse, os
p = argparse.ArgumentParser()
p.add_argument("--out-dir")
p.add_argument("--lr", type=float)
a = p.parse_args()
print(f"out_dir={a.out_dir} lr={a.lr} model_dir={os.environ['TPUCTL_MODEL_DIR']}", flush=True)
with open(os.path.join(a.out_dir, "ckpt.txt"), "w") as f:
    f.write("done")
'''


def test_a_shell_string_gets_its_variables_and_what_the_program_left_running_is_gone_after_its_attempt(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    (work / "spec.yaml").write_text("job: command\ncommand: |\n" + "".join(f"  {line}\n" for line in
                                                                         RUN.strip().splitlines())
                                    + "params: {lr: 0.5}\n")
    assert run_tpuctl_process("up", "lab").code == 0
    started = time.monotonic()
    r = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--json", timeout=120)
    assert r.code == 0, r.err[-3000:]
    run = r.json()["run"]
    assert run["status"] == "finished"
    log = run_tpuctl_process("logs", run["run_id"]).out
    line = next(x for x in log.splitlines() if x.startswith("out_dir="))
    out_dir, lr, model_dir = (part.split("=", 1)[1] for part in line.split())
    assert lr == "0.5" and out_dir.endswith("/checkpoint-dir") and model_dir == run["model_dir"].replace(
        "gs://tpuctl-local", str(Path(os.environ["TPUCTL_HOME"]) / "local" / "buckets" / "tpuctl-local"))
    # the file the program wrote into its checkpoint directory is kept under the model directory
    kept = Path(model_dir) / "checkpoint-dir" / "worker-0" / "ckpt.txt"
    assert kept.read_text() == "done"
    left = int(next(x for x in log.splitlines() if x.startswith("left ")).split()[1])
    stubborn = int(next(x for x in log.splitlines() if x.startswith("stubborn ")).split()[1])
    assert not alive(left) and not alive(stubborn)
    assert "2 process(es) the job started were still running after it exited: killed after the grace period" in log
    assert time.monotonic() - started < 60


def test_a_program_that_fails_the_same_way_before_any_progress_stops_at_once_and_names_the_ignored_file(tmp_path):
    """A data file its own .gitignore leaves out: two attempts, the exception line in train's
    output and in the events, the ignored file named with how to ship it; not four attempts of
    the same traceback, each billing a TPU."""
    work = tmp_path / "prog"
    (work / "data").mkdir(parents=True)
    (work / "data" / "train.csv").write_text("1,2\n")
    (work / ".gitignore").write_text("data/\n*.log\n")
    (work / "train.py").write_text("print('loading data', flush=True)\nopen('data/train.csv').read()\n")
    (work / "spec.yaml").write_text("job: command\ncommand: [python, train.py]\n")
    assert run_tpuctl_process("up", "lab").code == 0
    r = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1", timeout=120)
    assert r.code == 1
    assert "left out of the workdir: .gitignore (a dot path), data/ (ignored by .gitignore)" in r.err, r.err
    assert "  | FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'" in r.err, r.err
    assert ("its output names data/, which the workdir left out (ignored by .gitignore): add the line !data/ to the "
            "workdir's .tpuctlignore to ship it") in r.err
    last = r.err.strip().splitlines()[-1]
    assert last.startswith("tpuctl: error: run ") and ("the job failed twice in a row before its first progress, "
                                                       "with the same error: FileNotFoundError: ") in last, last
    status = run_tpuctl_process("status", "lab", "--json").json()
    run_id = r.err.split("run ", 1)[1].split()[0].rstrip(":")
    events = run_tpuctl_process("logs", run_id, "--events").out
    assert events.count("attempt_started") == 2 and 'error_line="FileNotFoundError: ' in events, events
    assert status["clusters"][0]["tpu"]["state"] == "READY"
    # shipped with a !data/ line, the same program runs
    (work / ".tpuctlignore").write_text("!data/\n")
    assert run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1", timeout=120).code == 0


SLOW = r'''
import os, sys, time
d = os.environ["TPUCTL_CHECKPOINT_DIR"]
ckpt = os.path.join(d, "it")
it = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
while it < 400:
    time.sleep(0.05)
    it += 1
    print(f"iter {it}: loss {1 / it:.4f}", flush=True)
    if it % 10 == 0:
        with open(ckpt, "w") as f:
            f.write(str(it))
'''


def test_simulate_preempt_at_step_waits_for_the_runs_step_and_says_so(tmp_path):
    """A toy program finishes before one can type the next command; --at-step rehearses the
    preemption once the run has reported step N, after a checkpoint, not before its first step."""
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(SLOW)
    (work / "spec.yaml").write_text("job: command\ncommand: [python, train.py]\nnum_train_steps: 400\n"
                                    "progress_pattern: 'iter (?P<step>\\d+): loss (?P<loss>[\\d.]+)'\n")
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    bad = run_tpuctl_process("simulate", "preempt", "lab", "--at-step", "30")
    assert bad.code == 2 and bad.err.strip().splitlines()[-1] == (
        "tpuctl: error: --at-step 30: no run of cluster lab is known on this machine; start one first (tpuctl "
        "train lab --job SPEC --detach), or drop --at-step"), bad.err
    assert run_tpuctl_process("simulate", "preempt", "lab", "--at-step", "0").code == 2
    started = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--detach", "--poll", "1")
    assert started.code == 0, started.err
    sim = run_tpuctl_process("simulate", "preempt", "lab", "--at-step", "30", "--grace", "5", timeout=180)
    assert sim.code == 0, sim.err
    assert sim.out.splitlines()[0].startswith("waiting for run lab-") and " to reach step 30 (now at " in sim.out
    run_id = sim.out.split("waiting for run ", 1)[1].split()[0]
    events = ""
    deadline = time.monotonic() + 180
    while "finished" not in events and time.monotonic() < deadline:
        time.sleep(1)
        events = run_tpuctl_process("logs", run_id, "--events").out
    preempted = next(line for line in events.splitlines() if " preempted " in line)
    assert int(preempted.split(" step=", 1)[1].split()[0]) >= 30, events
    resumed = next(line for line in events.splitlines() if " resumed " in line)
    assert int(resumed.split(" step=", 1)[1].split()[0]) >= 30, events       # from its own checkpoint
    assert "finished" in events


# Started by a shell that stays its parent (a second command after it: no exec), it saves its step
# into its checkpoint directory on SIGTERM ("save") or ignores SIGTERM ("ignore").
GRANDCHILD = r'''
import json, os, signal, sys, time
ckpt = os.path.join(os.environ["TPUCTL_CHECKPOINT_DIR"], "step")
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
print(f"pid {os.getpid()} parent {os.getppid()} resumed at step {step}", flush=True)
def save(*_):
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
    print(f"saved at step {step}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save if sys.argv[1] == "save" else signal.SIG_IGN)
report = open(os.environ["TPUCTL_PROGRESS_FILE"], "a", buffering=1)
while step < 80:
    time.sleep(0.05)
    step += 1
    report.write(json.dumps({"step": step}) + "\n")
'''


def _preempt_a_shells_child(tmp_path: Path, mode: str, grace_s: int) -> tuple[str, str, str]:
    """Train ``bash -c 'python prog.py MODE; echo after'``, give the notice once the program runs;
    (the run id, the program's log, what it printed first in attempt 1)."""
    work = tmp_path / "prog"
    work.mkdir()
    (work / "prog.py").write_text(GRANDCHILD)
    (work / "spec.yaml").write_text(f"job: command\ncommand: 'python prog.py {mode}; echo after'\n"
                                    f"num_train_steps: 80\nstop_grace_seconds: {grace_s}\n")
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = start_train("lab", "--job", str(work / "spec.yaml"))
    try:
        run_id = wait_for(latest_run_id, proc=proc)
        log = home() / "host" / "work" / run_id / "0" / "attempt-1-0.log"
        first = wait_for(lambda: next((x for x in (log.read_text() if log.exists() else "").splitlines()
                                       if x.startswith("pid ")), None), proc=proc)
        parent = Path(f"/proc/{first.split()[3]}/comm").read_text().strip()
        assert parent == "bash", f"the program's parent is {parent}, not the shell that started it"
        time.sleep(0.5)                                   # a few steps in
        sim = run_tpuctl_process("simulate", "preempt", "lab", "--grace", "3")
        assert sim.code == 0, sim.err
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["attempts"]) == ("finished", 1, 2), err[-3000:]
    return run_id, run_tpuctl_process("logs", run_id).out, first


def test_the_notice_reaches_a_program_its_shell_did_not_exec_and_what_it_saved_is_resumed_from(tmp_path):
    _run_id, log, _first = _preempt_a_shells_child(tmp_path, "save", 10)
    saved = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("saved at step ")]
    resumed = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("pid ")]
    assert len(saved) == 1 and saved[0] > 0, log                # the shell's child got SIGTERM and saved
    assert resumed == [0, saved[0]], log                         # kept in the bucket, restored, resumed from
    assert "exited with code 42" in log and "after SIGTERM" in log, log


def test_a_program_its_shell_did_not_exec_that_ignores_the_notice_is_killed_at_the_grace_end(tmp_path):
    run_id, log, first = _preempt_a_shells_child(tmp_path, "ignore", 1)
    assert not alive(int(first.split()[1])), "the shell's child outlived its attempt"
    assert "did not exit within 1 s of SIGTERM: killed (SIGKILL)" in log, log
    events = run_tpuctl_process("logs", run_id, "--events").out
    assert "program_killed" in events and "did not exit within 1 s of SIGTERM" in events, events
