"""TPU range reservations as the fake cloud holds them, read behind tpuctl's back: each cluster's
claim (an instance template ``tpuctl-range-CLUSTER``, provision/cloud/range_claims.py) and the
project-metadata value ``tpuctl-tpu-ranges`` that older tpuctl versions wrote."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from provision.cloud import range_claims

LEGACY_KEY = "tpuctl-tpu-ranges"


def legacy_ranges(fake: Any) -> dict[str, Any]:
    with urllib.request.urlopen(f"{fake.url}/compute/v1/projects/{fake.project}", timeout=10) as resp:
        meta = json.load(resp).get("commonInstanceMetadata") or {}
    for item in meta.get("items") or []:
        if item.get("key") == LEGACY_KEY:
            return json.loads(item["value"])
    return {}


def range_reservations(fake: Any) -> dict[str, dict[str, Any]]:
    """{cluster: {cidr, network, zone, ...}}: the claims, and the old value's entries."""
    out = dict(legacy_ranges(fake))
    for claim in range_claims.parse_all(fake.resources().get("instanceTemplates") or []):
        out[claim.cluster] = claim.record()
    return out
