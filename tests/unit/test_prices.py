"""Prices per region and tier: the figures a user sees, the SKU parser, the fallbacks.

Expected figures are skypilot-org/skypilot-catalog ``catalogs/v8/gcp/vms.csv`` rows (commit
006059e; built by SkyPilot from Google's Cloud Billing Catalog API): a TPU row gives the whole
slice's ``Price`` (on demand) and ``SpotPrice`` for a zone. Each region is checked on its own: a
single-region table once priced every region alike.
"""

from __future__ import annotations

import pytest

from provision.catalog import accelerators, prices, skus
from provision.catalog.prices import BUNDLED, ON_DEMAND, SPOT


def price(acc: str, zone: str | None, tier: str) -> prices.Price:
    return BUNDLED.tpu_price(accelerators.parse(acc), zone, tier)


@pytest.mark.parametrize(("acc", "zone", "tier", "usd"), [
    ("v2-8", "us-central1-b", ON_DEMAND, 4.50),            # tpu-v2-8 us-central1-b 4.5
    ("v2-32", "us-central1-a", ON_DEMAND, 24.0),           # tpu-v2-32 us-central1-a 24.0: $1.50/chip, not $1.125
    ("v2-32", "us-central1-a", SPOT, 6.12),                # SpotPrice 6.12
    ("v3-8", "us-central1-b", SPOT, 2.04),                 # $0.51/chip, not $0.60
    ("v3-32", "europe-west4-a", ON_DEMAND, 32.0),          # tpu-v3-32 europe-west4-a 32.0 / 10.56
    ("v3-32", "europe-west4-a", SPOT, 10.56),
    ("v4-8", "us-central2-b", SPOT, 3.686),                # $0.92/chip, not $0.966
    ("v5litepod-8", "us-central1-a", SPOT, 1.9594),        # 1.95941: $0.245/chip, not $0.60
    ("v5litepod-8", "europe-west4-b", ON_DEMAND, 12.48),   # 1.30x us-central1's 9.6
    ("v5p-8", "us-central1-a", SPOT, 3.3428),              # $0.84/chip, not $2.10
    ("v5p-8", "us-east5-a", SPOT, 6.72),                   # the same chip, twice the spot rate
    ("v6e-8", "us-central1-a", SPOT, 4.3537),              # 4.35366: $0.544/chip, not $1.35
    ("v6e-8", "europe-west4-a", ON_DEMAND, 23.76),         # 10 % over us-central1's 21.6
    ("v6e-8", "europe-west4-a", SPOT, 8.2998),             # 8.29981
    ("v6e-8", "us-south1-a", SPOT, 10.8),
])
def test_the_figures_a_user_sees(acc, zone, tier, usd):
    p = price(acc, zone, tier)
    assert p.usd_per_hour == usd
    assert p.region == prices.region_of(zone) and p.tier == tier and p.note is None
    assert "skypilot-catalog" in p.source and p.date == prices.READ


def test_every_generation_has_both_tiers_in_a_region_where_it_lives():
    for gen in accelerators.GENERATIONS.values():
        acc = accelerators.parse(f"{gen.name}-{gen.sizes[0]}")
        home = {"v4": "us-central2-b", "v3": "us-central1-b"}.get(gen.name, "us-central1-a")
        od, sp = price(acc.name, home, ON_DEMAND), price(acc.name, home, SPOT)
        assert od.note is None and od.usd_per_hour > 0, od
        if gen.name in prices.NO_PUBLIC_SPOT:     # TPU7x: no spot rate is public; the price says so
            assert sp.usd_per_hour is None and "no spot/preemptible price known" in sp.note
            continue
        assert sp.note is None, sp
        assert 0 < sp.usd_per_hour < od.usd_per_hour


def test_flex_start_is_priced_at_the_on_demand_rate_and_says_so():
    flex = price("v6e-8", "us-central1-a", prices.FLEX_START)
    assert flex.usd_per_hour == price("v6e-8", "us-central1-a", ON_DEMAND).usd_per_hour == 21.6
    assert flex.tier == prices.FLEX_START and "no flex-start list price known" in flex.note


def test_every_row_names_its_source_and_date():
    for table in (BUNDLED.tpu, BUNDLED.vm):
        for (key, region, tier), rate in table.items():
            assert rate.usd > 0 and rate.source and rate.date.startswith("2026-"), (key, region, tier)
            assert tier in prices.TIERS
    # us-east1 v3 pods are missing from Google's SKUs; SkyPilot's fetcher prices them by hand
    assert BUNDLED.tpu[("v3-pod", "us-east1", SPOT)].source == prices.SKYPILOT_FETCHER


def test_a_region_without_a_row_is_priced_in_the_nearest_known_one_and_says_so():
    p = price("v6e-4", "southamerica-west1-a", SPOT)       # vms.csv: spot not offered there (700.0)
    assert p.region == "us-central1" and "no spot/preemptible v6e price for southamerica-west1" in p.note
    eu = price("v5litepod-4", "europe-west2-b", ON_DEMAND)  # an unlisted European region: Europe first
    assert eu.region == "europe-west4" and "nearest known region" in eu.note
    v4 = price("v4-8", "us-central1-a", ON_DEMAND)          # v4 lives in us-central2 only
    assert (v4.region, v4.usd_per_hour) == ("us-central2", 12.88)
    assert price("v2-8", None, ON_DEMAND).region == "us-central1"


def test_region_of():
    assert prices.region_of("us-central1-b") == "us-central1"
    assert prices.region_of("us-south1-ai1b") == "us-south1"
    assert prices.region_of("europe-west4") == "europe-west4"
    assert prices.region_of(None) is None


def test_host_vm_prices_per_region():
    # vms.csv: n1-standard-1 us-central1 0.0475, europe-west4 0.05229; e2-standard-2 europe-west4 0.07377
    assert BUNDLED.vm_price("n1-standard-2", "us-central1-b").usd_per_hour == 0.095
    assert BUNDLED.vm_price("n1-standard-8", "europe-west4-a").usd_per_hour == pytest.approx(0.41832)
    assert BUNDLED.vm_price("e2-standard-2", "europe-west4-a").usd_per_hour == 0.07377
    assert BUNDLED.vm_price("n2-standard-4", "asia-east1-c").usd_per_hour == 0.2249
    n1_columbus = BUNDLED.vm_price("n1-standard-2", "us-east5-a")       # n1 is not offered in us-east5
    assert n1_columbus.region == "us-central1" and "us-east5" in n1_columbus.note
    assert BUNDLED.vm_price(None, "us-central1-a").usd_per_hour == 0.0
    unknown = BUNDLED.vm_price("c4-standard-8", "us-central1-a")
    assert unknown.usd_per_hour is None and "no price known" in unknown.note


def test_price_per_peak_pflop_hour_ranks_slices():
    v6e = prices.usd_per_peak_pflop_hour(accelerators.parse("v6e-8"), "us-central1-a", SPOT)
    v2 = prices.usd_per_peak_pflop_hour(accelerators.parse("v2-8"), "us-central1-b", SPOT)
    # v6e-8 spot: $4.3537/h for 8 x 918 TFLOP/s; v2-8: $1.35/h for 4 x 45 TFLOP/s
    assert v6e == pytest.approx(4.3537 / 7.344, rel=1e-4) and v2 == pytest.approx(1.35 / 0.18, rel=1e-4)
    assert v6e < v2
    assert prices.usd_per_peak_pflop_hour(accelerators.parse("v6e-8"), "us-south1-a", SPOT) > v6e


# ---- the SKU parser ----------------------------------------------------------------------------

def sku(sku_id, description, regions, usd, *, group="TPU", usage="OnDemand", family="Compute"):
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {"name": f"services/x/skus/{sku_id}", "skuId": sku_id, "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": family,
                         "resourceGroup": group, "usageType": usage},
            "serviceRegions": regions,
            "pricingInfo": [{"effectiveTime": "2026-11-01T00:00:00Z", "pricingExpression": {
                "usageUnit": "h", "tieredRates": [{"startUsageAmount": 0,
                                                   "unitPrice": {"currencyCode": "USD", "units": str(units),
                                                                 "nanos": nanos}}]}}],
            "geoTaxonomy": {"type": "REGIONAL", "regions": regions}}


# Descriptions as Google writes them: a fixture captured from the API (service 6F81-5844-456A,
# 2026-06-14) for v5e/v5p/v6e, spot, reserved and committed SKUs; SkyPilot's fetch_gcp.py for the
# Tpu-v2/v3/v4 ones ("Pod", "Preemptible" in the description, usageType OnDemand even then).
COMPUTE = [
    sku("04C3-5B71-D137", "TpuV5e running in Delhi", ["asia-south2"], 1.44132),
    sku("2549-F208-72FA", "TpuV6e running in Dallas", ["us-south1"], 2.7),
    sku("0561-8741-3BC7", "TpuV5e attached to Spot Preemptible VMs running in Singapore", ["asia-southeast1"],
        0.78, usage="Preemptible"),
    sku("026F-E6A1-BDBB", "Reserved TpuV5p in Delhi in Calendar Mode", ["asia-south2"], 2.94),
    sku("0115-21ED-7F03", "Commitment v1: TpuV5p running in Netherlands for 3 Years", ["europe-west4"], 1.911,
        usage="Commit3Yr"),
    sku("0F71-4391-B6CA", "TPU7x running in Americas", ["us-west1", "us-central1"], 12.0),
    sku("CP-E2-CORE", "E2 Instance Core running in Americas", ["us-central1", "us-east1"], 0.021811, group="CPU"),
    sku("CP-E2-RAM", "E2 Instance Ram running in Americas", ["us-central1", "us-east1"], 0.002923, group="RAM"),
    sku("CP-E2-SCORE", "Spot Preemptible E2 Instance Core running in Americas", ["us-central1"], 0.006543,
        group="CPU", usage="Preemptible"),
    sku("CP-N2D-CORE", "N2D AMD Instance Core running in Americas", ["us-central1"], 0.027, group="CPU"),
]
TPU = [
    sku("A1", "Tpu-v3 running in Americas", ["us-central1"], 8.0),
    sku("A2", "Preemptible Tpu-v3 running in Americas", ["us-central1"], 2.04),
    sku("A3", "Tpu-v2 Pod running in Netherlands", ["europe-west4"], 6.0),
    sku("A4", "Tpu-v4 Pod running in Oklahoma", ["us-central2"], 12.88),
]


def test_sku_parser_reads_per_chip_rates_by_generation_region_and_tier():
    book = skus.book_from_skus(TPU, COMPUTE, fetched="2026-11-24")
    assert book.tpu[("v5litepod", "asia-south2", ON_DEMAND)].usd == pytest.approx(1.44132)
    assert book.tpu[("v6e", "us-south1", ON_DEMAND)].usd == 2.7
    assert book.tpu[("v5litepod", "asia-southeast1", SPOT)].usd == 0.78
    assert book.tpu[("v3", "us-central1", ON_DEMAND)].usd == 2.0          # per 8-core device: 4 chips
    assert book.tpu[("v3", "us-central1", SPOT)].usd == 0.51              # "Preemptible" though OnDemand
    assert book.tpu[("v2-pod", "europe-west4", ON_DEMAND)].usd == 1.5
    assert book.tpu[("v4", "us-central2", ON_DEMAND)].usd == 3.22
    # reserved (calendar mode) and committed-use SKUs are not list prices; TPU7x is priced per chip-hour
    assert ("v5p", "asia-south2", ON_DEMAND) not in book.tpu and ("v5p", "europe-west4", ON_DEMAND) not in book.tpu
    assert book.tpu[("tpu7x", "us-central1", ON_DEMAND)].usd == 12.0
    assert book.tpu_price(accelerators.parse("tpu7x-8"), "us-west1-b", ON_DEMAND).usd_per_hour == 48.0
    rate = book.tpu[("v6e", "us-south1", ON_DEMAND)]
    assert rate.source.endswith("services/6F81-5844-456A SKU 2549-F208-72FA") and rate.date == "2026-11-01"
    assert book.tpu_price(accelerators.parse("v3-8"), "us-central1-b", SPOT).usd_per_hour == 2.04


def test_sku_parser_prices_vms_from_core_and_ram():
    book = skus.book_from_skus([], COMPUTE, fetched="2026-11-24")
    # e2-standard-2: 2 x 0.021811 + 8 x 0.002923 = 0.067006 (vms.csv: 0.06701); a multi-region SKU
    # prices every region it names
    for region in ("us-central1", "us-east1"):
        assert book.vm[("e2-standard-2", region, ON_DEMAND)].usd == pytest.approx(0.067006)
    assert book.vm[("e2-medium", "us-central1", ON_DEMAND)].usd == pytest.approx(0.033503)
    assert ("e2-standard-2", "us-central1", SPOT) not in book.vm        # a spot core without a spot RAM rate
    assert not any(k[0].startswith("n2-") for k in book.vm)             # N2D is not N2


def test_a_fetched_book_falls_back_to_the_bundled_rows_it_lacks():
    book = skus.book_from_skus(TPU, COMPUTE, fetched="2026-11-24").overlaid_on(BUNDLED)
    assert "Cloud Billing Catalog API" in book.tpu_price(accelerators.parse("v6e-8"), "us-south1-a", ON_DEMAND).source
    bundled_row = book.tpu_price(accelerators.parse("v6e-8"), "us-central1-a", SPOT)
    assert bundled_row.usd_per_hour == 4.3537 and "skypilot-catalog" in bundled_row.source


def test_an_unknown_price_is_unknown_and_a_total_with_one_says_so():
    """A price no source knows stays unknown, and so does a total with it in it: a tpu7x spot TPU
    is not $0.00/hour, and its cluster's total is not the host VM's alone ($0.07)."""
    tpu = prices.BUNDLED.tpu_price(accelerators.parse("tpu7x-8"), "us-central1-c", SPOT)
    vm = prices.BUNDLED.vm_price("e2-standard-2", "us-central1-c")
    assert tpu.usd_per_hour is None and not tpu.known and tpu.to_dict()["usd_per_hour"] is None
    assert prices.usd_text(tpu.usd_per_hour) == "unknown" and prices.usd_text(vm.usd_per_hour) == "$0.07"
    total = prices.Total.of([("the TPU", tpu), ("the host VM", vm)])
    assert total.usd is None and total.known_usd == pytest.approx(0.067)
    assert total.text() == "at least $0.07/hour (the TPU's price is unknown)"
    assert total.cell() == ">=0.07"
    alone = prices.Total.of([("the TPU", tpu)])
    assert (alone.text(), alone.cell()) == ("unknown (the TPU's price is unknown)", "unknown")
    known = prices.Total.of([("the TPU", 1.35), ("the host VM", vm)])
    assert (known.usd, known.text(), known.cell()) == (1.417, "$1.42/hour", "1.42")
    # nothing billed is a price: $0.00, not unknown
    assert prices.Total.of([("the TPU", prices.NO_PRICE)]).text() == "$0.00/hour"
    assert prices.usd_per_peak_pflop_hour(accelerators.parse("tpu7x-8"), "us-central1-c", SPOT) is None
