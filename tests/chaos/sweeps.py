"""Sweeps under chaos: a grid sweep of tiny fine-tunes on a pool of local TPUs while a seeded plan
kills the controller (while a trial starts, while trials train, while the pool is deleted) and
resumes it, preempts a pool TPU, and stops the sweep and resumes it.

Invariants per seed: every trial of the study ended finished, pruned, failed or stopped, once
(trial numbers 0..n-1 without a gap, each trial's run created once, no run shared); the best
trial is the best metric of the finished ones; the cost never passed the budget; no TPU of the
sweep is left. `python -m tests.chaos sweeps --seeds 0-5` runs the campaign.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

STEPS = 12
VALUES = [1.0e-3, 3.0e-3, 1.0e-2]
BUDGET_USD = 5.0
KINDS = ("kill_controller@start", "kill_controller@train", "kill_controller@teardown", "preempt", "stop")
ENDED = ("finished", "pruned", "failed", "stopped")


@dataclass
class Plan:
    seed: int
    faults: list[str]

    def describe(self) -> str:
        return f"seed {self.seed}: " + ", ".join(self.faults)


def generate(seed: int) -> Plan:
    rng = random.Random(seed)
    faults = rng.sample(KINDS[:4], rng.randint(1, 2))
    if "kill_controller@teardown" not in faults and rng.random() < 0.4:
        faults.append("stop")           # the sweep ends there: nothing after it
    order = {k: i for i, k in enumerate(("kill_controller@start", "preempt", "kill_controller@train",
                                         "stop", "kill_controller@teardown"))}
    return Plan(seed, sorted(faults, key=order.__getitem__))


@dataclass
class Outcome:
    plan: Plan
    injected: Counter = field(default_factory=Counter)
    trials: int = 0
    sweep_state: str | None = None
    states: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def write_spec(path: Path, tiny: Path) -> Path:
    path.write_text(f"""
job: {REPO}/templates/bert-finetune-tiny.yaml
set: {{bert_dir: {tiny}, train_file: {tiny}/train.tsv, dev_file: {tiny}/dev.tsv, num_train_steps: {STEPS},
       save_checkpoints_steps: 6, steps_per_execution: 6}}
metric: eval_accuracy
goal: maximize
method: grid
parameters:
  learning_rate: {{values: {json.dumps(VALUES)}}}
""")
    return path


class Campaign:
    def __init__(self, tiny: Path, env: dict, work: Path):
        self.tiny, self.work = tiny, work
        self.env = {**env, "TPUCTL_HEARTBEAT_SECONDS": "0.5", "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.home = Path(self.env["TPUCTL_HOME"])

    def _tpuctl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "provision", *args], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def _popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "provision", *args], cwd=REPO, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _sweep_dir(self, sweep_id: str) -> Path:
        return self.home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "sweeps" / sweep_id

    def _trials(self, sweep_id: str) -> dict[int, dict]:
        out = {}
        for p in (self._sweep_dir(sweep_id) / "trials").glob("*.json"):
            try:
                d = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            out[d["trial"]] = d
        return out

    def _controller_pid(self, sweep_id: str) -> int | None:
        try:
            return json.loads((self._sweep_dir(sweep_id) / "controller.json").read_text()).get("pid")
        except (OSError, ValueError):
            return None

    def _ready(self, kind: str, sweep_id: str) -> dict | None:
        """The trial the fault acts on when its moment has come, else None ({} when no trial is needed)."""
        trials = self._trials(sweep_id)
        if kind == "kill_controller@teardown":
            done = len(trials) == len(VALUES) and all(t["state"] in ENDED for t in trials.values())
            return {} if done else None
        if kind == "stop":      # while any trial is still running: a sweep stopped mid-trial, whatever its step
            return next((t for t in trials.values() if t["state"] == "running"), None)
        for t in trials.values():
            if t["state"] != "running" or not t.get("model_dir"):
                continue
            try:
                progress = json.loads((Path(t["model_dir"]) / "progress.json").read_text())
            except (OSError, ValueError):
                progress = {}
            if kind == "kill_controller@start":
                if not progress or progress.get("status") != "running":
                    return t
            elif progress.get("status") == "running" and 0 < (progress.get("step") or 0) < STEPS:
                return t
        return None

    def run(self, plan: Plan) -> Outcome:
        start = time.time()
        out = Outcome(plan)
        spec = write_spec(self.work / f"sweep-{plan.seed}.yaml", self.tiny)
        sweeps = self.home / "sweeps"
        before = {p.name for p in sweeps.glob("sweep-*")} if sweeps.is_dir() else set()
        proc = self._popen("sweep", str(spec), "--max-concurrent", "2", "--preemptible", "--budget-usd",
                           str(BUDGET_USD), "--poll", "1", "--json")
        sweep_id = None
        pending = list(plan.faults)
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:   # (a fault not injected by the end is counted)
            time.sleep(0.2)
            if sweep_id is None:
                ids = sorted({p.name for p in sweeps.glob("sweep-*") if p.is_dir()} - before) \
                    if sweeps.is_dir() else []
                if not ids:
                    continue
                sweep_id = ids[0]
            if not pending:
                continue
            kind = pending[0]
            target = self._ready(kind, sweep_id)
            if target is None:
                continue
            if kind.startswith("kill_controller"):
                pid = self._controller_pid(sweep_id)
                if not pid:
                    continue
                os.kill(pid, signal.SIGKILL)
                proc.wait()
                proc = self._popen("sweep", "resume", sweep_id, "--json")
            elif kind == "preempt":
                if self._tpuctl("simulate", "preempt", target["cluster"], "--no-notice").returncode != 0:
                    continue
            else:
                stopped = self._tpuctl("sweep", "stop", sweep_id, "--json")
                if stopped.returncode != 0:
                    out.violations.append(f"sweep stop exited {stopped.returncode}: {stopped.stderr[-500:]}")
                # `sweep resume` continues a sweep whose controller died, never a stopped one
                again = self._tpuctl("sweep", "resume", sweep_id, "--json")
                if again.returncode != 2 or f"sweep {sweep_id} is stopped" not in again.stderr:
                    out.violations.append(f"resume of a stopped sweep exited {again.returncode}: {again.stderr[-500:]}")
            out.injected[kind] += 1
            pending.pop(0)
        _, err = proc.communicate(timeout=600)
        out.seconds = time.time() - start
        if sweep_id is None:
            out.violations.append(f"no sweep was created: {err[-1500:]}")
            return out
        out.injected["not_injected"] += len(pending)   # the sweep ended first: counted, not a violation
        status = self._tpuctl("sweep", "status", sweep_id, "--json")
        try:
            doc = json.loads(status.stdout)
        except ValueError:
            out.violations.append(f"sweep status: {status.stderr[-1000:]}")
            return out
        self._check(doc, sweep_id, out, err)
        return out

    def _check(self, doc: dict, sweep_id: str, out: Outcome, err: str) -> None:
        v = out.violations
        trials = doc["trials"]
        out.trials = len(trials)
        out.sweep_state = doc["state"]
        out.states.update(t["state"] for t in trials)
        if doc["state"] not in ("finished", "stopped"):
            v.append(f"the sweep ended {doc['state']}: {doc.get('reason')} {err[-1000:]}")
        numbers = [t["trial"] for t in trials]
        if numbers != list(range(len(trials))):
            v.append(f"trial numbers {numbers}: one lost or asked twice")
        for t in trials:
            if t["state"] not in ENDED:
                v.append(f"trial {t['trial']} left {t['state']}")
            if t["state"] == "failed":      # no fault here makes a job fail: a failure is a lost trial
                v.append(f"trial {t['trial']} failed: {t.get('reason')}")
        runs = [t["run"] for t in trials if t.get("run")]
        if len(runs) != len(set(runs)):
            v.append(f"trials share a run: {runs}")
        for run in runs:
            events = self.home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run / "events.jsonl"
            kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()] if events.exists() else []
            if kinds.count("created") != 1:
                v.append(f"run {run} created {kinds.count('created')} times (a trial ran twice?)")
        if doc["state"] == "finished" and sorted(t["params"]["learning_rate"] for t in trials) != VALUES:
            v.append(f"a finished grid sweep did not try every point: {[t['params'] for t in trials]}")
        finished = [t for t in trials if t["state"] == "finished" and t.get("metric") is not None]
        if finished:
            top = max(t["metric"] for t in finished)
            if not doc.get("best") or doc["best"]["metric"] != top:
                v.append(f"best {doc.get('best')} is not the best metric {top}")
        if doc["cost_usd"] > BUDGET_USD:
            v.append(f"cost {doc['cost_usd']} passed the budget {BUDGET_USD}")
        left = [c for c in json.loads(self._tpuctl("status", "--json").stdout)["clusters"]
                if c["name"].startswith(sweep_id)]      # (not another seed's: each is judged alone)
        if left:
            v.append(f"TPUs left: {[c['name'] for c in left]}")


def summarize(outcomes: list[Outcome]) -> dict:
    injected: Counter = Counter()
    states: Counter = Counter()
    for o in outcomes:
        injected.update(o.injected)
        states.update(o.states)
    return {"scenarios": len(outcomes), "passed": sum(o.ok for o in outcomes),
            "faults": dict(sorted(injected.items())), "trials": sum(o.trials for o in outcomes),
            "trial_states": dict(sorted(states.items())),
            "violations": [{"seed": o.plan.seed, "violations": o.violations} for o in outcomes if not o.ok]}
