"""Slices under chaos (tests/chaos/slices.py), one seeded plan in `make test`: an emulated 2-host
slice whose workers, TPU and supervisor are killed at random steps ends at num_train_steps with
every attempt on every host, and bitwise the weights of an uninterrupted run on the same slice.
`python -m tests.chaos slices --seeds 0-9` runs more."""

from __future__ import annotations

import os

import pytest

from tests.chaos.slices import Campaign, generate

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.xdist_group("tf-e2e")]


@pytest.mark.long
def test_a_slice_under_chaos_ends_with_the_uninterrupted_weights(tiny_bert):
    plan = generate(3)   # a worker SIGTERMed (it must checkpoint and exit 42), the supervisor killed
    outcome = Campaign(tiny_bert, dict(os.environ)).run(plan)
    assert outcome.ok, f"{plan.describe()}\n" + "\n".join(outcome.violations)
    assert sum(outcome.injected.values()) == len(plan.faults) and outcome.attempts >= 2
