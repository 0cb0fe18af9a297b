"""Seeded chaos scenarios for the control plane: what goes wrong, where, and when.

A scenario is a pure function of its seed, so a failure is reproduced with
``python -m tests.chaos --seeds N``. It draws a few clusters (TPU Node or TPU VM, failover
zones), a fault mix for the fake cloud (429/500/503 bursts on TPU, Compute and metadata calls,
stockouts, quota errors, forced CIDR conflicts, slow operations), tpuctl processes killed at
random moments of ``up`` and ``down``, and preemptions of running TPUs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

ZONES_A = ("us-central1-b", "us-central1-c")
ZONES_B = ("us-central1-b", "us-central1-c", "europe-west4-a")
BURST_PATHS = (r"/v2/.*/nodes", r"/compute/v1/.*/instances", r"/compute/v1/projects/[^/]+$",
               r"/setCommonInstanceMetadata", r"/operations/")


@dataclass
class ClusterPlan:
    name: str
    arch: str
    zones: tuple[str, ...]
    preemptible: bool
    host_vm: bool
    kill_up_after: float | None      # seconds after start to SIGKILL the first `up`, or never
    preempt: bool                    # preempt its TPU once it is up, then re-run `up`
    kill_down_after: float | None


@dataclass
class Fault:
    kind: str                        # burst, stockout, quota, cidr_conflicts
    args: dict


@dataclass
class Scenario:
    seed: int
    latency_scale: float
    clusters: list[ClusterPlan] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)

    def describe(self) -> str:
        cl = ", ".join(f"{c.name}({c.arch}{' kill-up' if c.kill_up_after is not None else ''}"
                       f"{' preempt' if c.preempt else ''}{' kill-down' if c.kill_down_after is not None else ''})"
                       for c in self.clusters)
        fl = ", ".join(f"{f.kind}{f.args}" for f in self.faults)
        return f"seed {self.seed}: scale {self.latency_scale}; clusters {cl}; faults {fl or 'none'}"


def generate(seed: int) -> Scenario:
    rng = random.Random(seed)
    sc = Scenario(seed=seed, latency_scale=rng.choice((0.5, 1.0, 2.0)))
    for i in range(rng.randint(1, 3)):
        arch = rng.choice(("node", "vm"))
        zones = rng.choice((ZONES_A, ZONES_B))
        sc.clusters.append(ClusterPlan(
            name=f"chaos{seed}-{i}", arch=arch, zones=zones, preemptible=rng.random() < 0.8,
            host_vm=arch == "node" or rng.random() < 0.5,
            kill_up_after=rng.uniform(0.3, 2.5) if rng.random() < 0.4 else None,
            preempt=rng.random() < 0.5,
            kill_down_after=rng.uniform(0.3, 2.0) if rng.random() < 0.4 else None))
    for _ in range(rng.randint(0, 4)):
        kind = rng.choice(("burst", "burst", "stockout", "quota", "cidr_conflicts"))
        if kind == "burst":
            sc.faults.append(Fault("burst", {"status": rng.choice((429, 500, 503)), "count": rng.randint(1, 3),
                                             "path": rng.choice(BURST_PATHS)}))
        elif kind == "stockout":
            sc.faults.append(Fault("stockout", {"zone": rng.choice(ZONES_A), "count": rng.randint(1, 2)}))
        elif kind == "quota":
            sc.faults.append(Fault("quota", {"region": rng.choice(("us-central1", "europe-west4")), "count": 1}))
        else:
            sc.faults.append(Fault("cidr_conflicts", {"count": rng.randint(1, 2)}))
    return sc
