"""Goodput of a `job: command` program that reports progress only by printing it (`progress_pattern:`),
on the local provider through the installed tpuctl, preempted twice: once with the notice
(`tpuctl simulate preempt --grace 3`: it takes a second to save, then exits), once hard
(`--no-notice`: steps redone). Its goodput and every category sum to the wall time and match the
event log and the hosts' exit records to the millisecond; the host agent dates each step by when
it first saw the line (a look every half second), not by its 5-second beat, so the second spent
saving inside the notice is the notice's (`checkpoint_save`), not training; and the run's startup
(and `up`'s) is broken down by phase in `status NAME` and `cost RUN`."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time

import pytest

from provision.host.agent import STEP_LOOK_S
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.e2e.local_runs import home, latest_run_id, model_dir, read_json, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("command-e2e")]

# prints its step with the time it printed it; a checkpoint every EVERY steps; after SIGTERM it
# takes SAVE_S to save, then exits
PROGRAM = r'''
import json, os, signal, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
steps, every, save_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def save():
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
def term(*_):
    time.sleep(save_s)
    save()
    print("saved at step", step, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print(f"resuming at {step}", flush=True)
while step < steps:
    time.sleep(0.1)
    step += 1
    print(f"iter {step}: loss {10.0 / step:.4f} at {time.time():.3f}", flush=True)
    if step % every == 0:
        save()
save()
'''
STEPS, EVERY, SAVE_S = 200, 40, 1.0      # steps enough that a beat lands past a checkpoint
PATTERN = r"iter (?P<step>\d+): loss (?P<loss>[\d.]+)"
LINE = re.compile(r"^iter (\d+): loss [\d.]+ at ([\d.]+)$")


def _step(run_id: str) -> int:
    return read_json(model_dir(run_id) / "state.json").get("step", 0)


def _run_dir(run_id: str):
    return home() / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id


def _reported(run_id: str) -> int:
    """The step the run's progress.json says (the agent writes it at its beat)."""
    return read_json(model_dir(run_id) / "progress.json").get("step") or 0


def _printed(run_id: str, n: int) -> dict[int, float]:
    """When attempt ``n``'s program printed each step, by its own clock (its log on the host: the
    bucket's copy is uploaded at the beat, and a hard kill loses the last lines of it)."""
    text = (home() / "host" / "work" / run_id / "0" / f"attempt-{n}-0.log").read_text()
    return {int(m[1]): float(m[2]) for m in (LINE.match(x) for x in text.splitlines()) if m}


def test_a_pattern_programs_goodput_matches_its_events_and_its_steps_are_dated_finer_than_the_beat(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text(f'job: command\ncommand: [python, train.py, "{STEPS}", "{EVERY}", "{SAVE_S}"]\n'
                                    f"progress_pattern: '{PATTERN}'\nnum_train_steps: {STEPS}\n"
                                    "stop_grace_seconds: 10\n")
    up = run_tpuctl_process("up", "lab", "--preemptible", "--json")
    assert up.code == 0, up.err
    assert {p["phase"] for p in up.json()["startup"]["phases"]} >= {"look and plan", "TPU asked for to created",
                                                                     "TPU created to READY"}
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1",
                             "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = wait_for(latest_run_id, proc=proc)
    wait_for(lambda: _step(run_id) >= EVERY, proc=proc)
    time.sleep(0.3)
    assert run_tpuctl_process("simulate", "preempt", "lab", "--grace", "3").code == 0       # saves in the notice
    # steps reported past a checkpoint: they are redone
    wait_for(lambda: _step(run_id) >= 2 * EVERY and _reported(run_id) > _step(run_id) + 2, timeout=120, proc=proc)
    assert run_tpuctl_process("simulate", "preempt", "lab", "--no-notice").code == 0
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["attempts"]) == ("finished", 2, 3), err[-3000:]

    cost = json.loads(run_tpuctl_process("cost", run_id, "--json").out)
    (r,) = cost["clusters"][0]["runs"]
    g = r["goodput"]
    cats = {k: c["seconds"] for k, c in g["categories"].items()}
    assert g["wall_s"] == pytest.approx(run["ended_at"] - run["created_at"], abs=0.01)
    assert sum(cats.values()) == pytest.approx(g["wall_s"], abs=0.01)
    assert cats["goodput"] > 0 and cats["provisioning"] > 0 and cats["program_startup"] > 0, json.dumps(g)
    segs = g["segments"]
    assert (segs[0][0], segs[-1][1]) == (pytest.approx(run["created_at"], abs=0.001),
                                         pytest.approx(run["ended_at"], abs=0.001))
    assert all(a[1] == b[0] for a, b in itertools.pairwise(segs))     # they tile the wall

    # ---- the events say the same -----------------------------------------------------------------
    events = [json.loads(x) for x in (_run_dir(run_id) / "events.jsonl").read_text().splitlines() if x.strip()]
    by = {}
    for e in events:
        by.setdefault(e["event"], []).append(e)
    exit1 = read_json(_run_dir(run_id) / "attempts" / "1" / "exit-0.json")
    assert exit1["after_sigterm"] and exit1["code"] == 42 and set(exit1["startup"]) >= {"began", "program_started"}
    first, second = g["preemptions"]
    for pre, seen, rec, nxt in zip((first, second), by["preempted"], by["recreated"], by["attempt_started"][1:],
                                   strict=True):
        ph = {p["phase"]: p for p in pre["phases"]}
        assert pre["detected_at"] == pytest.approx(seen["time"], abs=0.001)
        assert ph["seen to recreate started"]["from"] == pytest.approx(seen["time"], abs=0.001)
        assert ph["recreate"]["to"] == pytest.approx(rec["time"], abs=0.001)
        assert ph["recreate"]["seconds"] == pytest.approx(rec["seconds"], abs=0.1)
        assert ph["recreated to attempt started"]["to"] == pytest.approx(nxt["time"], abs=0.001)
        assert ph["host bootstrap"]["from"] == pytest.approx(nxt["time"], abs=0.001)
        assert pre["recovery_s"] == pytest.approx(ph["program start and restore to first step"]["to"] - seen["time"],
                                                  abs=0.001)
    assert first["notice"] is True and first["checkpointed_in_notice"] is True and first["steps_redone"] == 0
    ph1 = {p["phase"]: p for p in first["phases"]}
    assert ph1["job exit to preemption seen"]["from"] == pytest.approx(exit1["time"], abs=0.001)
    (resumed1, resumed2) = by["resumed"]
    assert second["notice"] is False and second["steps_redone"] == resumed2["steps_lost"] > 0
    assert second["resumed_step"] == resumed2["step"] and first["resumed_step"] == resumed1["step"]

    # ---- steps dated by when the agent first saw their lines, not by its 5 s beat ------------------
    slack = STEP_LOOK_S + 0.5           # a look, and the scheduler's share of two shared cores
    printed = _printed(run_id, 1)
    p1 = by["preempted"][0]
    assert 0 <= p1["first_step_at"] - printed[1] <= slack, (p1, printed[1])
    assert 0 <= p1["step_at"] - printed[p1["step"]] <= slack, (p1, printed[p1["step"]])
    # the notice came after the last step; the program spent SAVE_S saving: the notice's, not training
    assert ph1["last step to job exit"]["seconds"] >= SAVE_S - slack
    assert cats["checkpoint_save"] == pytest.approx(ph1["last step to job exit"]["seconds"], abs=0.01)
    printed2 = _printed(run_id, 2)
    p2 = by["preempted"][1]
    assert 0 <= p2["step_at"] - printed2[p2["step"]] <= slack, (p2, printed2[p2["step"]])
    assert 0 <= ph1["program start and restore to first step"]["to"] - printed2[min(printed2)] <= slack

    # ---- the first attempt's startup, phase by phase, from `train` to its first step -----------------
    s = r["startup"]
    assert s == g["startup"] and s["first_step_at"] == pytest.approx(p1["first_step_at"], abs=0.001)
    chain = [p for p in s["phases"] if "part_of" not in p]
    assert [p["phase"] for p in chain] == ["run created to staged", "staged to attempt started",
                                           "attempt started to taken up by the host", "spec and workdir fetched",
                                           "checkpoint directory restored", "to program start",
                                           "program start to first step"], s
    assert all(p["recorded"] for p in chain) and chain[0]["from"] == pytest.approx(run["created_at"], abs=0.001)
    assert all(a["to"] == b["from"] for a, b in itertools.pairwise(chain))
    assert s["to_first_step_s"] == pytest.approx(sum(p["seconds"] for p in chain), abs=0.01)
    assert chain[1]["to"] == pytest.approx(by["attempt_started"][0]["time"], abs=0.001)
    assert chain[2]["to"] == exit1["startup"]["began"] and chain[4]["to"] == exit1["startup"]["checkpoint_restore"][1]
    assert chain[5]["to"] == exit1["startup"]["program_started"]

    text = run_tpuctl_process("cost", run_id).out
    assert f"  startup {''}" in text and " to the first step: run created to staged " in text, text
    shown = run_tpuctl_process("status", "lab")
    assert "  startup " in shown.out and "lab: a recreate after a preemption on this machine at " in shown.out, \
        shown.out
    st = json.loads(run_tpuctl_process("status", "lab", "--json").out)["clusters"][0]
    assert st["run"]["startup"]["to_first_step_s"] == pytest.approx(s["to_first_step_s"], abs=0.001)
    assert st["startup"]["by"] == "a recreate after a preemption" and st["startup"]["phases"]
