"""A run's spending and its hard caps: what it costs, and whether it may go on. Pure.

**The accounting** (:func:`usd`), the one the sweep budget uses too: a TPU costs its list price per
hour for as long as it is held. The supervisor adds each interval between two of its looks at
the price of the TPU it saw billing at the first of them (none while the TPU is gone, PREEMPTED
or TERMINATED), by the state the run was in (``tpuctl cost``'s states).

**The caps** (:func:`decide`), given the spend, the hourly price, the measured steps/s, the
checkpoint interval, the clock and the caps:

- budget: a warning once 80 % is spent; a stop when the spend would pass the budget before the
  next checkpoint (with the time a stop itself takes), so the run ends on a checkpoint it paid for;
- deadline: a warning once 80 % of the time from the run's start to the deadline is gone; a stop
  when even the measured rate, without another interruption, would finish after it (or when it
  is reached);
- neither stops a run before it has a measured rate, unless the money or the time is already up.

A stop is the graceful one (SIGTERM, a checkpoint, exit 42) without a recreate, then the TPU's
deletion: the caller does it.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass

from ..basics.validate import LONGEST_POLL_S, format_duration

WARN_FRACTION = 0.8
# what a stop takes on top of the next poll: the job's checkpoint and exit, the TPU's deletion
STOP_S = 60.0
# a deadline must be further away than a stop and one look (at most LONGEST_POLL_S apart), or the
# first look stops the run before its first step
DEADLINE_MARGIN_S = STOP_S + LONGEST_POLL_S


def usd(hourly_usd: float, seconds: float) -> float:
    """List price x time held: the cost of ``seconds`` of a TPU at ``hourly_usd``."""
    return hourly_usd * max(0.0, seconds) / 3600.0


class Verdict(str, enum.Enum):
    CONTINUE = "continue"
    WARN = "warn"
    STOP = "stop"


@dataclass(frozen=True)
class Caps:
    budget_usd: float | None = None
    deadline: float | None = None         # unix seconds
    started_at: float = 0.0               # the run's creation: where the deadline's 80 % counts from

    @property
    def any(self) -> bool:
        return self.budget_usd is not None or self.deadline is not None


@dataclass(frozen=True)
class Looked:
    """What the supervisor knows at one look."""

    now: float
    spent_usd: float
    hourly_usd: float
    steps_per_sec: float | None           # measured after warm-up, restores left out; None: not yet
    step: int
    num_train_steps: int
    save_checkpoints_steps: int
    stop_s: float = STOP_S


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    kind: str | None = None               # "budget" or "deadline"
    reason: str = ""


def check(budget_usd: float | None, deadline: str | None, *, now: float, usd_per_hour: float | None,
          accelerator_type: str) -> Caps:
    """The caps a run asks for (``--budget-usd`` / ``--deadline`` or the spec's keys), checked before
    anything is staged: a positive budget, a deadline still ahead, a price to count the budget with.
    Raises UsageError (exit 2) with the fix."""
    from jobs.spec import SpecError, parse_deadline

    from ..basics.errors import UsageError

    if budget_usd is not None and not budget_usd > 0:
        raise UsageError(f"--budget-usd {budget_usd:g} leaves nothing to spend",
                         hint="give a positive amount in US dollars, e.g. --budget-usd 50")
    if budget_usd is not None and (usd_per_hour is None or not usd_per_hour > 0):
        raise UsageError(f"no price is known for {accelerator_type}: a budget cannot be counted against it",
                         hint="drop --budget-usd (and budget_usd in the spec), or use a type tpuctl prices "
                              "(tpuctl cost lists the prices)")
    if budget_usd is not None and budget_usd <= usd(usd_per_hour, STOP_S):
        raise UsageError(f"--budget-usd {budget_usd:g} does not cover the {STOP_S:.0f} s a stop takes on a "
                         f"{accelerator_type} at ${usd_per_hour:.4g}/h: the run would be stopped at once",
                         hint=f"give more than ${usd(usd_per_hour, STOP_S):.4f}")
    when = None
    if deadline is not None:
        try:
            when = parse_deadline(deadline)
        except SpecError as exc:
            raise UsageError(str(exc)) from None
        if when <= now:
            raise UsageError(f"--deadline {deadline} is in the past (it is now "
                             f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(now))})",
                             hint="give a time ahead, e.g. --deadline "
                                  f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(now + 86400))}")
        if when - now <= DEADLINE_MARGIN_S:
            raise UsageError(f"--deadline {deadline} is {when - now:.0f} s away, within the "
                             f"{DEADLINE_MARGIN_S:.0f} s a stop and a look take: the run would be stopped at once",
                             hint=f"give a deadline more than {DEADLINE_MARGIN_S:.0f} s ahead, e.g. --deadline "
                                  f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(now + 86400))}")
    return Caps(budget_usd=budget_usd, deadline=when, started_at=now)


def show_deadline(when: float) -> str:
    """A deadline as ``train``, ``status`` and the caps' lines show it: to the second, with its zone
    (``2026-12-06 09:15:30 UTC``), so one set seconds ahead is not shown as a minute already gone."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(when))


def seconds_to_next_checkpoint(o: Looked) -> float | None:
    """At the measured rate; None without one."""
    if not o.steps_per_sec:
        return None
    every = max(1, o.save_checkpoints_steps)
    nxt = min(o.num_train_steps, (o.step // every + 1) * every)
    return max(0, nxt - o.step) / o.steps_per_sec


def finish_at(o: Looked) -> float | None:
    """When the last step is done at the measured rate with no further interruption; None without a rate."""
    if not o.steps_per_sec:
        return None
    return o.now + max(0, o.num_train_steps - o.step) / o.steps_per_sec


def decide(caps: Caps, o: Looked, *, warned: frozenset[str] = frozenset()) -> Decision:
    """Stop, warn (once per kind: ``warned`` are those already given) or go on."""
    stop = _budget_stop(caps, o) or _deadline_stop(caps, o)
    if stop is not None:
        return stop
    if caps.budget_usd is not None and "budget" not in warned and \
            o.spent_usd >= WARN_FRACTION * caps.budget_usd:
        return Decision(Verdict.WARN, "budget", f"${o.spent_usd:.4f} spent: {o.spent_usd / caps.budget_usd:.0%} "
                                                f"of the ${caps.budget_usd:g} budget")
    if caps.deadline is not None and "deadline" not in warned:
        window = caps.deadline - caps.started_at
        if window > 0 and o.now - caps.started_at >= WARN_FRACTION * window:
            return Decision(Verdict.WARN, "deadline", f"{(o.now - caps.started_at) / window:.0%} of the time "
                                                      f"to the deadline is gone, {_left(caps.deadline - o.now)} left")
    return Decision(Verdict.CONTINUE)


def _budget_stop(caps: Caps, o: Looked) -> Decision | None:
    if caps.budget_usd is None:
        return None
    to_ckpt = seconds_to_next_checkpoint(o)
    ahead = (to_ckpt or 0.0) + o.stop_s
    then = o.spent_usd + usd(o.hourly_usd, ahead)
    if then <= caps.budget_usd:
        return None
    where = (f"by the next checkpoint ({_left(to_ckpt)} away) and the stop" if to_ckpt is not None
             else "by the time a stop takes")
    return Decision(Verdict.STOP, "budget",
                    f"budget: ${o.spent_usd:.4f} of ${caps.budget_usd:g} spent at ${o.hourly_usd:.4g}/h; "
                    f"${then:.4f} {where} would pass it")


def _deadline_stop(caps: Caps, o: Looked) -> Decision | None:
    if caps.deadline is None:
        return None
    if o.now + o.stop_s >= caps.deadline:
        return Decision(Verdict.STOP, "deadline", f"deadline: reached at step {o.step}/{o.num_train_steps}")
    end = finish_at(o)
    if end is None or end <= caps.deadline:
        return None
    return Decision(Verdict.STOP, "deadline",
                    f"deadline: {o.num_train_steps - o.step} steps left at the measured "
                    f"{o.steps_per_sec:.4g} steps/s take {_left(end - o.now)}, "
                    f"{_left(end - caps.deadline)} past the deadline")


def crossings(caps: Caps, *, projected_usd: float | None, projected_end: float | None,
              over: dict[str, bool]) -> list[tuple[str, bool, str]]:
    """The caps the projection crossed since the last look, in either direction: (kind, now over, line).
    ``over`` is where the projection stood at the last look (a kind missing: never compared)."""
    out = []
    if caps.budget_usd is not None and projected_usd is not None and math.isfinite(projected_usd):
        now_over = projected_usd > caps.budget_usd
        if now_over != over.get("budget", False):
            where = "over" if now_over else "back within"
            out.append(("budget", now_over,
                        f"projected total ${projected_usd:.4f} {where} the ${caps.budget_usd:g} budget"))
    if caps.deadline is not None and projected_end is not None and math.isfinite(projected_end):
        now_over = projected_end > caps.deadline
        if now_over != over.get("deadline", False):
            line = (f"projected finish {_left(projected_end - caps.deadline)} after the deadline" if now_over
                    else f"projected finish {_left(caps.deadline - projected_end)} before the deadline again")
            out.append(("deadline", now_over, line))
    return out


def _left(seconds: float | None) -> str:
    return format_duration(max(0.0, seconds or 0.0))
