"""Pure budget decision: may the sweep start another trial without passing ``--budget-usd``?

A trial costs its TPU's list price per hour for as long as it holds the TPU. The next trial is
estimated at the mean length of the trials that ended, and never below a minute (before any
trial ended there is nothing better to go on, and a TPU bills at least its first minute). A trial
still running is counted at the larger of what it has cost so far and that estimate, so a wave of
concurrent trials cannot overshoot the budget together. A trial is priced by the same accounting
as a run's own budget (:func:`provision.runs.caps.usd`: list price x time held).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..runs.caps import usd

MIN_TRIAL_S = 60.0


def trial_usd(hourly_usd: float, seconds: float) -> float:
    return usd(hourly_usd, seconds)


def estimate_s(ended_seconds: Sequence[float]) -> float:
    """Expected seconds of the next trial."""
    mean = sum(ended_seconds) / len(ended_seconds) if ended_seconds else 0.0
    return max(MIN_TRIAL_S, mean)


@dataclass(frozen=True)
class Decision:
    start: bool
    reason: str
    committed_usd: float
    next_usd: float


def may_start(budget_usd: float | None, *, hourly_usd: float, ended_seconds: Sequence[float],
              running_seconds: Sequence[float]) -> Decision:
    """Start the next trial only if what was spent, what running trials will cost and the next
    trial's estimate all fit in the budget (``None``: no budget)."""
    est = estimate_s(ended_seconds)
    next_usd = trial_usd(hourly_usd, est)
    committed = sum(trial_usd(hourly_usd, s) for s in ended_seconds) + \
        sum(trial_usd(hourly_usd, max(s, est)) for s in running_seconds)
    if budget_usd is None:
        return Decision(True, "no budget", committed, next_usd)
    if committed + next_usd > budget_usd:
        return Decision(False, f"the next trial (about ${next_usd:.4f}) would pass --budget-usd {budget_usd:g} "
                               f"(${committed:.4f} spent or committed)", committed, next_usd)
    return Decision(True, f"${committed + next_usd:.4f} of ${budget_usd:g} with the next trial", committed, next_usd)
