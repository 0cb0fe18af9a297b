"""Mapping Cloud Monitoring's duty-cycle series to TPU nodes by what their labels allow (pure).

``tpu.googleapis.com/accelerator/duty_cycle`` is written on ``tpu.googleapis.com/GceTpuWorker``,
whose labels are resource_container, location and worker_id (plus the metric's accelerator_id):
nothing names the node, so only a zone with a single TPU node can be mapped.
"""

import pytest

from provision.cloud.dutycycle import (
    RESOURCE_LABELS,
    RESOURCE_TYPE,
    Unavailable,
    by_node,
    fetch,
    lookup,
)


def ts(zone, worker, points, accelerator="0", resource_type=RESOURCE_TYPE, **extra):
    labels = {"resource_container": "proj", "location": zone, "worker_id": worker, **extra}
    return {"metric": {"type": "tpu.googleapis.com/accelerator/duty_cycle", "labels": {"accelerator_id": accelerator}},
            "resource": {"type": resource_type, "labels": labels},
            "points": [{"interval": {"endTime": f"2026-01-01T00:0{i}:00Z"}, "value": {"doubleValue": v}}
                       for i, v in enumerate(points)]}


def test_the_labels_are_googles():
    assert RESOURCE_TYPE == "tpu.googleapis.com/GceTpuWorker"
    assert RESOURCE_LABELS == ("resource_container", "location", "worker_id")


def test_a_node_alone_in_its_zone_gets_the_busiest_of_its_workers_and_chips():
    table = by_node([ts("us-central1-b", "11", [1, 80, 2]), ts("us-central1-b", "11", [50, 3, 4], accelerator="1"),
                     ts("us-central1-b", "12", [0, 0, 9])],
                    [("pod", "us-central1-b"), ("other", "europe-west4-a")])
    duty = lookup(table, "pod", "us-central1-b")
    assert [v for _t, v in duty.points] == [50, 80, 9]
    assert lookup(table, "other", "europe-west4-a") is None       # no series there


def test_nodes_sharing_a_zone_cannot_be_told_apart():
    table = by_node([ts("us-central1-b", "11", [90]), ts("us-central1-b", "12", [0])],
                    [("a", "us-central1-b"), ("b", "us-central1-b")])
    assert lookup(table, "a", "us-central1-b") is None and lookup(table, "b", "us-central1-b") is None


def test_series_of_zones_without_our_nodes_are_ignored_and_a_named_node_is_used():
    table = by_node([ts("asia-east1-c", "5", [50])], [("a", "us-central1-b")])
    assert table == {}
    named = by_node([ts("us-central1-b", "5", [7], resource_type="tpu_worker", node_id="legacy")],
                    [("legacy", "us-central1-b"), ("x", "us-central1-b")])
    assert [v for _t, v in lookup(named, "legacy", "us-central1-b").points] == [7]


def test_without_usable_credentials_the_reason_names_the_fix(monkeypatch, tmp_path):
    """No silent fallback: a key file that is not there is named, with what to do (no network)."""
    monkeypatch.delenv("TPUCTL_CREDENTIALS", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(Unavailable) as err:
        fetch("proj", window_s=60)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(err.value) and "missing.json" in str(err.value)


def test_end_times_with_fractions_and_an_offset_are_read_in_utc_on_any_machine(monkeypatch):
    """Monitoring writes end times as RFC 3339 with up to nanoseconds; an offset's digits are not
    the fraction's (they were once read as such: the time lost its zone and was taken as local)."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        series = ts("us-central1-b", "11", [5])
        series["points"] = [{"interval": {"endTime": end}, "value": {"doubleValue": 7.0}}
                            for end in ("2026-01-01T00:00:00.123456789Z", "2026-01-01T05:00:01.5+05:00")]
        duty = lookup(by_node([series], [("pod", "us-central1-b")]), "pod", "us-central1-b")
        assert sorted(t for t, _v in duty.points) == [1767225600.123456, 1767225601.5]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
