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


@dataclass(frozen=True)
class Outlook:
    """What ``sweep --dry-run`` says of the money before anything runs: a trial's length is not
    known yet, so the total is given per trial-hour, with the longest average trial the budget
    pays for (and the minute every trial bills at least)."""

    trials: int
    pool: int
    hourly_usd: float              # one pool TPU
    budget_usd: float | None

    @property
    def pool_hourly_usd(self) -> float:
        return self.hourly_usd * self.pool

    @property
    def per_trial_hour_usd(self) -> float:
        """All the trials, if each holds its TPU an hour."""
        return self.hourly_usd * self.trials

    @property
    def least_usd(self) -> float:
        """All the trials, if each bills only its first minute."""
        return trial_usd(self.hourly_usd, MIN_TRIAL_S) * self.trials

    @property
    def trial_s_within(self) -> float | None:
        """The longest average trial the budget pays for (None: no budget, or a free TPU)."""
        if self.budget_usd is None or self.hourly_usd <= 0:
            return None
        return self.budget_usd / self.per_trial_hour_usd * 3600.0

    @property
    def fits(self) -> bool | None:
        """Whether even the least the trials can cost fits (None: no budget)."""
        return None if self.budget_usd is None else self.least_usd <= self.budget_usd

    def line(self) -> str:
        from ..basics.validate import format_duration

        head = (f"{self.trials} trial(s), {self.pool} at a time: ${self.pool_hourly_usd:.2f}/hour for the pool; "
                f"${self.per_trial_hour_usd:.2f} if each trial takes an hour")
        if self.budget_usd is None:
            return head + " (no --budget-usd)"
        within = self.trial_s_within
        if within is None:
            return head + f"; --budget-usd {self.budget_usd:g}: the TPUs are priced at nothing"
        if not self.fits:
            return (head + f"; --budget-usd {self.budget_usd:g} does not fit: the {self.trials} trials bill at "
                           f"least ${self.least_usd:.2f} (a minute each); fewer trials (--max-trials) or a "
                           f"larger budget")
        return (head + f"; --budget-usd {self.budget_usd:g} fits if trials average under "
                       f"{format_duration(within)} each (past it, no trial starts that would pass the budget)")

    def to_dict(self) -> dict[str, object]:
        return {"trials": self.trials, "pool": self.pool, "pool_usd_per_hour": round(self.pool_hourly_usd, 4),
                "usd_if_each_trial_takes_an_hour": round(self.per_trial_hour_usd, 4),
                "least_usd": round(self.least_usd, 4), "budget_usd": self.budget_usd,
                "trial_seconds_within_budget": None if self.trial_s_within is None else round(self.trial_s_within),
                "fits": self.fits}
