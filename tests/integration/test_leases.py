"""One supervisor, really: a run's and a sweep's lease taken by compare-and-swap, raced for by many
threads and processes at once, on the local provider's directory bucket and on Cloud Storage
(fake-gcs-server, which decides ``ifGenerationMatch`` under one lock as Cloud Storage does: see
fsouza/fake-gcs-server internal/backend/memory.go CreateObject). Exactly one contender wins a free
lease every round, none wins a live one, and no event appended meanwhile is lost.

Longer campaigns: ``python -m tests.chaos --leases 50``.
"""

from __future__ import annotations

import json
import time

import pytest

from provision.cloud.storage import LocalBucket, PreconditionFailed
from provision.runs.lease import LeaseBusy
from provision.runs.store import RunStore
from provision.runs.supervisor import RunLease
from tests.chaos import leases

ROUNDS = 1


@pytest.fixture(params=["local", "gcs"])
def bucket_spec(request, tmp_path):
    if request.param == "local":
        return f"dir:{tmp_path / 'bucket'}"
    return f"gs://{request.getfixturevalue('gcs_bucket')}"


def test_exactly_one_contender_wins_every_round_and_no_event_is_lost(bucket_spec):
    out = leases.campaign(bucket_spec, ROUNDS, threads=8, processes=4, per=3)
    assert out["violations"] == []
    # every kind (run, sweep) and start state (absent, released, stale, live), threads and processes
    assert out["rounds"] == ROUNDS * 2 * 4 * 2 and out["events"] == ROUNDS * 2 * 4 * (8 + 4) * 3


@pytest.mark.parametrize("backend", ["local", "gcs"])
def test_a_conditional_write_loses_to_any_write_since_its_read(backend, tmp_path, request):
    bucket = LocalBucket(tmp_path) if backend == "local" else \
        leases.open_bucket(f"gs://{request.getfixturevalue('gcs_bucket')}")
    first = bucket.write_if_generation("a/lease.json", b"one", 0)
    with pytest.raises(PreconditionFailed):
        bucket.write_if_generation("a/lease.json", b"two", 0)          # create-only: it exists
    second = bucket.write_if_generation("a/lease.json", b"two", first.generation)
    assert second.generation != first.generation
    with pytest.raises(PreconditionFailed):
        bucket.write_if_generation("a/lease.json", b"three", first.generation)   # stale generation
    assert bucket.read_versioned("a/lease.json") == (b"two", second.generation)
    assert bucket.read_versioned("a/missing.json") is None


def test_a_supervisor_whose_lease_was_taken_over_learns_it_at_its_next_renewal(tmp_path):
    store = RunStore(LocalBucket(tmp_path), "r1")
    first = RunLease(store, {"owner": "first", "heartbeat_at": time.time()})
    first.acquire()
    assert first.renew() and first.held()
    second = RunLease(store, {"owner": "second", "heartbeat_at": time.time()})
    with pytest.raises(LeaseBusy):
        second.acquire()                        # live: not taken
    second.acquire(force=True)                  # train --attach of a run handed back, sweep resume
    assert not first.held() and not first.renew()
    assert not first.release("late")            # a lost lease is not released by its old holder
    assert json.loads(store.bucket.read_bytes(f"{store.prefix}/supervisor.json"))["owner"] == "second"
    assert second.release("done")
    third = RunLease(store, {"owner": "third", "heartbeat_at": time.time()})
    third.acquire()                             # released: free again
    assert third.held()


class _SlowReply(LocalBucket):
    """A bucket whose conditional write lands at once but answers late, as a Cloud Storage upload
    does: the object's generation has changed before the writer learns the new one."""

    landed = None

    def write_if_generation(self, name, data, if_generation_match):
        info = super().write_if_generation(name, data, if_generation_match)
        if self.landed is not None:
            self.landed.set()
            time.sleep(0.5)
        return info


def test_a_renewal_in_flight_is_not_taken_for_a_takeover(tmp_path):
    """The heartbeat thread renews while the supervisor's loop asks whether the lease is still its
    own: seen from the loop, the object already has the renewal's generation and the lease the
    old one. A run supervised in the foreground stopped there, `running`, with tpuctl train exiting 0."""
    import threading

    bucket = _SlowReply(tmp_path)
    lease = RunLease(RunStore(bucket, "r1"), {"owner": "me", "heartbeat_at": time.time()})
    lease.acquire()
    bucket.landed = threading.Event()
    renewal = threading.Thread(target=lease.renew)
    renewal.start()
    assert bucket.landed.wait(5)
    assert lease.held()                         # waits for the renewal's answer, then sees its own write
    renewal.join()
    assert lease.held()


def test_events_written_by_an_older_tpuctl_stay_readable_and_appendable(tmp_path):
    store = RunStore(LocalBucket(tmp_path), "r1")
    store.bucket.write_bytes(f"{store.prefix}/events.jsonl", b'{"event": "preempted", "time": 1}')  # no newline
    store.event("resumed", step=50)
    assert [e["event"] for e in store.events()] == ["preempted", "resumed"]
