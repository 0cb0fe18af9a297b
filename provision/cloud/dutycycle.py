"""A TPU's duty cycle from Cloud Monitoring, for ``tpuctl down --idle --min-duty-cycle``.

One ``projects.timeSeries.list`` call (Monitoring API v3, REST, through google-auth's
AuthorizedSession: no monitoring client library needed) reads the metric
``tpu.googleapis.com/accelerator/duty_cycle`` (percent of each 60 s sample the accelerator was
busy, 0..100) for the whole project over the idle window.

Google writes that metric on the monitored resource ``tpu.googleapis.com/GceTpuWorker``, whose
labels are ``resource_container`` (the project), ``location`` (the zone) and ``worker_id`` (one
TPU VM worker), with a metric label ``accelerator_id`` per chip: nothing in them names the TPU
node. So a series is mapped to a node by what those labels allow: its zone. When exactly one TPU
node of the project is in that zone (the TPU API lists them all), every worker there is that
node's, and the node's duty cycle at a time is the busiest of its workers and chips. When several
nodes share a zone their series cannot be told apart: those nodes' duty cycle is unavailable and
their progress record decides alone, as it does when Monitoring cannot be reached at all. (A
series that does name its node, as the older ``tpu_worker`` resource's ``node_id`` does, is
mapped by that name.)

One token serves both calls, so it carries the ``cloud-platform`` scope (``gcp_rest.SCOPES``), the
GCP provider's own credentials: a ``monitoring.read`` token is refused by the TPU API (403
ACCESS_TOKEN_SCOPE_INSUFFICIENT) wherever the scope is honoured, i.e. with a service-account key or
user credentials on a laptop (a GCE VM's metadata token has the VM's scopes whatever is asked).
When either call fails, :class:`Unavailable` says why in one line: Google's status and message as
:mod:`provision.cloud.failures` reads them, and what fixes it (a role, a scope, an API to enable).

``TPUCTL_MONITORING_API_ENDPOINT`` replaces ``https://monitoring.googleapis.com`` (tests use a
loopback stub), ``TPUCTL_TPU_API_ENDPOINT`` ``https://tpu.googleapis.com``;
``TPUCTL_CREDENTIALS=anonymous`` skips Application Default Credentials.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from ..basics.redact import redact
from .base import DutyCycle

ENDPOINT_ENV = "TPUCTL_MONITORING_API_ENDPOINT"
DEFAULT_ENDPOINT = "https://monitoring.googleapis.com"
TPU_ENDPOINT_ENV = "TPUCTL_TPU_API_ENDPOINT"
DEFAULT_TPU_ENDPOINT = "https://tpu.googleapis.com"
METRIC = "tpu.googleapis.com/accelerator/duty_cycle"
RESOURCE_TYPE = "tpu.googleapis.com/GceTpuWorker"
RESOURCE_LABELS = ("resource_container", "location", "worker_id")
# Monitoring publishes a sample up to 180 s after it is taken: look back that much further.
PUBLISH_DELAY_S = 180.0
TIMEOUT_S = 10.0
NODE_LABELS = ("node_id",)                  # the older tpu_worker resource names its node
ZONE_LABELS = ("location", "zone")
WORKER_LABELS = ("worker_id",)


class Unavailable(Exception):
    """Cloud Monitoring could not say: the reason, in one line."""


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> float:
    text = text.replace("Z", "+00:00")
    if "." in text:  # Python 3.10 parses at most 6 fractional digits
        head, _, rest = text.partition(".")
        digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]   # the fraction, not the offset's
        tz = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    return datetime.fromisoformat(text).timestamp()


def _session(credentials: Any = None) -> Any:
    from google.auth.transport.requests import AuthorizedSession

    if credentials is not None:
        return AuthorizedSession(credentials)
    if os.environ.get("TPUCTL_CREDENTIALS", "").lower() == "anonymous":
        from google.auth.credentials import AnonymousCredentials

        return AuthorizedSession(AnonymousCredentials())
    import google.auth

    from .gcp_rest import SCOPES

    try:
        creds, _ = google.auth.default(scopes=list(SCOPES))
    except Exception as exc:  # noqa: BLE001 - no credentials: duty cycle unavailable, never fatal
        from .gcp_errors import credentials_error

        raise Unavailable(credentials_error(exc).one_line()) from None
    return AuthorizedSession(creds)


def _refused(what: str, resp: Any) -> Unavailable:
    """A non-200 answer, in one line: status, Google's message and the fix (role, scope, API)."""
    from .failures import classify_body

    try:
        body = resp.json()
    except Exception:  # noqa: BLE001 - not JSON (a proxy's page): the status alone
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return Unavailable(f"{what} answered HTTP {resp.status_code}")
    f = classify_body(body, http_status=resp.status_code, where="call")
    status = str(body["error"].get("status") or "")
    text = f"{what} answered {resp.status_code} {status}".rstrip() + (f": {f.message}" if f.message else "")
    return Unavailable(redact(" ".join((text + (f"; {f.hint}" if f.hint else "")).split()))[:400])


def _failed(what: str, base: str, exc: BaseException) -> Unavailable:
    """An exception on the way: a token that could not be had is said so, not called unreachable."""
    from .gcp_errors import failure_of

    f = failure_of(exc)
    name = type(exc).__name__
    if name == "RefreshError" or "access token" in f.message:
        return Unavailable(f.message + (f"; {f.hint}" if f.hint else ""))
    return Unavailable(f"{what} unreachable at {base} ({name})")


def fetch(project: str, *, window_s: float, now: float | None = None,
          nodes: Iterable[tuple[str, str]] | None = None,
          credentials: Any = None) -> dict[tuple[str, str | None], DutyCycle]:
    """Every node's duty cycle over the last ``window_s`` (plus the publishing delay).

    Keys are ``(node name, zone)``. ``nodes`` are every TPU node of the project as (name, zone);
    without them the TPU API is asked. Raises :class:`Unavailable` when Monitoring (or the TPU
    node list) cannot be read (unreachable, no permission, API disabled), with the reason.
    ``credentials`` (the provider's, cloud-platform scoped) default to Application Default
    Credentials with that scope.
    """
    now = time.time() if now is None else now
    base = (os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")
    params = {"filter": f'metric.type = "{METRIC}" AND resource.type = "{RESOURCE_TYPE}"',
              "interval.startTime": _rfc3339(now - window_s - PUBLISH_DELAY_S),
              "interval.endTime": _rfc3339(now), "view": "FULL", "pageSize": "1000"}
    session = _session(credentials)
    series: list[dict[str, Any]] = []
    try:
        for _page in range(20):
            resp = session.get(f"{base}/v3/projects/{project}/timeSeries", params=params, timeout=TIMEOUT_S)
            if resp.status_code != 200:
                raise _refused("Cloud Monitoring", resp)
            body = resp.json()
            series.extend(body.get("timeSeries") or [])
            token = body.get("nextPageToken")
            if not token:
                break
            params["pageToken"] = token
        if nodes is None:
            nodes = _list_nodes(session, project)
    except Unavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, DNS, TLS, bad JSON, no token
        raise _failed("Cloud Monitoring", base, exc) from None
    finally:
        session.close()
    return by_node(series, nodes)


def _list_nodes(session: Any, project: str) -> list[tuple[str, str]]:
    """Every TPU node of the project, (name, zone), from the TPU API (v2 lists TPU Nodes too)."""
    base = (os.environ.get(TPU_ENDPOINT_ENV) or DEFAULT_TPU_ENDPOINT).rstrip("/")
    params: dict[str, str] = {"pageSize": "1000"}
    out: list[tuple[str, str]] = []
    for _page in range(50):
        try:
            resp = session.get(f"{base}/v2/projects/{project}/locations/-/nodes", params=params, timeout=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            raise _failed("the TPU API (listing nodes to map series to)", base, exc) from None
        if resp.status_code != 200:
            raise _refused("the TPU API (listing nodes to map series to)", resp)
        body = resp.json()
        for n in body.get("nodes") or []:
            parts = str(n.get("name") or "").split("/")
            if "locations" in parts and len(parts) >= parts.index("locations") + 4:
                i = parts.index("locations")
                out.append((parts[i + 3], parts[i + 1]))
        token = body.get("nextPageToken")
        if not token:
            break
        params["pageToken"] = token
    return out


def _points(ts: dict[str, Any]) -> dict[float, float]:
    out: dict[float, float] = {}
    for p in ts.get("points") or []:
        value = p.get("value") or {}
        raw = value.get("doubleValue", value.get("int64Value"))
        end = (p.get("interval") or {}).get("endTime")
        if raw is None or not end:
            continue
        t, v = _parse_time(end), float(raw)
        out[t] = max(out.get(t, 0.0), v)
    return out


def _merge(into: dict[float, float], points: dict[float, float]) -> None:
    for t, v in points.items():
        into[t] = max(into.get(t, 0.0), v)


def by_node(series: list[dict[str, Any]], nodes: Iterable[tuple[str, str]] | None = None
            ) -> dict[tuple[str, str | None], DutyCycle]:
    """Group timeSeries (Monitoring's JSON) by the node they belong to: max over workers and chips
    at each time. A series naming its node (``node_id``) goes to that node; a ``GceTpuWorker``
    series (``location``, ``worker_id``) to the only node of ``nodes`` in its zone, or to none when
    the zone has several."""
    in_zone: dict[str, list[str]] = {}
    for name, zone in nodes or ():
        if name not in in_zone.setdefault(zone, []):
            in_zone[zone].append(name)
    merged: dict[tuple[str, str | None], dict[float, float]] = {}
    for ts in series:
        labels = {**((ts.get("resource") or {}).get("labels") or {}), **((ts.get("metric") or {}).get("labels") or {})}
        zone = next((labels[k] for k in ZONE_LABELS if labels.get(k)), None)
        node = next((labels[k] for k in NODE_LABELS if labels.get(k)), None)
        if node is None and zone is not None and len(in_zone.get(zone, ())) == 1:
            node = in_zone[zone][0]
        if not node:
            continue      # no node named, and the zone has none or several: cannot tell whose
        _merge(merged.setdefault((node, zone), {}), _points(ts))
    return {k: DutyCycle(tuple(sorted(v.items()))) for k, v in merged.items()}


def lookup(table: dict[tuple[str, str | None], DutyCycle], name: str, zone: str) -> DutyCycle | None:
    return table.get((name, zone)) or table.get((name, None))
