"""What ``down --idle`` reads from Cloud Storage on a fleet: a fixed number of small reads per
training cluster, none for the others, so a fleet's cost cannot creep back.

The fleet is the benchmark's (tests/fleet.py) in the fake cloud, its run records in fake-gcs-server
behind tests/faultproxy.py (no faults: it only counts what the installed ``tpuctl`` asks for). A
training cluster's run is named by its pointer (``current.json``), whose custom metadata the one
listing of the clusters' folder returns (tpuctl writes the run id there too), so what is downloaded
is its record (``run.json``): one download, no metadata read before it. The job's progress file
(``progress.json``) is read only where it can change the verdict: not for a live run whose record
shows progress well inside --idle-for (the fleet's training clusters at the default 30 minutes),
but for every one of them at --idle-for 1m. A pointer written without that metadata (by a tpuctl
before it) is downloaded, as before. The supervisor's lease is read only where the verdict can
depend on it (a PREEMPTED TPU that a live supervisor may be recreating): a READY TPU whose job
reports progress is judged without it. Where a bucket has many runs to read (a larger fleet), one
listing of its run records answers instead: each record's summary is in its custom metadata.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from urllib.parse import unquote

from provision.basics.config import home
from provision.runs.store import current_name
from tests import fleet
from tests.conftest import run_tpuctl_process
from tests.faultproxy import FaultProxy

N = 40                       # 8 training clusters (index 2 and 6 mod 10), 4 PREEMPTED ones
PREEMPTED_WITH_RUN = 13      # a PREEMPTED member given a live run with a fresh supervisor lease


def _object_requests(proxy_paths: list[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """(cluster, what) for every request about one object: ``download`` of its bytes or ``metadata``."""
    out: Counter[tuple[str, str]] = Counter()
    for method, path in proxy_paths:
        if method != "GET" or "/o/" not in path:
            continue
        kind = "download" if path.startswith("/download/") else "metadata"
        name = unquote(path.split("/o/", 1)[1].split("?", 1)[0])
        cluster = next((p for p in name.split("/") if p.startswith("fleet-")), name).removesuffix("-run")
        out[(cluster, f"{kind} {name.rsplit('/', 1)[-1]}")] += 1
    return out


def _down_idle(gcs_url: str, *flags: str) -> tuple[list[dict], Counter, list[tuple[str, str]]]:
    """``down --idle --dry-run --json``'s nodes, and what it asked of Cloud Storage (through a
    proxy that counts)."""
    paths: list[tuple[str, str]] = []
    with FaultProxy(gcs_url, script=lambda method, path: paths.append((method, path))) as proxy:
        r = run_tpuctl_process("down", "--idle", "--all-zones", "--dry-run", "--json", *flags,
                               env={"STORAGE_EMULATOR_HOST": proxy.url})
    assert r.code == 0, r.err
    return r.json()["nodes"], _object_requests(paths), paths


def test_down_idle_reads_one_record_per_training_cluster_and_the_rest_only_where_it_decides(
        fakegcp_env, gcs_env, gcs_client):
    now = time.time()
    members = fleet.build(fakegcp_env, gcs_env.url, home(), N, now=now)
    # a PREEMPTED TPU whose run's supervisor is alive: its verdict hangs on the lease, so it is read;
    # its pointer is an older tpuctl's, without the run in its metadata, so it is read too
    m = fleet.member(PREEMPTED_WITH_RUN, now)
    assert m.state == "PREEMPTED" and not m.training
    rec = fleet.run_record(m, fakegcp_env.project, now)
    bucket = gcs_client.bucket(fleet.BUCKET)
    bucket.blob(current_name(m.name)).upload_from_string(json.dumps({"run_id": rec.run_id}))
    bucket.blob(f"{rec.prefix}/run.json").upload_from_string(json.dumps({**rec.to_dict(), "status": "recovering"}))
    bucket.blob(f"{rec.prefix}/supervisor.json").upload_from_string(json.dumps({"heartbeat_at": now}))

    def down_idle(*flags: str) -> tuple[dict, Counter, list[tuple[str, str]]]:
        nodes, reads, paths = _down_idle(gcs_env.url, *flags)
        return {n["cluster"]: (n["verdict"], n["reason"]) for n in nodes}, reads, paths

    verdicts, reads, paths = down_idle()
    training = [x.name for x in members if x.training]
    assert len(training) == 8
    for name in training:
        assert verdicts[name][0] == "keep" and verdicts[name][1].startswith("training"), verdicts[name]
        got = {what: k for (c, what), k in reads.items() if c == name}
        assert got == {"download run.json": 1}, got
    verdict, reason = verdicts[m.name]
    assert verdict == "keep" and "supervisor is recreating it" in reason, reason
    assert reads[(m.name, "download supervisor.json")] == 1
    assert reads[(m.name, "download current.json")] == 1
    # the clusters without a run pointer cost nothing: one listing of the bucket's pointers found them
    readers = {c for (c, _what) in reads}
    assert readers == {*training, m.name}, readers - {*training, m.name}
    listings = [p for meth, p in paths if meth == "GET" and p.split("?")[0].endswith(f"/b/{fleet.BUCKET}/o")]
    assert len(listings) == 1, listings
    assert sum(reads.values()) == len(training) + 3

    # two minutes since the records' last progress is past --idle-for 1m: the progress file decides
    verdicts, reads, _ = down_idle("--idle-for", "1m")
    for name in training:
        assert verdicts[name][0] == "delete" and "has not reported progress" in verdicts[name][1], verdicts[name]
        got = {what: k for (c, what), k in reads.items() if c == name}
        assert got == {"download run.json": 1, "download progress.json": 1}, got


def test_a_fleets_run_records_are_listed_not_downloaded_and_judged_alike(fakegcp_env, gcs_env, gcs_client):
    """From LIST_RECORDS_FROM runs to read in a bucket on, their records' summaries come from one
    listing of the records: no run.json is downloaded, and every verdict is the one the downloaded
    records give (the records rewritten as an older tpuctl wrote them, without the summary)."""
    from provision.billing.reaper import LIST_RECORDS_FROM

    fleet.ensure_bucket(gcs_env.url, fakegcp_env.project)
    bucket = gcs_client.bucket(fleet.BUCKET)
    for blob in bucket.list_blobs():            # fake-gcs-server outlives a test: its fleet's records go
        blob.delete()
    now = time.time()
    members = fleet.build(fakegcp_env, gcs_env.url, home(), 200, now=now)
    training = [x for x in members if x.training]
    assert len(training) >= LIST_RECORDS_FROM

    def down_idle(*flags: str) -> tuple[dict, Counter, list[tuple[str, str]]]:
        nodes, reads, paths = _down_idle(gcs_env.url, *flags)
        # what a run decides (the reasons' "for 3d1s" moves with the clock)
        judged = {n["cluster"]: {k: n.get(k) for k in ("verdict", "idle_since", "run_id", "run_status", "heartbeat_at",
                                                    "run_source")}
                  | {"training": n["reason"].startswith("training")} for n in nodes}
        return judged, reads, paths

    listed, reads, paths = down_idle()
    assert reads == Counter(), reads            # nothing downloaded: the listings answered
    listings = [p for meth, p in paths if meth == "GET" and p.split("?")[0].endswith(f"/b/{fleet.BUCKET}/o")]
    assert len(listings) == 2, listings         # the pointers, the records
    assert all("matchGlob=" in p for p in listings), listings
    for m in training:
        assert listed[m.name]["verdict"] == "keep" and listed[m.name]["training"], listed[m.name]

    for m in training:                          # as a tpuctl before the summaries wrote them
        rec = fleet.run_record(m, fakegcp_env.project, now)
        bucket.blob(f"{rec.prefix}/run.json").upload_from_string(json.dumps(rec.to_dict()))
    downloaded, reads, _ = down_idle()
    assert {c for (c, what) in reads if what == "download run.json"} == {m.name for m in training}
    assert downloaded == listed

    # past --idle-for the progress files decide, read where the listing's summaries say so
    late, reads, _ = down_idle("--idle-for", "1m")
    for m in training:
        assert late[m.name]["verdict"] == "delete", late[m.name]
        assert reads[(m.name, "download progress.json")] == 1
