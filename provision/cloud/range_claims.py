"""TPU range reservations as per-cluster claims, and who holds a range when claims overlap (pure).

A TPU Node's block used to be reserved in one JSON value of the project's metadata, rewritten by
compare-and-swap on the project's metadata fingerprint: every concurrent ``up`` in the project
contended on that one value (20 at once retried the swap about 30 times), and Compute caps a
metadata value at 256 KB (about 2,500 clusters). Now each cluster claims its block on a resource
of its own, written once, and one filtered list reads every claim. Two clusters may claim
overlapping blocks at the same moment; both then read the claims, and the claim created first
(then the lower cluster name) holds the block: the other deletes its claim and picks again.

That is safe because a claim is listed only once it exists: whoever lists after creating its own
claim sees every claim created before its own, so for any two overlapping claims at least the later
one sees the earlier one and gives way. The old project-metadata value is still read, never written
again except to drop a released cluster's entry.

The claim's resource is a Compute Engine instance template named ``tpuctl-range-CLUSTER``: global,
free, created or deleted in one call (a second create of the name fails), listed with a filter on
its name, with a creation time and a description that holds the claim. Nothing is created from it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

PREFIX = "tpuctl-range-"
LIST_FILTER = f'name eq "{PREFIX}.*"'
MACHINE_TYPE = "e2-micro"           # an instance template must name one; nothing is ever created from it
_MAX_NAME = 63                     # Compute Engine resource names: [a-z]([-a-z0-9]{0,61}[a-z0-9])?
_MAX_DESCRIPTION = 2048            # what tpuctl reads of a description (its own are ~150 bytes)


@dataclass(frozen=True)
class Claim:
    """One cluster's claim on a TPU range of a network."""

    cluster: str
    cidr: str
    network: str
    zone: str
    created: datetime               # when Compute created the claim's resource (aware)
    resource: str = ""              # the resource's name

    def overlaps(self, other: Claim) -> bool:
        return (self.network == other.network
                and ipaddress.ip_network(self.cidr).overlaps(ipaddress.ip_network(other.cidr)))

    def precedes(self, other: Claim) -> bool:
        """The deterministic order of claims: created first, then the lower cluster name."""
        return (self.created, self.cluster) < (other.created, other.cluster)

    def record(self) -> dict[str, Any]:
        """The reservation as ``Provider.reservations`` reports it."""
        return {"cidr": self.cidr, "network": self.network, "zone": self.zone, "at": int(self.created.timestamp())}


def resource_name(cluster: str) -> str:
    """The claim's resource name: ``tpuctl-range-CLUSTER``, shortened with a digest of the full
    name when that would pass Compute's 63 characters (the cluster is in the description too)."""
    name = f"{PREFIX}{cluster}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:10]
    return f"{name[:_MAX_NAME - 11].rstrip('-')}-{digest}"


def description(cluster: str, cidr: str, network: str, zone: str) -> str:
    """What the claim says, in the description of its resource (one JSON object)."""
    return json.dumps({"tpuctl-range": {"cluster": cluster, "cidr": cidr, "network": network, "zone": zone}},
                      sort_keys=True)


def parse(resource: dict[str, Any]) -> Claim | None:
    """The claim a listed resource holds; None for anything that is not a well-formed claim."""
    text = resource.get("description")
    stamp = resource.get("creationTimestamp")
    if not isinstance(text, str) or len(text) > _MAX_DESCRIPTION or not isinstance(stamp, str):
        return None
    try:
        rec = json.loads(text).get("tpuctl-range")
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        fields = {k: rec[k] for k in ("cluster", "cidr", "network", "zone")}
        if not all(isinstance(v, str) for v in fields.values()) or created.tzinfo is None:
            return None
        cidr = str(ipaddress.ip_network(fields["cidr"]))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    name = resource.get("name")
    if not isinstance(name, str) or name != resource_name(fields["cluster"]):
        return None
    return Claim(cluster=fields["cluster"], cidr=cidr, network=fields["network"], zone=fields["zone"],
                 created=created, resource=name)


def parse_all(resources: list[dict[str, Any]]) -> list[Claim]:
    return [c for c in (parse(r) for r in resources) if c is not None]


def holder(mine: Claim, claims: list[Claim]) -> Claim | None:
    """The claim of another cluster that holds ``mine``'s block before it (None: ``mine`` holds it)."""
    rivals = [c for c in claims if c.cluster != mine.cluster and c.overlaps(mine) and c.precedes(mine)]
    return min(rivals, key=lambda c: (c.created, c.cluster)) if rivals else None


def legacy_holder(cluster: str, block: str, network: str, legacy: dict[str, Any]) -> str | None:
    """Another cluster whose reservation in the old project-metadata value overlaps ``block``."""
    net = ipaddress.ip_network(block)
    for other, rec in legacy.items():
        if other == cluster or not isinstance(rec, dict) or rec.get("network") != network:
            continue
        try:
            if ipaddress.ip_network(str(rec.get("cidr"))).overlaps(net):
                return other
        except ValueError:
            continue
    return None
