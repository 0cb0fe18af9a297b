"""The price cache's decisions (the wire itself: tests/integration/test_gcp_prices.py)."""

from __future__ import annotations

import json

from provision.cloud import gcp_billing
from tests.unit.test_prices import COMPUTE, TPU

DAY = 24 * 3600


def catalog_call(pages: dict[str, list[dict]], size: int = 3):
    """A stand-in for ``Rest.call`` answering ``services.skus.list`` in pages of ``size``."""
    asked = []

    def call(method, url, *, params, timeout):
        service = url.split("/services/")[1].split("/")[0]
        start = int(params.get("pageToken") or 0)
        asked.append((service, start))
        items = pages[service][start:start + size]
        nxt = start + size if start + size < len(pages[service]) else ""
        return {"skus": items, "nextPageToken": str(nxt) if nxt else ""}

    return call, asked


def test_every_page_is_read_and_the_rates_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUCTL_HOME", str(tmp_path))
    call, asked = catalog_call({"E000-3F24-B8AA": TPU, "6F81-5844-456A": COMPUTE})
    warnings = []
    book = gcp_billing.load(lambda: call, warn=warnings.append, now=1000.0)
    assert len(asked) == 2 + 4 and not warnings           # 4 TPU SKUs in 2 pages, 10 Compute SKUs in 4
    assert book.tpu[("v3", "us-central1", "spot/preemptible")].usd == 0.51
    # within the day: the cache answers, the API is not asked
    again = gcp_billing.load(lambda: (_ for _ in ()).throw(AssertionError("asked")), warn=warnings.append,
                             now=1000.0 + DAY - 1)
    assert again.tpu == book.tpu and not warnings


def test_a_failure_prefers_a_stale_cache_and_is_not_retried_for_an_hour(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUCTL_HOME", str(tmp_path))
    call, _ = catalog_call({"E000-3F24-B8AA": TPU, "6F81-5844-456A": COMPUTE})
    gcp_billing.load(lambda: call, warn=print, now=0.0)
    attempts, warnings = [], []

    def broken():
        attempts.append(1)
        raise ConnectionError("no route")

    stale = gcp_billing.load(broken, warn=warnings.append, now=2 * DAY)
    assert attempts == [1] and "using prices cached 1970-01-01 00:00 UTC" in warnings[0]
    assert stale.tpu[("v3", "us-central1", "spot/preemptible")].usd == 0.51     # the stale cache, not the table
    gcp_billing.load(broken, warn=warnings.append, now=2 * DAY + 60)
    assert attempts == [1] and "not asked again for an hour" in warnings[1]
    gcp_billing.load(broken, warn=warnings.append, now=2 * DAY + 3601)
    assert attempts == [1, 1]


def test_a_damaged_cache_is_asked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUCTL_HOME", str(tmp_path))
    path = gcp_billing.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "fetched_at": 5.0, "tpu": [["v2", "x"]], "vm": []}))
    call, asked = catalog_call({"E000-3F24-B8AA": TPU, "6F81-5844-456A": COMPUTE})
    book = gcp_billing.load(lambda: call, warn=print, now=10.0)
    assert asked and ("v2-pod", "europe-west4", "on-demand") in book.tpu
