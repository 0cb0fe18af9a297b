"""Cloud Monitoring v3: ``projects.timeSeries.create`` (what tpuctl writes a run's workload metrics with).

``POST /v3/projects/{project}/timeSeries`` with a ``CreateTimeSeriesRequest``, as Google's
discovery document ``monitoring.v3.json`` (google-api-python-client ships it) describes the method:
the body is checked against the document first (an unknown field, a value of the wrong type or
outside an enum is refused whole, 400, in the JSON decoder's words: :mod:`.discovery`), then each
series against what the same document says a write must be:

- at most 200 series a request (``CreateTimeSeriesRequest.timeSeries``);
- exactly one point a series (``TimeSeries.points``), of the series' ``valueType`` when it names one;
- a GAUGE point's interval has an end time, and a start time only if it is the same
  (``TimeInterval``); the end time no more than 25 hours in the past nor five minutes in the future;
- a new point later than the newest point of its series, by at least a millisecond;
- each series once a request ("Each TimeSeries value must fully specify a unique time series").

What the document does not word, Google's answers do, as pasted in public reports; a series that
fails is reported in one 400 INVALID_ARGUMENT, ``One or more TimeSeries could not be written:
<why>: timeSeries[i]; ...`` (micrometer-metrics/micrometer#2160, googleforgames/open-match#569),
while the request's other series are written, and a ``CreateTimeSeriesSummary`` detail counts
them (``total_point_count:3 errors:{status:{code:3} point_count:3}``,
GoogleCloudPlatform/opentelemetry-operations-go#1029):

- a point not after the newest: ``Points must be written in order. One or more of the points
  specified had an older end time than the most recent point.`` (googleapis/python-monitoring#57);
- within 5 s of it: ``One or more points were written more frequently than the maximum sampling
  period configured for the metric. {Metric: M, Timestamps: {Youngest Existing: '...', New:
  '...'}}`` (open-match#569: 5.000 s apart is refused; Stackdriver/stackdriver-prometheus-sidecar#224);
- a series twice: ``Field timeSeries[i] had an invalid value: Duplicate TimeSeries encountered.
  Only one point can be written per TimeSeries per request.`` (influxdata/telegraf#5963);
- a value of another type than the metric's: ``Value type for metric M must be DOUBLE, but is
  INT64.`` (micrometer#2160); another kind: ``Metric kind for metric M must be GAUGE, but is
  CUMULATIVE.`` (Stackdriver/stackdriver-prometheus-sidecar#86).

The metrics Google defines that a workload writes are known with their kind, value type, labels and
monitored resource: the ``compute.googleapis.com/workload/`` metrics of the ML Goodput Measurement
library (0.2.3, ``src/monitoring.py``: GAUGE points, DOUBLE times, INT64 counts, on
``compute.googleapis.com/Workload`` with ``location``, ``workload_id``, ``replica_id``). A series of
one of them that lacks a resource label, carries a label the library never sets, or names another
resource is refused (the wording of those three is the fake's own). A custom metric
(``custom.googleapis.com/``, ``workload.googleapis.com/``, ``external.googleapis.com/``) takes the
kind and type of its first point, as Monitoring auto-creates its descriptor; another Google metric
is refused (the fake's own wording). ``projects.timeSeries.list`` is not served (404).

``GET /_admin/monitoring`` answers every create request as received (project, body, HTTP status)
and every series written, with its points.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import discovery
from .errors import ApiError
from .routing import Request, Router
from .store import Store

SERVICE = "monitoring.googleapis.com"
DOC = "monitoring.v3"
CREATE = "monitoring.projects.timeSeries.create"
MAX_SERIES = 200
SAMPLING_PERIOD_S = 5.0
PAST_LIMIT_S = 25 * 3600.0
FUTURE_LIMIT_S = 5 * 60.0
WORKLOAD = "compute.googleapis.com/Workload"
WORKLOAD_LABELS = ("location", "workload_id", "replica_id")
CUSTOM_PREFIXES = ("custom.googleapis.com/", "workload.googleapis.com/", "external.googleapis.com/")
SUMMARY = "type.googleapis.com/google.monitoring.v3.CreateTimeSeriesSummary"


@dataclass(frozen=True)
class Descriptor:
    kind: str
    value_type: str
    labels: frozenset[str] = frozenset()
    resource: str | None = None


# ml-goodput-measurement 0.2.3, src/monitoring.py _upload_goodput_metrics_to_gcm and
# _send_step_deviation_metric_to_gcp (cluster_name: its optional label on every metric of a GKE job)
_ACC = frozenset({"accelerator_type", "cluster_name"})
KNOWN: dict[str, Descriptor] = {
    "compute.googleapis.com/workload/goodput_time": Descriptor("GAUGE", "DOUBLE", _ACC | {"goodput_source"}, WORKLOAD),
    "compute.googleapis.com/workload/badput_time": Descriptor("GAUGE", "DOUBLE", _ACC | {"badput_source"}, WORKLOAD),
    "compute.googleapis.com/workload/total_elapsed_time": Descriptor("GAUGE", "DOUBLE", _ACC | {"window_type"},
                                                                     WORKLOAD),
    "compute.googleapis.com/workload/disruptions": Descriptor("GAUGE", "INT64", _ACC | {"window_type"}, WORKLOAD),
    "compute.googleapis.com/workload/max_productive_steps": Descriptor("GAUGE", "INT64", _ACC, WORKLOAD),
    "compute.googleapis.com/workload/step_time_deviation": Descriptor("GAUGE", "DOUBLE", _ACC, WORKLOAD),
    "compute.googleapis.com/workload/performance": Descriptor("GAUGE", "DOUBLE", frozenset(), WORKLOAD),
}
VALUE_TYPES = {"boolValue": "BOOL", "int64Value": "INT64", "doubleValue": "DOUBLE", "stringValue": "STRING",
               "distributionValue": "DISTRIBUTION"}


@dataclass
class Series:
    project: str
    metric: dict[str, Any]
    resource: dict[str, Any]
    value_type: str
    points: list[tuple[float, dict[str, Any]]] = field(default_factory=list)   # (end time, value), oldest first

    def json(self) -> dict[str, Any]:
        return {"metric": self.metric, "resource": self.resource, "metricKind": "GAUGE", "valueType": self.value_type,
                "points": [{"interval": {"endTime": _stamp(t)}, "value": v} for t, v in reversed(self.points)]}


@dataclass
class Monitoring:
    """What the fake keeps of Cloud Monitoring: the series and the requests, in one store."""

    series: dict[tuple[Any, ...], Series] = field(default_factory=dict)
    descriptors: dict[tuple[str, str], Descriptor] = field(default_factory=dict)   # (project, type): auto-created
    requests: list[dict[str, Any]] = field(default_factory=list)


def state(store: Store) -> Monitoring:
    if store.monitoring is None:
        store.monitoring = Monitoring()
    return store.monitoring


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _google_time(t: float) -> str:
    """A time as Monitoring's errors show one: ``2019/06/21-12:29:46.439`` (open-match#569)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y/%m/%d-%H:%M:%S.%f")[:-3]


def _parse_time(path: str, text: str) -> float:
    """A protobuf Timestamp in JSON (RFC 3339); else the decoder's refusal of the whole request."""
    try:
        value = text.replace("Z", "+00:00")
        if "." in value:       # Python parses at most 6 fractional digits
            head, _, rest = value.partition(".")
            digits = "".join(itertools.takewhile(str.isdigit, rest))
            value = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError(text)
        return parsed.timestamp()
    except ValueError:
        raise ApiError(3, f"Invalid value at '{path}' (type.googleapis.com/google.protobuf.Timestamp), "
                          f"Field '{path}', Invalid time format: {text}") from None


def _labels(d: Any) -> dict[str, str]:
    return dict((d or {}).get("labels") or {}) if isinstance(d, dict) else {}


def _key(project: str, ts: dict[str, Any]) -> tuple[Any, ...]:
    m, r = ts.get("metric") or {}, ts.get("resource") or {}
    return (project, m.get("type"), tuple(sorted(_labels(m).items())), r.get("type"),
            tuple(sorted(_labels(r).items())))


def _shown(i: int, ts: dict[str, Any]) -> str:
    """Where a refused series is, as Google's errors name it: ``global{} timeSeries[3]:
    workload.googleapis.com/x{label:value,...}`` (GoogleCloudPlatform/opentelemetry-operations-java#247)."""
    m, r = ts.get("metric") or {}, ts.get("resource") or {}

    def text(labels: dict[str, str]) -> str:
        return ",".join(f"{k}:{v}" for k, v in sorted(labels.items()))
    return f"{r.get('type')}{{{text(_labels(r))}}} timeSeries[{i}]: {m.get('type')}{{{text(_labels(m))}}}"


class _Refused(Exception):
    """One series that cannot be written: why, in Google's words (or the fake's own, where marked)."""


def _descriptor(mon: Monitoring, project: str, metric_type: str, kind: str, value_type: str) -> Descriptor:
    known = KNOWN.get(metric_type)
    if known is not None:
        return known
    if not metric_type.startswith(CUSTOM_PREFIXES):
        # the fake's own wording: a metric Google defines that it does not know
        raise _Refused(f"The metric type {metric_type} cannot be written by this fake: it knows the "
                       f"workload metrics and custom ones ({', '.join(CUSTOM_PREFIXES)}) only.")
    made = mon.descriptors.get((project, metric_type))
    if made is None:
        # the first point creates the descriptor: GAUGE unless CUMULATIVE (TimeSeries.metricKind)
        made = Descriptor(kind if kind in ("GAUGE", "CUMULATIVE") else "GAUGE", value_type)
        mon.descriptors[(project, metric_type)] = made
    return made


def _check_series(mon: Monitoring, project: str, i: int, ts: dict[str, Any], now: float
                  ) -> tuple[tuple[Any, ...], float, dict[str, Any], str]:
    """Raises _Refused with why ``ts`` cannot be written; else (its key, end time, value, value type)."""
    metric, resource = ts.get("metric") or {}, ts.get("resource") or {}
    metric_type = str(metric.get("type") or "")
    if not metric_type:
        raise _Refused(f"Field timeSeries[{i}].metric.type had an invalid value: a metric type is required.")
    if not resource.get("type"):
        raise _Refused(f"Field timeSeries[{i}].resource.type had an invalid value: a monitored resource type "
                       "is required.")
    points = ts.get("points") or []
    if len(points) != 1:
        raise _Refused(f"Field timeSeries[{i}].points had an invalid value: Only one point can be written per "
                       "TimeSeries per request.")
    point = points[0]
    given = [k for k in VALUE_TYPES if k in (point.get("value") or {})]
    if len(given) != 1:
        raise _Refused(f"Field timeSeries[{i}].points[0].value had an invalid value: exactly one value is "
                       "required.")
    value_type = VALUE_TYPES[given[0]]
    if ts.get("valueType") not in (None, "VALUE_TYPE_UNSPECIFIED", value_type):
        raise _Refused(f"Value type for metric {metric_type} must be {ts['valueType']}, but is {value_type}.")
    kind = str(ts.get("metricKind") or "GAUGE")
    d = _descriptor(mon, project, metric_type, kind, value_type)
    if value_type != d.value_type:
        raise _Refused(f"Value type for metric {metric_type} must be {d.value_type}, but is {value_type}.")
    if kind not in ("METRIC_KIND_UNSPECIFIED", d.kind):
        raise _Refused(f"Metric kind for metric {metric_type} must be {d.kind}, but is {kind}.")
    if d.resource is not None:
        if resource["type"] != d.resource:          # the fake's own wording, as the three below
            raise _Refused(f"The metric {metric_type} is written on the monitored resource {d.resource}, "
                           f"not {resource['type']}.")
        missing = [k for k in WORKLOAD_LABELS if not _labels(resource).get(k)]
        if missing:
            raise _Refused(f"The monitored resource {d.resource} needs a value for every label; "
                           f"missing: {', '.join(missing)}.")
        extra = sorted(set(_labels(metric)) - d.labels)
        if extra:
            raise _Refused(f"Unrecognized metric labels for {metric_type}: {', '.join(extra)}.")
    interval = point.get("interval") or {}
    if not interval.get("endTime"):
        raise _Refused(f"Field timeSeries[{i}].points[0].interval.end_time had an invalid value: an end time is "
                       "required.")
    end = _parse_time(f"time_series[{i}].points[0].interval.end_time", str(interval["endTime"]))
    if interval.get("startTime") is not None:
        start = _parse_time(f"time_series[{i}].points[0].interval.start_time", str(interval["startTime"]))
        if d.kind == "GAUGE" and start != end:
            raise _Refused(f"Field timeSeries[{i}].points[0].interval.start_time had an invalid value: the start "
                           "and end times of a GAUGE point must be identical.")
    if end < now - PAST_LIMIT_S or end > now + FUTURE_LIMIT_S:
        raise _Refused(f"Field timeSeries[{i}].points[0].interval.end_time had an invalid value: it must be no "
                       "more than 25 hours in the past and no more than 5 minutes in the future.")
    key = _key(project, ts)
    old = mon.series.get(key)
    if old is not None and old.points:
        youngest = old.points[-1][0]
        if end < youngest + 0.001:
            raise _Refused("Points must be written in order. One or more of the points specified had an older "
                           "end time than the most recent point.")
        if end - youngest <= SAMPLING_PERIOD_S:
            raise _Refused("One or more points were written more frequently than the maximum sampling period "
                           f"configured for the metric. {{Metric: {metric_type}, Timestamps: {{Youngest Existing: "
                           f"'{_google_time(youngest)}', New: '{_google_time(end)}'}}}}")
    return key, end, dict(point["value"]), value_type


def create(store: Store, project: str, body: Any, *, now: float) -> dict[str, Any]:
    """``projects.timeSeries.create``: writes what it can, refuses the rest in one 400."""
    mon = state(store)
    entry: dict[str, Any] = {"project": project, "body": json.loads(json.dumps(body)), "status": 400}
    mon.requests.append(entry)
    discovery.check(CREATE, body, doc=DOC, root="")
    series = body.get("timeSeries") or []
    if not series:
        raise ApiError(3, "Field timeSeries had an invalid value: at least one TimeSeries is required.")
    if len(series) > MAX_SERIES:
        # the limit is the discovery document's; this wording is the fake's own
        raise ApiError(3, f"Field timeSeries had an invalid value: at most {MAX_SERIES} TimeSeries may be written "
                          f"in one request, not {len(series)}.")
    refused: list[tuple[int, str]] = []
    seen: set[tuple[Any, ...]] = set()
    accepted: list[tuple[tuple[Any, ...], float, dict[str, Any], str, dict[str, Any]]] = []
    for i, ts in enumerate(series):
        try:
            key, end, value, value_type = _check_series(mon, project, i, ts, now)
        except _Refused as why:
            refused.append((i, str(why)))
            continue
        if key in seen:
            refused.append((i, (f"Field timeSeries[{i}] had an invalid value: Duplicate TimeSeries encountered. "
                                "Only one point can be written per TimeSeries per request.")))
            continue
        seen.add(key)
        accepted.append((key, end, value, value_type, ts))
    for key, end, value, value_type, ts in accepted:
        s = mon.series.get(key)
        if s is None:
            s = mon.series[key] = Series(project, {"type": ts["metric"]["type"], "labels": _labels(ts["metric"])},
                                         {"type": ts["resource"]["type"], "labels": _labels(ts["resource"])},
                                         value_type)
        s.points.append((end, value))
    if refused:
        message = "One or more TimeSeries could not be written: " + "; ".join(
            f"{why}: {_shown(i, series[i])}" for i, why in refused)
        raise ApiError(3, message, details=[{"@type": SUMMARY, "totalPointCount": len(series),
                                             "successPointCount": len(accepted),
                                             "errors": [{"status": {"code": 3}, "pointCount": len(refused)}]}])
    entry["status"] = 200
    return {}


def register(router: Router, store_of: Any) -> None:
    import time

    @router.add("POST", "/v3/projects/{project}/timeSeries", CREATE, permission="monitoring.timeSeries.create",
                service=SERVICE, style="tpu")
    def create_time_series(req: Request) -> Any:
        return create(store_of(), req.params["project"], req.body, now=time.time())


def register_admin(router: Router, cloud: Any) -> None:
    """``GET /_admin/monitoring``: every create request as received, and every series written."""

    @router.add("GET", "/_admin/monitoring", "admin", service="admin", style="tpu")
    def written(req: Request) -> Any:
        mon = state(cloud.store)
        return {"requests": list(mon.requests), "timeSeries": [s.json() for s in mon.series.values()]}
