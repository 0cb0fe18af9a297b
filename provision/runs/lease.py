"""A lease in a bucket, taken, renewed and released by compare-and-swap.

A run's supervisor (``supervisor.json``) and a sweep's controller (``controller.json``) each hold
one. Reading the holder and then writing oneself is a race: two processes started at the same
moment both read "free" and both write, and each believes it won until its next renewal. Every
write here is conditioned on the generation that was read (``ifGenerationMatch`` on Cloud Storage,
``0`` to create; a lock and a generation check on the local bucket), so of any set of racing
contenders exactly one write lands and the others get :class:`PreconditionFailed` and look again.
A renewal is conditioned on the generation of our own last write: if anyone took the lease since,
the renewal fails and the holder knows at once that it lost.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypedDict

from ..basics.errors import TpuctlError
from ..cloud.storage import PreconditionFailed

# Rounds of read-and-conditional-write before a contender gives up a contest it keeps losing to
# writers that release at once (a holder that stays wins; its lease is then reported busy).
CAS_ROUNDS = 8


class _Holder(TypedDict, total=False):
    """A lease's record as tpuctl writes it (the holder's identity), the fields contenders compare."""
    owner: str | None
    host: str | None
    pid: int | None
    where: str | None
    heartbeat_at: float | None
    released: bool | None
    released_at: float | None
    note: str | None


def checked_holder(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A lease's record (``data``, read from ``where``) whose fields have the types tpuctl writes, or
    :class:`~provision.basics.records.BadRecord` naming the object and the field."""
    from ..basics.records import checked_object

    return checked_object(data, _Holder, where)


class LeaseBusy(TpuctlError):
    """Someone else holds the lease; ``holder`` is their record."""

    def __init__(self, message: str, *, holder: dict[str, Any] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.holder = holder


class Lease:
    """``identity`` is this holder's record ({"owner": unique token, host, pid, where, ...})."""

    def __init__(self, bucket: Any, name: str, identity: dict[str, Any]):
        self.bucket = bucket
        self.name = name
        self.identity = identity
        self.generation: int | None = None   # of our last write; None while we do not hold it
        self._lock = threading.Lock()        # the heartbeat thread and the main loop share this

    def read(self) -> tuple[dict[str, Any] | None, int]:
        """The holder's record (None: never taken) and its generation (0: absent). Whoever can
        write the bucket can write it too: bytes that are not a JSON object are no holder's (free
        to take); an object whose fields tpuctl computes with have the wrong type is
        :class:`~provision.basics.records.BadRecord`, one line naming it."""
        got = self.bucket.read_versioned(self.name)
        if got is None:
            return None, 0
        try:
            data = json.loads(got[0])
        except (ValueError, RecursionError):
            data = {}
        if not isinstance(data, dict):
            return {}, got[1]
        return checked_holder(data, f"{getattr(self.bucket, 'url', '')}/{self.name}"), got[1]

    def holder(self) -> dict[str, Any] | None:
        return self.read()[0]

    def take(self, free: Callable[[dict[str, Any] | None], bool], *, force: bool = False) -> dict[str, Any] | None:
        """One contest. None when we hold the lease now; otherwise the record of whoever keeps it.

        ``free`` says whether a holder's record can be taken over (released, stale, dead).
        ``force`` takes over the holder read first, whoever it is, but only that one: a contender
        that wrote in between won the race and is judged by ``free`` like any holder."""
        cur: dict[str, Any] | None = None
        for _ in range(CAS_ROUNDS):
            cur, gen = self.read()
            mine = bool(cur) and cur.get("owner") == self.identity["owner"]
            if not (force or mine or free(cur)):
                return cur
            try:
                with self._lock:
                    self._write(gen)
                return None
            except PreconditionFailed:
                force = False
        return cur

    def acquire(self, free: Callable[[dict[str, Any] | None], bool], busy: Callable[[dict[str, Any]], str], *,
                force: bool = False, wait: float = 0.0, waiting: Callable[[dict[str, Any]], str] | None = None,
                log: Callable[[str], None] | None = None, hint: str | None = None) -> None:
        """Take the lease, waiting up to ``wait`` seconds for a holder that may be a dead one;
        :class:`LeaseBusy` (``busy(holder)`` as its message) if it stays held."""
        deadline = time.time() + wait
        told = False
        while True:
            cur = self.take(free, force=force)
            if cur is None:
                return
            if time.time() >= deadline:
                raise LeaseBusy(busy(cur), holder=cur, hint=hint)
            if log and waiting and not told:
                log(waiting(cur))
                told = True
            time.sleep(1.0)

    def _write(self, generation: int) -> None:
        self.identity["heartbeat_at"] = time.time()
        self.identity.pop("released", None)
        info = self.bucket.write_if_generation(self.name, _dumps(self.identity), generation)
        self.generation = info.generation

    def renew(self) -> bool:
        """Refresh the heartbeat; False (and no longer held) if someone took the lease since."""
        with self._lock:
            if self.generation is None:
                return False
            try:
                self._write(self.generation)
                return True
            except PreconditionFailed:
                self.generation = None
                return False

    def held(self) -> bool:
        """The lease is still as we last wrote it (a cheap metadata read). Under the lock: a renewal
        in flight has already changed the object's generation before it learns the new one, and
        reading between the two would take our own heartbeat for a takeover."""
        with self._lock:
            gen = self.generation
            if gen is None:
                return False
            info = self.bucket.stat(self.name)
            return info is not None and info.generation == gen

    def release(self, note: str = "") -> bool:
        """Mark the lease released, if it is still ours; False if it was not."""
        with self._lock:
            if self.generation is None:
                return False
            data = dict(self.identity, released=True, released_at=time.time(), note=note)
            try:
                self.bucket.write_if_generation(self.name, _dumps(data), self.generation)
                return True
            except PreconditionFailed:
                return False
            finally:
                self.generation = None


def _dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True, default=str) + "\n").encode()
