"""A run pointer (``tpuctl/clusters/<c>/current.json``) names its run twice: in its bytes and in
its custom metadata, which the one listing of the clusters' folder returns, so a fleet's
``down --idle`` learns every cluster's run without downloading a pointer. The local provider's
directory buckets keep custom metadata as Cloud Storage does (fake-gcs-server here): with the bytes
it was written with and with no later write, so a listing never names a run the bytes do not.
"""

from __future__ import annotations

import json

import pytest

from provision.basics.config import Target
from provision.billing.reaper import clusters_with_runs
from provision.cloud.storage import open_bucket
from provision.runs.store import POINTER_RUN_KEY, RunStore, current_name


@pytest.fixture(params=["local", "gcs"])
def where(request, tmp_path) -> tuple[str, Target]:
    if request.param == "local":
        return "gs://pointers", Target(provider="local", project=None, zone=None)
    return f"gs://{request.getfixturevalue('gcs_bucket')}", Target(provider="gcp", project="tpuctl-test", zone=None)


def _listed(url: str, target: Target) -> dict[str, dict[str, str] | None]:
    return {o.name: o.metadata for o in open_bucket(url, target).list("tpuctl/clusters/")}


def test_the_listing_names_each_pointers_run_as_its_bytes_do_on_either_bucket(where, tmp_path):
    url, target = where
    bucket = open_bucket(url, target)
    store = RunStore(bucket, "lab-run-1")
    store.write_current("lab", {"run_id": "lab-run-1", "attempt": 1})
    store.write_current("old", {"run_id": None, "ended": "old-run-3"})
    store.write_current("host", {"supervise_on_host": "x"})        # names no run: "" says so
    bucket.write_bytes(current_name("legacy"), json.dumps({"run_id": "legacy-run"}).encode())   # an older tpuctl
    store.write_current("gone", {"run_id": "gone-run"})
    bucket.delete(current_name("gone"))

    assert _listed(url, target) == {current_name("host"): {POINTER_RUN_KEY: ""},
                                    current_name("lab"): {POINTER_RUN_KEY: "lab-run-1"},
                                    current_name("legacy"): {},
                                    current_name("old"): {POINTER_RUN_KEY: "old-run-3"}}
    # the reaper's view of the folder: the run each names, None where only the bytes can say
    assert clusters_with_runs(target, url) == {"host": "", "lab": "lab-run-1", "legacy": None, "old": "old-run-3"}

    # a later write without the metadata (an older tpuctl, an upload) leaves none of the earlier
    store.write_json(current_name("lab"), {"run_id": "lab-run-2"})
    src = tmp_path / "pointer.json"
    src.write_text(json.dumps({"run_id": "old-run-4"}))
    bucket.upload_file(src, current_name("old"))
    assert clusters_with_runs(target, url) == {"host": "", "lab": None, "legacy": None, "old": None}
    store.write_current("lab", {"run_id": "lab-run-5"})
    assert clusters_with_runs(target, url)["lab"] == "lab-run-5"
    assert json.loads(bucket.read_bytes(current_name("lab"))) == {"run_id": "lab-run-5"}


def test_a_local_pointers_metadata_is_hidden_and_goes_with_it(tmp_path):
    target = Target(provider="local", project=None, zone=None)
    bucket = open_bucket("gs://pointers", target)
    RunStore(bucket, "r").write_current("lab", {"run_id": "r"})
    assert [o.name for o in bucket.list("")] == [current_name("lab")]
    assert bucket.delete(current_name("lab"))
    assert not (bucket.root / "tpuctl").exists()      # no folder left behind, as in Cloud Storage
