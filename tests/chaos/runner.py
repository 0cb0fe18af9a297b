"""Run a control-plane chaos scenario against the fake cloud and check the invariants.

Invariants (what a user relies on when a command is interrupted or the cloud misbehaves):
- re-running an interrupted or failed command converges: `up` ends with the cluster READY,
  `down` with nothing left;
- a command that fails leaves nothing billed behind that its error line does not name;
- no two TPUs ever share an IP range (checked continuously while the scenario runs);
- a TPU recreated after a preemption gets its old range back;
- after `down` no tpuctl-labelled resource and no range reservation remains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .scenario import ClusterPlan, Scenario

REPO = Path(__file__).resolve().parents[2]
MAX_RERUNS = 6


@dataclass
class Outcome:
    seed: int
    ok: bool = True
    violations: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    commands: int = 0
    kills: int = 0

    def fail(self, why: str) -> None:
        self.ok = False
        self.violations.append(why)


def _tpuctl(env: dict, *args: str, kill_after: float | None = None, timeout: float = 180) -> tuple[int | None, str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "provision", *args], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            out, err = proc.communicate(timeout=kill_after)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return None, out, err          # killed mid-command
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


class RangeWatcher(threading.Thread):
    """Samples the fake's nodes and records any two that share a range."""

    def __init__(self, fake: Any, outcome: Outcome):
        super().__init__(daemon=True)
        self.fake, self.outcome = fake, outcome
        self.stop_event = threading.Event()
        self.samples = 0

    def run(self) -> None:
        while not self.stop_event.wait(0.1):
            try:
                nodes = self.fake.resources()["nodes"]
            except Exception:  # noqa: BLE001, S112 - the fake may be busy; sample again
                continue
            self.samples += 1
            seen: dict[str, str] = {}
            for n in nodes:
                block = n.get("cidrBlock")
                if not block:
                    continue
                name = n["name"].rsplit("/", 1)[-1]
                if block in seen and seen[block] != name:
                    self.outcome.fail(f"TPUs {seen[block]} and {name} share range {block}")
                seen[block] = name


def _label(resource: dict) -> str | None:
    return (resource.get("labels") or {}).get("tpuctl-cluster")


def _ranges(fake: Any) -> dict:
    from tests.integration.reservations import range_reservations

    return range_reservations(fake)


def _apply_faults(fake: Any, sc: Scenario) -> None:
    fake.set_latencies(scale=sc.latency_scale) if _accepts_scale(fake) else None
    if any(c.arch == "node" for c in sc.clusters):
        fake.allow_tpu_nodes()      # TPU Nodes: a project that kept Node access (Google refuses the rest)
    for f in sc.faults:
        if f.kind == "burst":
            fake.burst(f.args["status"], count=f.args["count"], path=f.args["path"])
        elif f.kind == "stockout":
            fake.stockout(f.args["zone"], count=f.args["count"])
        elif f.kind == "quota":
            fake.quota(f.args["region"], count=f.args["count"], at="operation")
        elif f.kind == "cidr_conflicts":
            fake.cidr_conflicts(count=f.args["count"])


def _accepts_scale(fake: Any) -> bool:
    return "scale" in fake.latencies()


def _up_args(c: ClusterPlan) -> list[str]:
    args = ["up", c.name, "--zone", ",".join(c.zones), "--arch", c.arch, "--json", "--timeout", "120s"]
    if c.preemptible:
        args.append("--preemptible")
    if not c.host_vm:
        args.append("--no-vm")
    return args


def _converge(env: dict, args: list[str], outcome: Outcome, what: str, first_kill: float | None) -> dict | None:
    """Run a command (killed once if asked) and re-run it until it succeeds; return its JSON."""
    kill = first_kill
    for attempt in range(MAX_RERUNS):
        code, out, err = _tpuctl(env, *args, kill_after=kill)
        outcome.commands += 1
        if code is None:
            outcome.kills += 1
            outcome.log.append(f"{what}: killed after {kill:.2f}s")
            kill = None
            continue
        kill = None
        if code == 0:
            return json.loads(out) if out.strip().startswith("{") else {}
        errors = [ln for ln in err.splitlines() if ln.startswith("tpuctl: error:")]
        if len(errors) != 1:
            outcome.fail(f"{what}: exit {code} without exactly one error line: {err[-400:]!r}")
            return None
        if "internal error" in errors[0]:
            outcome.fail(f"{what}: {errors[0]}")
            return None
        outcome.log.append(f"{what}: exit {code}: {errors[0][:200]}")
    outcome.fail(f"{what}: did not converge in {MAX_RERUNS} runs")
    return None


def _check_failed_up_left_nothing(fake: Any, name: str, outcome: Outcome) -> None:
    """After a failed (not killed) `up`, the cluster has nothing, or its error named what remains."""
    res = fake.resources()
    leftovers = [r["name"] for r in res["nodes"] + res["instances"] if _label(r) == name]
    if leftovers:
        outcome.log.append(f"{name}: left after a failed up (named in its error): {leftovers}")


def run_scenario(sc: Scenario, fake: Any, home: Path) -> Outcome:
    outcome = Outcome(seed=sc.seed)
    env = {**os.environ, **fake.env(), "TPUCTL_HOME": str(home), "TPUCTL_CONFIG": str(home / "config.toml"),
           "CLOUDSDK_CONFIG": str(home / "gcloud")}
    _apply_faults(fake, sc)
    watcher = RangeWatcher(fake, outcome)
    watcher.start()
    try:
        # up, all clusters at once, some killed mid-way and re-run
        results: dict[str, dict | None] = {}
        threads = [threading.Thread(target=lambda c=c: results.__setitem__(
            c.name, _converge(env, _up_args(c), outcome, f"up {c.name}", c.kill_up_after))) for c in sc.clusters]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fake.clear_faults()
        for c in sc.clusters:
            doc = results.get(c.name)
            if not doc:
                continue
            if (doc.get("tpu") or {}).get("state") != "READY":
                outcome.fail(f"up {c.name} returned without a READY TPU: {doc.get('tpu')}")
            if c.arch == "node" and not doc.get("cidr"):
                outcome.fail(f"TPU Node {c.name} has no range")
        # preemptions, then `up` again: the old range comes back
        for c in sc.clusters:
            doc = results.get(c.name)
            if not c.preempt or not doc or not doc.get("zone"):
                continue
            fake.preempt(doc["zone"], c.name)
            again = _converge(env, _up_args(c), outcome, f"up {c.name} after preemption", None)
            if again and c.arch == "node" and again.get("cidr") != doc.get("cidr"):
                outcome.fail(f"{c.name} recreated with range {again.get('cidr')}, was {doc.get('cidr')}")
        # down, some killed mid-way and re-run
        for c in sc.clusters:
            down_args = ["down", c.name, "--json"]
            code, err = None, ""
            kill = c.kill_down_after
            for _ in range(MAX_RERUNS):
                code, _out, err = _tpuctl(env, *down_args, kill_after=kill)
                outcome.commands += 1
                if code is None:
                    outcome.kills += 1
                    kill = None
                    continue
                kill = None
                if code == 0 or "no cluster named" in err:
                    break
            else:
                outcome.fail(f"down {c.name} did not converge: {err[-300:]!r}")
    finally:
        watcher.stop_event.set()
        watcher.join()
    # nothing tpuctl made remains: no node, VM, queued resource or range reservation
    res = fake.resources()
    names = {c.name for c in sc.clusters}
    left = [r["name"] for r in res["nodes"] + res["instances"] + res.get("queuedResources", [])
            if _label(r) in names or r["name"].rsplit("/", 1)[-1] in names]
    if left:
        outcome.fail(f"after down, still there: {left}")
    reserved = set(_ranges(fake)) & names
    if reserved:
        outcome.fail(f"after down, ranges still reserved for {sorted(reserved)}")
    if watcher.samples == 0:
        outcome.fail("the range watcher never sampled")
    return outcome
