"""A fleet's goodput (``tpuctl cost --since 7d``) asks the same number of questions of 40 clusters
as of 400 (or TPUCTL_FLEET_GOODPUT_N): one list per kind of the cloud's resources, and per bucket
one listing of the run records (each record's summary, with its goodput summary, is in its custom
metadata) and one of the ledgers. No run's record, event log or exit records is downloaded.

The fleet is the benchmark's (tests/fleet.py) in the fake cloud, its runs in fake-gcs-server behind
tests/faultproxy.py (no faults: it only counts). Besides the fleet's live runs (two clusters in ten,
no goodput summary yet: they are listed apart), every fifth cluster has a run that ended two days
ago with the goodput summary its supervisor keeps, on v2-8 or v5litepod-8, spot, on-demand or
flex-start; every tenth one that ended ten days ago, outside the window.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest

from provision.basics.config import home
from provision.runs.store import SUMMARY_KEY, RunRecord, record_summary
from tests import fleet
from tests.conftest import run_tpuctl_process
from tests.faultproxy import FaultProxy

SMALL = 40
LARGE = int(os.environ.get("TPUCTL_FLEET_GOODPUT_N", "400"))
DAY = 86400.0
CAPACITIES = ("spot", "on-demand", "flex-start")


def _past(m: fleet.Member, project: str, now: float, *, ended_days: float) -> RunRecord:
    """An ended run of the member's cluster with its goodput summary: 1000 s, 800 of goodput, and
    (spot only) two preemptions that cost 100 s and $0.25."""
    i = m.index
    capacity = CAPACITIES[(i // 5) % 3]
    preempted = capacity == "spot"
    ended = now - ended_days * DAY
    summary = {"as_of": ended, "final": True, "accelerator_type": "v2-8" if i % 2 else "v5litepod-8",
               "zone": m.zone, "capacity": capacity, "wall_s": 1000.0, "goodput_s": 800.0, "badput_s": 200.0,
               "badput_usd": 0.5, "total_usd": 2.5, "seconds": {"disruption": 100.0, "program_startup": 100.0},
               "preemptions": 2 if preempted else 0, "preemption_s": 100.0 if preempted else 0.0,
               "preemption_usd": 0.25 if preempted else 0.0, "recovery_s": [60.0, 180.0] if preempted else []}
    return RunRecord(run_id=f"{m.name}-past-{int(ended_days)}", cluster=m.name, provider="gcp", project=project,
                     zone=m.zone, bucket=f"gs://{fleet.BUCKET}", model_dir=f"gs://{fleet.BUCKET}/past/{m.name}",
                     num_train_steps=100, save_checkpoints_steps=10, status="finished", created_at=ended - 1000,
                     ended_at=ended, goodput=summary)


def _build(fake, gcs_url: str, start: int, stop: int, now: float) -> list[RunRecord]:
    """Members ``start`` .. ``stop - 1`` of the fleet (as tests/fleet.py builds it) and their past runs."""
    script = fleet.startup_script()
    members = [fleet.member(i, now) for i in range(start, stop)]
    for lo in range(0, len(members), fleet.CHUNK):
        part = members[lo:lo + fleet.CHUNK]
        fake.bulk(instances=[{"zone": m.zone, "body": fleet.host_body(m, script), "created": m.created} for m in part],
                  nodes=[{"zone": m.zone, "nodeId": m.name, "body": fleet.tpu_body(m, fake.project, script),
                          "state": m.state, "created": m.created} for m in part])
    fleet.runs_and_caches(gcs_url, home(), fake.project, members, now)
    past = [_past(m, fake.project, now, ended_days=2) for m in members if m.index % 5 == 0] + \
           [_past(m, fake.project, now, ended_days=10) for m in members if m.index % 10 == 0]
    for rec in past:          # as RunStore.save writes it: the summary in the record's custom metadata
        fleet._upload(gcs_url, f"{rec.prefix}/run.json", rec.to_dict(),
                      {SUMMARY_KEY: json.dumps(record_summary(rec.to_dict()), sort_keys=True)})
    return past


@pytest.fixture
def empty_bucket(fakegcp_env, gcs_env, gcs_client):
    """The fleet's bucket without an earlier test's runs, and left so (fake-gcs-server outlives a test)."""
    fleet.ensure_bucket(gcs_env.url, fakegcp_env.project)
    bucket = gcs_client.bucket(fleet.BUCKET)

    def empty() -> None:
        for blob in bucket.list_blobs():
            blob.delete()

    empty()
    yield bucket
    empty()


def _since(fake, gcs_url: str, *flags: str) -> tuple[object, Counter, Counter]:
    """``cost --since 7d``: its result, the cloud API calls it made, and its Cloud Storage requests
    (``list`` of a bucket's objects, ``download`` of one, or another ``METHOD``)."""
    paths: list[tuple[str, str]] = []
    fake.clear_calls()
    with FaultProxy(gcs_url, script=lambda method, path: paths.append((method, path))) as proxy:
        r = run_tpuctl_process("cost", "--since", "7d", *flags, env={"STORAGE_EMULATOR_HOST": proxy.url})
    assert r.code == 0, r.err
    calls = Counter(c["call"] for c in fake.calls())
    storage: Counter = Counter()
    for method, path in paths:
        bare = path.split("?", 1)[0]
        kind = "download" if "/download/" in bare or "alt=media" in path else \
            "list" if method == "GET" and bare.endswith("/o") else f"{method} {bare.rsplit('/', 1)[-1]}"
        storage[kind] += 1
    return r, calls, storage


def test_a_fleets_goodput_costs_the_same_requests_at_any_size_and_reads_no_run(fakegcp_env, gcs_env, empty_bucket):
    fake = fakegcp_env
    now = time.time()
    past = _build(fake, gcs_env.url, 0, SMALL, now)
    assert run_tpuctl_process("cost").code == 0       # the day's list prices, cached (cloudbilling: once a day)
    small, small_calls, small_storage = _since(fake, gcs_env.url, "--json")
    past += _build(fake, gcs_env.url, SMALL, LARGE, now)
    t0 = time.perf_counter()
    large, large_calls, large_storage = _since(fake, gcs_env.url, "--json")
    seconds = time.perf_counter() - t0
    print(f"cost --since 7d --json at {LARGE} clusters: {seconds:.2f} s, cloud {dict(large_calls)}, "
          f"storage {dict(large_storage)}")

    # the same questions of 40 clusters as of LARGE: a list per kind, a listing per bucket, nothing per run
    assert large_calls == small_calls and sum(large_calls.values()) <= 10, large_calls
    assert not {"compute.instances.get", "tpu.v2.nodes.get"} & set(large_calls), large_calls
    assert large_storage == small_storage == Counter({"list": 2}), large_storage       # the records, the ledgers

    for doc, n in ((small.json(), SMALL), (large.json(), LARGE)):
        view = doc["fleet"]
        inside = [r for r in past if int(r.cluster.rsplit("-", 1)[1]) < n and r.ended_at > now - 7 * DAY]
        assert sorted(r["run_id"] for r in view["runs"]) == sorted(r.run_id for r in inside)
        live = [m for m in (fleet.member(i, now) for i in range(n)) if m.training]
        assert sorted(r["run_id"] for r in view["without_summary"]) == sorted(f"{m.name}-run" for m in live)
        spot = [r for r in inside if r.goodput["capacity"] == "spot"]
        t = view["total"]
        assert (t["runs"], t["goodput_pct"], t["preemptions"]) == (len(inside), 80.0, 2 * len(spot))
        assert t["preemption_usd"] == pytest.approx(0.25 * len(spot)) and t["recovery_median_s"] == 120.0
        assert t["badput_usd"] == pytest.approx(0.5 * len(inside))
        assert set(view["by_capacity"]) == {r.goodput["capacity"] for r in inside}
        assert set(view["by_accelerator_type"]) == {"v2-8", "v5litepod-8"}
        assert view["by_capacity"]["on-demand"]["preemption_usd"] == 0
        assert sum(g["runs"] for g in view["by_accelerator_type"].values()) == len(inside)
        assert view["buckets"] == [f"gs://{fleet.BUCKET}"]


def test_the_fleets_goodput_in_words(fakegcp_env, gcs_env, empty_bucket):
    from provision.runs.store import remember

    now = time.time()
    past = _build(fakegcp_env, gcs_env.url, 0, 20, now)
    r, _calls, _storage = _since(fakegcp_env, gcs_env.url)
    out = r.out
    assert "goodput of runs live since " in out and " (7d): 4 run(s), goodput 80.0% " in out, out
    assert "lost to preemption $0.5000 (3m20s) over 4 preemption(s), median recovery 2m" in out, out
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("TPU ") and "MEDIAN RECOVERY" in ln)
    assert lines[head + 1].split()[:3] == ["v2-8", "2", "80.0%"] or lines[head + 1].split()[:3] == \
        ["v5litepod-8", "2", "80.0%"], lines[head:head + 3]
    assert any(ln.startswith("CAPACITY ") for ln in lines) and any(ln.startswith("fleet-0005-past-2 ") for ln in lines)
    assert "4 run(s) without a goodput summary (live and not yet recovered from a preemption" in out, out
    # a run id is not a window: --since is for the fleet or a cluster; a bad duration is one line
    remember(past[1])
    for argv, fragment in ((("cost", past[1].run_id, "--since", "7d"), "--since is for the fleet or a cluster"),
                           (("cost", "--since", "a week"), "invalid --since 'a week'"),
                           (("cost", "--since", "0"), "is an empty window")):
        bad = run_tpuctl_process(*argv)
        assert bad.code == 2, (argv, bad.out, bad.err)
        errors = [ln for ln in bad.err.splitlines() if ln.startswith("tpuctl: error:")]
        assert len(errors) == 1 and "Traceback" not in bad.err, bad.err
        assert fragment in errors[0], errors
