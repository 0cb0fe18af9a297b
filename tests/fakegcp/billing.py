"""The Cloud Billing Catalog API: ``services.list`` and ``services.skus.list`` (public SKUs).

Shapes from Google's discovery document ``cloudbilling.v1.json`` (google-api-python-client):
``GET /v1/services`` -> ``{services[{name, serviceId, displayName, businessEntityName}],
nextPageToken}``; ``GET /v1/services/{serviceId}/skus?pageSize&pageToken&currencyCode`` ->
``{skus[Sku], nextPageToken}``, a ``Sku`` being ``{name, skuId, description, category{
serviceDisplayName, resourceFamily, resourceGroup, usageType}, serviceRegions[], pricingInfo[{
summary, pricingExpression{usageUnit, usageUnitDescription, baseUnit, baseUnitConversionFactor,
displayQuantity, tieredRates[{startUsageAmount, unitPrice{currencyCode, units, nanos}}]},
currencyConversionRate, effectiveTime}], serviceProviderName, geoTaxonomy{type, regions[]}}``.
Service ids as public fetchers use them (SkyPilot ``fetch_gcp.py``, dstack gpuhunt ``gcp.py``):
Compute Engine ``6F81-5844-456A``, Cloud TPU ``E000-3F24-B8AA``.

The SKUs are built from public data, never from what tpuctl expects:
- descriptions as Google words them: ``TpuV5e running in Delhi``, ``TpuV5e attached to Spot
  Preemptible VMs running in Singapore`` (usageType Preemptible), ``Reserved TpuV5p in Delhi in
  Calendar Mode``, ``Commitment v1: TpuV5p running in Netherlands for 3 Years`` (Commit3Yr), ``TPU7x
  running in Americas`` (a test fixture captured from the API on 2026-06-14, whose SKU ids are kept
  here); ``Tpu-v3``/``Tpu-v2 Pod``, "Preemptible" in the description while the usageType stays
  OnDemand (SkyPilot's fetch_gcp.py: "'usageType' of preemptible TPUs are 'OnDemand'"); VM cores
  and memory ``E2 Instance Core running in Americas``, ``N1 Predefined Instance Ram ...`` (gpuhunt's
  parser);
- prices: per chip-hour for v5e/v5p/v6e, per 8-core device for v2/v3/v4, as the slice prices in
  skypilot-org/skypilot-catalog ``catalogs/v8/gcp/vms.csv`` (commit 006059e) divide out; VM vCPU
  and GiB rates from https://cloud.google.com/compute/vm-instance-pricing (they reproduce vms.csv's
  e2-standard-2 $0.06701 and n1-standard-1 $0.0475 in us-central1).
"""

from __future__ import annotations

import hashlib
from typing import Any

from .errors import ApiError, invalid
from .routing import Request, Router

SERVICE = "cloudbilling.googleapis.com"
COMPUTE = "6F81-5844-456A"
TPU = "E000-3F24-B8AA"
SERVICES = {COMPUTE: "Compute Engine", TPU: "Cloud TPU"}
MAX_PAGE = 5000
EFFECTIVE = "2026-11-20T08:00:00.000Z"

# region -> the place name Google's SKU descriptions use
PLACES = {"us-central1": "Iowa", "us-central2": "Oklahoma", "us-east1": "South Carolina", "us-east5": "Columbus",
          "us-south1": "Dallas", "europe-west4": "Netherlands", "asia-southeast1": "Singapore",
          "asia-south2": "Delhi"}
AMERICAS = ["us-central1", "us-east1", "us-west1"]

# (service, description, regions, resourceGroup, usageType, USD per unit, captured skuId or None)
_ROWS: list[tuple[str, str, list[str], str, str, float, str | None]] = [
    # v5e, v5p, v6e: Compute Engine SKUs per chip-hour (vms.csv v5litepod-1, v5p-8 / 4, v6e-1)
    (COMPUTE, "TpuV5e running in Iowa", ["us-central1"], "TPU", "OnDemand", 1.2, None),
    (COMPUTE, "TpuV5e attached to Spot Preemptible VMs running in Iowa", ["us-central1"], "TPU", "Preemptible",
     0.24493, None),
    (COMPUTE, "TpuV5e running in Netherlands", ["europe-west4"], "TPU", "OnDemand", 1.56, None),
    (COMPUTE, "TpuV5e attached to Spot Preemptible VMs running in Netherlands", ["europe-west4"], "TPU",
     "Preemptible", 0.44498, None),
    (COMPUTE, "TpuV5e running in Delhi", ["asia-south2"], "TPU", "OnDemand", 1.44132, "04C3-5B71-D137"),
    (COMPUTE, "TpuV5e attached to Spot Preemptible VMs running in Singapore", ["asia-southeast1"], "TPU",
     "Preemptible", 0.78, "0561-8741-3BC7"),
    (COMPUTE, "TpuV5p running in Iowa", ["us-central1"], "TPU", "OnDemand", 4.2, None),
    (COMPUTE, "TpuV5p attached to Spot Preemptible VMs running in Iowa", ["us-central1"], "TPU", "Preemptible",
     0.8357, None),
    (COMPUTE, "TpuV5p running in Columbus", ["us-east5"], "TPU", "OnDemand", 4.2, None),
    (COMPUTE, "TpuV5p attached to Spot Preemptible VMs running in Columbus", ["us-east5"], "TPU", "Preemptible",
     1.68, None),
    (COMPUTE, "TpuV6e running in Iowa", ["us-central1"], "TPU", "OnDemand", 2.7, None),
    (COMPUTE, "TpuV6e attached to Spot Preemptible VMs running in Iowa", ["us-central1"], "TPU", "Preemptible",
     0.54421, None),
    (COMPUTE, "TpuV6e running in Dallas", ["us-south1"], "TPU", "OnDemand", 2.7, "2549-F208-72FA"),
    (COMPUTE, "TpuV6e attached to Spot Preemptible VMs running in Dallas", ["us-south1"], "TPU", "Preemptible",
     1.35, None),
    (COMPUTE, "TpuV6e running in Netherlands", ["europe-west4"], "TPU", "OnDemand", 2.97, None),
    (COMPUTE, "TpuV6e attached to Spot Preemptible VMs running in Netherlands", ["europe-west4"], "TPU",
     "Preemptible", 1.03748, None),
    # not list prices, or not a generation tpuctl knows
    (COMPUTE, "Reserved TpuV5p in Delhi in Calendar Mode", ["asia-south2"], "TPU", "OnDemand", 2.94,
     "026F-E6A1-BDBB"),
    (COMPUTE, "Commitment v1: TpuV5p running in Netherlands for 3 Years", ["europe-west4"], "TPU", "Commit3Yr",
     1.911, "0115-21ED-7F03"),
    (COMPUTE, "TPU7x running in Americas", AMERICAS, "TPU", "OnDemand", 12.0, "0F71-4391-B6CA"),
    # host VM cores and memory (us-central1 rates; "Americas" SKUs name several regions)
    (COMPUTE, "E2 Instance Core running in Americas", AMERICAS, "CPU", "OnDemand", 0.021811, None),
    (COMPUTE, "E2 Instance Ram running in Americas", AMERICAS, "RAM", "OnDemand", 0.002923, None),
    (COMPUTE, "N1 Predefined Instance Core running in Americas", AMERICAS, "N1Standard", "OnDemand", 0.031611, None),
    (COMPUTE, "N1 Predefined Instance Ram running in Americas", AMERICAS, "N1Standard", "OnDemand", 0.004237, None),
    (COMPUTE, "N2 Instance Core running in Americas", AMERICAS, "CPU", "OnDemand", 0.031611, None),
    (COMPUTE, "N2 Instance Ram running in Americas", AMERICAS, "RAM", "OnDemand", 0.004237, None),
    (COMPUTE, "Nvidia Tesla T4 GPU running in Americas", AMERICAS, "GPU", "OnDemand", 0.35, None),
    # v2, v3, v4: Cloud TPU SKUs per 8-core device (4 chips); vms.csv tpu-v2-8, -32, v3-8, -32, v4-8
    (TPU, "Tpu-v2 running in Iowa", ["us-central1"], "TPU", "OnDemand", 4.5, None),
    (TPU, "Preemptible Tpu-v2 running in Iowa", ["us-central1"], "TPU", "OnDemand", 1.35, None),
    (TPU, "Tpu-v2 Pod running in Iowa", ["us-central1"], "TPU", "OnDemand", 6.0, None),
    (TPU, "Preemptible Tpu-v2 Pod running in Iowa", ["us-central1"], "TPU", "OnDemand", 1.53, None),
    (TPU, "Tpu-v3 running in Iowa", ["us-central1"], "TPU", "OnDemand", 8.0, None),
    (TPU, "Preemptible Tpu-v3 running in Iowa", ["us-central1"], "TPU", "OnDemand", 2.04, None),
    (TPU, "Tpu-v3 running in Netherlands", ["europe-west4"], "TPU", "OnDemand", 8.8, None),
    (TPU, "Preemptible Tpu-v3 running in Netherlands", ["europe-west4"], "TPU", "OnDemand", 2.244, None),
    (TPU, "Tpu-v3 Pod running in Netherlands", ["europe-west4"], "TPU", "OnDemand", 8.0, None),
    (TPU, "Preemptible Tpu-v3 Pod running in Netherlands", ["europe-west4"], "TPU", "OnDemand", 2.64, None),
    (TPU, "Tpu-v4 Pod running in Oklahoma", ["us-central2"], "TPU", "OnDemand", 12.88, None),
    (TPU, "Preemptible Tpu-v4 Pod running in Oklahoma", ["us-central2"], "TPU", "OnDemand", 3.686, None),
]


def _sku_id(description: str) -> str:
    h = hashlib.sha1(description.encode()).hexdigest().upper()
    return f"{h[0:4]}-{h[4:8]}-{h[8:12]}"


def _money(usd: float) -> dict[str, Any]:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}


def _sku(service: str, description: str, regions: list[str], group: str, usage: str, usd: float,
         sku_id: str | None) -> dict[str, Any]:
    sku_id = sku_id or _sku_id(description)
    family = "Compute"
    unit, unit_desc = ("GiBy.h", "gibibyte hour") if " Ram " in description else ("h", "hour")
    return {
        "name": f"services/{service}/skus/{sku_id}", "skuId": sku_id, "description": description,
        "category": {"serviceDisplayName": SERVICES[service], "resourceFamily": family, "resourceGroup": group,
                     "usageType": usage},
        "serviceRegions": list(regions),
        "pricingInfo": [{
            "summary": "", "currencyConversionRate": 1, "effectiveTime": EFFECTIVE,
            "pricingExpression": {"usageUnit": unit, "usageUnitDescription": unit_desc, "baseUnit": "s",
                                  "baseUnitConversionFactor": 3600, "displayQuantity": 1,
                                  "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(usd)}]},
        }],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "MULTI_REGIONAL" if len(regions) > 1 else "REGIONAL", "regions": list(regions)},
    }


def catalog(service: str) -> list[dict[str, Any]]:
    return [_sku(*row) for row in _ROWS if row[0] == service]


def _page(items: list[dict[str, Any]], req: Request) -> tuple[list[dict[str, Any]], str]:
    try:
        size = int(req.arg("pageSize") or MAX_PAGE)
        start = int(req.arg("pageToken") or 0)
    except ValueError:
        raise invalid("Invalid page token or page size.") from None
    if size <= 0 or start < 0 or start > len(items):
        raise invalid("Invalid page token or page size.")
    size = min(size, MAX_PAGE)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else "")


def register(router: Router) -> None:
    def route(path: str, call: str):
        return router.add("GET", path, call, permission=None, service=SERVICE, style="tpu")

    @route("/v1/services", "cloudbilling.services.list")
    def list_services(req: Request) -> Any:
        services = [{"name": f"services/{sid}", "serviceId": sid, "displayName": name,
                     "businessEntityName": "businessEntities/GCP"} for sid, name in SERVICES.items()]
        page, token = _page(services, req)
        return {"services": page, **({"nextPageToken": token} if token else {})}

    @route("/v1/services/{serviceId}/skus", "cloudbilling.services.skus.list")
    def list_skus(req: Request) -> Any:
        sid = req.params["serviceId"]
        if sid not in SERVICES:
            raise ApiError(5, f"Service {sid} not found.")
        currency = req.arg("currencyCode") or "USD"
        if currency != "USD":
            raise invalid(f"Currency {currency} is not supported by this fake (USD only).")
        page, token = _page(catalog(sid), req)
        # the API always sends nextPageToken, empty on the last page (SkyPilot's loop reads it)
        return {"skus": page, "nextPageToken": token}
