"""The Bucket interface tpuctl stages into, and the errors every implementation raises.

Two implementations: :mod:`.gcs` (Google Cloud Storage) and :mod:`.local` (a directory, the
local provider's bucket, or a plain local path). Object names are full names inside the bucket
(``bert/base/vocab.txt``); callers join prefixes themselves.

Contracts every implementation keeps:

- Atomic: an object is visible under its name only when complete (GCS: a finalized upload or
  a compose; local: a temporary file renamed into place).
- Verified: after a write, the stored object's CRC32C is compared with the bytes read from the
  source; a mismatch raises :class:`ChecksumMismatch` and the bad copy is removed.
- Internal names (parts of interrupted parallel uploads, partial files) never appear in
  :meth:`Bucket.list`.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...basics.errors import CloudError, NotFound, UsageError

# Hidden prefix, at the bucket root, holding the parts of large uploads until they are composed.
PARTS_PREFIX = ".tpuctl-parts/"
# Basename prefix of a local file being written; renamed away once verified.
PARTIAL_PREFIX = ".tpuctl-partial."
# Basename prefix of a local object's custom metadata, beside it (Cloud Storage keeps it on the object).
META_PREFIX = ".tpuctl-meta."

# The narrowest predefined role that lets a TPU read, write and overwrite (delete) checkpoints
# and list a checkpoint directory, without the object-ACL/IAM permissions of objectAdmin.
OBJECT_ROLE = "roles/storage.objectUser"

Progress = Callable[[int], None]


def glob_matcher(glob: str) -> Callable[[str], bool]:
    """Whether a name matches ``glob`` as Cloud Storage's ``matchGlob`` reads it (the subset
    tpuctl uses): ``*`` any characters but ``/``, ``**`` any characters, ``?`` one character but
    ``/``, anything else itself. Used where the server does not filter (a local bucket, an
    emulator that ignores ``matchGlob``), so every bucket answers a glob alike."""
    parts = []
    for token in re.split(r"(\*\*|\*|\?)", glob):
        parts.append({"**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token)))
    return re.compile("".join(parts) + r"\Z", re.DOTALL).match  # type: ignore[return-value]


def no_progress(_: int) -> None:
    return None


@dataclass(frozen=True)
class ObjectInfo:
    """One object: what rsync-style comparison and verification need."""

    name: str
    size: int
    crc32c: int | None = None  # None when not known without reading (local files in a listing)
    generation: int | None = None  # changes on every write (GCS generation; local mtime_ns)
    # the custom metadata its writer set (``write_bytes(metadata=)``), as a listing returns it;
    # None where not read (a stat, an upload's result)
    metadata: dict[str, str] | None = field(default=None, compare=False)


class BucketNotFound(UsageError):
    """The bucket does not exist: found before anything is sent."""


class ObjectNotFound(NotFound):
    pass


class ChecksumMismatch(CloudError):
    """The stored copy's CRC32C differs from the source's: retried, then reported."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, kind="checksum", hint=hint)


class PreconditionFailed(CloudError):
    """A conditional write lost: the object's generation was not the one it was conditioned on
    (another writer got there first). GCS answers 412; the local bucket checks under a lock."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, kind="precondition", hint=hint)


class TransferJob(abc.ABC):
    """One file's transfer, split so that a shared bounded pool can run its pieces.

    ``prepare`` runs first and returns the pieces (chunk transfers, run in any order, in
    parallel); ``finish`` runs once all pieces succeeded: it verifies the CRC32C and publishes
    the object atomically. ``abort`` removes temporary local files; parts already in a bucket
    are kept so that a re-run resumes from them.
    """

    def __init__(self, label: str, size: int, progress: Progress = no_progress):
        self.label = label
        self.size = size
        self.progress = progress
        self.sent = 0  # bytes actually moved
        self.reused = 0  # bytes found already in place (parts of an interrupted run)
        self.retries = 0  # pieces sent again after failing verification
        self.cancelled = False

    @abc.abstractmethod
    def prepare(self) -> list[Callable[[], None]]: ...

    @abc.abstractmethod
    def finish(self) -> ObjectInfo: ...

    def abort(self) -> None:
        return None

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise _Cancelled()


class _Cancelled(Exception):
    pass


def run_inline(make_job: Callable[[], TransferJob], attempts: int = 3) -> ObjectInfo:
    """Run a job in this thread, retrying a checksum mismatch: the simple API's engine."""
    for attempt in range(1, attempts + 1):
        job = make_job()
        try:
            for piece in job.prepare():
                piece()
            return job.finish()
        except ChecksumMismatch:
            job.abort()
            if attempt == attempts:
                raise
        except BaseException:
            job.abort()
            raise
    raise AssertionError("unreachable")


class Bucket(abc.ABC):
    """A bucket (or a local directory standing in for one)."""

    kind: str  # "gcs" or "local"
    url: str  # gs://NAME, or the directory, for messages

    # -- the bucket itself
    @abc.abstractmethod
    def exists(self) -> bool: ...

    @abc.abstractmethod
    def create(self, location: str) -> None:
        """Create the bucket in ``location`` with uniform bucket-level access."""

    @abc.abstractmethod
    def grant_object_access(self, member: str) -> bool:
        """Grant ``member`` :data:`OBJECT_ROLE` on this bucket only; True if it changed the policy."""

    def describe(self) -> str:
        return self.url

    # -- objects
    @abc.abstractmethod
    def list(self, prefix: str = "", *, glob: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose names start with ``prefix`` (all levels), internal names left out, each
        with its custom metadata (``{}`` when it has none); with ``glob``, only the names it
        matches (Cloud Storage's ``matchGlob``, see :func:`glob_matcher`), so a listing of one
        file per folder does not page through the folders' other files."""

    @abc.abstractmethod
    def stat(self, name: str) -> ObjectInfo | None:
        """Size, CRC32C and generation of one object; None if it does not exist."""

    def exists_object(self, name: str) -> bool:
        return self.stat(name) is not None

    @abc.abstractmethod
    def read_bytes(self, name: str) -> bytes:
        """The whole object, verified against its CRC32C (for small files: run records, logs)."""

    def read_range(self, name: str, start: int, length: int) -> bytes:
        """At most ``length`` bytes of the object from ``start`` (fewer at its end): the tail of a
        file that grows (a TensorBoard event file). Not verified: the object's CRC32C covers it
        whole, so the reader checks what it reads (event records carry their own CRC-32C)."""
        return self.read_bytes(name)[start:start + length]

    @abc.abstractmethod
    def write_bytes(self, name: str, data: bytes, metadata: dict[str, str] | None = None) -> ObjectInfo:
        """Replace the object atomically with ``data`` and verify it. ``metadata``: custom metadata
        that goes with these bytes (and only these: a later write without it has none), so that a
        listing can answer what a reader would otherwise download the object for."""

    # -- compare-and-swap: leases and append-only logs that several processes may write at once
    @abc.abstractmethod
    def read_versioned(self, name: str) -> tuple[bytes, int] | None:
        """The object's bytes and the generation they belong to (read together); None if absent."""

    @abc.abstractmethod
    def write_if_generation(self, name: str, data: bytes, if_generation_match: int) -> ObjectInfo:
        """Write ``data`` only if the object's generation is ``if_generation_match`` (0: only if it
        does not exist); raise :class:`PreconditionFailed` otherwise. Among writers that all use
        this method exactly one of a racing set wins; the returned generation is the new one."""

    @abc.abstractmethod
    def delete(self, name: str) -> bool:
        """Delete one object; False if it was not there."""

    @abc.abstractmethod
    def upload_job(self, path: Path, name: str, *, part_size: int,
                   progress: Progress = no_progress) -> TransferJob: ...

    @abc.abstractmethod
    def download_job(self, info: ObjectInfo, path: Path, *, part_size: int,
                     progress: Progress = no_progress) -> TransferJob: ...

    def upload_file(self, path: str | Path, name: str, *, part_size: int = 16 << 20) -> ObjectInfo:
        """Copy a local file to ``name``: atomic, verified, retried on a checksum mismatch."""
        return run_inline(lambda: self.upload_job(Path(path), name, part_size=part_size))

    def download_file(self, name: str, path: str | Path, *, part_size: int = 16 << 20) -> ObjectInfo:
        """Copy ``name`` to a local file: written beside it, verified, then renamed into place."""
        info = self.stat(name)
        if info is None:
            raise ObjectNotFound(f"{self.url}/{name} does not exist")
        return run_inline(lambda: self.download_job(info, Path(path), part_size=part_size))

    # -- housekeeping for staging
    def clean_internal(self, prefix: str) -> int:
        """Remove leftovers of interrupted writes under ``prefix``; returns how many."""
        return 0
