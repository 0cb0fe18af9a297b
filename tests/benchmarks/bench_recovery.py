"""Recovery from preemption, on the local provider with a real (tiny) BERT pretraining run.

Two paths, each under a fixed schedule (preemptions at steps 150 and 400 of 600):

- ``attached``: ``tpuctl train`` supervising in the foreground, model_dir a local directory;
- ``detached``: the README tour's path: the checkpoint staged into a bucket, ``tpuctl train
  --detach`` (a supervisor process of its own, its job started by the host agent's attempt
  wrapper), model_dir in the bucket.

and a third, ``command``: a ``job: command`` program that knows nothing of tpuctl (nanoGPT's
shape: ``ckpt`` file in its ``out_dir``, which the spec points at ``$TPUCTL_CHECKPOINT_DIR``; its
progress read from the ``iter N: loss X`` line it prints), preempted *with the notice* (``tpuctl
simulate preempt``: SIGTERM, the program ends, its files are uploaded, the TPU goes), timed from
the notice to the program's first new iteration by the program's own clock.

For the BERT paths:

- recovery time: from the preemption to the first training step of the new attempt, and the
  same minus the provider's delete + create time (what tpuctl itself adds: detection within one
  poll, restart of the job, TensorFlow start-up, checkpoint restore);
- goodput: useful training time (the same run without preemptions, measured side by side in this
  script) over the time the preempted run took from start to finish (what a TPU would bill);
- the reference a tool without resume gets (ctpu, which restarts from step 0): its goodput,
  computed from the same measured baseline and schedule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = 600
CKPT = 50
SCHEDULE = (150, 400)
POLL_S = float(os.environ.get("BENCH_RECOVERY_POLL", "10"))
CREATE_S = 5.0


def _env(home: Path) -> dict:
    return {**os.environ, "TPUCTL_HOME": str(home), "TPUCTL_CONFIG": str(home / "c.toml"), "TPUCTL_PROVIDER": "local",
            "TPUCTL_LOCAL_TPU_CREATE_SECONDS": str(CREATE_S), "TPUCTL_LOCAL_DELETE_SECONDS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2"}


def _tpuctl(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], check=False, env=_env(home), cwd=REPO, capture_output=True,
                          text=True)


def _progress(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _train_args(tiny: str, model: str) -> list[str]:
    return ["train", "bench", "--job", "templates/bert-pretrain-tiny.yaml",
            "--set", f"bert_dir={tiny}", "--set", f"corpus_files={tiny}/corpus.txt", "--set", f"model_dir={model}",
            "--set", f"num_train_steps={STEPS}", "--set", f"save_checkpoints_steps={CKPT}",
            "--set", "steps_per_execution=10", "--poll", str(POLL_S), "--json"]


def _inject(home: Path, model: Path, pending: list[int], injected: list[float]) -> None:
    """Preempt the TPU once the current attempt has reached the next scheduled step."""
    p = _progress(model / "progress.json")
    due = pending and p.get("status") == "running" and (p.get("step") or 0) >= pending[0] and \
        (not injected or (p.get("started_at") or 0) > injected[-1])
    # the hard kill: what is measured is the recovery from a TPU lost at once, as in earlier runs
    if due and _tpuctl(home, "simulate", "preempt", "bench", "--no-notice").returncode == 0:
        injected.append(time.time())
        pending.pop(0)


def _run(home: Path, tiny: Path, preempt_at: tuple[int, ...]) -> dict:
    """The attached path: ``tpuctl train`` supervises in the foreground."""
    assert _tpuctl(home, "up", "bench", "--preemptible").returncode == 0
    model = home / "model"
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "provision", *_train_args(str(tiny), str(model))], env=_env(home),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    injected: list[float] = []
    pending = list(preempt_at)
    while proc.poll() is None:
        time.sleep(0.2)
        _inject(home, model, pending, injected)
    out, err = proc.communicate()
    end = time.time()
    if proc.returncode != 0:
        raise RuntimeError(err[-1000:])
    run = json.loads(out)["run"]
    events = [json.loads(line) for line in
              (home / "local/buckets/tpuctl-local/tpuctl/runs" / run["run_id"] / "events.jsonl").read_text().splitlines()]
    _tpuctl(home, "down", "bench")
    return {"wall_s": end - start, "run": run, "events": events, "injected": injected}


def _run_detached(home: Path, tiny: Path, preempt_at: tuple[int, ...]) -> dict:
    """The README tour's path: staged into a bucket, ``train --detach``, model_dir in the bucket."""
    assert _tpuctl(home, "up", "bench", "--preemptible").returncode == 0
    staged = _tpuctl(home, "stage", str(tiny), "gs://bench-bucket/bert/tiny", "--create-bucket")
    assert staged.returncode == 0, staged.stderr
    bucket = home / "local/buckets/bench-bucket"
    start = time.time()
    r = _tpuctl(home, *_train_args("gs://bench-bucket/bert/tiny", "gs://bench-bucket/model"), "--detach",
                "--bucket", "gs://bench-bucket")
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-1000:])
    run_dir = bucket / "tpuctl/runs" / json.loads(r.stdout)["run_id"]
    injected: list[float] = []
    pending = list(preempt_at)
    deadline = time.time() + 1800
    while time.time() < deadline:
        time.sleep(0.2)
        run = _progress(run_dir / "run.json")
        if run.get("status") in ("finished", "failed", "gave_up", "stopped"):
            break
        _inject(home, bucket / "model", pending, injected)
    if run.get("status") != "finished":
        raise RuntimeError(f"detached run ended {run.get('status')}: {run.get('reason')}")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    _tpuctl(home, "down", "bench")
    return {"wall_s": float(run["ended_at"]) - start, "run": run, "events": events, "injected": injected}


# the command row's program: every iteration's wall time goes to a side file the benchmark reads
PROGRAM = r'''
import argparse, json, os, time
p = argparse.ArgumentParser()
p.add_argument("--out_dir"); p.add_argument("--wall"); p.add_argument("--max_iters", type=int)
p.add_argument("--eval_interval", type=int); p.add_argument("--sleep", type=float)
a = p.parse_args()
ckpt = os.path.join(a.out_dir, "ckpt.json")
it = json.load(open(ckpt))["iter_num"] if os.path.exists(ckpt) else 0
print(f"resuming from iteration {it}" if it else "from scratch", flush=True)
wall = open(a.wall, "a", buffering=1)
while it < a.max_iters:
    time.sleep(a.sleep)
    it += 1
    wall.write(json.dumps({"iter": it, "time": time.time(), "attempt": os.environ["TPUCTL_ATTEMPT"]}) + "\n")
    print(f"iter {it}: loss {1.0 / it:.4f}", flush=True)
    if it % a.eval_interval == 0:
        with open(ckpt, "w") as f:
            json.dump({"iter_num": it}, f)
'''
COMMAND_ITERS, COMMAND_EVERY, COMMAND_SLEEP = 600, 50, 0.05


def _walls(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def _run_command(home: Path) -> dict:
    """The command row: a program's own checkpoint file, preempted with the notice at SCHEDULE."""
    work = home / "prog"
    work.mkdir(parents=True)
    wall = home / "wall.jsonl"
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text(
        "job: command\n"
        f"command: python train.py --out_dir \"$TPUCTL_CHECKPOINT_DIR\" --wall {wall} --max_iters {COMMAND_ITERS} "
        f"--eval_interval {COMMAND_EVERY} --sleep {COMMAND_SLEEP}\n"
        "progress_pattern: 'iter (?P<step>\\d+): loss (?P<loss>[\\d.]+)'\n"
        f"num_train_steps: {COMMAND_ITERS}\n")
    assert _tpuctl(home, "up", "bench", "--preemptible").returncode == 0
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "provision", "train", "bench", "--job", str(work / "spec.yaml"),
                             "--workdir", str(work), "--poll", str(POLL_S), "--json"], env=_env(home), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pending, notices = list(SCHEDULE), []
    while proc.poll() is None:
        time.sleep(0.1)
        seen = _walls(wall)
        if pending and seen and seen[-1]["iter"] >= pending[0] and (not notices or seen[-1]["time"] > notices[-1]):
            notices.append(time.time())
            if _tpuctl(home, "simulate", "preempt", "bench").returncode != 0:
                notices.pop()
                continue
            pending.pop(0)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(err[-1000:])
    run = json.loads(out)["run"]
    seen = _walls(wall)
    recoveries = []
    for n, notice in enumerate(notices):
        before = [w for w in seen if w["time"] <= notice]
        after = [w for w in seen if w["time"] > notice and int(w["attempt"]) > n]
        first = after[0] if after else None
        recoveries.append({
            "notice_at_iter": before[-1]["iter"] if before else None,
            "resumed_at_iter": first["iter"] - 1 if first else None,
            "notice_to_first_new_iter_s": round(first["time"] - notice, 2) if first else None,
            "iters_lost": before[-1]["iter"] - (first["iter"] - 1) if before and first else None})
    _tpuctl(home, "down", "bench")
    times = [r["notice_to_first_new_iter_s"] for r in recoveries if r["notice_to_first_new_iter_s"] is not None]
    return {"recoveries": recoveries, "mean_notice_to_first_new_iter_s": round(sum(times) / max(1, len(times)), 2),
            "wall_s": round(time.time() - start, 1), "preemptions": run["preemptions"],
            "finished_at_step": (run.get("last_progress") or {}).get("step"),
            "useful_s": round(COMMAND_ITERS * COMMAND_SLEEP, 1)}


def _recoveries(preempted: dict) -> list[dict]:
    out = []
    ev = preempted["events"]
    recreated = [e for e in ev if e["event"] == "recreated"]
    resumed = [e for e in ev if e["event"] == "resumed"]
    detected = [e for e in ev if e["event"] == "preempted"]
    for inj, det, rec, res in zip(preempted["injected"], detected, recreated, resumed):
        first_new_step = det["time"] + res["seconds_lost"]
        total = first_new_step - inj
        out.append({"detect_s": round(det["time"] - inj, 2), "recreate_s": rec["seconds"],
                    "recreate_began_s": round(rec["time"] - rec["seconds"] - inj, 2),
                    "preemption_to_first_new_step_s": round(total, 2),
                    "minus_provider_create_s": round(total - rec["seconds"], 2),
                    "steps_lost": res["steps_lost"], "resumed_at_step": res["step"]})
    return out


def _report(preempted: dict, useful: float) -> dict:
    """Recovery times and goodput of a preempted run, against the unpreempted baseline's wall time."""
    recoveries = _recoveries(preempted)
    billed = preempted["wall_s"]
    # a tool that restarts from step 0 (no resume) repeats every step done before each preemption
    per_step = useful / STEPS
    restart_overhead = sum(r["preemption_to_first_new_step_s"] for r in recoveries)
    no_resume_billed = useful + sum(SCHEDULE) * per_step + restart_overhead
    return {
        "recoveries": recoveries,
        "mean_recovery_s": round(sum(r["preemption_to_first_new_step_s"] for r in recoveries)
                                 / max(1, len(recoveries)), 2),
        "mean_recovery_minus_create_s": round(sum(r["minus_provider_create_s"] for r in recoveries)
                                              / max(1, len(recoveries)), 2),
        "preempted_wall_s": round(billed, 1),
        "goodput": round(useful / billed, 3),
        "reference_no_resume_goodput": round(useful / no_resume_billed, 3),
        "run_steps_lost": preempted["run"]["steps_lost"], "run_seconds_lost": round(preempted["run"]["seconds_lost"], 1),
        "finished_at_step": preempted["run"]["last_progress"]["step"],
    }


def run() -> dict:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny = tmp / "tiny"
        subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(tiny)], check=True, capture_output=True, cwd=REPO)
        baseline = _run(tmp / "baseline", tiny, ())
        attached = _run(tmp / "preempted", tiny, SCHEDULE)
        detached = _run_detached(tmp / "detached", tiny, SCHEDULE)
        command = _run_command(tmp / "command")
    useful = baseline["wall_s"]
    return {
        "steps": STEPS, "save_checkpoints_steps": CKPT, "preempt_at_steps": list(SCHEDULE), "poll_s": POLL_S,
        "provider_create_s": CREATE_S, "baseline_wall_s": round(useful, 1),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "attached": _report(attached, useful),
        "detached": _report(detached, useful),
        "command": command,
    }
