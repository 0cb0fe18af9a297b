"""`python -m tests.chaos --seeds 0-99`: run many control-plane chaos scenarios, print a JSON report."""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("--seeds", default="0-19")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
