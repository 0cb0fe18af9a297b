"""A run's record (``tpuctl/runs/<id>/run.json``) carries its summary in its custom metadata,
written with the record in one write, so a fleet's ``down --idle`` learns whether each run is alive
from one listing of the bucket's records instead of a download per run. The listing asks for the
records alone (``matchGlob``): a run's checkpoints, logs and attempts under its folder are not
paged through on Cloud Storage; fake-gcs-server ignores ``matchGlob``, so tpuctl filters too, and
a local bucket walks no deeper than the glob reaches. On either bucket the summary says what the
record says, and the reaper's verdict from it is the one the downloaded record gives.
"""

from __future__ import annotations

import json
import time

import pytest

from provision.basics.config import Target, home
from provision.billing.idle import view_of
from provision.billing.reaper import BucketRuns, find_run
from provision.cloud.local import LocalProvider
from provision.cloud.storage import open_bucket
from provision.runs.store import (
    RECORD_GLOB,
    SUMMARY_KEY,
    RunRecord,
    RunStore,
    current_name,
    listed_summaries,
)


@pytest.fixture(params=["local", "gcs"])
def where(request) -> tuple[str, Target]:
    if request.param == "local":
        return "gs://records", Target(provider="local", project=None, zone=None)
    return f"gs://{request.getfixturevalue('gcs_bucket')}", Target(provider="gcp", project="tpuctl-test", zone=None)


def _record(run_id: str, cluster: str, url: str, **kw) -> RunRecord:
    now = time.time()
    return RunRecord(run_id=run_id, cluster=cluster, provider="gcp", project="tpuctl-test", zone="us-central1-b",
                     bucket=url, model_dir=f"{url}/tpuctl/runs/{run_id}/model", num_train_steps=100,
                     save_checkpoints_steps=10, created_at=now - 3600, **kw)


def test_the_records_listing_answers_what_the_records_say_and_nothing_else_of_the_runs(where):
    url, target = where
    bucket = open_bucket(url, target)
    now = time.time()
    live = _record("lab-run-1", "lab", url, status="running", last_progress={"time": now - 60, "step": 40, "loss": 1.5})
    done = _record("old-run-2", "old", url, status="finished", ended_at=now - 7200,
                   last_progress={"time": now - 7300, "step": 100})
    for rec in (live, done):
        RunStore(bucket, rec.run_id).save(rec)
    # what else a run's folder holds: checkpoints, an attempt's records, a nested run.json-named file
    bucket.write_bytes("tpuctl/runs/lab-run-1/model/ckpt-40.index", b"x")
    bucket.write_bytes("tpuctl/runs/lab-run-1/attempts/1/run.json", b"{}")
    bucket.write_bytes("tpuctl/runs/lab-run-1/events.jsonl", b"{}\n")
    # a record an older tpuctl wrote: no summary, so it is downloaded
    bucket.write_bytes("tpuctl/runs/legacy-run/run.json", json.dumps(_record("legacy-run", "legacy", url).to_dict()).encode())

    listed = [o.name for o in bucket.list("tpuctl/runs/", glob=RECORD_GLOB)]
    assert listed == ["tpuctl/runs/lab-run-1/run.json", "tpuctl/runs/legacy-run/run.json",
                      "tpuctl/runs/old-run-2/run.json"]
    summaries = listed_summaries(bucket)
    assert set(summaries) == {"lab-run-1", "old-run-2"}
    for rec in (live, done):
        stored = RunStore(bucket, rec.run_id).load().to_dict()
        assert view_of(summaries[rec.run_id]) == view_of(stored)
        assert {k: summaries[rec.run_id][k] for k in ("created_at", "model_dir", "provider", "project")} == \
               {k: stored[k] for k in ("created_at", "model_dir", "provider", "project")}
    assert summaries["lab-run-1"]["last_progress"] == {"time": live.last_progress["time"]}     # not the loss
    # a later save replaces the summary with the record
    live.status, live.ended_at = "stopped", now
    RunStore(bucket, live.run_id).save(live)
    assert view_of(listed_summaries(bucket)["lab-run-1"]).status == "stopped"
    info = next(o for o in bucket.list("tpuctl/runs/lab-run-1/", glob=RECORD_GLOB))
    assert json.loads(info.metadata[SUMMARY_KEY])["ended_at"] == now


def test_a_summary_that_does_not_belong_to_its_folder_is_not_believed(where):
    url, target = where
    bucket = open_bucket(url, target)
    rec = _record("lab-run-1", "lab", url, status="running")
    # a record copied to another run's folder, and a summary that is not JSON: both downloaded instead
    bucket.write_bytes("tpuctl/runs/other-run/run.json", b"{}",
                       metadata={SUMMARY_KEY: json.dumps({"run_id": "lab-run-1", "status": "running",
                                                          "created_at": 1.0})})
    bucket.write_bytes("tpuctl/runs/lab-run-1/run.json", json.dumps(rec.to_dict()).encode(),
                       metadata={SUMMARY_KEY: "{not json"})
    assert listed_summaries(bucket) == {}


def test_the_reaper_judges_a_run_from_its_summary_as_from_its_record(where):
    url, target = where
    bucket = open_bucket(url, target)
    now = time.time()
    rec = _record("lab-run-1", "lab", url, status="running", last_progress={"time": now - 90, "step": 40})
    store = RunStore(bucket, rec.run_id)
    store.save(rec)
    store.write_current("lab", {"run_id": rec.run_id})
    provider = LocalProvider(home())
    pointers = {"lab": rec.run_id}
    listed = BucketRuns(pointers, listed_summaries(bucket))
    # a bucket whose record is unreadable now: the summary alone answers
    downloaded = find_run(provider, target, "lab", url, listed=BucketRuns(pointers), idle_for=1800.0)
    bucket.delete(f"{rec.prefix}/run.json")
    from_listing = find_run(provider, target, "lab", url, listed=listed, idle_for=1800.0)
    assert from_listing == downloaded
    assert from_listing[0].live and from_listing[0].heartbeat_at == pytest.approx(now - 90)
    assert from_listing[1] == f"{url}/{current_name('lab')}"
