"""Chaos against the fake cloud: seeded fault mixes, tpuctl killed mid-command, preemptions.

Each seed is one scenario (see scenario.py); `python -m tests.chaos --seeds 0-199` runs many more
and prints how many passed. `make test` runs seeds 0-4, `make test-long` 5-9; the terminal summary
reports the count.
"""

from __future__ import annotations

import pytest

from tests.chaos.runner import run_scenario
from tests.chaos.scenario import generate

SEEDS = [*range(5), *(pytest.param(s, marks=pytest.mark.long) for s in range(5, 10))]


@pytest.mark.parametrize("seed", SEEDS)
def test_control_plane_chaos(seed, fakegcp, tmp_path):
    sc = generate(seed)
    outcome = run_scenario(sc, fakegcp, tmp_path / "home")
    assert outcome.ok, f"{sc.describe()}\nviolations: {outcome.violations}\nlog: {outcome.log}"
