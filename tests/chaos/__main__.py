"""`python -m tests.chaos --seeds 0-99`: run many control-plane chaos scenarios, print a JSON report.

`python -m tests.chaos --leases 50`: instead, 50 rounds of every lease race (tests/chaos/leases.py)
on a local directory bucket and on fake-gcs-server.

`python -m tests.chaos staging --seeds 0-19 --rate 0.15`: the staging campaign (tests/chaos/staging.py):
`tpuctl stage` through a fault-injecting proxy to fake-gcs-server, large trees, many seeds.

`python -m tests.chaos slices --seeds 0-9`: the slices campaign (tests/chaos/slices.py): an emulated
2-host slice training the tiny BERT while workers, the slice and the supervisor are killed.

`python -m tests.chaos sweeps --seeds 0-5`: the sweeps campaign (tests/chaos/sweeps.py): grid sweeps of
tiny fine-tunes while the controller is killed and resumed, pool TPUs preempted, the sweep stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.runner import run_scenario
from tests.chaos.scenario import generate
from tests.fakegcp.fixture import FakeGCP


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def staging_main(argv: list[str]) -> int:
    from tests.chaos.staging import FULL, SMALL, Campaign, summarize
    from tests.gcs_fixture import FakeGcs

    parser = argparse.ArgumentParser(prog="python -m tests.chaos staging")
    parser.add_argument("--seeds", default="0-19")
    parser.add_argument("--rate", default="0.10,0.15,0.20",
                        help="fault rates, cycled over the seeds (default 0.10,0.15,0.20)")
    parser.add_argument("--small", action="store_true", help="the small trees make test uses")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rate.split(",")]
    start = time.time()
    results = []
    with FakeGcs() as fake, tempfile.TemporaryDirectory() as tmp:
        campaign = Campaign(fake, Path(tmp), SMALL if args.small else FULL)
        for i, seed in enumerate(_seeds(args.seeds)):
            res = campaign.run_seed(seed, rates[i % len(rates)])
            results.append(res)
            print(f"{'ok' if res.ok else 'FAILED'} seed {seed} rate {res.rate:.2f}: {res.requests} requests, "
                  f"{sum(res.faults.values())} faulted, {res.failed_runs} of {res.runs} runs exit 1"
                  + "".join(f"\n  {v}" for v in res.violations), file=sys.stderr, flush=True)
    doc = summarize(results)
    doc["seconds"] = round(time.time() - start, 1)
    print(json.dumps(doc, indent=2))
    return 1 if doc["violations"] else 0


def _local_env(root: Path) -> dict:
    """An isolated tpuctl home on the local provider, and the tiny BERT in root/tiny."""
    import subprocess

    from tests.conftest import REPO
    subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(root / "tiny")], check=True,
                   capture_output=True, cwd=REPO)
    return {**os.environ, "TPUCTL_HOME": str(root / "home"), "TPUCTL_CONFIG": str(root / "config.toml"),
            "CLOUDSDK_CONFIG": str(root / "gcloud"), "TPUCTL_LOCAL_TPU_CREATE_SECONDS": "0.2",
            "TPUCTL_LOCAL_VM_CREATE_SECONDS": "0.1", "TPUCTL_LOCAL_DELETE_SECONDS": "0.1"}


def _local_campaign(name: str, argv: list[str], default_seeds: str, make, line) -> int:
    """A campaign on the local provider and the tiny BERT (slices, sweeps): one plan per seed,
    a line per outcome on stderr, the summary as JSON."""
    import importlib

    mod = importlib.import_module(f"tests.chaos.{name}")
    parser = argparse.ArgumentParser(prog=f"python -m tests.chaos {name}")
    parser.add_argument("--seeds", default=default_seeds)
    args = parser.parse_args(argv)
    start = time.time()
    outcomes = []
    # (a job that was just killed may still be writing under the home while it is removed)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        campaign = make(mod.Campaign, root)
        for seed in _seeds(args.seeds):
            res = campaign.run(mod.generate(seed))
            outcomes.append(res)
            print(f"{'ok' if res.ok else 'FAILED'} {res.plan.describe()}: {line(res)}, {res.seconds:.0f}s"
                  + "".join(f"\n  {v}" for v in res.violations), file=sys.stderr, flush=True)
    doc = mod.summarize(outcomes)
    doc["seconds"] = round(time.time() - start, 1)
    print(json.dumps(doc, indent=2))
    return 1 if doc["violations"] else 0


def slices_main(argv: list[str]) -> int:
    return _local_campaign("slices", argv, "0-9", lambda cls, root: cls(root / "tiny", _local_env(root)),
                           lambda res: f"{res.attempts} attempts")


def sweeps_main(argv: list[str]) -> int:
    return _local_campaign("sweeps", argv, "0-5", lambda cls, root: cls(root / "tiny", _local_env(root), root),
                           lambda res: f"{res.trials} trials {dict(res.states)}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sweeps"]:
        return sweeps_main(argv[1:])
    if argv[:1] == ["slices"]:
        return slices_main(argv[1:])
    if argv[:1] == ["staging"]:
        return staging_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("--seeds", default="0-19")
    parser.add_argument("--leases", type=int, default=0, metavar="ROUNDS",
                        help="run the lease races instead: ROUNDS rounds of each kind and start state")
    args = parser.parse_args(argv)
    if args.leases:
        return _leases(args.leases)
    seeds = _seeds(args.seeds)
    failed, kills, commands = [], 0, 0
    start = time.time()
    with FakeGCP() as fake, tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            fake.reset()
            sc = generate(seed)
            outcome = run_scenario(sc, fake, Path(tmp) / f"home-{seed}")
            kills += outcome.kills
            commands += outcome.commands
            status = "ok" if outcome.ok else "FAILED"
            print(f"{status} {sc.describe()}", file=sys.stderr, flush=True)
            if not outcome.ok:
                failed.append({"seed": seed, "violations": outcome.violations})
    print(json.dumps({"scenarios": len(seeds), "passed": len(seeds) - len(failed), "failed": failed,
                      "tpuctl_commands": commands, "tpuctl_killed": kills,
                      "seconds": round(time.time() - start, 1)}, indent=2))
    return 1 if failed else 0


def _leases(rounds: int) -> int:
    from tests.chaos import leases
    from tests.gcs_fixture import FakeGcs

    start = time.time()
    reports = []
    with tempfile.TemporaryDirectory() as tmp, FakeGcs() as gcs:
        reports.append(leases.campaign(f"dir:{tmp}/bucket", rounds))
        os.environ.update(gcs.env())
        reports.append(leases.campaign(f"gs://{gcs.create_bucket()}", rounds, env=gcs.env()))
    print(json.dumps({"campaigns": reports, "seconds": round(time.time() - start, 1)}, indent=2))
    return 1 if any(r["violations"] for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
