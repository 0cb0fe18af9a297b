"""A run's breakdown as the Cloud Monitoring workload metrics of Google's ML Goodput library
(provision.runs.workload_metrics): the library's metric types, labels and monitored resource, every
badput second under some badput_source, and bodies Google's discovery document (monitoring.v3) takes."""

from __future__ import annotations

import pytest

from provision.runs import goodput
from provision.runs import workload_metrics as wm
from tests.fakegcp import discovery
from tests.unit.test_goodput import BILLED, EVENTS, EXITS, EXPECTED, RECORD


def _g():
    return goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED)


def test_every_badput_category_has_a_source_and_the_librarys_own_keep_its_names():
    assert set(wm.BADPUT_SOURCE) == set(goodput.KEYS) - {goodput.GOODPUT}
    assert len(set(wm.BADPUT_SOURCE.values())) == len(wm.BADPUT_SOURCE)
    # ml-goodput-measurement 0.2.3 goodput_utils.BadputType names, where tpuctl's category is one
    assert {wm.BADPUT_SOURCE[k] for k in ("program_startup", "data_loading", "checkpoint_save", "wasted_progress",
                                          "disruption", "unattributed")} == {
        "PROGRAM_STARTUP", "DATA_LOADING_SYNC", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "WASTED_PROGRESS_FROM_DISRUPTION",
        "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "OTHER"}


@pytest.mark.parametrize(("tpuctl", "label"), [("v2-8", "TPU-v2"), ("v3-32", "TPU-v3"), ("v4-16", "TPU-v4p"),
                                               ("v5litepod-8", "TPU-v5e"), ("v5p-16", "TPU-v5p"), ("v6e-8", "TPU-v6e"),
                                               ("tpu7x-8", "TPU-7x"), ("cpu", "UNKNOWN"), (None, "UNKNOWN")])
def test_the_accelerator_label_is_the_librarys(tpuctl, label):
    assert wm.accelerator_label(tpuctl) == label


def test_the_series_say_the_breakdown_and_the_discovery_document_takes_them():
    g = _g()
    series = wm.time_series(g, workload_id="r", location="us-central1-b", accelerator_type="v6e-8",
                            end_time=1_795_780_800.25, disruptions=2, max_productive_step=20)
    discovery.check("monitoring.projects.timeSeries.create", {"timeSeries": series}, doc="monitoring.v3", root="")
    assert wm.values(series) == {"goodput": 170.0, **{wm.BADPUT_SOURCE[k]: float(v) for k, v in EXPECTED.items()
                                                     if k != "goodput"},
                                 "total_elapsed_time": 330.0, "disruptions": 2.0, "max_productive_steps": 20.0}
    assert sum(v for k, v in wm.values(series).items() if k in wm.BADPUT_SOURCE.values()) + 170 == 330
    for ts in series:
        assert ts["resource"] == {"type": "compute.googleapis.com/Workload",
                                  "labels": {"location": "us-central1-b", "workload_id": "r", "replica_id": "0"}}
        assert ts["metric"]["type"].startswith("compute.googleapis.com/workload/")
        assert ts["metric"]["labels"]["accelerator_type"] == "TPU-v6e"
        assert ts["points"][0]["interval"] == {"endTime": "2026-11-27T12:00:00.250000Z"}
    by_type = {ts["metric"]["type"]: ts for ts in series}
    assert by_type[wm.TOTAL_ELAPSED_TIME]["metric"]["labels"]["window_type"] == "cumulative"
    assert by_type[wm.DISRUPTIONS]["points"][0]["value"] == {"int64Value": "2"}
    assert by_type[wm.GOODPUT_TIME]["metric"]["labels"]["goodput_source"] == "TOTAL"


def test_unknown_counts_are_left_out_not_guessed():
    series = wm.time_series({"wall_s": 10.0, "goodput_s": None, "categories": {}}, workload_id="r", location="z",
                            accelerator_type=None, end_time=0.0)
    assert {ts["metric"]["type"] for ts in series} == {wm.GOODPUT_TIME, wm.BADPUT_TIME, wm.TOTAL_ELAPSED_TIME}
    assert wm.values(series)["goodput"] == 0.0 and wm.values(series)["OTHER"] == 0.0
