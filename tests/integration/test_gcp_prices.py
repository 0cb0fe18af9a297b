"""Prices from the Cloud Billing Catalog API: tpuctl reads the fake's SKUs over the wire, caches
them for a day, and falls back to its bundled table when the API fails, without failing a command.

The fake's SKUs (tests/fakegcp/billing.py) are modelled on Google's: ``Preemptible Tpu-v2 running
in Iowa`` at $1.35 per 8-core device (vms.csv tpu-v2-8 us-central1 SpotPrice 1.35), N1 cores and
RAM at $0.031611 and $0.004237 (cloud.google.com/compute/vm-instance-pricing, us-central1).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.conftest import run_tpuctl_process

SKUS = "cloudbilling.services.skus.list"
API = "Cloud Billing Catalog API"


def cache_file() -> Path:
    return Path(os.environ["TPUCTL_HOME"]) / "cache" / "prices.json"


def test_up_status_cost_down_price_from_the_catalog_and_reuse_the_cache(fakegcp_env):
    r = run_tpuctl_process("up", "pr1", "--zone", "us-central1-b", "--accelerator-type", "v2-8",
                           "--preemptible", "--json")
    assert r.code == 0, r.err
    up = json.loads(r.out)
    tpu, vm = up["price"]["tpu"], up["price"]["vm"]
    assert (tpu["usd_per_hour"], tpu["region"], tpu["tier"]) == (1.35, "us-central1", "spot/preemptible")
    assert tpu["source"].startswith(f"{API} services/E000-3F24-B8AA SKU ") and tpu["date"] == "2026-11-20"
    # the default host, e2-standard-2 = 2 x 0.021811 + 8 x 0.002923 (E2 core and RAM SKUs), both SKUs named
    assert up["machine_type"] == "e2-standard-2"
    assert (vm["usd_per_hour"], vm["tier"]) == (0.06701, "on-demand") and "SKUs" in vm["source"]
    assert up["hourly_usd"] == 1.417 and API in up["price_source"]
    assert fakegcp_env.call_counts()[SKUS] == 2       # one listing per service: Cloud TPU and Compute Engine
    assert json.loads(cache_file().read_text())["endpoint"] == fakegcp_env.url

    # the next commands read the cache, not the API
    st = run_tpuctl_process("status", "--json")
    assert st.code == 0, st.err
    [view] = json.loads(st.out)["clusters"]
    assert view["hourly_usd"] == 1.417 and view["price"]["tpu"]["source"] == tpu["source"]
    text = run_tpuctl_process("status")
    assert "pr1: TPU v2-8 $1.35/hour (us-central1 spot/preemptible, Cloud Billing Catalog API, 2026-11-20)" \
        in text.out.splitlines()
    fetched = time.strftime("%Y-%m-%d", time.gmtime(json.loads(cache_file().read_text())["fetched_at"]))
    assert text.out.splitlines()[-1] == (f"prices: list prices from the Cloud Billing Catalog API of {fetched}; "
                                         "rows it lacks from the bundled table")
    cost = run_tpuctl_process("cost", "pr1", "--json")
    assert cost.code == 0, cost.err
    [row] = json.loads(cost.out)["prices"]
    assert (row["accelerator_type"], row["region"], row["on_demand_usd_per_hour"], row["preemptible_usd_per_hour"]) \
        == ("v2-8", "us-central1", 4.5, 1.35) and row["on_demand"]["source"].startswith(API)
    down = run_tpuctl_process("down", "pr1", "--json")
    assert down.code == 0, down.err
    doc = json.loads(down.out)
    assert doc["saves_usd_per_hour"] == 1.417
    assert {p["price"]["source"].split(" SKU")[0] for p in doc["prices"]} == {f"{API} services/E000-3F24-B8AA",
                                                                             f"{API} services/6F81-5844-456A"}
    assert fakegcp_env.call_counts()[SKUS] == 2

    # a day later the cache is stale: the API is asked again
    data = json.loads(cache_file().read_text())
    data["fetched_at"] -= 25 * 3600
    cache_file().write_text(json.dumps(data))
    assert run_tpuctl_process("status", "--json").code == 0
    assert fakegcp_env.call_counts()[SKUS] == 4


def test_a_failing_catalog_falls_back_to_the_bundled_table_and_says_so(fakegcp_env):
    fakegcp_env.burst(503, count=5, method="GET", path="/v1/services/.*")
    r = run_tpuctl_process("up", "pr2", "--zone", "europe-west4-a", "--accelerator-type", "v2-8", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    # skypilot-catalog v8 gcp/vms.csv: tpu-v2-8 europe-west4-a Price 4.95; e2-standard-2 (the default host) europe-west4 0.07377
    assert doc["price"]["tpu"]["usd_per_hour"] == 4.95 and doc["price"]["tpu"]["region"] == "europe-west4"
    assert "skypilot-catalog" in doc["price"]["tpu"]["source"] and doc["price"]["vm"]["usd_per_hour"] == 0.07377
    assert "bundled table" in doc["price_source"] and "failed" in doc["price_source"]
    [note] = [line for line in r.err.splitlines() if line.startswith("prices: ")]
    assert "Cloud Billing Catalog API failed (503" in note and note.endswith("using the bundled table")
    asked = fakegcp_env.call_counts()[SKUS]
    assert asked == 1                                 # the first listing failed: nothing more was asked
    # within the hour a failed catalog is not asked again, and every command still says why
    st = run_tpuctl_process("status", "--json")
    assert st.code == 0 and "not asked again for an hour" in st.err
    assert fakegcp_env.call_counts()[SKUS] == asked
    assert run_tpuctl_process("down", "pr2").code == 0


def test_a_disabled_billing_api_is_said_with_how_to_enable_it(fakegcp_env):
    """Google's own words for the fix ("Enable it by visiting ...") follow a long URL: the note said
    Google's text cut at 160 characters and lost them."""
    fakegcp_env.disable_service("cloudbilling.googleapis.com")
    r = run_tpuctl_process("up", "pr3", "--zone", "us-central1-b", "--no-vm", "--json")
    assert r.code == 0, r.err
    [note] = [line for line in r.err.splitlines() if line.startswith("prices: ")]
    assert note.startswith("prices: the Cloud Billing Catalog API failed (Cloud Billing API has not been used in "
                           "project "), note
    assert ("or it is disabled; enable it: gcloud services enable cloudbilling.googleapis.com); using the "
            "bundled table") in note, note


def test_the_fake_pages_skus_as_the_api_does(fakegcp):
    import urllib.request

    def get(query: str) -> dict:
        with urllib.request.urlopen(f"{fakegcp.url}/v1/services/6F81-5844-456A/skus?{query}") as resp:
            return json.loads(resp.read())

    first = get("pageSize=7")
    assert len(first["skus"]) == 7 and first["nextPageToken"]
    rest, token = [], first["nextPageToken"]
    while token:
        page = get(f"pageSize=7&pageToken={token}")
        rest += page["skus"]
        token = page["nextPageToken"]
    everything = get("")
    assert [s["skuId"] for s in first["skus"] + rest] == [s["skuId"] for s in everything["skus"]]
    assert everything["nextPageToken"] == ""
    sku = everything["skus"][0]
    assert set(sku) >= {"name", "skuId", "description", "category", "serviceRegions", "pricingInfo", "geoTaxonomy"}
    assert sku["name"] == f"services/6F81-5844-456A/skus/{sku['skuId']}"
