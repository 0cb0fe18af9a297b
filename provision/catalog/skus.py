"""Turn Cloud Billing Catalog SKUs into a :class:`~provision.catalog.prices.PriceBook` (pure).

The SKU shape is Google's (discovery document ``cloudbilling.v1.json``, ``Sku``): ``skuId``,
``description``, ``category{resourceFamily, resourceGroup, usageType}``, ``serviceRegions``,
``pricingInfo[{effectiveTime, pricingExpression{usageUnit, tieredRates[{startUsageAmount,
unitPrice{currencyCode, units, nanos}}]}}]``. How Google words TPU and VM SKUs, as public parsers
read them (SkyPilot ``sky/catalog/data_fetchers/fetch_gcp.py``, dstack's gpuhunt
``src/gpuhunt/providers/gcp.py``, and a test fixture captured from the API on 2026-06-14):

- Cloud TPU service (``E000-3F24-B8AA``): v2, v3, v4 as ``Tpu-v3 ...``, a pod slice's SKU says
  ``Pod``, a preemptible one says ``Preemptible`` (its usageType may still be ``OnDemand``); the
  unit is an 8-core device, i.e. 4 chips.
- Compute Engine service (``6F81-5844-456A``): v5e, v5p, v6e per chip-hour as ``TpuV5e running in
  Delhi``; spot as ``TpuV5e attached to Spot Preemptible VMs running in Singapore`` (usageType
  ``Preemptible``); ``Reserved ... in Calendar Mode`` and ``Commitment v1: ...`` (usageType
  ``Commit1Yr``/``Commit3Yr``) are not list prices and are dropped. TPU7x the same way, as
  ``TPU7x running in Americas`` (the fixture's SKU ``0F71-4391-B6CA``). These per-chip SKUs are the
  ones a TPU VM bills whichever API made it: the TPU generations Compute Engine sells as machine
  types (v5p, v6e, TPU7x) are already Compute Engine SKUs. No SKU wording for flex-start TPUs was
  found; :data:`provision.catalog.prices.FLEX_START` says how they are priced.
- VM cores and memory: ``E2 Instance Core running in Americas``, ``N1 Predefined Instance Ram
  running in ...``, ``N2 Instance Core ...``, spot ones prefixed ``Spot Preemptible``; a machine
  type costs vCPUs x core rate + GiB x RAM rate.

The region of a SKU is each of its ``serviceRegions`` (a multi-regional SKU prices them all).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .prices import CATALOG_API, ON_DEMAND, SPOT, PriceBook, Rate

TPU_SERVICE = "E000-3F24-B8AA"
COMPUTE_SERVICE = "6F81-5844-456A"
API = CATALOG_API

_TPU_RE = re.compile(r"\btpu[-\s]?(v\d+[a-z]*|7x)\b", re.IGNORECASE)
_VM_RE = re.compile(r"^(?:spot preemptible )?(e2 instance|n1 predefined instance|n2 instance) (core|ram)\b",
                    re.IGNORECASE)
_FAMILY = {"e2 instance": "e2", "n1 predefined instance": "n1", "n2 instance": "n2"}
_DROP = ("reserved", "commitment", "calendar mode", "sole tenancy", "custom", "premium", "suspended")
_CHIPS_PER_UNIT = {"v2": 4, "v3": 4, "v4": 4}          # per 8-core device; newer ones per chip

# Machine types priced from core and RAM rates: (vCPUs billed, GiB). Google's machine-type pages:
# e2-standard-N and n2-standard-N have 4 GiB per vCPU, n1-standard-N 3.75; shared-core e2-small and
# e2-medium bill 0.5 and 1 vCPU with 2 and 4 GiB.
SHAPES: dict[str, tuple[float, float]] = {
    **{f"e2-standard-{n}": (n, 4.0 * n) for n in (2, 4, 8, 16)},
    **{f"n1-standard-{n}": (n, 3.75 * n) for n in (1, 2, 4, 8, 16)},
    **{f"n2-standard-{n}": (n, 4.0 * n) for n in (2, 4, 8, 16)},
    "e2-small": (0.5, 2.0), "e2-medium": (1.0, 4.0),
}


def unit_price(sku: dict[str, Any]) -> tuple[float, str] | None:
    """The first tier's USD unit price and the date it took effect, or None when not in USD."""
    infos = sku.get("pricingInfo") or []
    if not infos:
        return None
    info = infos[0]
    rates = (info.get("pricingExpression") or {}).get("tieredRates") or []
    if not rates:
        return None
    first = min(rates, key=lambda r: float(r.get("startUsageAmount") or 0))
    money = first.get("unitPrice") or {}
    if money.get("currencyCode", "USD") != "USD":
        return None
    usd = int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    return usd, str(info.get("effectiveTime") or "")[:10]


def _tier(sku: dict[str, Any]) -> str | None:
    usage = (sku.get("category") or {}).get("usageType")
    if usage not in ("OnDemand", "Preemptible"):
        return None
    desc = str(sku.get("description") or "").lower()
    return SPOT if usage == "Preemptible" or "preemptible" in desc else ON_DEMAND


def _listed(sku: dict[str, Any]) -> bool:
    desc = str(sku.get("description") or "").lower()
    return not any(word in desc for word in _DROP)


def tpu_rates(skus: Iterable[dict[str, Any]], service: str, fetched: str) -> dict[tuple[str, str, str], Rate]:
    """Per chip-hour rates keyed (rate class, region, tier), as :func:`prices.rate_class` names them."""
    out: dict[tuple[str, str, str], Rate] = {}
    for sku in skus:
        if (sku.get("category") or {}).get("resourceGroup") != "TPU" or not _listed(sku):
            continue
        tier = _tier(sku)
        m = _TPU_RE.search(str(sku.get("description") or ""))
        price = unit_price(sku)
        if tier is None or m is None or price is None:
            continue
        gen = m.group(1).lower()
        gen = {"v5e": "v5litepod", "7x": "tpu7x"}.get(gen, gen)
        key = f"{gen}-pod" if gen in ("v2", "v3") and "pod" in sku["description"].lower() else gen
        usd = price[0] / _CHIPS_PER_UNIT.get(gen, 1)
        rate = Rate(round(usd, 6), f"{API} services/{service} SKU {sku.get('skuId', '?')}", price[1] or fetched)
        for region in sku.get("serviceRegions") or []:
            out[(key, region, tier)] = rate
    return out


def vm_rates(skus: Iterable[dict[str, Any]], service: str, fetched: str) -> dict[tuple[str, str, str], Rate]:
    """Hourly rates of the machine types in :data:`SHAPES`, keyed (machine type, region, tier)."""
    parts: dict[tuple[str, str, str], dict[str, tuple[float, str, str]]] = {}
    for sku in skus:
        if (sku.get("category") or {}).get("resourceFamily") != "Compute" or not _listed(sku):
            continue
        m = _VM_RE.match(str(sku.get("description") or ""))
        tier = _tier(sku)
        price = unit_price(sku)
        if m is None or tier is None or price is None:
            continue
        family, resource = _FAMILY[m.group(1).lower()], m.group(2).lower()
        for region in sku.get("serviceRegions") or []:
            parts.setdefault((family, region, tier), {})[resource] = (price[0], str(sku.get("skuId", "?")),
                                                                      price[1] or fetched)
    out: dict[tuple[str, str, str], Rate] = {}
    for (family, region, tier), got in parts.items():
        if "core" not in got or "ram" not in got:
            continue
        (core, core_id, date), (ram, ram_id, _) = got["core"], got["ram"]
        for machine_type, (vcpus, gib) in SHAPES.items():
            if machine_type.startswith(family + "-"):
                out[(machine_type, region, tier)] = Rate(
                    round(vcpus * core + gib * ram, 6), f"{API} services/{service} SKUs {core_id}+{ram_id}", date)
    return out


def book_from_skus(tpu_skus: Iterable[dict[str, Any]], compute_skus: Iterable[dict[str, Any]], *,
                   fetched: str) -> PriceBook:
    """A book of what the two services list (TPU v5e/v5p/v6e are Compute Engine SKUs)."""
    compute_skus = list(compute_skus)
    tpu = {**tpu_rates(compute_skus, COMPUTE_SERVICE, fetched), **tpu_rates(tpu_skus, TPU_SERVICE, fetched)}
    vm = vm_rates(compute_skus, COMPUTE_SERVICE, fetched)
    return PriceBook(tpu=tpu, vm=vm, origin=f"{API} (fetched {fetched})")
