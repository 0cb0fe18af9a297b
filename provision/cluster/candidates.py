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

Capacity (``--capacity spot,flex-start,on-demand``) is the outermost order: every (type, zone)
of the first capacity is tried before any of the next, as the user listed them, and a failure
blocks only its capacity (a spot stockout leaves flex-start and on-demand to try there). A
Compute Engine stockout that names the zones with capacity (``zonesAvailable``) blocks the other
zones of its region for that type and capacity and moves the named ones ahead, as zone failover
does (:mod:`provision.cluster.failover`).

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
    capacity: str = ""             # how it is paid for ("spot", "flex-start", ...); "": the spec's own

    @property
    def name(self) -> str:
        return self.accelerator.name

    @property
    def usd_per_pflops_hour(self) -> float | None:
        """List price of one peak bf16 PFLOP/s for an hour: what the cheapest-first order compares."""
        if self.usd_per_hour is None or not self.accelerator.peak_bf16_flops:
            return None
        return self.usd_per_hour / (self.accelerator.peak_bf16_flops / 1e15)

    def describe(self, capacity: bool = False) -> str:
        """``v6e-8 in us-east5-b ($9.72/hour, ...)``; with ``capacity``, how it is paid for too."""
        what = f"{self.name} in {self.zone}" + (f" ({self.capacity})" if capacity and self.capacity else "")
        if self.usd_per_hour is None:
            return f"{what} (price unknown)"
        per = self.usd_per_pflops_hour
        return (f"{what} (${self.usd_per_hour:.2f}/hour"
                + (f", ${per:.2f} per peak bf16 PFLOP/s-hour" if per is not None else "") + ")")


def rank(types: Sequence[AcceleratorType], zones_of: Mapping[str, Sequence[str]], price: PriceOf, *,
         in_order: bool = False, capacities: Sequence[str] = ("",),
         allows: Callable[[AcceleratorType, str, str], bool] | None = None,
         price_for: Callable[[str], PriceOf] | None = None) -> list[Candidate]:
    """Every (type, zone, capacity) candidate, in the order to try them.

    ``zones_of`` maps a type's name to the zones that offer it, in the user's failover order;
    ``capacities`` are tried in order, each over every (type, zone) that ``allows`` it, priced
    by ``price_for(capacity)`` (else ``price``). Within a capacity: cheapest first by price per
    peak PFLOP/s-hour; a candidate without a price goes after every priced one; ties keep the
    order given (types as listed, then zones in failover order).
    """
    out: list[tuple[tuple, Candidate]] = []
    for ci, cap in enumerate(capacities):
        price_of = price_for(cap) if price_for else price
        for ti, acc in enumerate(types):
            for zi, zone in enumerate(zones_of.get(acc.name, ())):
                if allows is not None and not allows(acc, zone, cap):
                    continue
                cand = Candidate(acc, zone, price_of(acc, zone), capacity=cap)
                per = cand.usd_per_pflops_hour
                key = (ci, ti, zi) if in_order else (ci, per is None, per if per is not None else 0.0, ti, zi)
                out.append((key, cand))
    return [c for _k, c in sorted(out, key=lambda kc: kc[0])]


@dataclass
class CandidatePlan:
    """What has failed where, and so which candidate comes next.

    With one type it reads as zone failover always has ("us-central1-b: stockout; region
    us-central1: quota"); with several, every entry names its type or generation.
    """

    candidates: tuple[Candidate, ...]
    blocked: dict[tuple[str, str, str], str] = field(default_factory=dict)       # (type, zone, capacity) -> why
    blocked_gen_zone: dict[tuple[str, str, str], str] = field(default_factory=dict)    # (generation, zone, capacity)
    blocked_gen_region: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (generation, region, capacity)
    stopped: Failure | None = None
    tried: list[Candidate] = field(default_factory=list)
    preferred: set[tuple[str, str, str]] = field(default_factory=set)  # (type, zone, capacity) said to have room

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.name for c in self.candidates))

    @property
    def several(self) -> bool:
        return len({c.name for c in self.candidates}) > 1

    @property
    def capacities(self) -> bool:
        """Whether more than one capacity is tried (then every label names its capacity)."""
        return len({c.capacity for c in self.candidates}) > 1

    def label(self, cand: Candidate) -> str:
        where = f"{cand.name} in {cand.zone}" if self.several else cand.zone
        return f"{where} ({cand.capacity})" if self.capacities else where

    def _say(self, what: str, place: str, cap: str) -> str:
        where = f"{what} in {place}" if self.several else place
        return f"{where} ({cap})" if self.capacities else where

    def record(self, cand: Candidate, failure: Failure) -> None:
        if cand not in self.tried:
            self.tried.append(cand)
        why = failure.kind.value
        gen = cand.accelerator.generation.name
        cap = cand.capacity
        if failure.scope == Scope.CLOUD:
            self.stopped = failure
        elif failure.kind == Kind.ZONE_QUOTA:
            self.blocked_gen_zone[(gen, cand.zone, cap)] = why
        elif failure.scope == Scope.REGION:
            self.blocked_gen_region[(gen, region_of(cand.zone), cap)] = why
        else:
            # a stockout, a zone that does not offer this type (so worded: "... not supported for
            # accelerator type ... in location", "invalid AcceleratorType ... for zone"), or a failure
            # that keeps recurring there: this type in this zone, paid for this way
            self.blocked[(cand.name, cand.zone, cap)] = why
            if failure.zones_available:
                region = region_of(cand.zone)
                for other in self.candidates:
                    key = (other.name, other.zone, other.capacity)
                    if (other.name, other.capacity) != (cand.name, cap) or region_of(other.zone) != region:
                        continue
                    if other.zone in failure.zones_available:
                        self.preferred.add(key)
                    elif key not in self.blocked:
                        self.blocked[key] = f"{why} (not in zonesAvailable of {cand.zone})"

    def available(self, cand: Candidate) -> bool:
        gen, cap = cand.accelerator.generation.name, cand.capacity
        return ((cand.name, cand.zone, cap) not in self.blocked and (gen, cand.zone, cap) not in self.blocked_gen_zone
                and (gen, region_of(cand.zone), cap) not in self.blocked_gen_region)

    def next(self) -> Candidate | None:
        """The next candidate to try, or None: stop. Among the next one's type and capacity, a zone
        Compute said has capacity (zonesAvailable) goes first."""
        if self.stopped is not None:
            return None
        first = next((c for c in self.candidates if self.available(c)), None)
        if first is None:
            return None
        return next((c for c in self.candidates if self.available(c) and (c.name, c.capacity) ==
                     (first.name, first.capacity) and (c.name, c.zone, c.capacity) in self.preferred), first)

    def untried(self) -> list[Candidate]:
        return [c for c in self.candidates if c not in self.tried]

    def explain(self) -> str:
        """What failed where."""
        parts = [f"{self._say(t, z, c)}: {why}" for (t, z, c), why in self.blocked.items()]
        parts += [f"{self._say(g, z, c)}: {why}" for (g, z, c), why in self.blocked_gen_zone.items()]
        parts += [f"{self._say(g, f'region {r}', c)}: {why}" for (g, r, c), why in self.blocked_gen_region.items()]
        if self.stopped is not None and self.tried:
            parts.append(f"{self.label(self.tried[-1])}: {self.stopped.kind.value}")
        return "; ".join(parts) or "nothing tried"
