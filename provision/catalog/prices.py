"""List prices per region and tier: the one place tpuctl prices TPUs and host VMs.

A :class:`PriceBook` maps (TPU rate class, region, tier) to a USD rate per chip-hour and (machine
type, region, tier) to a USD rate per VM-hour. Every rate carries its source and date, and every
:class:`Price` it answers says its region, tier, source and date, so a shown figure is never a bare
number. The book tpuctl uses on Google Cloud is read from the Cloud Billing Catalog API
(:mod:`provision.catalog.skus` parses it, :mod:`provision.cloud.gcp_billing` fetches and caches it);
:data:`BUNDLED` is the dated fallback below, and the only book of the local provider (which shows
what the same cluster would cost on Google Cloud).

Facts the table encodes (skypilot-org/skypilot-catalog ``catalogs/v8/gcp/vms.csv``, built by
SkyPilot from the SKU API; TPU rows give the whole slice's ``Price`` and ``SpotPrice`` per zone):

- v2 and v3 are priced per 8-core device; a pod slice (more than 8 cores) has its own per-chip
  rate: v2-8 $4.50/h is $1.125/chip, v2-32 $24/h is $1.50/chip (us-central1).
- Preemptible (TPU Node / v2, v3) and spot TPUs share one rate per region: the SKUs Google lists
  are "Preemptible" ones for both (SkyPilot's fetch_gcp.py notes their usageType is even OnDemand).
- Spot rates differ by region far more than on-demand ones (v6e: $0.54/chip-h in us-central1,
  $1.35 in us-south1).
- Host VMs are priced per vCPU and GiB, so e2/n1/n2 ``standard-N`` cost N times the per-vCPU rate
  of their family in a region.

The local provider bills nothing; tpuctl never bills: these figures say what deleting a TPU saves
and what a run cost, at list price, without committed-use or sustained-use discounts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .accelerators import AcceleratorType

ON_DEMAND = "on-demand"
SPOT = "spot/preemptible"   # spot and preemptible TPUs share Google's "Preemptible" SKUs and rate
TIERS = (ON_DEMAND, SPOT)
# Compute Engine flex-start VMs (resize requests): no public per-chip rate or SKU wording for TPUs
# was found (compute/docs/instance-groups/about-resize-requests-mig lists discounts for vCPU,
# memory and GPUs only), so a flex-start TPU is priced at its on-demand rate, saying so: an upper
# bound, never an invented discount.
FLEX_START = "flex-start"
CURRENCY = "USD"

SKYPILOT_CATALOG = "skypilot-catalog v8 gcp/vms.csv @ 006059e"
SKYPILOT_FETCHER = "skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py HIDDEN_TPU_DF"
GOOGLE_PRICING = "https://cloud.google.com/compute/vm-instance-pricing"
READ = "2026-11-24"          # when the bundled rows were read from their sources
SOURCE = f"bundled table ({SKYPILOT_CATALOG}, read {READ})"
RECORDED = READ
REFERENCE_REGION = "us-central1"

# Regions to try, nearest first, when a price is asked for a region the book has no row for: the
# region's own continent first (by the area prefix of its name), then the others.
_AREAS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("us-", "northamerica-", "southamerica-"),
     ("us-central1", "us-east1", "us-west1", "us-east5", "us-east4", "us-south1", "us-west4",
      "us-central2", "northamerica-northeast1", "southamerica-west1")),
    (("europe-", "me-", "africa-"), ("europe-west4", "europe-west1", "europe-west3", "europe-north1")),
    (("asia-", "australia-"), ("asia-east1", "asia-southeast1", "asia-northeast1", "asia-south1")),
)


@dataclass(frozen=True)
class Rate:
    """One row of a book: a USD rate (per chip-hour for a TPU, per hour for a VM), its source and date."""

    usd: float
    source: str
    date: str


@dataclass(frozen=True)
class Price:
    """A price as tpuctl shows it: the figure and where it holds and comes from.

    ``usd_per_hour`` is None when no source knows the rate (TPU7x spot, a type no row prices): the
    one way tpuctl holds "unknown", shown as ``unknown`` (:func:`usd_text`), null in --json, and
    never added into a total as 0 (:class:`Total`). 0.0 is a price: nothing billed."""

    usd_per_hour: float | None
    region: str
    tier: str
    source: str
    date: str
    note: str | None = None      # e.g. priced in the nearest known region, or not offered

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None

    def label(self) -> str:
        """``us-central1 spot/preemptible, bundled table, 2026-11-24`` (plus the note): a few words
        after a figure in a listing. The source in full (a SKU, a catalog's commit) is in --json and
        in ``tpuctl cost``; a price of nothing billed says only why."""
        if self.source == NOTHING_BILLED:
            return self.note or NOTHING_BILLED
        text = f"{self.region} {self.tier}, {origin_of(self.source)}, {self.date}"
        return f"{text}; {self.note}" if self.note else text

    def to_dict(self) -> dict[str, Any]:
        return {"usd_per_hour": self.usd_per_hour, "currency": CURRENCY, "region": self.region,
                "tier": self.tier, "source": self.source, "date": self.date, "note": self.note}


NOTHING_BILLED = "nothing billed"
NO_PRICE = Price(0.0, "-", ON_DEMAND, NOTHING_BILLED, "-")
UNKNOWN = "unknown"


def usd_text(usd: float | None, digits: int = 2, *, dollar: bool = True) -> str:
    """A rate or an amount as shown: ``$1.35`` (``1.35`` in a $ column), or ``unknown`` where no
    source knows it, never ``$0.00``."""
    if usd is None:
        return UNKNOWN
    return f"{'$' if dollar else ''}{usd:.{digits}f}"


@dataclass(frozen=True)
class Total:
    """A sum of prices, some of which may be unknown: what is known, and which parts are not.

    A total with an unknown part is a lower bound and says so (``at least $0.07/hour (the TPU's
    price is unknown)``); its ``usd`` is None (null in --json), never the known part alone."""

    known_usd: float
    unknown: tuple[str, ...] = ()     # the parts without a price, as a listing names them

    @classmethod
    def of(cls, parts: Iterable[tuple[str, Price | float | None]]) -> Total:
        """``parts``: (what, its price or rate); a part that is None or priced None is unknown."""
        known, unknown = 0.0, []
        for what, p in parts:
            usd = p.usd_per_hour if isinstance(p, Price) else p
            if usd is None:
                unknown.append(what)
            else:
                known += usd
        return cls(round(known, 4), tuple(unknown))

    @property
    def usd(self) -> float | None:
        return None if self.unknown else self.known_usd

    def why(self) -> str:
        """``the TPU's price is unknown``: what a lower bound leaves out."""
        names = " and ".join(self.unknown)
        return f"{names}'s price is unknown" if len(self.unknown) == 1 else f"the prices of {names} are unknown"

    def text(self, digits: int = 2, per: str = "/hour") -> str:
        """``$1.42/hour``; ``at least $0.07/hour (the TPU's price is unknown)``; ``unknown``."""
        if not self.unknown:
            return f"${self.known_usd:.{digits}f}{per}"
        if not self.known_usd:
            return f"{UNKNOWN} ({self.why()})"
        return f"at least ${self.known_usd:.{digits}f}{per} ({self.why()})"

    def cell(self, digits: int = 2) -> str:
        """For a $ column: ``1.42``, ``>=0.07`` (a part unknown) or ``unknown``."""
        if not self.unknown:
            return f"{self.known_usd:.{digits}f}"
        return f">={self.known_usd:.{digits}f}" if self.known_usd else UNKNOWN
CATALOG_API = "Cloud Billing Catalog API"
BUNDLED_NAME = "bundled table"


def origin_of(source: str) -> str:
    """A rate's source in two or three words: Google's catalog, or the bundled table (whose rows name
    skypilot-catalog or Google's pricing page)."""
    return CATALOG_API if source.startswith(CATALOG_API) else BUNDLED_NAME


def tier_of(interruptible: bool, capacity: str | None = None) -> str:
    """The tier a TPU is billed at: spot/preemptible, flex-start (Compute Engine) or on demand."""
    if capacity == "flex-start":
        return FLEX_START
    return SPOT if interruptible else ON_DEMAND


def region_of(zone: str | None) -> str | None:
    """``us-central1-b`` -> ``us-central1``; a region name stays as it is; None stays None."""
    if not zone:
        return None
    parts = zone.split("-")
    if len(parts) >= 3 and len(parts[-1]) <= 4 and parts[-1][:1].isalpha() and parts[-2][-1:].isdigit():
        return "-".join(parts[:-1])
    return zone


def rate_class(acc: AcceleratorType) -> str:
    """The rate an accelerator type is billed at: v2/v3 devices and pod slices differ."""
    gen = acc.generation.name
    if gen in ("v2", "v3") and acc.cores > 8:
        return f"{gen}-pod"
    return gen


def nearest_regions(region: str | None) -> list[str]:
    """Known regions in the order tpuctl falls back to them for ``region``."""
    order: list[str] = []
    areas = list(_AREAS)
    own = [a for a in areas if region and region.startswith(a[0])]
    for _, regions in own + [a for a in areas if a not in own]:
        order.extend(r for r in regions if r not in order)
    return order


@dataclass(frozen=True)
class PriceBook:
    """Rates per (TPU rate class | machine type, region, tier); lookups fall back to the nearest region."""

    tpu: Mapping[tuple[str, str, str], Rate]
    vm: Mapping[tuple[str, str, str], Rate]
    origin: str = "bundled table"
    notes: tuple[str, ...] = field(default=())

    def _lookup(self, table: Mapping[tuple[str, str, str], Rate], key: str, region: str | None,
                tier: str, what: str) -> tuple[Rate, str, str | None] | None:
        if region and (key, region, tier) in table:
            return table[(key, region, tier)], region, None
        for other in nearest_regions(region):
            if (key, other, tier) in table:
                why = f"no {tier} {what} price for {region}" if region else f"no region given for {what}"
                return table[(key, other, tier)], other, f"{why}; priced as {other}, the nearest known region"
        return None

    def tpu_price(self, acc: AcceleratorType, zone: str | None, tier: str) -> Price:
        """What the slice costs per hour in ``zone``'s region and ``tier``."""
        if tier == FLEX_START and not any(k[0] == rate_class(acc) and k[2] == FLEX_START for k in self.tpu):
            on_demand = self.tpu_price(acc, zone, ON_DEMAND)
            note = "no flex-start list price known; priced at the on-demand rate (an upper bound)"
            return Price(on_demand.usd_per_hour, on_demand.region, FLEX_START, on_demand.source, on_demand.date,
                         f"{on_demand.note}; {note}" if on_demand.note else note)
        found = self._lookup(self.tpu, rate_class(acc), region_of(zone), tier, acc.generation.name)
        if found is None:
            return Price(None, region_of(zone) or "-", tier, self.origin, "-",
                         f"no {tier} price known for {acc.name}")
        rate, region, note = found
        return Price(round(rate.usd * acc.chips, 4), region, tier, rate.source, rate.date, note)

    def vm_price(self, machine_type: str | None, zone: str | None, tier: str = ON_DEMAND) -> Price:
        """A host VM per hour; no VM costs nothing, an unknown type's price is unknown (None)."""
        if not machine_type:
            return NO_PRICE
        found = self._lookup(self.vm, machine_type, region_of(zone), tier, machine_type)
        if found is None:
            return Price(None, region_of(zone) or "-", tier, self.origin, "-",
                         f"no price known for machine type {machine_type}")
        rate, region, note = found
        return Price(round(rate.usd, 5), region, tier, rate.source, rate.date, note)

    def knows_vm(self, machine_type: str) -> bool:
        return any(k[0] == machine_type for k in self.vm)

    def describe(self) -> str:
        text = f"list prices in {CURRENCY} per region and tier, from the {self.origin}"
        return "; ".join((text, *self.notes))

    def brief(self) -> str:
        """The book in a few words, for the end of a listing (``describe`` is the whole, in --json):
        where from and of when, and its short notes (a failed fetch was already said on stderr)."""
        when = re.search(r"(?:read|fetched) ([0-9-]+)", self.origin)
        text = f"list prices from the {origin_of(self.origin)}" + (f" of {when.group(1)}" if when else "")
        return "; ".join((text, *(n for n in self.notes if len(n) <= 80)))

    def overlaid_on(self, base: PriceBook) -> PriceBook:
        """This book's rates, with ``base``'s for every key this one lacks (each keeps its source)."""
        return PriceBook(tpu={**base.tpu, **self.tpu}, vm={**base.vm, **self.vm}, origin=self.origin,
                         notes=self.notes)


def usd_per_peak_pflop_hour(acc: AcceleratorType, zone: str | None, tier: str,
                            book: PriceBook | None = None) -> float | None:
    """Dollars per hour per peak bf16 PFLOP/s: the figure to rank slices by, cheapest first.

    None when the slice has no known price (callers rank those last)."""
    price = (book or BUNDLED).tpu_price(acc, zone, tier)
    if price.usd_per_hour is None:
        return None
    return round(price.usd_per_hour / (acc.peak_bf16_flops / 1e15), 6)


# ---- the bundled table ---------------------------------------------------------------------------
# Per chip-hour, (on demand, spot); None: that tier is not offered there (700.0 in vms.csv, or no
# SpotPrice). Derived from vms.csv as slice price / chips: v2/v3 from the -8 rows (devices) and the
# -32 rows (pods), v4 from v4-8 (us-central2 is v4's only region), v5e from v5litepod-1, v5p from
# v5p-8 (4 chips), v6e from v6e-1. Source per row: SKYPILOT_CATALOG unless named.

_TPU_PER_CHIP: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "v2": {"us-central1": (1.125, 0.3375), "europe-west4": (1.2375, 0.3155625),
           "asia-east1": (1.305, 0.3915)},
    "v2-pod": {"us-central1": (1.50, 0.3825), "europe-west4": (1.50, 0.3825)},
    "v3": {"us-central1": (2.00, 0.51), "europe-west4": (2.20, 0.561), "us-east1": (2.00, None)},
    "v3-pod": {"europe-west4": (2.00, 0.66), "us-east1": (2.00, 0.60)},
    "v4": {"us-central2": (3.22, 0.9215)},
    "v5litepod": {
        "us-central1": (1.20, 0.24493), "us-east1": (1.20, 0.24493), "us-west1": (1.20, 0.24493),
        "us-east4": (1.20, 0.60), "us-east5": (1.20, 0.60), "us-west4": (1.20, 0.48),
        "us-south1": (1.416, 0.5664), "northamerica-northeast1": (1.32132, 0.36389),
        "southamerica-west1": (1.716, 0.47259), "europe-west4": (1.56, 0.44498),
        "europe-west1": (1.32132, 0.52853), "europe-west3": (1.416, 0.38997),
        "europe-north1": (1.32132, 0.66066), "asia-east1": (1.38948, 0.55579),
        "asia-northeast1": (1.54104, 0.4244), "asia-southeast1": (1.56, 0.78)},
    "v5p": {"us-central1": (4.20, 0.8357), "us-east1": (4.20, 0.8357), "us-east5": (4.20, 1.68),
            "us-south1": (4.779, 1.3161375), "europe-west4": (4.2525, 1.34849),
            "europe-west1": (4.459455, 1.7837825)},
    "v6e": {"us-central1": (2.70, 0.54421), "us-east1": (2.70, 0.54421), "us-west1": (2.70, 0.54421),
            "us-east4": (2.70, 0.57766), "us-east5": (2.70, 1.215), "us-south1": (2.70, 1.35),
            "southamerica-west1": (2.70, None), "europe-west4": (2.97, 1.03748),
            "asia-southeast1": (2.97, 0.36292), "asia-northeast1": (3.24, 0.94352),
            "asia-south1": (3.24, 2.27)},
    # The Cloud Billing Catalog API's Compute Engine SKU 0F71-4391-B6CA "TPU7x running in Americas"
    # (captured 2026-06-14; tests/unit/test_prices.py quotes it): on demand only, no spot SKU seen.
    "tpu7x": {"us-central1": (12.0, None), "us-west1": (12.0, None)},
}
# us-east1 v3 pods are missing from Google's SKUs; SkyPilot prices them as us-central1 (its
# HIDDEN_TPU_DF): the row says so.
TPU7X_SKU = "Cloud Billing Catalog API services/6F81-5844-456A SKU 0F71-4391-B6CA"
_TPU_SOURCE_OVERRIDES = {("v3-pod", "us-east1"): SKYPILOT_FETCHER, ("tpu7x", "us-central1"): TPU7X_SKU,
                         ("tpu7x", "us-west1"): TPU7X_SKU}
_TPU_DATE_OVERRIDES = {("tpu7x", "us-central1"): "2026-06-14", ("tpu7x", "us-west1"): "2026-06-14"}
# Generations without a public spot rate: their spot price is unknown (None, with a note).
NO_PUBLIC_SPOT = frozenset({"tpu7x"})

# Host VMs per hour (on demand, spot) for one base shape per family; the other standard sizes are
# multiples (vCPUs / base vCPUs). e2-standard-2 rows for asia-* are vms.csv's e2-standard-32 / 16
# (the -2 rows were not read). n1 is not offered in us-east5, us-south1 or southamerica-west1.
_VM_BASE: dict[tuple[str, int], dict[str, tuple[float, float]]] = {
    ("e2-standard", 2): {
        "us-central1": (0.06701, 0.0294), "us-east1": (0.06701, 0.0294), "us-west1": (0.06701, 0.0294),
        "us-east4": (0.07547, 0.03633), "us-east5": (0.06701, 0.01514), "us-south1": (0.07907, 0.02016),
        "us-west4": (0.07547, 0.00786), "northamerica-northeast1": (0.07377, 0.01816),
        "southamerica-west1": (0.09583, 0.02479), "europe-west4": (0.07377, 0.03071),
        "europe-west1": (0.07372, 0.02948), "europe-west3": (0.08634, 0.03452),
        "europe-north1": (0.07378, 0.01619), "asia-east1": (0.0775919, 0.0356681),
        "asia-northeast1": (0.0859656, 0.0377363), "asia-south1": (0.0804844, 0.0353119),
        "asia-southeast1": (0.0826663, 0.0362763)},
    ("n1-standard", 1): {
        "us-central1": (0.0475, 0.01306), "us-east1": (0.0475, 0.01306), "us-west1": (0.0475, 0.01306),
        "us-east4": (0.0535, 0.0113), "us-west4": (0.0535, 0.01627),
        "northamerica-northeast1": (0.05229, 0.02396), "europe-west4": (0.05229, 0.02092),
        "europe-west1": (0.05225, 0.01563), "europe-west3": (0.0612, 0.0154),
        "europe-north1": (0.0523, 0.01428), "asia-east1": (0.055, 0.00891),
        "asia-northeast1": (0.06094, 0.01665), "asia-south1": (0.05705, 0.01036),
        "asia-southeast1": (0.0586, 0.00968)},
    ("n2-standard", 4): {
        "us-central1": (0.19424, 0.0635), "us-east1": (0.19424, 0.0635), "us-west1": (0.19424, 0.0635),
        "us-east4": (0.21876, 0.04826), "us-east5": (0.19424, 0.07456), "us-south1": (0.2292, 0.0627),
        "us-west4": (0.21875, 0.09312), "northamerica-northeast1": (0.21383, 0.05581),
        "southamerica-west1": (0.27776, 0.04941), "europe-west4": (0.21383, 0.0744),
        "europe-west1": (0.21367, 0.03059), "europe-west3": (0.25025, 0.0913),
        "europe-north1": (0.21385, 0.0793), "asia-east1": (0.2249, 0.06308),
        "asia-northeast1": (0.24918, 0.05932), "asia-south1": (0.23329, 0.0589),
        "asia-southeast1": (0.23961, 0.08555)},
}
_VM_SIZES = {"e2-standard": (2, 4, 8), "n1-standard": (1, 2, 4, 8), "n2-standard": (2, 4, 8)}
# Shared-core e2 types bill a fraction of a vCPU (e2-small 0.5, e2-medium 1): not in vms.csv at
# that rate; us-central1 from Google's pricing page.
_VM_SHARED = {"e2-small": 0.0168, "e2-medium": 0.0335}
_VM_SHARED_DATE = "2026-11-22"


def _bundled() -> PriceBook:
    tpu: dict[tuple[str, str, str], Rate] = {}
    for key, regions in _TPU_PER_CHIP.items():
        for region, pair in regions.items():
            source = _TPU_SOURCE_OVERRIDES.get((key, region), SKYPILOT_CATALOG)
            date = _TPU_DATE_OVERRIDES.get((key, region), READ)
            for tier, usd in zip(TIERS, pair):
                if usd is not None:
                    tpu[(key, region, tier)] = Rate(usd, source, date)
    vm: dict[tuple[str, str, str], Rate] = {}
    for (family, base), regions in _VM_BASE.items():
        for region, pair in regions.items():
            for size in _VM_SIZES[family]:
                for tier, usd in zip(TIERS, pair):
                    vm[(f"{family}-{size}", region, tier)] = Rate(round(usd * size / base, 6),
                                                                  SKYPILOT_CATALOG, READ)
    for machine_type, usd in _VM_SHARED.items():
        vm[(machine_type, REFERENCE_REGION, ON_DEMAND)] = Rate(usd, GOOGLE_PRICING, _VM_SHARED_DATE)
    return PriceBook(tpu=tpu, vm=vm, origin=SOURCE)


BUNDLED = _bundled()


# ---- shortcuts for callers that price with the bundled table ---------------------------------------

def tpu_hourly(acc: AcceleratorType, *, preemptible: bool, zone: str | None = None,
               book: PriceBook | None = None) -> float | None:
    return (book or BUNDLED).tpu_price(acc, zone, tier_of(preemptible)).usd_per_hour


def vm_hourly(machine_type: str | None, zone: str | None = None, book: PriceBook | None = None) -> float | None:
    """Hourly price of a host VM; 0 when there is none, None when its type is not priced."""
    return (book or BUNDLED).vm_price(machine_type, zone).usd_per_hour


def known_vm(machine_type: str) -> bool:
    return BUNDLED.knows_vm(machine_type)


def describe_source(book: PriceBook | None = None) -> str:
    return (book or BUNDLED).describe()
