"""The bounded-pool executor, with in-memory jobs: sequencing, retries, failures, the bound."""

from __future__ import annotations

import threading
import time

import pytest

from provision.cloud.storage.base import ChecksumMismatch, ObjectInfo, TransferJob
from provision.staging.executor import Executor


class FakeJob(TransferJob):
    def __init__(self, label, n_pieces, log, fail_finish=0, fail_piece=None, attempts=None, gate=None):
        super().__init__(label, n_pieces, lambda n: None)
        self.n, self.log, self.fail_finish, self.fail_piece = n_pieces, log, fail_finish, fail_piece
        self.attempts = attempts if attempts is not None else [0]
        self.gate = gate
        self.aborted = False

    def prepare(self):
        self.attempts[0] += 1
        return [lambda i=i: self._piece(i) for i in range(self.n)]

    def _piece(self, i):
        if self.gate:
            self.gate()
        if self.fail_piece == i:
            raise OSError("disk on fire")
        self.sent += 1
        self.log.append((self.label, "piece", i))

    def finish(self):
        if self.attempts[0] <= self.fail_finish:
            raise ChecksumMismatch(f"{self.label}: bad")
        self.log.append((self.label, "finish"))
        return ObjectInfo(self.label, self.n, 0)

    def abort(self):
        self.aborted = True


def test_finish_runs_after_all_pieces():
    log = []
    out = Executor(4).run([(f"f{k}", lambda k=k: FakeJob(f"f{k}", k, log)) for k in range(4)])
    assert all(o.ok for o in out) and [o.label for o in out] == ["f0", "f1", "f2", "f3"]
    for k in range(4):
        events = [e for e in log if e[0] == f"f{k}"]
        assert events[-1] == (f"f{k}", "finish") and len(events) == k + 1


def test_checksum_mismatch_is_retried_then_succeeds():
    attempts = [0]
    out = Executor(2).run([("x", lambda: FakeJob("x", 2, [], fail_finish=2, attempts=attempts))])
    assert out[0].ok and out[0].attempts == 3 and attempts[0] == 3
    assert out[0].sent == 6  # every attempt's bytes are counted as sent


def test_persistent_mismatch_is_reported_not_kept():
    out = Executor(2).run([("x", lambda: FakeJob("x", 1, [], fail_finish=99)), ("y", lambda: FakeJob("y", 1, []))])
    assert not out[0].ok and "bad" in out[0].error and out[0].attempts == 3
    assert out[1].ok


def test_other_errors_fail_the_file_once_and_abort_it():
    jobs = []

    def make():
        jobs.append(FakeJob("x", 3, [], fail_piece=1))
        return jobs[-1]

    out = Executor(2).run([("x", make)])
    assert not out[0].ok and "disk on fire" in out[0].error and len(jobs) == 1 and jobs[0].aborted


def test_a_factory_error_is_a_failed_file():
    def boom():
        raise FileNotFoundError("gone")

    out = Executor(2).run([("gone", boom), ("ok", lambda: FakeJob("ok", 1, []))])
    assert not out[0].ok and "gone" in out[0].error and out[1].ok


def test_in_flight_work_never_exceeds_the_pool():
    lock, live, peak = threading.Lock(), [0], [0]

    def gate():
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.005)
        with lock:
            live[0] -= 1

    out = Executor(3).run([(f"f{k}", lambda k=k: FakeJob(f"f{k}", 5, [], gate=gate)) for k in range(6)])
    assert all(o.ok for o in out) and peak[0] <= 3


def test_interrupt_cancels_and_aborts():
    jobs = []
    started = threading.Event()

    def gate():
        started.set()
        time.sleep(0.05)

    def make(k):
        jobs.append(FakeJob(f"f{k}", 4, [], gate=gate))
        return jobs[-1]

    import _thread

    caught = threading.Event()

    def interrupter():
        # Ctrl-C again until it lands: a KeyboardInterrupt raised inside a gc callback another
        # library installed (hypothesis does) is swallowed as "unraisable", as a real one would be
        started.wait(5)
        deadline = time.monotonic() + 15
        while not caught.is_set() and time.monotonic() < deadline:
            _thread.interrupt_main()
            caught.wait(0.5)

    t = threading.Thread(target=interrupter)
    t.start()
    # 200 jobs of 4 pieces take 20 s at least: the interrupt lands mid-run even on a loaded machine
    with pytest.raises(KeyboardInterrupt):
        try:
            Executor(2).run([(f"f{k}", lambda k=k: make(k)) for k in range(200)])
        except KeyboardInterrupt:
            caught.set()
            raise
    t.join()
    try:
        time.sleep(0.6)      # a last Ctrl-C sent just before `caught` was seen lands here
    except KeyboardInterrupt:
        pass
    assert all(j.cancelled and j.aborted for j in jobs)
    assert sum(j.sent for j in jobs) < 800


class FlakyNetworkJob(FakeJob):
    """Finish fails with what translate() raises when the client library's retries ran out."""

    def __init__(self, *args, kind="transient", **kw):
        super().__init__(*args, **kw)
        self.kind = kind

    def finish(self):
        from provision.basics.errors import CloudError

        if self.attempts[0] <= self.fail_finish:
            raise CloudError(f"upload gs://b/{self.label}: cannot reach Cloud Storage", kind=self.kind)
        return super().finish()


def test_a_transient_network_failure_starts_the_file_over_and_others_do_not():
    attempts = [0]
    out = Executor(2).run([("x", lambda: FlakyNetworkJob("x", 1, [], fail_finish=2, attempts=attempts))])
    assert out[0].ok and attempts[0] == 3
    attempts = [0]
    out = Executor(2).run([("x", lambda: FlakyNetworkJob("x", 1, [], fail_finish=9, attempts=attempts))])
    assert not out[0].ok and attempts[0] == 3 and "gs://b/x: cannot reach Cloud Storage" in out[0].error
    attempts = [0]
    out = Executor(2).run([("x", lambda: FlakyNetworkJob("x", 1, [], fail_finish=9, attempts=attempts,
                                                         kind="permission"))])
    assert not out[0].ok and attempts[0] == 1  # permission denied is not retried
