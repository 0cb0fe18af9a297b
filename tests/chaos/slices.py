"""Slices under chaos: an emulated multi-host slice (`tpuctl up -z us-central2-b -a v4-16`: 2 hosts,
2 processes joined by MultiWorkerMirroredStrategy) training the tiny pretraining spec while a seeded plan
kills a random worker (SIGKILL, or SIGTERM as a host shutting down sends it), preempts the slice,
and kills the supervising `tpuctl train` and re-attaches, each at a random step.

Invariants per seed: the run ends at num_train_steps; every attempt ran on every host of the
slice (the group always restarts together: no host of an earlier attempt is left running) and
the last one ended 0 on all of them; the final
weights (and Adam moments, step, input position) are bitwise those of an uninterrupted run of the
same spec on the same topology; every host's TensorFlow server (its TF_CONFIG port, bound to
every interface: TensorFlow has no bind address) listens in the slice's own network namespace,
never in this machine's (read from /proc/PID/net/tcp{,6}: tests/netcheck.py).
`python -m tests.chaos slices --seeds 0-9` runs the campaign.
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
from tests.netcheck import exposed, listeners

STEPS, CKPT, PER_LOOP = 40, 10, 5
ACCELERATOR, HOSTS, ZONE = "v4-16", 2, "us-central2-b"     # v4 is offered in us-central2-b only
KINDS = ("kill_worker", "stop_worker", "preempt", "kill_supervisor")


@dataclass
class Plan:
    seed: int
    faults: list[tuple[str, int]]          # (kind, at step), by step

    def describe(self) -> str:
        return f"seed {self.seed}: " + ", ".join(f"{k}@{s}" for k, s in self.faults)


def generate(seed: int) -> Plan:
    rng = random.Random(seed)
    kinds = rng.sample(KINDS, rng.randint(2, 3))
    steps = sorted(rng.sample(range(3, STEPS - 4), len(kinds)))
    return Plan(seed, list(zip(kinds, steps)))


@dataclass
class Outcome:
    plan: Plan
    injected: Counter = field(default_factory=Counter)
    attempts: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    servers_seen: int = 0                  # hosts' TensorFlow servers whose sockets were read

    @property
    def ok(self) -> bool:
        return not self.violations


def _tpuctl(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _train(cluster: str, tiny: Path, env: dict, attach: bool = False) -> subprocess.Popen:
    args = [sys.executable, "-m", "provision", "train", cluster, "--poll", "1", "--json", "--on-interrupt", "leave"]
    if attach:
        args.append("--attach")
    else:
        args += ["--job", "templates/bert-pretrain-tiny.yaml"]
        for key, value in {"bert_dir": tiny, "corpus_files": f"{tiny}/corpus.txt", "num_train_steps": STEPS,
                           "train_batch_size": 16, "max_eval_steps": 1, "save_checkpoints_steps": CKPT,
                           "steps_per_execution": PER_LOOP, "export_bert_dir": "false"}.items():
            args += ["--set", f"{key}={value}"]
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _runs_dir(env: dict) -> Path:
    return Path(env["TPUCTL_HOME"]) / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs"


def _progress(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def checkpoint_arrays(prefix: Path) -> dict:
    """Every training variable of a checkpoint but save_counter (an interrupted run saves more often)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def same_bits(a: dict, b: dict) -> list[str]:
    """Names of the variables whose bytes differ (or that only one side has)."""
    return sorted(k for k in set(a) | set(b)
                  if k not in a or k not in b or a[k].dtype != b[k].dtype or a[k].tobytes() != b[k].tobytes())


def _worker_pid(run_id: str, worker: int) -> int | None:
    out = subprocess.run(["pgrep", "-f", f"host/work/{run_id}/{worker}/spec.yaml"],
                         capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) if out else None


def check_servers(run_id: str, seen: set[int], out: Outcome) -> None:
    """Each host's job (once per process): its TF_CONFIG port listens, and no listener of it is
    reachable from this machine's networks."""
    for worker in range(HOSTS):
        pid = _worker_pid(run_id, worker)
        if pid is None or pid in seen:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
            port = int(json.loads(env[b"TF_CONFIG"])["cluster"]["worker"][worker].rsplit(":", 1)[1])
            socks = listeners(pid)
            if port not in {s.port for s in socks}:
                continue                      # its server is not up yet: look again
            open_to_all = exposed(pid)
        except (OSError, KeyError, ValueError, IndexError):
            continue                          # it exited meanwhile
        seen.add(pid)
        out.servers_seen += 1
        if open_to_all:
            out.violations.append(f"worker {worker}'s job (pid {pid}) listens on this machine's network: "
                                  + ", ".join(f"{s.address}:{s.port}" for s in open_to_all))


def _left_over(run_id: str, wait: float = 10.0) -> list[str]:
    """The run's host processes (wrappers and jobs) still alive once it has finished: a host of
    an earlier attempt that nobody stopped holds its TPU (and here, a core) for ever."""
    deadline = time.time() + wait
    while True:
        found = subprocess.run(["pgrep", "-af", f"(host/work/{run_id}/|--run {run_id} )"],
                               capture_output=True, text=True, check=False).stdout.splitlines()
        if not found or time.time() >= deadline:
            return [line[:160] for line in found]
        time.sleep(0.5)


class Campaign:
    """One slice cluster and one uninterrupted reference run, then one seeded plan after another."""

    def __init__(self, tiny: Path, env: dict, cluster: str = "slice"):
        self.tiny, self.env, self.cluster = tiny, dict(env), cluster
        self.env.setdefault("TPUCTL_HEARTBEAT_SECONDS", "1")
        self.env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.reference: dict | None = None

    def _up(self) -> None:
        res = _tpuctl("up", self.cluster, "--zone", ZONE, "--accelerator-type", ACCELERATOR, "--preemptible",
                      env=self.env)
        if res.returncode != 0:
            raise RuntimeError(f"tpuctl up failed: {res.stderr[-2000:]}")

    def _finish(self, proc: subprocess.Popen) -> tuple[int, dict, str]:
        out, err = proc.communicate(timeout=600)
        try:
            return proc.returncode, json.loads(out).get("run") or {}, err
        except ValueError:
            return proc.returncode, {}, err

    def prepare(self) -> None:
        self._up()
        code, run, err = self._finish(_train(self.cluster, self.tiny, self.env))
        if code != 0 or run.get("attempts") != 1:
            raise RuntimeError(f"the reference run did not finish in one attempt: {err[-3000:]}")
        self.reference = checkpoint_arrays(_runs_dir(self.env) / run["run_id"] / "model" / f"ckpt-{STEPS}")

    def run(self, plan: Plan) -> Outcome:
        if self.reference is None:
            self.prepare()
        start = time.time()
        out = Outcome(plan)
        pending = list(plan.faults)
        existing = set(os.listdir(_runs_dir(self.env)))
        proc = _train(self.cluster, self.tiny, self.env)
        run_id = None
        servers: set[int] = set()
        deadline = time.time() + 600
        while pending and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
            if run_id is None:
                new = sorted(set(os.listdir(_runs_dir(self.env))) - existing)
                if not new:
                    continue
                run_id = new[0]
            p = _progress(_runs_dir(self.env) / run_id / "model" / "progress.json")
            if p.get("status") == "running":
                check_servers(run_id, servers, out)
            if p.get("status") != "running" or (p.get("step") or 0) < pending[0][1]:
                continue
            kind, _ = pending[0]
            if kind in ("kill_worker", "stop_worker"):
                worker = random.Random(plan.seed * 7 + len(pending)).randrange(HOSTS)
                pid = _worker_pid(run_id, worker)
                if pid is None:
                    continue                  # between attempts: wait for the next one to start
                os.kill(pid, signal.SIGKILL if kind == "kill_worker" else signal.SIGTERM)
            elif kind == "preempt":
                # lost at once, as these invariants were written for (the notice: test_preempt_rehearsal_local)
                if _tpuctl("simulate", "preempt", self.cluster, "--no-notice", env=self.env).returncode != 0:
                    continue
            else:
                proc.kill()                   # the laptop dies; the slice trains on
                proc.wait()
                proc = _train(self.cluster, self.tiny, self.env, attach=True)
            out.injected[kind] += 1
            pending.pop(0)
        code, run, err = self._finish(proc)
        out.seconds = time.time() - start
        if pending:
            out.violations.append(f"faults not injected (the run ended first): {pending}")
        if not out.servers_seen:
            out.violations.append("no host's TensorFlow server was seen listening (its socket table not read)")
        if code != 0 or run.get("status") != "finished":
            out.violations.append(f"train exited {code}, run {run.get('status')}: {err[-1500:]}")
            return out
        if (run.get("last_progress") or {}).get("step") != STEPS:
            out.violations.append(f"the run ended at step {(run.get('last_progress') or {}).get('step')}, not {STEPS}")
        run_dir = _runs_dir(self.env) / run["run_id"]
        attempts = sorted(int(p.name) for p in (run_dir / "attempts").iterdir() if p.name.isdigit())
        out.attempts = len(attempts)
        for n in attempts:
            # a host took the attempt up: its heartbeat (written at once) or its log (every few
            # seconds and at exit: a group restarted a moment after it started may have none)
            started = {p.name.split("-", 1)[1].split(".")[0]
                       for p in (run_dir / "attempts" / str(n)).iterdir() if p.name.startswith(("alive-", "log-"))}
            if started != {str(w) for w in range(HOSTS)}:
                out.violations.append(f"attempt {n} did not run on every host: {sorted(started)}")
        left = _left_over(run["run_id"])
        if left:
            out.violations.append(f"processes of the run's hosts left running after it finished: {left}")
        last = run_dir / "attempts" / str(attempts[-1])
        codes = {p.name: json.loads(p.read_text()).get("code") for p in last.glob("exit-*.json")}
        if sorted(codes.values()) != [0] * HOSTS:
            out.violations.append(f"the last attempt's hosts exited {codes}")
        if out.injected["kill_worker"] + out.injected["stop_worker"] + out.injected["preempt"] and out.attempts < 2:
            out.violations.append("a worker or the slice was lost but the run never restarted")
        final = checkpoint_arrays(run_dir / "model" / f"ckpt-{STEPS}")
        differ = same_bits(self.reference or {}, final)
        if differ:
            out.violations.append(f"final weights differ from the uninterrupted run in {len(differ)} "
                                  f"variable(s), e.g. {differ[:3]}")
        return out


def summarize(outcomes: list[Outcome]) -> dict:
    injected: Counter = Counter()
    for o in outcomes:
        injected.update(o.injected)
    return {"scenarios": len(outcomes), "passed": sum(o.ok for o in outcomes),
            "faults": dict(sorted(injected.items())), "attempts": sum(o.attempts for o in outcomes),
            "lost": {"runs_not_finished": sum(1 for o in outcomes if any("exited" in v or "ended at" in v
                                                                         for v in o.violations)),
                     "weights_differ": sum(1 for o in outcomes if any("weights differ" in v for v in o.violations))},
            "violations": [{"seed": o.plan.seed, "violations": o.violations} for o in outcomes if not o.ok]}
