"""`job: command`: a program of the user's (plain Python here, so the tests run fast in the main
venv) under the same supervisor as the built-in jobs, on the local provider, through the
installed tpuctl. The program knows nothing of tpuctl but its environment and SIGTERM.

- preempted twice (a TPU lost under it, then a host shutting down: SIGTERM, after which the
  program saves and exits 0, which still counts as a preemption), it resumes from its own
  checkpoints and ends in the state of an uninterrupted run;
- on an emulated 4-host slice with `hosts: all` each worker sees its index, the count and the
  coordinator (the workers meet there, as `jax.distributed.initialize` would), and when one
  worker is killed the group restarts together, each worker with its own part of the checkpoint
  directory back (worker i finds what worker i wrote);
- a program that reports nothing is not idle while it runs; one that ignores SIGTERM is killed
  after the stated grace, and the event log says so;
  a program that fails is retried within --max-failures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.cloud import netns
from tests.conftest import run_tpuctl_process
from tests.e2e.local_runs import home as _home
from tests.e2e.local_runs import latest_run_id as _run_id
from tests.e2e.local_runs import model_dir as _model_dir
from tests.e2e.local_runs import read_json as _read
from tests.e2e.local_runs import start_train as _train
from tests.e2e.local_runs import wait_for as _wait

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("command-e2e")]

# A training loop with its own checkpoints: a state that depends on every step, saved every
# EVERY steps and when SIGTERM comes (then it exits 0: it saved, and thinks itself done).
LOOP = r'''
import json, os, signal, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
state = json.load(open(ckpt)) if os.path.exists(ckpt) else {"step": 0, "x": 1}
steps, every = int(sys.argv[1]), int(sys.argv[2])
notice = []
signal.signal(signal.SIGTERM, lambda *_: notice.append(1))
report = open(os.environ.get("TPUCTL_PROGRESS_FILE", os.devnull), "a", buffering=1)
def save():
    tmp = ckpt + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, ckpt)
    report.write(json.dumps({"checkpoint_step": state["step"]}) + "\n")
with open(os.path.join(d, f"attempt-{os.environ.get('TPUCTL_ATTEMPT', 'x')}.json"), "w") as f:
    json.dump({"ppid": os.getppid(), "resumed_at": state["step"]}, f)
while state["step"] < steps:
    state["x"] = (state["x"] * 31 + state["step"]) % 1000003
    state["step"] += 1
    time.sleep(0.03)
    report.write(json.dumps({"step": state["step"], "loss": 1.0 / state["step"]}) + "\n")
    if state["step"] % every == 0 or notice:
        save()
    if notice:
        sys.exit(0)
save()
report.write(json.dumps({"step": state["step"], "metrics": {"x": state["x"]}}) + "\n")
'''

STEPS, EVERY = 120, 10


def test_a_program_preempted_twice_resumes_from_its_own_checkpoints_to_the_state_of_an_uninterrupted_run(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(LOOP)
    (work / "spec.yaml").write_text(f'job: command\ncommand: [python, train.py, "{STEPS}", "{EVERY}"]\n'
                                    f"num_train_steps: {STEPS}\n")
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, str(work / "train.py"), str(STEPS), str(EVERY)], check=True,
                   env={**os.environ, "TPUCTL_MODEL_DIR": str(straight)})

    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = _train("lab", "--job", str(work / "spec.yaml"))      # the workdir: the spec's directory
    run_id = _wait(_run_id, proc=proc)
    model = _model_dir(run_id)
    # 1. the TPU is lost under the program (no notice): it resumes from its last periodic checkpoint
    _wait(lambda: _read(model / "state.json").get("step", 0) >= 2 * EVERY, proc=proc)
    assert run_tpuctl_process("simulate", "preempt", "lab", "--no-notice").code == 0
    # 2. the host shuts down: its agent passes SIGTERM on; the program saves and exits 0
    second = _wait(lambda: _read(model / "attempt-1.json"), proc=proc)
    assert second["resumed_at"] >= 2 * EVERY and second["resumed_at"] % EVERY == 0
    _wait(lambda: _read(model / "state.json").get("step", 0) >= second["resumed_at"] + 2 * EVERY, proc=proc)
    os.kill(second["ppid"], signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    run = json.loads(out)["run"]
    assert (run["status"], run["last_progress"]["step"], run["preemptions"], run["attempts"], run["failures"]) == \
        ("finished", STEPS, 2, 3, 0), err[-3000:]
    third = _read(model / "attempt-2.json")
    assert third["resumed_at"] > second["resumed_at"] + EVERY    # it saved at the notice, not only every EVERY
    assert _read(model / "state.json") == _read(straight / "state.json")
    # the exit after SIGTERM was the program's own 0, recorded as a preemption (42)
    ended = json.loads((_home() / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "attempts" /
                        "2" / "exit-0.json").read_text())
    assert (ended["code"], ended["program_code"], ended["after_sigterm"]) == (42, 0, True)
    events = run_tpuctl_process("logs", run_id, "--events").out
    assert events.count(" preempted ") == 2 and events.count(" resumed ") == 2, events
    # what the program reported is what status and sweeps read
    progress = _read(model / "progress.json")
    assert progress["status"] == "finished" and progress["metrics"] == {"x": _read(straight / "state.json")["x"]}
    assert progress["checkpoint_step"] == STEPS and progress["run_id"] == run_id


# Each worker of a slice: meet at the coordinator (worker 0 listens, the others connect and say
# who they are), record what it saw, then train its own share with a checkpoint of its own.
SLICE = r'''
import json, os, socket, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
i, n = int(os.environ["TPUCTL_WORKER_INDEX"]), int(os.environ["TPUCTL_NUM_WORKERS"])
host, port = os.environ["TPUCTL_COORDINATOR"].rsplit(":", 1)
own = os.environ["TPUCTL_CHECKPOINT_DIR"]
found = {name: open(os.path.join(own, name)).read() for name in sorted(os.listdir(own))}
with open(os.path.join(own, "mine"), "w") as f:
    f.write(f"worker {i} attempt {os.environ['TPUCTL_ATTEMPT']}")
met = []
if i == 0:
    with socket.create_server((host, int(port))) as srv:
        srv.settimeout(60)
        for _ in range(n - 1):
            conn, _addr = srv.accept()
            met.append(int(conn.recv(16)))
            conn.close()
else:
    for _ in range(600):
        try:
            with socket.create_connection((host, int(port)), timeout=1) as c:
                c.sendall(str(i).encode())
            break
        except OSError:
            time.sleep(0.1)
seen = {k: os.environ.get(k) for k in ("TPUCTL_WORKER_INDEX", "TPUCTL_NUM_WORKERS", "TPUCTL_COORDINATOR",
                                       "TPUCTL_ATTEMPT", "TPUCTL_RUN", "TPUCTL_ACCELERATOR_TYPE")}
with open(os.path.join(d, f"seen-{os.environ['TPUCTL_ATTEMPT']}-{i}.json"), "w") as f:
    json.dump({"env": seen, "met": sorted(met), "pid": os.getpid(), "found": found}, f)
ckpt = os.path.join(d, f"worker-{i}.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
while step < int(sys.argv[1]):
    step += 1
    time.sleep(0.05)
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
'''


@pytest.mark.skipif(not netns.available(), reason="this machine makes no network namespace for an emulated slice")
def test_on_an_emulated_four_host_slice_every_worker_runs_the_program_and_the_group_restarts_together(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "worker.py").write_text(SLICE)
    (work / "spec.yaml").write_text('job: command\ncommand: [python, worker.py, "60"]\nhosts: all\n')
    assert run_tpuctl_process("up", "pod", "--accelerator-type", "v2-32").code == 0
    proc = _train("pod", "--job", str(work / "spec.yaml"), "--max-failures", "1")
    run_id = _wait(_run_id, proc=proc)
    model = _model_dir(run_id)

    def whole() -> list[dict] | None:
        """Each worker's record once all are whole (a file that exists may still be being written),
        and each worker's checkpoint file kept in the bucket (a scan's upload: the survivors of a
        failed worker are stopped without a final one)."""
        got = [_read(model / f"seen-0-{i}.json") for i in range(4)]
        kept = all((model / "checkpoint-dir" / f"worker-{i}" / "mine").exists() for i in range(4))
        return got if all(got) and kept else None

    first = _wait(whole, proc=proc)
    os.kill(first[2]["pid"], signal.SIGKILL)          # one worker dies: the whole group starts again
    out, err = proc.communicate(timeout=180)
    run = json.loads(out)["run"]
    assert (run["status"], run["attempts"], run["failures"], run["preemptions"]) == ("finished", 2, 1, 0), err[-3000:]
    for attempt, seen in ((0, first), (1, [_read(model / f"seen-1-{i}.json") for i in range(4)])):
        coordinator = seen[0]["env"]["TPUCTL_COORDINATOR"]
        assert coordinator.startswith("127.0.0.1:")
        assert [s["env"] for s in seen] == [
            {"TPUCTL_WORKER_INDEX": str(i), "TPUCTL_NUM_WORKERS": "4", "TPUCTL_COORDINATOR": coordinator,
             "TPUCTL_ATTEMPT": str(attempt), "TPUCTL_RUN": run_id, "TPUCTL_ACCELERATOR_TYPE": "v2-32"}
            for i in range(4)]
        assert seen[0]["met"] == [1, 2, 3]            # every worker reached worker 0 at the coordinator
        # each worker's checkpoint directory: empty at first, then its own part of the last attempt
        assert [s["found"] for s in seen] == [{} if attempt == 0 else {"mine": f"worker {i} attempt 0"}
                                              for i in range(4)]
    # no program of the first attempt outlived it: the survivors were stopped before the restart
    for s in first:
        with pytest.raises(ProcessLookupError):
            os.kill(s["pid"], 0)
    assert all(_read(model / f"worker-{i}.json")["step"] == 60 for i in range(4))
    assert [(model / "checkpoint-dir" / f"worker-{i}" / "mine").read_text() for i in range(4)] == \
        [f"worker {i} attempt 1" for i in range(4)]


IGNORES_SIGTERM = r'''
import json, os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.environ["TPUCTL_PROGRESS_FILE"], "a") as f:
    f.write(json.dumps({"step": 1}) + "\n")
time.sleep(600)
'''


def test_a_program_that_ignores_sigterm_is_killed_after_the_stated_grace_and_the_event_log_says_so(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "stubborn.py").write_text(IGNORES_SIGTERM)
    (work / "spec.yaml").write_text("job: command\ncommand: [python, stubborn.py]\nstop_grace_seconds: 2\n")
    assert run_tpuctl_process("up", "lab").code == 0
    proc = _train("lab", "--job", str(work / "spec.yaml"), "--on-interrupt", "stop")
    run_id = _wait(_run_id, proc=proc)
    log = _home() / "host" / "work" / run_id / "0" / "attempt-1-0.log"
    _wait(lambda: _read(_model_dir(run_id) / "progress.json").get("pid"), proc=proc)   # it runs
    assert "running python stubborn.py in the workdir, in a process group of its own (SIGTERM to the group is the " \
           "preemption notice: 2 s to save and exit, then SIGKILL)" in log.read_text()
    # it reports nothing more, yet its live process is the run's heartbeat: never idle while it runs
    progress = _model_dir(run_id) / "progress.json"
    _wait(lambda: _read(progress).get("time", 0) > _read(progress).get("started_at", 1e18) + 10, proc=proc)
    reaper = run_tpuctl_process("down", "--idle", "--idle-for", "7s", "--dry-run", "--json")  # it beats every 5 s
    [verdict] = [n for n in reaper.json()["nodes"] if n["cluster"] == "lab"]
    assert verdict["verdict"] != "delete" and verdict["run_id"] == run_id, verdict
    started = time.time()
    proc.send_signal(signal.SIGINT)                  # Ctrl-C, --on-interrupt stop: the attempt is stopped
    out, err = proc.communicate(timeout=120)
    assert json.loads(out)["run"]["status"] == "stopped", err[-3000:]
    assert time.time() - started < 30                # killed after its 2 s, not after the supervisor's wait
    events = run_tpuctl_process("logs", run_id, "--events").out
    assert "program_killed" in events and "did not exit within 2 s of SIGTERM: killed (SIGKILL)" in events, events
    assert "did not exit within 2 s of SIGTERM" in run_tpuctl_process("logs", run_id).out


def test_a_program_that_fails_is_retried_within_max_failures_then_the_run_stops(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    # a different error each time: the same one twice before any progress stops at once (test_command_programs)
    (work / "fails.py").write_text("import os, sys\nprint('out of luck', os.environ['TPUCTL_ATTEMPT'], flush=True)\n"
                                   "sys.exit(3)\n")
    (work / "spec.yaml").write_text("job: command\ncommand: [python, fails.py]\n")
    assert run_tpuctl_process("up", "lab").code == 0
    r = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--max-failures", "1", "--poll", "1",
                           "--json", timeout=120)
    assert r.code == 1, r.err
    run = r.json()["run"]
    assert (run["status"], run["attempts"], run["failures"]) == ("gave_up", 2, 2)
    assert "the job failed with exit code 3, and --max-failures 1 is used up" in run["reason"]
    assert "out of luck" in run_tpuctl_process("logs", run["run_id"]).out


SCORE = r'''
import json, os, sys
lr = float(sys.argv[1])
assert json.loads(os.environ["TPUCTL_PARAMS"])["lr"] == lr
with open(os.environ["TPUCTL_PROGRESS_FILE"], "a") as f:
    for step in (1, 2):
        f.write(json.dumps({"step": step, "metrics": {"score": -(lr - 0.3) ** 2 * step}}) + "\n")
'''


def test_a_sweep_over_a_command_spec_passes_each_trials_params_and_optimises_what_the_program_reports(tmp_path):
    """The trials run in the sweep's workdir (staged once, by digest: the job spec's directory
    here, and the program named relative to it), their params reach the program as {params.lr}
    and TPUCTL_PARAMS, and the metric is what the program reported."""
    work = tmp_path / "prog"
    work.mkdir()
    (work / "score.py").write_text(SCORE)
    (work / "job.yaml").write_text("job: command\ncommand: [python, score.py, '{params.lr}']\nparams: {lr: 0.1}\n"
                                   "metrics: [score]\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"job: {work / 'job.yaml'}\nmetric: score\ngoal: maximize\nmethod: grid\n"
                     "parameters:\n  params.lr: {values: [0.1, 0.3]}\n")
    (tmp_path / "bad.yaml").write_text(sweep.read_text().replace("metric: score", "metric: accuracy"))
    bad = run_tpuctl_process("sweep", str(tmp_path / "bad.yaml"), "--dry-run")
    assert bad.code == 2 and "metric 'accuracy' is never reported by this job" in bad.err, bad.err
    assert "use one of loss, score" in bad.err
    r = run_tpuctl_process("sweep", str(sweep), "--poll", "1", "--json", timeout=180)
    assert r.code == 0, r.err[-3000:]
    doc = r.json()
    assert doc["best"]["params"] == {"params.lr": 0.3} and doc["best"]["metric"] == 0.0, doc


def _wheel(directory: Path, value: str) -> Path:
    """A wheel of the one-module package tinydep, made by hand (what pip reads of one)."""
    import zipfile

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tinydep-1.0-py3-none-any.whl"
    files = {"tinydep/__init__.py": f"VALUE = {value!r}\n",
             "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
             "tinydep-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n"}
    files["tinydep-1.0.dist-info/RECORD"] = "".join(f"{name},,\n" for name in files) + \
        "tinydep-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def test_requirements_reach_the_program_from_the_buckets_wheelhouse_and_a_swapped_wheel_is_refused(tmp_path):
    """`requirements:` is resolved into wheels where train runs (here from a local index, as pip
    is told by PIP_FIND_LINKS), staged beside the run and pinned by their digests; the host
    installs exactly those. A bucket writer who swaps the wheel gets the attempt refused."""
    from provision.cloud.storage import local_bucket
    from provision.runs import wheelhouse

    index = tmp_path / "index"
    _wheel(index, "from the wheelhouse")
    work = tmp_path / "prog"
    work.mkdir()
    (work / "requirements.txt").write_text("tinydep==1.0\n")
    (work / "use.py").write_text("import os, tinydep\nopen(os.path.join(os.environ['TPUCTL_MODEL_DIR'], 'v'), 'w')"
                                 ".write(tinydep.VALUE)\n")
    (work / "spec.yaml").write_text("job: command\ncommand: [python, use.py]\nrequirements: requirements.txt\n")
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}
    assert run_tpuctl_process("up", "lab").code == 0
    r = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1", "--json", env=env,
                           timeout=180)
    assert r.code == 0, r.err[-3000:]
    run = r.json()["run"]
    assert (Path(run["model_dir"]) / "v").read_text() == "from the wheelhouse"
    assert "staged the run's requirements: 1 wheel(s)" in r.err
    # a host with nothing installed yet (a recreated TPU VM) installs the pinned wheels from the bucket;
    # a wheel swapped there by a bucket writer is refused, with what was swapped
    bucket = local_bucket("tpuctl-local")
    [manifest] = [p.stem for p in (bucket.root / wheelhouse.PREFIX).glob("*.json")]
    site = wheelhouse.install(bucket, manifest, tmp_path / "fresh-host", log=lambda _m: None)
    assert (site / "tinydep" / "__init__.py").read_text() == "VALUE = 'from the wheelhouse'\n"
    [obj] = list((bucket.root / wheelhouse.PREFIX).rglob("*.whl"))
    obj.write_bytes(_wheel(tmp_path / "evil", "from the attacker").read_bytes())
    with pytest.raises(ValueError, match="wheel tinydep-1.0-py3-none-any.whl in the bucket is not the one pinned"):
        wheelhouse.install(bucket, manifest, tmp_path / "another-host", log=lambda _m: None)
    assert not (tmp_path / "another-host" / "site").exists()
