"""Pure zone failover: given the zones the user allowed and what failed where, which zone next.

A stockout blocks its zone, a quota error its whole region (every zone of a region shares the
quota), and anything of cloud scope stops the search: trying another zone cannot grant a role.
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

    def record(self, zone: str, failure: Failure) -> None:
        if failure.scope == Scope.ZONE:
            self.blocked_zones[zone] = failure.kind.value
        elif failure.scope == Scope.REGION:
            self.blocked_regions[region_of(zone)] = failure.kind.value
        elif failure.scope == Scope.CLOUD:
            self.stopped = failure

    def available(self, zone: str) -> bool:
        return zone not in self.blocked_zones and region_of(zone) not in self.blocked_regions

    def next_zone(self) -> str | None:
        if self.stopped is not None:
            return None
        for z in self.zones:
            if self.available(z):
                return z
        return None

    def explain(self) -> str:
        parts = [f"{z}: {why}" for z, why in self.blocked_zones.items()]
        parts += [f"region {r}: {why}" for r, why in self.blocked_regions.items()]
        return "; ".join(parts) or "no zone tried"
