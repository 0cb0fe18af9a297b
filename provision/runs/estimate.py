"""The estimate's arithmetic: time and dollars to the last step, per candidate TPU. Pure.

For one accelerator type in one zone and tier:

- **speed**: steps/s measured by past runs of the same work on that type (the ledger,
  :mod:`provision.runs.history`), else peak bf16 FLOP/s x a published utilisation / FLOPs per step;
- **interruptions** (spot and preemptible only): expected interruptions per billed hour (the
  ledger's count for the zone and type, else a cited default) x (the recovery time: the median of
  what past runs on the provider and type measured per preemption, else an assumed default; + the
  steps lost since the last checkpoint, on average half a checkpoint interval). With ``r`` per hour
  and ``c`` seconds each, a run that computes for ``T`` seconds takes ``T / (1 - r c / 3600)``:
  the interruptions of the extra time are counted too. Recovery time is billed in full here (the
  new TPU bills from its creation; a gone TPU bills nothing, so this errs high);
- **dollars**: that time at the list price of the type in the zone's region and tier;
- **input**: the examples/s per host the accelerator would consume, against the most the input
  pipeline delivered per host in past runs of the same work: above that, data may be the
  bottleneck, not the TPU.

Every figure carries its basis, in words, so a shown number is never bare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..catalog.accelerators import AcceleratorType
from ..catalog.performance import Figure, peak_flops, utilisation
from ..catalog.prices import Price
from .flops import StepFlops


@dataclass(frozen=True)
class Measured:
    """What past runs of the same work measured on one accelerator type (after warm-up, restores left out)."""

    steps_per_sec: float
    steps: int
    seconds: float
    runs: tuple[str, ...]
    warmup_s: float = 0.0           # a start's mean seconds to its first step (start-up, compilation)

    def basis(self) -> str:
        return (f"measured: {self.steps_per_sec:.4g} steps/s over {self.steps} steps in "
                f"{len(self.runs)} past run(s) on this type ({', '.join(self.runs[:3])}"
                + (" ..." if len(self.runs) > 3 else "") + f"), {self.warmup_s:.0f} s from a start to its first step")


@dataclass(frozen=True)
class Interruptions:
    """Expected interruptions per billed hour and what each costs, with where each figure comes from."""

    per_hour: float
    per_hour_basis: str
    recovery_s: float
    recovery_basis: str
    # preemptions of past runs the recovery time is the median of (0: the cited default, assumed)
    recoveries_measured: int = 0

    @classmethod
    def none(cls) -> Interruptions:
        return cls(0.0, "on demand: not preempted", 0.0, "-")

    def recovery_line(self) -> str:
        """``recovery 3m12s, measured over 7 preemption(s) of past v5litepod-8 runs on gcp (their
        median)``, or the default's ``assumed: ...``."""
        from ..basics.validate import format_duration

        return f"recovery {format_duration(self.recovery_s)}, {self.recovery_basis}"

    @classmethod
    def from_figures(cls, rate: Figure, recovery: Figure) -> Interruptions:
        return cls(rate.value, rate.flag(), recovery.value, recovery.flag())


@dataclass(frozen=True)
class Candidate:
    """One (type, zone, tier) to estimate, and what is known about it."""

    accelerator: AcceleratorType
    zone: str
    interruptible: bool
    spot: bool
    price: Price
    interruptions: Interruptions
    measured: Measured | None = None
    # the most examples/s per host the input pipeline delivered in past runs of this work
    input_per_host: float | None = None

    @property
    def tier(self) -> str:
        return "spot" if self.spot else "preemptible" if self.interruptible else "on-demand"


@dataclass(frozen=True)
class Estimate:
    accelerator_type: str
    zone: str
    region: str
    tier: str
    usd_per_hour: float
    steps: int
    steps_per_sec: float
    speed_source: str               # "measured" or "published" (or "assumed": carried over)
    compute_s: float                # the steps (and, measured, the first warm-up)
    interruptions: float            # expected count
    overhead_s: float               # what they cost in time
    total_s: float                  # math.inf: interrupted faster than it recovers
    total_usd: float
    basis: tuple[str, ...]
    input_note: str | None = None
    cheapest: bool = False
    fastest: bool = False
    # what each interruption's recovery is taken to cost, its basis, and over how many measured
    # preemptions (0: assumed); None for a tier that is not interrupted
    recovery_s: float | None = None
    recovery_basis: str | None = None
    recoveries_measured: int = 0

    @property
    def finishes(self) -> bool:
        return math.isfinite(self.total_s)

    def to_dict(self) -> dict[str, Any]:
        return {"accelerator_type": self.accelerator_type, "zone": self.zone, "region": self.region,
                "tier": self.tier, "usd_per_hour": round(self.usd_per_hour, 4), "steps": self.steps,
                "steps_per_sec": round(self.steps_per_sec, 6), "speed_source": self.speed_source,
                "compute_s": round(self.compute_s, 1), "interruptions": round(self.interruptions, 3),
                "overhead_s": round(self.overhead_s, 1),
                "total_s": round(self.total_s, 1) if self.finishes else None,
                "total_usd": round(self.total_usd, 4) if self.finishes else None,
                "basis": list(self.basis), "input_note": self.input_note,
                "cheapest": self.cheapest, "fastest": self.fastest,
                "recovery_s": round(self.recovery_s, 1) if self.recovery_s is not None else None,
                "recovery_basis": self.recovery_basis, "recoveries_measured": self.recoveries_measured}


class Unknowable(ValueError):
    """Neither a measured rate nor the FLOPs of a step: nothing to estimate from."""


class Baseless(Unknowable):
    """A figure came out, but nothing it rests on holds at that size; its text says why in full."""


# A FLOPs model (peak x utilisation / FLOPs per step) leaves out what does not scale with FLOPs:
# the start (compilation, a TPU's first step takes tens of seconds or more) and each step's fixed
# cost (dispatch, input, the host's loop). For a job whose steps it puts under a minute those
# dominate, so its figure (the tiny BERT's 300 steps: a few milliseconds) says only that the job is
# small: no estimate is given, and a first run measures the rate.
MIN_MODELLED_S = 60.0
# And no estimate at all under a second: a "0s" estimate is never shown.
MIN_ESTIMATE_S = 1.0


def speed(c: Candidate, step: StepFlops) -> tuple[float, str, list[str]]:
    """Steps/s of the work on the candidate, its source word and its basis lines."""
    if c.measured is not None and c.measured.steps_per_sec > 0:
        return c.measured.steps_per_sec, "measured", [c.measured.basis()]
    if not step.known:
        raise Unknowable(step.basis)
    peak = peak_flops(c.accelerator)
    u = utilisation(c.accelerator)
    rate = peak * u.value / float(step.flops or 1)
    lines = [f"FLOPs per step: {step.basis} = {float(step.flops or 0) / 1e12:.4g} TFLOP",
             (f"speed: {peak / 1e12:.0f} TFLOP/s peak bf16 ({c.accelerator.chips} chips x "
              f"{c.accelerator.generation.peak_bf16_tflops_per_chip:g}) x utilisation {u.value:.3f} ({u.flag()})")]
    return rate, ("published" if u.measured_here else "assumed"), lines


def duration(compute_s: float, *, per_hour: float, per_interruption_s: float) -> tuple[float, float]:
    """(total seconds, expected interruptions) of ``compute_s`` of steps interrupted ``per_hour``
    times an hour, each costing ``per_interruption_s``; total is math.inf when the interruptions
    eat every hour."""
    if per_hour <= 0 or compute_s <= 0:
        return max(0.0, compute_s), 0.0
    share = per_hour * per_interruption_s / 3600.0
    if share >= 1.0:
        return math.inf, math.inf
    total = compute_s / (1.0 - share)
    return total, per_hour * total / 3600.0


def lost_per_interruption_s(rate: float, checkpoint_steps: int, recovery_s: float) -> float:
    """Recovery plus, on average, half a checkpoint interval of steps redone."""
    return recovery_s + (checkpoint_steps / 2.0) / rate if rate > 0 else math.inf


def estimate(c: Candidate, step: StepFlops, *, steps: int, batch: int, checkpoint_steps: int) -> Estimate:
    """Time and dollars for ``steps`` steps of the work on one candidate. Raises :class:`Unknowable`
    (:class:`Baseless` when a figure would come out but rest on nothing: never a 0 s estimate)."""
    rate, source, basis = speed(c, step)
    # the first start's warm-up is measured with the rate (a recovery's is in its recovery time)
    compute_s = steps / rate + (c.measured.warmup_s if c.measured is not None and source == "measured" else 0.0)
    each = lost_per_interruption_s(rate, checkpoint_steps, c.interruptions.recovery_s)
    total_s, count = duration(compute_s, per_hour=c.interruptions.per_hour, per_interruption_s=each)
    if source != "measured" and compute_s < MIN_MODELLED_S:
        raise Baseless(f"the {source} speed of a {c.accelerator.name} ({rate:.3g} steps/s from its FLOPs) puts "
                       f"{steps} steps at {_hours(compute_s)}, too little for a FLOPs model: start-up and each "
                       f"step's fixed cost, which it leaves out, rule a job this small; train it once on the type "
                       f"and its measured rate is used")
    if total_s < MIN_ESTIMATE_S:
        raise Baseless(f"the measured {rate:.4g} steps/s puts {steps} steps under a second")
    usd = c.price.usd_per_hour * total_s / 3600.0 if math.isfinite(total_s) else math.inf
    basis = [*basis, f"{steps} steps at {rate:.4g} steps/s" + (
        f" + the warm-up = {_hours(compute_s)}" if compute_s > steps / rate else f" = {_hours(compute_s)} of steps")]
    if c.interruptible:
        basis.append(c.interruptions.recovery_line())
        basis.append(f"interruptions: {c.interruptions.per_hour:.4g}/h ({c.interruptions.per_hour_basis}) x "
                     f"({c.interruptions.recovery_s:.0f} s recovery + "
                     f"{checkpoint_steps / 2:g} steps redone): {count:.2f} expected, "
                     + (f"+{_hours(total_s - compute_s)}" if math.isfinite(total_s)
                        else "more than every hour: it never finishes"))
    basis.append(f"price: ${c.price.usd_per_hour:.4g}/h ({c.price.label()})")
    return Estimate(
        accelerator_type=c.accelerator.name, zone=c.zone, region=c.price.region, tier=c.tier,
        usd_per_hour=c.price.usd_per_hour, steps=steps, steps_per_sec=rate, speed_source=source,
        compute_s=compute_s, interruptions=count, overhead_s=total_s - compute_s, total_s=total_s,
        total_usd=usd, basis=tuple(basis), input_note=input_note(c, rate, batch),
        **({"recovery_s": c.interruptions.recovery_s, "recovery_basis": c.interruptions.recovery_basis,
            "recoveries_measured": c.interruptions.recoveries_measured} if c.interruptible else {}))


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 36 else f"{seconds:.2g} s"


def input_note(c: Candidate, rate: float, batch: int) -> str | None:
    """When data, not the TPU, may set the pace: the accelerator would consume more examples/s per
    host than the input pipeline ever delivered in past runs of the work."""
    need = rate * batch / max(1, c.accelerator.hosts)
    if c.input_per_host is None:
        return None
    if need > c.input_per_host * 1.05:
        return (f"input-bound? this TPU would consume {need:,.0f} examples/s per host; the input pipeline "
                f"delivered at most {c.input_per_host:,.0f} per host in past runs: data, not the TPU, may "
                f"set the pace")
    return None


def rank(estimates: Sequence[Estimate]) -> list[Estimate]:
    """The estimates, the cheapest and the fastest marked (the first of equals), in the order given."""
    done = [e for e in estimates if e.finishes]
    if not done:
        return list(estimates)
    cheapest = min(done, key=lambda e: e.total_usd)
    fastest = min(done, key=lambda e: e.total_s)
    return [replace(e, cheapest=e is cheapest, fastest=e is fastest) for e in estimates]
