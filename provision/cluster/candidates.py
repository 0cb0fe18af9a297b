"""Which TPU to ask for next when several accelerator types would do.

``--accelerator-type v5litepod-8,v6e-8,v3-8`` names types that would all serve the job. Each
(type, zone) pair the zones offer is a candidate; they are tried cheapest first by list price per
peak bf16 PFLOP/s-hour in that zone's region and tier (spot prices of one type differ by region
by up to 6x, so the order is per zone, not per type), or in the order given (``--in-order``: the
types as listed, each over the zones in failover order).

A failure blocks what its scope says, as zone failover does for one type
(:mod:`provision.cluster.failover`), with one refinement: Cloud TPU quotas are per generation
("Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' ... in region us-east5"), so a
zonal or regional quota blocks that generation there and leaves other generations to try; a
stockout, or a zone that does not offer a type, blocks the exact (type, zone); a failure of cloud
scope (a missing role, a global quota) stops.

Pure: prices and offerings come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..basics.validate import region_of
from ..catalog.accelerators import AcceleratorType
from ..cloud.failures import Failure, Kind, Scope

# price of a whole slice per hour in a zone's region and tier; None when unknown
PriceOf = Callable[[AcceleratorType, str], "float | None"]


@dataclass(frozen=True)
class Candidate:
    accelerator: AcceleratorType
    zone: str
    usd_per_hour: float | None = None

    @property
    def name(self) -> str:
        return self.accelerator.name

    @property
    def usd_per_pflops_hour(self) -> float | None:
        """List price of one peak bf16 PFLOP/s for an hour: what the cheapest-first order compares."""
        if self.usd_per_hour is None or not self.accelerator.peak_bf16_flops:
            return None
        return self.usd_per_hour / (self.accelerator.peak_bf16_flops / 1e15)

    def describe(self) -> str:
        if self.usd_per_hour is None:
            return f"{self.name} in {self.zone} (price unknown)"
        per = self.usd_per_pflops_hour
        return (f"{self.name} in {self.zone} (${self.usd_per_hour:.2f}/hour"
                + (f", ${per:.2f} per peak bf16 PFLOP/s-hour" if per is not None else "") + ")")


def rank(types: Sequence[AcceleratorType], zones_of: Mapping[str, Sequence[str]], price: PriceOf, *,
         in_order: bool = False) -> list[Candidate]:
    """Every (type, zone) candidate, in the order to try them.

    ``zones_of`` maps a type's name to the zones that offer it, in the user's failover order.
    Cheapest first by price per peak PFLOP/s-hour; a candidate without a price goes after every
    priced one; ties keep the order given (types as listed, then zones in failover order).
    """
    out: list[tuple[tuple, Candidate]] = []
    for ti, acc in enumerate(types):
        for zi, zone in enumerate(zones_of.get(acc.name, ())):
            cand = Candidate(acc, zone, price(acc, zone))
            per = cand.usd_per_pflops_hour
            key = (ti, zi) if in_order else (per is None, per if per is not None else 0.0, ti, zi)
            out.append((key, cand))
    return [c for _k, c in sorted(out, key=lambda kc: kc[0])]


@dataclass
class CandidatePlan:
    """What has failed where, and so which candidate comes next.

    With one type it reads as zone failover always has ("us-central1-b: stockout; region
    us-central1: quota"); with several, every entry names its type or generation.
    """

    candidates: tuple[Candidate, ...]
    blocked: dict[tuple[str, str], str] = field(default_factory=dict)       # (type, zone) -> why
    blocked_gen_zone: dict[tuple[str, str], str] = field(default_factory=dict)    # (generation, zone)
    blocked_gen_region: dict[tuple[str, str], str] = field(default_factory=dict)  # (generation, region)
    stopped: Failure | None = None
    tried: list[Candidate] = field(default_factory=list)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.name for c in self.candidates))

    @property
    def several(self) -> bool:
        return len({c.name for c in self.candidates}) > 1

    def label(self, cand: Candidate) -> str:
        return f"{cand.name} in {cand.zone}" if self.several else cand.zone

    def record(self, cand: Candidate, failure: Failure) -> None:
        if cand not in self.tried:
            self.tried.append(cand)
        why = failure.kind.value
        gen = cand.accelerator.generation.name
        if failure.scope == Scope.CLOUD:
            self.stopped = failure
        elif failure.kind == Kind.ZONE_QUOTA:
            self.blocked_gen_zone[(gen, cand.zone)] = why
        elif failure.scope == Scope.REGION:
            self.blocked_gen_region[(gen, region_of(cand.zone))] = why
        else:
            # a stockout, a zone that does not offer this type (so worded: "... not supported for
            # accelerator type ... in location", "invalid AcceleratorType ... for zone"), or a failure
            # that keeps recurring there: this type in this zone
            self.blocked[(cand.name, cand.zone)] = why

    def available(self, cand: Candidate) -> bool:
        gen = cand.accelerator.generation.name
        return ((cand.name, cand.zone) not in self.blocked and (gen, cand.zone) not in self.blocked_gen_zone
                and (gen, region_of(cand.zone)) not in self.blocked_gen_region)

    def next(self) -> Candidate | None:
        """The next candidate to try, or None: stop."""
        if self.stopped is not None:
            return None
        return next((c for c in self.candidates if self.available(c)), None)

    def untried(self) -> list[Candidate]:
        return [c for c in self.candidates if c not in self.tried]

    def explain(self) -> str:
        """What failed where."""
        many = self.several
        parts = [f"{t} in {z}: {why}" if many else f"{z}: {why}" for (t, z), why in self.blocked.items()]
        parts += [f"{g} in {z}: {why}" if many else f"{z}: {why}" for (g, z), why in self.blocked_gen_zone.items()]
        parts += [f"{g} in region {r}: {why}" if many else f"region {r}: {why}"
                  for (g, r), why in self.blocked_gen_region.items()]
        if self.stopped is not None and self.tried:
            parts.append(f"{self.label(self.tried[-1])}: {self.stopped.kind.value}")
        return "; ".join(parts) or "nothing tried"
