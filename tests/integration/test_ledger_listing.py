"""A fleet's ``tpuctl cost`` reads every cluster's ledger events in a bucket from one listing:
each ledger object carries its event in its custom metadata too (``tpuctl-event``), so no event
is downloaded, where it was one download per event (thousands on a fleet). An event an older
tpuctl wrote without it is downloaded. The listing asks only for ledger objects (``matchGlob``);
fake-gcs-server ignores ``matchGlob``, and tpuctl filters too. On either bucket (the local
provider's directory buckets keep custom metadata as Cloud Storage does) the events read are
the objects' bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
from urllib.parse import unquote

import pytest

from provision.basics.config import Target, home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import open_bucket
from provision.cluster import ledger
from tests.faultproxy import FaultProxy


@pytest.fixture(params=["local", "gcs"])
def where(request) -> tuple[str, Target]:
    if request.param == "local":
        return "gs://ledgers", Target(provider="local", project=None, zone=None)
    return f"gs://{request.getfixturevalue('gcs_bucket')}", Target(provider="gcp", project="tpuctl-test", zone=None)


def _written(url: str, target: Target) -> dict[str, list[dict]]:
    """What the ledger objects' bytes say, by cluster: what a reader downloading each would get."""
    bucket = open_bucket(url, target)
    out: dict[str, list[dict]] = {}
    for info in bucket.list("tpuctl/clusters/"):
        cluster, _, rest = info.name[len("tpuctl/clusters/"):].partition("/")
        if rest.startswith("ledger/"):
            out.setdefault(cluster, []).append(json.loads(bucket.read_bytes(info.name)))
    return out


def test_a_fleets_ledger_events_come_from_one_listing_with_their_bytes_values(where, monkeypatch):
    url, target = where
    provider = LocalProvider(home())
    bucket = open_bucket(url, target)
    for cluster in ("lab", "exp"):
        ledger.record(provider, "tpu_created", cluster, bucket=bucket, node="n", zone="us-central1-b",
                      accelerator_type="v5litepod-8", preemptible=True)
        ledger.record(provider, "tpu_deleted", cluster, bucket=bucket, node="n", zone="us-central1-b", by="reaper")
    # an event an older tpuctl wrote (no metadata), and a cluster's other files beside its ledger
    old = ledger.event("tpu_preempted", "lab", node="n", zone="us-central1-b")
    bucket.write_bytes(ledger.bucket_event_name("lab", old), json.dumps(old).encode())
    bucket.write_bytes("tpuctl/clusters/lab/current.json", b'{"run_id": null}')
    written = _written(url, target)
    assert {c: len(v) for c, v in written.items()} == {"lab": 3, "exp": 2}

    downloads: list[str] = []
    with contextlib.ExitStack() as stack:
        if target.provider == "gcp":    # every download counted on its way to fake-gcs-server
            proxy = stack.enter_context(FaultProxy(
                os.environ["STORAGE_EMULATOR_HOST"],
                script=lambda method, path: downloads.append(path) if "/download/" in path else None))
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        ledgers = ledger.BucketLedgers(lambda u: open_bucket(u, target))
        for cluster, events in written.items():
            assert sorted(ledgers.read(url, cluster), key=lambda e: e["id"]) == sorted(events, key=lambda e: e["id"])
        assert ledgers.read(url, "none") == []
    if target.provider == "gcp":        # only the event written without its metadata was downloaded
        assert [unquote(p.split("/o/", 1)[1].split("?")[0]) for p in downloads] == [ledger.bucket_event_name("lab", old)]
    # a cluster's own reader (cost of one cluster) reads the same events
    assert sorted(ledger.read_bucket(open_bucket(url, target), "lab"), key=lambda e: e["id"]) == \
           sorted(written["lab"], key=lambda e: e["id"])
