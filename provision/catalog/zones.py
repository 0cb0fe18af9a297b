"""Which zones offer which TPU generation: the bundled table, one source per row.

On Google Cloud, ``up`` asks each zone (``acceleratorTypes.get``) and never reads this table to
decide. The local provider has no zone to ask: it reads this table, so a rehearsal refuses what
Google refuses (``v4-8`` in us-central1-b, a zone such as ``europe-west9-z`` where no TPU is
offered) with the same line ``up`` prints on Google Cloud. The fake cloud in tests serves the same
rows, so both stand-ins for Google agree with each other and with the sources below.

Rows are per generation, as the fake serves them: Google's page also limits some sizes to fewer
zones (v2 and v3 pods), which neither stand-in rehearses. Each row names where it comes from:

- :data:`PAGE`: the zone is listed for the generation on Google's "TPU regions and zones" page;
- :data:`PRICED`: skypilot-catalog's ``vms.csv`` (the bundled prices' source) prices the
  generation's slices in that zone;
- :data:`EARLIER`: earlier editions of Google's page listed it; the 2026-11 edition does not, so
  Google Cloud may refuse what a rehearsal accepts there, and ``up`` says so.

Pure: no I/O.
"""

from __future__ import annotations

from .accelerators import AcceleratorType

PAGE = "cloud.google.com/tpu/docs/regions-zones (read 2026-11)"
PRICED = "skypilot-catalog v8 gcp/vms.csv @ 006059e (a priced row for the zone)"
TPU7X_ZONE = ("skypilot-org/skypilot sky/clouds/gcp.py _COMPUTE_TPU_FLEX_START_ZONES @a790cb6 "
              "(tpu7x-standard-4t requested there)")
EARLIER = "earlier editions of cloud.google.com/tpu/docs/regions-zones (not on the 2026-11 edition)"

# generation -> ((zone, source), ...); the first zone is the one an error suggests
TPU_ZONES: dict[str, tuple[tuple[str, str], ...]] = {
    "v2": (("us-central1-b", PAGE), ("us-central1-c", PAGE), ("us-central1-f", EARLIER),
           ("europe-west4-a", PRICED), ("asia-east1-c", PRICED)),
    "v3": (("europe-west4-a", PRICED), ("us-central1-a", PAGE), ("us-central1-b", PAGE)),
    "v4": (("us-central2-b", PAGE),),
    "v5litepod": (("us-west4-a", PAGE), ("us-central1-a", PAGE), ("us-south1-a", PAGE), ("us-west1-c", PAGE),
                  ("us-east1-c", EARLIER), ("europe-west4-b", PRICED)),
    "v5p": (("us-east5-a", PAGE), ("us-central1-a", PAGE), ("europe-west4-b", PRICED)),
    # Compute Engine only: a zone is never asked of the Cloud TPU API; this row names where the
    # machine type is known to be requested (its error hints and the local provider's refusal)
    "tpu7x": (("us-central1-c", TPU7X_ZONE),),
    "v6e": (("us-east5-b", PAGE), ("us-east5-a", PAGE), ("us-east1-d", PAGE), ("us-central1-b", PAGE),
            ("europe-west4-a", PAGE), ("asia-northeast1-b", PRICED)),
}


def zones_of(generation: str) -> tuple[str, ...]:
    """The zones that offer ``generation`` (``v2`` ... ``v6e``), in the table's order."""
    return tuple(zone for zone, _ in TPU_ZONES.get(generation, ()))


def region_zones(region: str) -> list[str]:
    """The table's zones in ``region`` (of any generation), sorted: where a rehearsal can be."""
    return sorted({z for rows in TPU_ZONES.values() for z, _ in rows if z.rsplit("-", 1)[0] == region})


def short_list(zones: list[str]) -> str:
    """``us-central1-a, -b, -c, -f``: a region's zones, its name said once."""
    if not zones:
        return ""
    region = zones[0].rsplit("-", 1)[0]
    rest = [("-" + z.rsplit("-", 1)[1]) if z.rsplit("-", 1)[0] == region else z for z in zones[1:]]
    return ", ".join([zones[0], *rest])


def source_of(generation: str, zone: str) -> str | None:
    """Where the row (generation, zone) comes from; None when the table has no such row."""
    return next((src for z, src in TPU_ZONES.get(generation, ()) if z == zone), None)


def offers(zone: str, acc: AcceleratorType) -> bool:
    return source_of(acc.generation.name, zone) is not None


def suggested_zone(generation: str) -> str:
    """A zone to name in an error that asks for another zone."""
    zones = zones_of(generation)
    return zones[0] if zones else "us-central1-b"


def unconfirmed(zone: str, acc: AcceleratorType) -> str | None:
    """What to tell a rehearsal that accepted ``zone`` for ``acc`` on an :data:`EARLIER` row."""
    if source_of(acc.generation.name, zone) != EARLIER:
        return None
    return (f"rehearsal: {zone} offers {acc.generation.name} only by earlier editions of Google's TPU zone list "
            f"(the 2026-11 one does not name it): Google Cloud may refuse what this rehearsal accepted; "
            f"{', '.join(z for z, s in TPU_ZONES[acc.generation.name] if s != EARLIER)} are listed today")
