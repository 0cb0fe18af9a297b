"""Pure zone failover: given the zones the user allowed and what failed where, which zone next.

Each failure blocks what its kind says (``failures.SCOPE_OF_KIND``): a stockout, a per-zone quota
or a zone not served to the project blocks its zone; a regional quota every zone of its region
(they share it); anything of cloud scope (a global quota, a missing role, a disabled API) stops
the search: trying another zone cannot grant a role. A Compute stockout that names the zones
that have capacity (``zonesAvailable``) also blocks the zones of its region it does not name, and
moves the named ones ahead.

``tried`` is every zone a failure was recorded for, in order: what a message may say was tried
(a zone skipped for its region's quota was never asked). A failure that stops the search is
reported as itself by the caller, never as "no zone could".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..basics.validate import region_of
from ..cloud.failures import Failure, Scope


@dataclass
class ZonePlan:
    zones: tuple[str, ...]
    blocked_zones: dict[str, str] = field(default_factory=dict)     # zone -> why
    blocked_regions: dict[str, str] = field(default_factory=dict)   # region -> why
    stopped: Failure | None = None
    preferred: tuple[str, ...] = ()                                 # zones said to have capacity
    tried: list[str] = field(default_factory=list)                  # zones asked, in order

    def record(self, zone: str, failure: Failure) -> None:
        if zone not in self.tried:
            self.tried.append(zone)
        if failure.scope == Scope.ZONE:
            self.blocked_zones[zone] = failure.kind.value
            if failure.zones_available:
                region = region_of(zone)
                for z in self.zones:
                    if region_of(z) == region and z not in failure.zones_available and z not in self.blocked_zones:
                        self.blocked_zones[z] = f"{failure.kind.value} (not in zonesAvailable of {zone})"
                self.preferred = tuple(z for z in failure.zones_available if z not in self.preferred) + self.preferred
        elif failure.scope == Scope.REGION:
            self.blocked_regions[region_of(zone)] = failure.kind.value
        elif failure.scope == Scope.CLOUD:
            self.stopped = failure

    def available(self, zone: str) -> bool:
        return zone not in self.blocked_zones and region_of(zone) not in self.blocked_regions

    def next_zone(self, region: str | None = None) -> str | None:
        """The next zone to try (in ``region`` only, when given), or None: stop."""
        if self.stopped is not None:
            return None
        candidates = [z for z in self.zones if self.available(z) and (region is None or region_of(z) == region)]
        for z in candidates:
            if z in self.preferred:
                return z
        return candidates[0] if candidates else None

    def explain(self) -> str:
        """What failed where: "us-central1-b: stockout; region europe-west4: quota"."""
        parts = [f"{z}: {why}" for z, why in self.blocked_zones.items()]
        parts += [f"region {r}: {why}" for r, why in self.blocked_regions.items()]
        if self.stopped is not None and self.tried:
            parts.append(f"{self.tried[-1]}: {self.stopped.kind.value}")
        return "; ".join(parts) or "no zone tried"

    def untried(self) -> list[str]:
        """The allowed zones never asked (skipped with their region, or not reached)."""
        return [z for z in self.zones if z not in self.tried]
