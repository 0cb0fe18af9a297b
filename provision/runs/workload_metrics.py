"""A run's goodput as the Cloud Monitoring workload metrics Google's ML Goodput library writes. Pure.

What the library writes, read in ``ml-goodput-measurement`` 0.2.3
(github.com/AI-Hypercomputer/ml-goodput-measurement, commit 57092cf, 2026-08-17):

- ``src/monitoring.py`` ``_upload_goodput_metrics_to_gcm``: one time series per metric on the
  monitored resource ``compute.googleapis.com/Workload`` with resource labels ``location`` (the
  zone), ``workload_id`` (the job's name) and ``replica_id`` (``GCPOptions.replica_id``, default
  ``'0'``); metrics ``compute.googleapis.com/workload/goodput_time`` (DOUBLE seconds, metric labels
  ``goodput_source`` = a ``GoodputType`` name, only ``TOTAL``, and ``accelerator_type``),
  ``.../badput_time`` (DOUBLE seconds, ``badput_source`` = a ``BadputType`` name, a nested one as
  ``TYPE.SUBTYPE``, and ``accelerator_type``), ``.../total_elapsed_time`` (DOUBLE seconds,
  ``accelerator_type``, ``window_type`` = ``MonitoringWindowType.CUMULATIVE.value``, i.e.
  ``cumulative``), ``.../disruptions`` (INT, the same two labels) and ``.../max_productive_steps``
  (INT, ``accelerator_type``); it also writes ``step_time_deviation`` and ``performance`` (ideal
  step time), which tpuctl does not measure and does not write;
- ``src/gcp_metrics.py`` ``GCPMetrics.send_metrics``: every series in one
  ``projects.timeSeries.create`` call, each with one point whose interval has only an end time,
  the time of the upload (a GAUGE point), ``double_value`` or ``int64_value``;
- ``src/goodput_utils.py``: ``BadputType`` (``TPU_INITIALIZATION``, ``TRAINING_PREP``,
  ``PROGRAM_STARTUP``, ``DATA_LOADING_SYNC``, ``DATA_LOADING_ASYNC``,
  ``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME``, ``UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME``,
  ``WASTED_PROGRESS_FROM_DISRUPTION``, ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``,
  ``CUSTOM_BADPUT_EVENTS``, ``OTHER``, and the elastic ones) and
  ``MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING``, whose values (``TPU-v5e``, ``TPU-v6e``, ...) are the
  ``accelerator_type`` label.

Google's goodput dashboard (the library's ``dashboards/goodput_dashboard.json``) divides
``goodput_time`` by ``goodput_time`` plus ``badput_time`` summed over every ``badput_source``: so
every badput second tpuctl counts is written under some source, and the sources sum with the
goodput to the run's wall time, as its categories do (:mod:`provision.runs.goodput`). A category
that is one of the library's types is written under that type's name; tpuctl's own (waiting for a
TPU, billed with no job, host bootstrap) under their own upper-case names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .goodput import GOODPUT, KEYS

PREFIX = "compute.googleapis.com/workload/"
GOODPUT_TIME = PREFIX + "goodput_time"
BADPUT_TIME = PREFIX + "badput_time"
TOTAL_ELAPSED_TIME = PREFIX + "total_elapsed_time"
DISRUPTIONS = PREFIX + "disruptions"
MAX_PRODUCTIVE_STEPS = PREFIX + "max_productive_steps"
RESOURCE_TYPE = "compute.googleapis.com/Workload"
REPLICA_ID = "0"                      # GCPOptions.replica_id's default: one replica per run
GOODPUT_SOURCE = "TOTAL"              # GoodputType.TOTAL, the library's only goodput source
WINDOW_TYPE = "cumulative"            # MonitoringWindowType.CUMULATIVE.value

# tpuctl's badput category -> the badput_source it is written under
BADPUT_SOURCE: dict[str, str] = {
    "provisioning": "PROVISIONING",                     # tpuctl's own: waiting for a TPU
    "billed_no_job": "BILLED_NO_JOB",                   # tpuctl's own: the TPU billed, no job
    "host_bootstrap": "HOST_BOOTSTRAP",                 # tpuctl's own: agent, wheels, restore
    # accelerator init, training prep, compilation and checkpoint restore are one span from outside
    "program_startup": "PROGRAM_STARTUP",
    "data_loading": "DATA_LOADING_SYNC",
    "checkpoint_save": "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "wasted_progress": "WASTED_PROGRESS_FROM_DISRUPTION",
    "disruption": "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "training_no_progress": "TRAINING_NO_PROGRESS_REPORTED",   # tpuctl's own: a program that reports no step
    "unattributed": "OTHER",
}

# tpuctl's accelerator type prefix -> the library's accelerator_type label (its
# MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING values: ct4p -> TPU-v4p, ct5lp -> TPU-v5e, ...)
ACCELERATOR_LABELS: tuple[tuple[str, str], ...] = (
    ("v2-", "TPU-v2"), ("v3-", "TPU-v3"), ("v4-", "TPU-v4p"), ("v5litepod-", "TPU-v5e"), ("v5e-", "TPU-v5e"),
    ("v5p-", "TPU-v5p"), ("v6e-", "TPU-v6e"), ("tpu7x-", "TPU-7x"),
)
UNKNOWN = "UNKNOWN"                   # the library's label where it cannot tell


def accelerator_label(accelerator_type: str | None) -> str:
    """``v5litepod-8`` -> ``TPU-v5e``, as the library labels that generation; ``UNKNOWN`` else."""
    name = (accelerator_type or "").strip().lower()
    return next((label for prefix, label in ACCELERATOR_LABELS if name.startswith(prefix)), UNKNOWN)


def rfc3339(t: float) -> str:
    """A protobuf Timestamp in JSON (RFC 3339, UTC, ``Z``), to the microsecond."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return 0.0
    return max(0.0, float(v))


def time_series(g: Mapping[str, Any], *, workload_id: str, location: str, accelerator_type: str | None,
                end_time: float, disruptions: int | None = None, max_productive_step: int | None = None,
                replica_id: str = REPLICA_ID) -> list[dict[str, Any]]:
    """The Monitoring v3 ``TimeSeries`` (JSON) of a run's breakdown ``g`` (:func:`provision.runs.
    goodput.breakdown`), one point each at ``end_time``: goodput, each badput source (zeros too, so
    a dashboard's last point of each is this run's), the wall time, and, where known, the
    disruptions (preemptions) and the last step kept."""
    resource = {"type": RESOURCE_TYPE,
                "labels": {"location": location, "workload_id": workload_id, "replica_id": replica_id}}
    acc = accelerator_label(accelerator_type)
    point_time = {"endTime": rfc3339(end_time)}

    def series(metric: str, labels: dict[str, str], value: dict[str, Any]) -> dict[str, Any]:
        return {"metric": {"type": metric, "labels": {**labels, "accelerator_type": acc}},
                "resource": {"type": resource["type"], "labels": dict(resource["labels"])},
                "metricKind": "GAUGE", "valueType": "DOUBLE" if "doubleValue" in value else "INT64",
                "points": [{"interval": dict(point_time), "value": value}]}

    cats = g.get("categories") if isinstance(g.get("categories"), Mapping) else {}
    out = [series(GOODPUT_TIME, {"goodput_source": GOODPUT_SOURCE}, {"doubleValue": _seconds(g.get("goodput_s"))})]
    for key in KEYS:
        if key == GOODPUT:
            continue
        secs = _seconds((cats.get(key) or {}).get("seconds") if isinstance(cats.get(key), Mapping) else None)
        out.append(series(BADPUT_TIME, {"badput_source": BADPUT_SOURCE[key]}, {"doubleValue": secs}))
    out.append(series(TOTAL_ELAPSED_TIME, {"window_type": WINDOW_TYPE}, {"doubleValue": _seconds(g.get("wall_s"))}))
    if isinstance(disruptions, int) and not isinstance(disruptions, bool) and disruptions >= 0:
        # int64 travels as a JSON string (discovery document: TypedValue.int64Value, format int64)
        out.append(series(DISRUPTIONS, {"window_type": WINDOW_TYPE}, {"int64Value": str(disruptions)}))
    if isinstance(max_productive_step, int) and not isinstance(max_productive_step, bool) and max_productive_step >= 0:
        out.append(series(MAX_PRODUCTIVE_STEPS, {}, {"int64Value": str(max_productive_step)}))
    return out


def values(series: list[Mapping[str, Any]]) -> dict[str, float]:
    """What a list of series says, keyed ``goodput``, each badput source, ``total_elapsed_time``,
    ``disruptions``, ``max_productive_steps``: for a report, and to check what was written."""
    out: dict[str, float] = {}
    for ts in series:
        metric = ts.get("metric") or {}
        labels = metric.get("labels") or {}
        value = ((ts.get("points") or [{}])[0] or {}).get("value") or {}
        raw = value.get("doubleValue", value.get("int64Value"))
        if raw is None:
            continue
        kind = str(metric.get("type", "")).removeprefix(PREFIX)
        key = {"goodput_time": "goodput", "badput_time": labels.get("badput_source")}.get(kind, kind)
        out[str(key)] = float(raw)
    return out
