"""A run's goodput written to Cloud Monitoring as Google's ML Goodput library writes it
(provision.runs.workload_metrics), over the wire to the fake cloud's Monitoring v3
``projects.timeSeries.create``: every request body the fake received is one Google's discovery
document ``monitoring.v3.json`` takes, and the values written are the breakdown's, to the second.

The fake refuses what Monitoring refuses (tests/fakegcp/monitoring.py cites each answer): a body
with a field the document does not have, whole; a point not after its series' newest, a point
within 5 s of it, a series twice in one request, a value of another type than the metric's, each
series alone, with the rest of the request written.
"""

from __future__ import annotations

import json
import time

import pytest

from provision.cloud.gcp import GcpProvider
from provision.runs import goodput
from provision.runs import workload_metrics as wm
from provision.runs.store import RunRecord, RunStore, remember
from tests.conftest import run_tpuctl_process
from tests.fakegcp import discovery
from tests.fakegcp.monitoring import CREATE, DOC
from tests.unit.test_goodput import BILLED, EVENTS, EXITS, EXPECTED, RECORD

pytestmark = [pytest.mark.xdist_group("goodput-export")]

LIBRARY_SOURCES = {"PROGRAM_STARTUP", "DATA_LOADING_SYNC", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
                   "WASTED_PROGRESS_FROM_DISRUPTION", "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "OTHER"}


def _series(g, *, at: float, **kw):
    return wm.time_series(g, workload_id=kw.pop("workload_id", "lab-20261206-101500-3f2a"),
                          location="us-central1-b", accelerator_type="v5litepod-8", end_time=at, **kw)


def _bodies_take_the_discovery_document(fake) -> list[dict]:
    reqs = fake.monitoring()["requests"]
    for r in reqs:
        discovery.check(CREATE, r["body"], doc=DOC, root="")       # raises ApiError if Google would refuse it
    return reqs


def test_the_series_written_are_the_breakdown_in_the_librarys_names(fakegcp_env):
    g = goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED)
    now = time.time()
    written = GcpProvider("tpuctl-test").write_time_series(_series(g, at=now, disruptions=2, max_productive_step=20))
    assert written == 1 + len(wm.BADPUT_SOURCE) + 3      # goodput, each badput source, wall, disruptions, steps
    [req] = _bodies_take_the_discovery_document(fakegcp_env)
    assert (req["project"], req["status"]) == ("tpuctl-test", 200)
    # the fake's route is that method of the discovery document, as Google serves it
    method = discovery.method(CREATE, DOC)
    assert (method["httpMethod"], method["flatPath"], method["request"]) == \
        ("POST", "v3/projects/{projectsId}/timeSeries", {"$ref": "CreateTimeSeriesRequest"})
    assert [(c["method"], c["path"], c["call"]) for c in fakegcp_env.calls()] == \
        [("POST", "/v3/projects/tpuctl-test/timeSeries", CREATE)]
    stored = fakegcp_env.monitoring()["timeSeries"]
    # what was stored is what the request said, one GAUGE point each at the time of the export
    for ts in stored:
        assert ts["resource"] == {"type": "compute.googleapis.com/Workload",
                                  "labels": {"location": "us-central1-b", "workload_id": "lab-20261206-101500-3f2a",
                                             "replica_id": "0"}}
        assert ts["metric"]["labels"]["accelerator_type"] == "TPU-v5e"
        assert ts["metricKind"] == "GAUGE" and len(ts["points"]) == 1
        assert set(ts["points"][0]["interval"]) == {"endTime"}
    by = {(ts["metric"]["type"].removeprefix(wm.PREFIX),
           ts["metric"]["labels"].get("badput_source") or ts["metric"]["labels"].get("goodput_source")):
          ts["points"][0]["value"] for ts in stored}
    assert by[("goodput_time", "TOTAL")] == {"doubleValue": EXPECTED["goodput"]}
    for key, source in wm.BADPUT_SOURCE.items():
        assert by[("badput_time", source)] == {"doubleValue": EXPECTED[key]}, key
    assert by[("total_elapsed_time", None)] == {"doubleValue": 330.0}
    assert by[("disruptions", None)] == {"int64Value": "2"}
    assert by[("max_productive_steps", None)] == {"int64Value": "20"}
    # the goodput and every badput source sum to the wall time: Google's dashboard's goodput % is tpuctl's
    badput = sum(v["doubleValue"] for (kind, _s), v in by.items() if kind == "badput_time")
    assert by[("goodput_time", "TOTAL")]["doubleValue"] / (by[("goodput_time", "TOTAL")]["doubleValue"] + badput) \
        == pytest.approx(g["goodput_pct"] / 100, abs=1e-4)
    assert LIBRARY_SOURCES <= {s for (kind, s) in by if kind == "badput_time"}


def test_monitoring_refuses_each_series_as_google_does_and_writes_the_rest(fakegcp_env):
    g = goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED)
    prov = GcpProvider("tpuctl-test")
    now = time.time() - 60
    prov.write_time_series(_series(g, at=now))
    from provision.basics.errors import CloudError

    # the same points again: older than (equal to) the newest of each series
    with pytest.raises(CloudError, match="Points must be written in order. One or more of the points specified had an "
                                         "older end time than the most recent point.: compute.googleapis.com/Workload"):
        prov.write_time_series(_series(g, at=now))
    # 5 s later: more often than the metric's sampling period
    with pytest.raises(CloudError, match=r"written more frequently than the maximum sampling period configured for the "
                                         r"metric. \{Metric: compute.googleapis.com/workload/goodput_time, Timestamps"):
        prov.write_time_series(_series(g, at=now + 5))
    # a series twice, and one of another value type than the metric's: those refused, the rest written
    later = _series(g, at=now + 10, workload_id="other-run")
    int_goodput = json.loads(json.dumps(later[0]))
    int_goodput["points"][0]["value"] = {"int64Value": "170"}
    int_goodput.pop("valueType")
    int_goodput["resource"]["labels"]["workload_id"] = "third-run"
    with pytest.raises(CloudError) as err:
        prov.write_time_series([*later, later[1], int_goodput])
    msg = err.value.message
    assert f"Field timeSeries[{len(later)}] had an invalid value: Duplicate TimeSeries encountered. Only one point " \
           "can be written per TimeSeries per request." in msg
    assert "Value type for metric compute.googleapis.com/workload/goodput_time must be DOUBLE, but is INT64." in msg
    stored = fakegcp_env.monitoring()["timeSeries"]
    assert sum(ts["resource"]["labels"]["workload_id"] == "other-run" for ts in stored) == len(later)
    assert not [ts for ts in stored if ts["resource"]["labels"]["workload_id"] == "third-run"]
    # a field the discovery document does not have: the whole request refused, nothing written
    bad = json.loads(json.dumps(_series(g, at=now + 20, workload_id="fourth-run")))
    bad[0]["metric"]["label"] = {"x": "y"}
    with pytest.raises(CloudError, match="Unknown name \"label\" at 'time_series\\[0\\].metric': Cannot find field"):
        prov.write_time_series(bad)
    assert not [ts for ts in fakegcp_env.monitoring()["timeSeries"]
                if ts["resource"]["labels"]["workload_id"] == "fourth-run"]
    statuses = [r["status"] for r in fakegcp_env.monitoring()["requests"]]
    assert statuses == [200, 400, 400, 400, 400]


@pytest.mark.slow
def test_status_name_export_monitoring_writes_the_runs_goodput(fakegcp_env, gcs_env):
    """The command a user runs: ``tpuctl status NAME --export-monitoring`` on Google Cloud writes the
    goodput it shows, and says what it wrote; a second export within 5 s is refused, in one line."""
    bucket = f"gs://{gcs_env.create_bucket()}"
    up = run_tpuctl_process("up", "lab", "--zone", "us-central1-a", "--accelerator-type", "v5litepod-8",
                            "--preemptible", "--no-vm", "--json")
    assert up.code == 0, up.err
    # the timeline of tests/unit/test_goodput.py, shifted to have ended 10 minutes ago
    shift = time.time() - 600 - 1330
    events = [{**e, **{k: e[k] + shift for k in ("time", "program_started_at", "first_step_at", "step_at") if k in e}}
              for e in EVENTS]
    rec = RunRecord(run_id="lab-20261206-101500-3f2a", cluster="lab", provider="gcp", project="tpuctl-test",
                    zone="us-central1-a", bucket=bucket, model_dir=f"{bucket}/model", num_train_steps=20,
                    save_checkpoints_steps=2, status="finished", attempts=3, preemptions=2,
                    created_at=RECORD["created_at"] + shift, ended_at=RECORD["ended_at"] + shift,
                    curve=[{**c, "t": c["t"] + shift} for c in RECORD["curve"]],
                    last_progress={"step": 20, **{k: v + shift for k, v in RECORD["last_progress"].items()
                                                  if k != "step"}})
    from provision.basics.config import Target
    from provision.cloud.storage import open_bucket

    store = RunStore(open_bucket(bucket, Target(provider="gcp", project="tpuctl-test", zone=None)), rec.run_id)
    store.save(rec)
    store.bucket.write_bytes(f"{store.prefix}/events.jsonl", "".join(json.dumps(e) + "\n" for e in events).encode())
    for n, workers in EXITS.items():
        for w, x in workers.items():
            store.bucket.write_bytes(f"{store.attempt_prefix(n)}/exit-{w}.json",
                                     json.dumps({**x, "time": x["time"] + shift}).encode())
    remember(rec)

    r = run_tpuctl_process("status", "lab", "--export-monitoring", "--json")
    assert r.code == 0, r.err
    [cluster] = r.json()["clusters"]
    run = cluster["run"]
    g, export = run["goodput"], run["monitoring_export"]
    assert (export["project"], export["time_series"], export["workload_id"], export["location"],
            export["accelerator_type"]) == \
        ("tpuctl-test", 1 + len(wm.BADPUT_SOURCE) + 3, rec.run_id, "us-central1-a", "TPU-v5e")
    _bodies_take_the_discovery_document(fakegcp_env)
    written = wm.values(fakegcp_env.monitoring()["timeSeries"])
    assert written["goodput"] == g["goodput_s"] == EXPECTED["goodput"]
    for key, source in wm.BADPUT_SOURCE.items():
        assert written[source] == g["categories"][key]["seconds"], key
    assert written["total_elapsed_time"] == g["wall_s"] == 330
    assert (written["disruptions"], written["max_productive_steps"]) == (2, 20)
    assert export["values"] == written
    # the text form says what it wrote; at once again: Monitoring's sampling period, in one line
    again = run_tpuctl_process("status", "lab", "--export-monitoring")
    assert again.code == 1
    assert "Cloud Monitoring did not take run lab-20261206-101500-3f2a's goodput: One or more points were written " \
           "more frequently than the maximum sampling period" in again.err
    assert "(and 13 more series)" in again.err and "export again in a few seconds" in again.err
    assert again.err.strip().splitlines()[1:] == [next(x for x in again.err.splitlines() if x.startswith("tpuctl: error:"))]


def test_export_monitoring_is_refused_without_a_name_or_off_google_cloud(tpuctl):
    r = tpuctl("status", "--export-monitoring")
    assert r.code == 2 and "--export-monitoring exports one cluster's run" in r.err
    r = tpuctl("status", "lab", "--export-monitoring", "--provider", "local")
    assert r.code == 2 and "the local provider has none" in r.err


def test_more_than_200_series_go_in_requests_of_200_which_is_what_monitoring_takes(fakegcp_env):
    import requests

    at = wm.rfc3339(time.time())
    many = [{"metric": {"type": "custom.googleapis.com/tpuctl/probe", "labels": {"n": str(i)}},
             "resource": {"type": "global", "labels": {}}, "points": [{"interval": {"endTime": at},
                                                                      "value": {"doubleValue": float(i)}}]}
            for i in range(250)]
    assert GcpProvider("tpuctl-test").write_time_series(many) == 250
    reqs = _bodies_take_the_discovery_document(fakegcp_env)
    assert [len(r["body"]["timeSeries"]) for r in reqs] == [200, 50]
    assert len(fakegcp_env.monitoring()["timeSeries"]) == 250
    # all 250 in one request: refused whole
    r = requests.post(f"{fakegcp_env.url}/v3/projects/tpuctl-test/timeSeries", json={"timeSeries": many}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
