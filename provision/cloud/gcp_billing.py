"""Prices from the Cloud Billing Catalog API, cached in ``TPUCTL_HOME`` for a day.

``GET {endpoint}/v1/services/{serviceId}/skus`` (discovery document ``cloudbilling.v1.json``,
``services.skus.list``: ``pageSize``, ``pageToken``, ``currencyCode``; answer ``{skus[],
nextPageToken}``) for the Cloud TPU service and the Compute Engine service, through the same
google-auth ``AuthorizedSession`` as every other call (:mod:`provision.cloud.gcp_rest`). The rates
parsed from them (:mod:`provision.catalog.skus`) are cached as a small JSON file, so ``status`` and
``cost`` read a file, not the API, while the cache is under a day old. Any failure (no network, no
permission, a bad answer) falls back to the last cache however old, else to the bundled table, with
one line saying so, and is not retried for :data:`RETRY_AFTER_S`: pricing never fails a command.

``TPUCTL_BILLING_API_ENDPOINT`` replaces ``https://cloudbilling.googleapis.com`` (the fake cloud
in tests serves the same paths).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..basics.config import home
from ..basics.statefile import read_json, write_json
from ..catalog.prices import BUNDLED, PriceBook, Rate
from ..catalog.skus import COMPUTE_SERVICE, TPU_SERVICE, book_from_skus
from .failures import Kind

ENDPOINT_ENV = "TPUCTL_BILLING_API_ENDPOINT"
ENDPOINT = "https://cloudbilling.googleapis.com"
LIFETIME_S = 24 * 3600.0
RETRY_AFTER_S = 3600.0
PAGE_SIZE = 5000
CACHE_VERSION = 1
CALL_TIMEOUT = 30.0


def billing_base() -> str:
    url = (os.environ.get(ENDPOINT_ENV) or "").strip() or ENDPOINT
    if "://" not in url:
        url = f"https://{url}"
    return url.rstrip("/")


def cache_path() -> Path:
    return home() / "cache" / "prices.json"


def list_skus(call: Callable[..., dict[str, Any]], service: str) -> list[dict[str, Any]]:
    """Every SKU of ``service``, following ``nextPageToken``."""
    url = f"{billing_base()}/v1/services/{service}/skus"
    skus: list[dict[str, Any]] = []
    token = ""
    for _ in range(1000):
        params = {"pageSize": PAGE_SIZE, "currencyCode": "USD", **({"pageToken": token} if token else {})}
        page = call("GET", url, params=params, timeout=CALL_TIMEOUT)
        skus.extend(s for s in page.get("skus") or [] if isinstance(s, dict))
        token = page.get("nextPageToken") or ""
        if not token:
            return skus
    raise ValueError(f"{url} kept answering with another page")


def _rows(table: dict[tuple[str, str, str], Rate]) -> list[list[Any]]:
    return [[*key, r.usd, r.source, r.date] for key, r in sorted(table.items())]


def _table(rows: Any) -> dict[tuple[str, str, str], Rate]:
    return {(str(k), str(reg), str(t)): Rate(float(usd), str(src), str(date))
            for k, reg, t, usd, src, date in rows}


def _from_cache(data: dict[str, Any], note: str | None = None) -> PriceBook:
    book = PriceBook(tpu=_table(data["tpu"]), vm=_table(data["vm"]), origin=str(data["origin"]),
                     notes=((note,) if note else ()) + ("rows it lacks from the bundled table",))
    return book.overlaid_on(BUNDLED)


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def load(call: Callable[[], Callable[..., dict[str, Any]]], *, warn: Callable[[str], None],
         now: float | None = None) -> PriceBook:
    """The price book: the fresh cache, else the API (then cached), else a stale cache or the bundled table.

    ``call`` gives the authorized call function (``Rest.call``) only when the API is asked."""
    now = time.time() if now is None else now
    path = cache_path()
    cached = read_json(path, default=None)
    good = cached if isinstance(cached, dict) and cached.get("version") == CACHE_VERSION and "tpu" in cached \
        else None
    try:
        if good is not None and now - float(good.get("fetched_at", 0)) < LIFETIME_S:
            return _from_cache(good)
        if isinstance(cached, dict) and now - float(cached.get("failed_at") or 0) < RETRY_AFTER_S:
            return _fallback(good, str(cached.get("error") or "unavailable"), warn, retry=False)
    except (KeyError, TypeError, ValueError):
        good = None             # a damaged cache: ask the API again
    try:
        fn = call()
        fetched = book_from_skus(list_skus(fn, TPU_SERVICE), list_skus(fn, COMPUTE_SERVICE),
                                 fetched=_stamp(now)[:10])
        if not fetched.tpu:
            raise ValueError("the answer listed no TPU prices")
    except Exception as exc:  # noqa: BLE001 - pricing never fails a command: fall back and say why
        reason = reason_of(exc)
        write_json(path, {**(good or {}), "version": CACHE_VERSION, "failed_at": now, "error": reason}
                   if good else {"version": CACHE_VERSION, "failed_at": now, "error": reason})
        return _fallback(good, reason, warn, retry=True)
    data = {"version": CACHE_VERSION, "fetched_at": now, "origin": fetched.origin,
            "endpoint": billing_base(), "tpu": _rows(dict(fetched.tpu)), "vm": _rows(dict(fetched.vm))}
    write_json(path, data)
    return _from_cache(data)


def reason_of(exc: BaseException) -> str:
    """Why the catalog could not be read, in a few words and the fix: a disabled API or a missing
    role is said with how to enable or grant it (Google's own words for that, "Enable it by
    visiting ...", come after a long URL and would be cut)."""
    from .gcp_errors import failure_of

    name = type(exc).__name__
    if "Connection" in name or "Timeout" in name:
        return f"{name}: {billing_base()} did not answer"
    f = failure_of(exc)
    if f.kind in (Kind.API_DISABLED, Kind.PERMISSION) and f.hint:
        return f"{_first_sentence(f.message)}; {f.hint}"
    return _cut(" ".join(str(exc).split()) or name, 160)


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return _cut(text[:end] if end > 0 else text.rstrip("."), 160)


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word and marked."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _fallback(good: dict[str, Any] | None, reason: str, warn: Callable[[str], None], *, retry: bool) -> PriceBook:
    when = "" if retry else " (not asked again for an hour)"
    if good is not None:
        note = (f"the Cloud Billing Catalog API failed ({reason}){when}; using prices cached "
                f"{_stamp(float(good.get('fetched_at', 0)))}")
        warn(f"prices: {note}")
        return _from_cache(good, note)
    note = f"the Cloud Billing Catalog API failed ({reason}){when}; using the bundled table"
    warn(f"prices: {note}")
    return PriceBook(tpu=BUNDLED.tpu, vm=BUNDLED.vm, origin=BUNDLED.origin, notes=(note,))
