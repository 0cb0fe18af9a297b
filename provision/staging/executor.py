"""Runs transfer jobs on one bounded thread pool.

Every piece of work — a small file, one part of a large file, a compose, a rename — is a task
on the same pool of ``workers`` threads, so the number of requests in flight (and the memory
they buffer, a few MiB each) stays bounded whatever the number and size of files. The main
thread only sequences: prepare -> pieces -> finish per job. A checksum mismatch or a transient
network failure restarts the job (bounded); any other error fails just that file, which is
reported, never silently kept.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..basics.errors import CloudError, TpuctlError
from ..basics.redact import redact
from ..cloud.storage.base import ChecksumMismatch, ObjectInfo, TransferJob

ATTEMPTS = 3


@dataclass
class Outcome:
    label: str
    ok: bool
    error: str | None = None
    sent: int = 0
    reused: int = 0
    attempts: int = 0
    info: ObjectInfo | None = None
    retries: int = 0  # whole-file attempts and parts sent again after failing verification


@dataclass
class _State:
    label: str
    factory: Callable[[], TransferJob]
    job: TransferJob | None = None
    attempt: int = 0
    remaining: int = 0
    done: bool = False
    sent: int = 0
    retries: int = 0


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, TpuctlError):
        return redact(exc.one_line())
    return redact(" ".join(f"{type(exc).__name__}: {exc}".split()))[:300]


def retryable(exc: BaseException) -> bool:
    """Worth starting the file over: a copy that failed verification, or a network failure the
    client library's own retries did not get past (a re-start reuses the parts already stored)."""
    return isinstance(exc, ChecksumMismatch) or (isinstance(exc, CloudError) and exc.kind == "transient")


class Executor:
    def __init__(self, workers: int, attempts: int = ATTEMPTS):
        self.workers = workers
        self.attempts = attempts

    def run(self, work: Sequence[tuple[str, Callable[[], TransferJob]]]) -> list[Outcome]:
        """Run ``(label, make_job)`` pairs; one Outcome per pair, in the same order."""
        outcomes: list[Outcome | None] = [None] * len(work)
        if not work:
            return []
        events: queue.SimpleQueue = queue.SimpleQueue()
        states = [_State(label, factory) for label, factory in work]
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="tpuctl-stage")

        def submit(index: int, attempt: int, step: str, fn: Callable) -> None:
            future = pool.submit(fn)
            future.add_done_callback(lambda f: events.put((index, attempt, step, f)))

        def settle(index: int, exc: BaseException | None, info: ObjectInfo | None = None) -> None:
            st = states[index]
            st.done = True
            job = st.job
            sent = st.sent + (job.sent if job else 0)
            retries = st.retries + (job.retries if job else 0) + max(0, st.attempt - 1)
            outcomes[index] = Outcome(st.label, exc is None, None if exc is None else describe_error(exc),
                                      sent, job.reused if job else 0, st.attempt, info, retries)

        def start(index: int) -> bool:
            st = states[index]
            if st.job is not None:
                st.sent += st.job.sent
                st.retries += st.job.retries
            st.attempt += 1
            try:
                st.job = st.factory()
            except Exception as exc:  # noqa: BLE001 - e.g. the source vanished since it was listed
                st.job = None
                settle(index, exc)
                return False
            submit(index, st.attempt, "prepare", st.job.prepare)
            return True

        active = sum(1 for i in range(len(work)) if start(i))
        try:
            while active:
                index, attempt, step, future = events.get()
                st = states[index]
                if st.done or attempt != st.attempt:
                    continue  # a piece of an attempt already given up
                assert st.job is not None
                exc = future.exception()
                if exc is not None:
                    st.job.cancelled = True
                    st.job.abort()
                    if retryable(exc) and st.attempt < self.attempts:
                        if not start(index):
                            active -= 1
                        continue
                    settle(index, exc)
                    active -= 1
                elif step == "prepare":
                    pieces = future.result()
                    st.remaining = len(pieces)
                    if not pieces:
                        submit(index, attempt, "finish", st.job.finish)
                    for piece in pieces:
                        submit(index, attempt, "piece", piece)
                elif step == "piece":
                    st.remaining -= 1
                    if st.remaining == 0:
                        submit(index, attempt, "finish", st.job.finish)
                else:
                    settle(index, None, future.result())
                    active -= 1
        except BaseException:
            # Interrupted: stop starting work, let running pieces notice and stop, drop partial files.
            for st in states:
                if st.job is not None and not st.done:
                    st.job.cancelled = True
            pool.shutdown(wait=False, cancel_futures=True)
            for st in states:
                if st.job is not None and not st.done:
                    st.job.abort()
            raise
        pool.shutdown(wait=True)
        return [o for o in outcomes if o is not None]

    def run_tasks(self, tasks: Sequence[tuple[str, Callable[[], object]]]) -> list[Outcome]:
        """Independent one-step tasks (deletions) on the same kind of bounded pool."""
        if not tasks:
            return []
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="tpuctl-stage") as pool:
            futures: list[Future] = [pool.submit(fn) for _, fn in tasks]
            out = []
            for (label, _), future in zip(tasks, futures):
                exc = future.exception()
                out.append(Outcome(label, exc is None, None if exc is None else describe_error(exc), attempts=1))
            return out
