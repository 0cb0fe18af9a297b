"""A TPU's duty cycle from Cloud Monitoring, for ``tpuctl down --idle --min-duty-cycle``.

One ``projects.timeSeries.list`` call (Monitoring API v3, REST, through google-auth's
AuthorizedSession: no monitoring client library needed) reads the metric
``tpu.googleapis.com/accelerator/duty_cycle`` (percent of each 60 s sample the accelerator was
busy, 0..100) for the whole project over the idle window; each series is matched to a node by the
node name in its resource or metric labels (``node_id`` on ``tpu_worker``), and a node's duty cycle
at a time is the busiest of its workers and chips. Series that name no node (the
``GceTpuWorker`` resource labels only a ``worker_id``) match nothing: that node's duty cycle is
then "unavailable" and the progress record decides alone, as it does when Monitoring cannot be
reached at all.

``TPUCTL_MONITORING_API_ENDPOINT`` replaces ``https://monitoring.googleapis.com`` (tests use a
loopback stub); ``TPUCTL_CREDENTIALS=anonymous`` skips Application Default Credentials.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from typing import Any

from .base import DutyCycle

ENDPOINT_ENV = "TPUCTL_MONITORING_API_ENDPOINT"
DEFAULT_ENDPOINT = "https://monitoring.googleapis.com"
METRIC = "tpu.googleapis.com/accelerator/duty_cycle"
# Monitoring publishes a sample up to 180 s after it is taken: look back that much further.
PUBLISH_DELAY_S = 180.0
TIMEOUT_S = 10.0
NODE_LABELS = ("node_id", "node_name", "tpu_node", "instance_name")
ZONE_LABELS = ("zone", "location")


class Unavailable(Exception):
    """Cloud Monitoring could not say: the reason, in one line."""


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> float:
    text = text.replace("Z", "+00:00")
    if "." in text:  # Python 3.10 parses at most 6 fractional digits
        head, _, rest = text.partition(".")
        digits = "".join(ch for ch in rest if ch.isdigit())
        tz = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    return datetime.fromisoformat(text).timestamp()


def _session() -> Any:
    from google.auth.transport.requests import AuthorizedSession

    if os.environ.get("TPUCTL_CREDENTIALS", "").lower() == "anonymous":
        from google.auth.credentials import AnonymousCredentials

        creds = AnonymousCredentials()
    else:
        import google.auth

        try:
            creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/monitoring.read"])
        except Exception as exc:  # noqa: BLE001 - no credentials: duty cycle unavailable, never fatal
            raise Unavailable(f"no Google Cloud credentials ({type(exc).__name__})") from None
    return AuthorizedSession(creds)


def fetch(project: str, *, window_s: float, now: float | None = None) -> dict[tuple[str, str | None], DutyCycle]:
    """Every node's duty cycle over the last ``window_s`` (plus the publishing delay).

    Keys are ``(node name, zone or None)``; raises :class:`Unavailable` when Monitoring cannot be
    read (unreachable, no permission, API disabled), with the reason.
    """
    now = time.time() if now is None else now
    base = (os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")
    params = {"filter": f'metric.type = "{METRIC}"',
              "interval.startTime": _rfc3339(now - window_s - PUBLISH_DELAY_S),
              "interval.endTime": _rfc3339(now), "view": "FULL", "pageSize": "1000"}
    session = _session()
    series: list[dict[str, Any]] = []
    try:
        for _page in range(20):
            resp = session.get(f"{base}/v3/projects/{project}/timeSeries", params=params, timeout=TIMEOUT_S)
            if resp.status_code != 200:
                raise Unavailable(f"Cloud Monitoring answered {resp.status_code} {_status(resp)}")
            body = resp.json()
            series.extend(body.get("timeSeries") or [])
            token = body.get("nextPageToken")
            if not token:
                break
            params["pageToken"] = token
    except Unavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, DNS, TLS, bad JSON
        raise Unavailable(f"Cloud Monitoring unreachable at {base} ({type(exc).__name__})") from None
    finally:
        session.close()
    return by_node(series)


def _status(resp: Any) -> str:
    try:
        return str(resp.json()["error"].get("status") or "")
    except Exception:  # noqa: BLE001
        return ""


def by_node(series: list[dict[str, Any]]) -> dict[tuple[str, str | None], DutyCycle]:
    """Group timeSeries (Monitoring's JSON) by the node they name: max over workers at each time."""
    merged: dict[tuple[str, str | None], dict[float, float]] = {}
    for ts in series:
        labels = {**((ts.get("resource") or {}).get("labels") or {}), **((ts.get("metric") or {}).get("labels") or {})}
        node = next((labels[k] for k in NODE_LABELS if labels.get(k)), None)
        if not node:
            continue
        zone = next((labels[k] for k in ZONE_LABELS if labels.get(k)), None)
        points = merged.setdefault((node, zone), {})
        for p in ts.get("points") or []:
            value = p.get("value") or {}
            raw = value.get("doubleValue", value.get("int64Value"))
            end = (p.get("interval") or {}).get("endTime")
            if raw is None or not end:
                continue
            t, v = _parse_time(end), float(raw)
            points[t] = max(points.get(t, 0.0), v)
    return {k: DutyCycle(tuple(sorted(v.items()))) for k, v in merged.items()}


def lookup(table: dict[tuple[str, str | None], DutyCycle], name: str, zone: str) -> DutyCycle | None:
    return table.get((name, zone)) or table.get((name, None))
