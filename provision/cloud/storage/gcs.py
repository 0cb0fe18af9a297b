"""Google Cloud Storage buckets, through google-cloud-storage (imported only here, lazily).

Small files go in one request (multipart up to 8 MiB, then a resumable upload in 16 MiB chunks):
GCS makes the object visible only once the upload finalizes. Large files go as parallel parts
to ``.tpuctl-parts/NAME/...``, each verified by CRC32C, are composed into NAME in one request,
verified again, and the parts deleted. Every upload also sends the CRC32C it computed, so real
GCS itself refuses a corrupted upload; tpuctl then compares the stored CRC32C as well (storage
emulators do not check it). Why not ``transfer_manager``: its chunked upload speaks the XML
multipart API, which fake-gcs-server does not serve (HTTP 400) and which cannot resume a part
across processes; and each of its calls opens its own pool, so many small files and the chunks
of large ones could not share one bounded pool. The same client primitives it builds on
(resumable uploads, ranged downloads) are used here directly.
"""

from __future__ import annotations

import io
import mimetypes
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...basics.errors import CloudError, TpuctlError, UsageError
from ...basics.redact import redact
from . import crc, iam, parts
from .base import (
    OBJECT_ROLE,
    PARTS_PREFIX,
    Bucket,
    BucketNotFound,
    ChecksumMismatch,
    ObjectInfo,
    ObjectNotFound,
    PreconditionFailed,
    Progress,
    TransferJob,
    glob_matcher,
    no_progress,
)
from .local import partial_path

if TYPE_CHECKING:
    from google.cloud.storage import Client

UPLOAD_CHUNK = 16 << 20  # bytes per resumable-upload request; bounds memory per worker
ATTEMPTS = 3


def make_client(project: str | None, pool_size: int = 16) -> Client:
    """A client for ``project``: Application Default Credentials, or none with
    ``TPUCTL_CREDENTIALS=anonymous``; ``STORAGE_EMULATOR_HOST`` picks the endpoint. The HTTP
    connection pool is sized to the transfer pool, so parallel requests reuse connections."""
    import requests.adapters
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import storage

    if os.environ.get("TPUCTL_CREDENTIALS", "").strip().lower() == "anonymous":
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    else:
        import google.auth
        import google.auth.exceptions

        try:
            credentials, _ = google.auth.default(scopes=list(storage.Client.SCOPE))
        except google.auth.exceptions.DefaultCredentialsError as exc:
            from ..gcp_errors import credentials_error

            raise credentials_error(exc, emulator_hint=True) from None
        from ...basics.redact import remember_credentials

        remember_credentials(credentials)
    session = AuthorizedSession(credentials)
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=max(pool_size, 4))
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    _environment_once(session, endpoint())
    # the library looks each bucket up in the background to label trace spans; tpuctl exports none,
    # and on a fleet's run records that was one more request per bucket and thread
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    return storage.Client(project=project, credentials=credentials, _http=session)


def _environment_once(session: Any, url: str) -> None:
    """The proxy and CA bundle the environment names for the storage endpoint, read once: requests
    reads them again on every call (a scan of the environment and ``no_proxy`` per request, a
    millisecond each when ``down --idle`` reads a fleet's run records). What it would find is what
    the session now has, so behind a proxy or with ``REQUESTS_CA_BUNDLE`` nothing changes."""
    import requests.utils

    session.proxies.update(requests.utils.get_environ_proxies(url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    session.trust_env = False


def endpoint() -> str:
    return os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com"


@contextmanager
def translate(what: str):
    """Turn client-library failures into one-line tpuctl errors, credentials scrubbed."""
    import google.auth.exceptions as auth_exc
    import requests
    from google.api_core import exceptions as api_exc

    try:
        yield
    except TpuctlError:
        raise
    except api_exc.NotFound as exc:
        raise ObjectNotFound(f"{what}: not found ({_short(exc)})") from None
    except (api_exc.Forbidden, api_exc.Unauthorized) as exc:
        raise CloudError(f"{what}: permission denied ({_short(exc)})", kind="permission",
                         hint="check the credentials, and that they hold roles/storage.objectUser "
                              "(or admin for bucket changes) on the bucket") from None
    except api_exc.BadRequest as exc:
        if "crc32c" in str(exc).lower():
            raise ChecksumMismatch(f"{what}: Cloud Storage rejected the upload's CRC32C ({_short(exc)})") from None
        raise CloudError(f"{what}: {_short(exc)}", kind="invalid") from None
    except (api_exc.Conflict, api_exc.PreconditionFailed) as exc:
        raise CloudError(f"{what}: {_short(exc)}", kind="conflict") from None
    except api_exc.GoogleAPICallError as exc:
        raise CloudError(f"{what}: {_short(exc)}", kind="transient") from None
    except auth_exc.GoogleAuthError as exc:
        raise UsageError(f"{what}: Google Cloud credentials failed ({_short(exc)})",
                         hint="run gcloud auth application-default login") from None
    except (requests.exceptions.RequestException, api_exc.RetryError, ConnectionError) as exc:
        raise unreachable(what, exc) from None


def unreachable(what: str, exc: BaseException) -> CloudError:
    """The one line for a request that failed even after the client library's own retries."""
    cause = getattr(exc, "cause", None) or exc
    gave_up = " after retrying" if type(exc).__name__ == "RetryError" else ""
    return CloudError(f"{what}: cannot reach Cloud Storage at {endpoint()}{gave_up} ({type(cause).__name__})",
                      kind="transient", hint="check the network (or STORAGE_EMULATOR_HOST) and re-run; "
                                             "finished files are not sent again")


# A resumable-upload session URI is a bearer credential for that upload (Google: "treat the
# session URI as you would an authentication token"): never quote one.
_SESSION_URI = re.compile(r"https?://\S*[?&]upload_id=\S*")


def _short(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    text = _SESSION_URI.sub("(upload session)", " ".join(str(text).split()))
    return redact(text)[:300]


def _retry(timeout: float | None = None):
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY if timeout is None else DEFAULT_RETRY.with_timeout(timeout)


def content_type(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def _info(blob: Any, metadata: bool = False) -> ObjectInfo:
    return ObjectInfo(blob.name, int(blob.size or 0), crc.from_b64(blob.crc32c), blob.generation,
                      dict(blob.metadata or {}) if metadata else None)


class FileSlice(io.RawIOBase):
    """A read-only, seekable window on ``length`` bytes of a file descriptor (``os.pread``):
    what the client streams one part from, rereading on its own retries. Reports each byte once."""

    def __init__(self, fd: int, offset: int, length: int, progress: Progress = no_progress,
                 check: Callable[[], None] = lambda: None):
        super().__init__()
        self.fd, self.offset, self.length = fd, offset, length
        self.pos = 0
        self.high = 0
        self.progress, self.check = progress, check

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(self.length, base + pos))
        return self.pos

    def read(self, n: int = -1) -> bytes:
        self.check()
        if n is None or n < 0:
            n = self.length - self.pos
        n = min(n, self.length - self.pos)
        if n <= 0:
            return b""
        data = os.pread(self.fd, n, self.offset + self.pos)
        if len(data) < n:
            raise OSError("source file shrank while being uploaded")
        self.pos += len(data)
        if self.pos > self.high:
            self.progress(self.pos - self.high)
            self.high = self.pos
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


class _RangeWriter:
    """File-like sink for one ranged download: gathers the client's small reads into blocks of
    up to :data:`crc.BLOCK` bytes, checksums them and writes them at their offset."""

    def __init__(self, fd: int, offset: int, progress: Progress, check: Callable[[], None]):
        self.fd, self.pos = fd, offset
        self.crc, self.count = 0, 0
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.progress, self.check = progress, check

    def write(self, data: bytes) -> int:
        self.pending.append(bytes(data))
        self.pending_bytes += len(data)
        if self.pending_bytes >= crc.BLOCK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if not self.pending:
            return
        self.check()
        block = b"".join(self.pending)
        self.pending, self.pending_bytes = [], 0
        view, pos = memoryview(block), self.pos
        while view:
            written = os.pwrite(self.fd, view, pos)
            view, pos = view[written:], pos + written
        self.crc = crc.extend(self.crc, block)
        self.pos = pos
        self.count += len(block)
        self.progress(len(block))


def _source_state(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


class _Job(TransferJob):
    def __init__(self, bucket: GcsBucket, label: str, size: int, progress: Progress):
        super().__init__(label, size, progress)
        self.bucket = bucket
        self._lock = threading.Lock()

    def _count(self, sent: int = 0, reused: int = 0, retries: int = 0) -> None:
        with self._lock:
            self.sent += sent
            self.reused += reused
            self.retries += retries

    def _upload(self, path: Path, name: str, offset: int, length: int, want: int, ctype: str,
                what: str) -> ObjectInfo:
        """Send ``length`` bytes of ``path`` to object ``name`` and return the stored copy, whose
        size and CRC32C match. A transient failure left after the client library's own retries
        (a reply lost after the last request of an upload, so that the resent request finds the
        session finished: 404/410; the retry deadline running out) is recovered as the resumable
        upload protocol allows: if the object is stored with the expected CRC32C, the upload
        arrived; otherwise a new session sends it again (bounded)."""
        failure: CloudError | None = None
        for attempt in range(1, ATTEMPTS + 1):
            self.check_cancelled()
            blob = self.bucket.blob(name)
            blob.chunk_size = UPLOAD_CHUNK
            try:
                with open(path, "rb", buffering=0) as fh, translate(what):
                    stream = FileSlice(fh.fileno(), offset, length, self.progress if attempt == 1 else no_progress,
                                       self.check_cancelled)
                    self.bucket.put(blob, stream, length, want, ctype)
                self._count(sent=length)
                info = _info(blob)
                if info.crc32c == want and info.size == length:
                    return info
                self.bucket.delete_generation(name, info.generation)
                failure = ChecksumMismatch(f"{what}: stored CRC32C {crc.to_b64(info.crc32c or 0)} differs from "
                                           f"the file's {crc.to_b64(want)}")
            except ChecksumMismatch as exc:  # Cloud Storage refused bytes that did not match the CRC32C sent
                self._count(sent=length)
                failure = exc
            except (ObjectNotFound, CloudError) as exc:
                if not isinstance(exc, ObjectNotFound) and exc.kind != "transient":
                    raise
                failure = exc
                stored = self.bucket.stat_quietly(name)
                if stored is not None and stored.crc32c == want and stored.size == length:
                    self._count(sent=length)
                    return stored
            if attempt < ATTEMPTS:
                self._count(retries=1)
        assert failure is not None
        if isinstance(failure, ObjectNotFound):  # the session vanished every time
            raise CloudError(f"{what}: the upload session was lost {ATTEMPTS} times", kind="transient",
                             hint="re-run; finished files are not sent again") from None
        raise failure


class _SingleUpload(_Job):
    """A file below the parts threshold: one upload, visible only once finalized."""

    def __init__(self, bucket: GcsBucket, path: Path, name: str, progress: Progress):
        super().__init__(bucket, name, path.stat().st_size, progress)
        self.path, self.name = path, name
        self.result: ObjectInfo | None = None

    def prepare(self) -> list[Callable[[], None]]:
        return [self._send]

    def _send(self) -> None:
        before = _source_state(self.path)
        self.size = before[0]
        self.crc = crc.of_file(self.path)
        self.result = self._upload(self.path, self.name, 0, self.size, self.crc, content_type(self.name),
                                   f"upload {self.bucket.url}/{self.name}")
        if _source_state(self.path) != before:
            raise ChecksumMismatch(f"{self.path} changed while it was being uploaded")

    def finish(self) -> ObjectInfo:
        info = self.result
        assert info is not None
        if info.crc32c != self.crc or info.size != self.size:
            self.bucket.delete_generation(self.name, info.generation)
            raise ChecksumMismatch(f"{self.name}: stored CRC32C {crc.to_b64(info.crc32c or 0)} differs from "
                                   f"the file's {crc.to_b64(self.crc)}")
        return info


class _CompositeUpload(_Job):
    """A large file: parts in parallel under ``.tpuctl-parts/``, then one compose."""

    def __init__(self, bucket: GcsBucket, path: Path, name: str, part_size: int, progress: Progress):
        super().__init__(bucket, name, path.stat().st_size, progress)
        self.path, self.name, self.part_size = path, name, part_size

    def prepare(self) -> list[Callable[[], None]]:
        self.before = _source_state(self.path)
        self.size = self.before[0]
        self.ranges = parts.ranges(self.size, self.part_size)
        self.names = [parts.part_name(self.name, self.size, self.part_size, i) for i in range(len(self.ranges))]
        layout = parts.layout_dir(self.name, self.size, self.part_size)
        found = {o.name: o for o in self.bucket.list_internal(parts.object_dir(self.name))}
        self.existing = {n: o for n, o in found.items() if n.startswith(layout)}
        self.stale = sorted(n for n in found if not n.startswith(layout) or n not in self.names)
        self.crcs: list[int | None] = [None] * len(self.ranges)
        return [partial(self._part, i) for i in range(len(self.ranges))]

    def _part(self, index: int) -> None:
        self.check_cancelled()
        offset, length = self.ranges[index]
        name = self.names[index]
        want = crc.of_file(self.path, offset, length)
        have = self.existing.get(name)
        if have is not None and have.size == length and have.crc32c == want:
            self.crcs[index] = want  # left by an interrupted run, and intact
            self._count(reused=length)
            self.progress(length)
            return
        self._upload(self.path, name, offset, length, want, "application/octet-stream",
                     f"upload part {index} of {self.bucket.url}/{self.name}")
        self.crcs[index] = want

    def finish(self) -> ObjectInfo:
        if _source_state(self.path) != self.before:
            raise ChecksumMismatch(f"{self.path} changed while it was being uploaded")
        whole = crc.combine_all([(c or 0, n) for c, (_, n) in zip(self.crcs, self.ranges)])
        dest = self.bucket.blob(self.name)
        dest.content_type = content_type(self.name)
        with translate(f"compose {self.bucket.url}/{self.name}"):
            dest.compose([self.bucket.blob(n) for n in self.names], retry=_retry())
        info = _info(dest)
        if info.crc32c != whole or info.size != self.size:
            self.bucket.delete_generation(self.name, info.generation)
            self.bucket.delete_many(self.names)
            raise ChecksumMismatch(f"{self.name}: composed object's CRC32C {crc.to_b64(info.crc32c or 0)} "
                                   f"differs from the file's {crc.to_b64(whole)}")
        try:
            self.bucket.delete_many(self.names + self.stale)
        except CloudError:  # the object is published and verified; the next stage removes the parts
            pass
        return info


class _Download(_Job):
    """One object to a local file: ranges in parallel into a partial file, verified, renamed."""

    def __init__(self, bucket: GcsBucket, info: ObjectInfo, path: Path, part_size: int, progress: Progress):
        super().__init__(bucket, info.name, info.size, progress)
        self.info, self.path, self.part_size = info, path, part_size
        self.tmp: Path | None = None

    def prepare(self) -> list[Callable[[], None]]:
        if self.info.crc32c is None:
            raise ChecksumMismatch(f"{self.bucket.url}/{self.info.name} has no CRC32C to verify against")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = partial_path(self.path)
        with open(self.tmp, "wb") as fh:
            fh.truncate(self.info.size)
        if parts.in_parts(self.info.size, self.part_size):
            self.ranges = parts.ranges(self.info.size, self.part_size)
        else:
            self.ranges = [(0, self.info.size)] if self.info.size else []
        self.crcs: list[int] = [0] * len(self.ranges)
        return [partial(self._range, i) for i in range(len(self.ranges))]

    def _range(self, index: int) -> None:
        self.check_cancelled()
        offset, length = self.ranges[index]
        blob = self.bucket.blob(self.info.name, generation=self.info.generation)
        assert self.tmp is not None
        with open(self.tmp, "r+b", buffering=0) as fh, translate(f"download {self.bucket.url}/{self.info.name}"):
            sink = _RangeWriter(fh.fileno(), offset, self.progress, self.check_cancelled)
            blob.download_to_file(sink, start=offset, end=offset + length - 1, raw_download=True,
                                  checksum=None, retry=_retry())
            sink.flush()
        if sink.count != length:
            raise ChecksumMismatch(f"{self.info.name}: got {sink.count} bytes of range {offset}+{length}")
        self.crcs[index] = sink.crc
        self._count(sent=length)

    def finish(self) -> ObjectInfo:
        assert self.tmp is not None
        whole = crc.combine_all(list(zip(self.crcs, (n for _, n in self.ranges))))
        if whole != self.info.crc32c:
            self.abort()
            raise ChecksumMismatch(f"{self.info.name}: downloaded bytes' CRC32C {crc.to_b64(whole)} differs "
                                   f"from the object's {crc.to_b64(self.info.crc32c or 0)}")
        os.replace(self.tmp, self.path)
        self.tmp = None
        return self.info

    def abort(self) -> None:
        if self.tmp is not None:
            try:
                self.tmp.unlink()
            except FileNotFoundError:
                pass
            self.tmp = None


class GcsBucket(Bucket):
    kind = "gcs"

    def __init__(self, name: str, client: Client):
        self.name = name
        self.url = f"gs://{name}"
        self.client = client
        self._bucket = client.bucket(name)

    def blob(self, name: str, generation: int | None = None):
        return self._bucket.blob(name, generation=generation)

    def put(self, blob: Any, stream: io.RawIOBase, size: int, want: int,
            ctype: str = "application/octet-stream") -> None:
        """Upload ``size`` bytes from ``stream``, announcing their CRC32C (GCS refuses a mismatch).

        The one place bytes go up: tests subclass it to corrupt uploads on the wire."""
        blob.upload_from_file(stream, size=size, content_type=ctype, checksum=None,
                              crc32c_checksum_value=crc.to_b64(want), retry=_retry())

    # -- the bucket itself
    def exists(self) -> bool:
        with translate(f"look up bucket {self.url}"):
            return bool(self._bucket.exists(retry=_retry(30.0)))

    def new_bucket_resource(self) -> Any:
        """The bucket as created: IAM only (uniform bucket-level access), never public."""
        bucket = self.client.bucket(self.name)
        bucket.iam_configuration.uniform_bucket_level_access_enabled = True
        bucket.iam_configuration.public_access_prevention = "enforced"
        return bucket

    def create(self, location: str) -> None:
        bucket = self.new_bucket_resource()
        try:
            with translate(f"create bucket {self.url}"):
                self.client.create_bucket(bucket, location=location, project=self.client.project)
        except CloudError as exc:
            if exc.kind == "conflict":
                raise CloudError(f"bucket name {self.name} is taken", kind="conflict",
                                 hint="bucket names are global; choose another name") from None
            raise

    def grant_object_access(self, member: str) -> bool:
        """Bind :data:`OBJECT_ROLE` for ``member`` on this bucket, once (read-modify-write with etag)."""
        iam.check_member(member)
        for _ in range(ATTEMPTS):
            try:
                with translate(f"read IAM policy of {self.url}"):
                    policy = self._bucket.get_iam_policy(requested_policy_version=3)
            except ObjectNotFound:
                if not self.exists():
                    raise BucketNotFound(f"bucket {self.url} does not exist",
                                         hint="create it with tpuctl stage SRC gs://BUCKET --create-bucket") from None
                raise CloudError(f"{endpoint()} does not serve bucket IAM policies, so access to {self.url} "
                                 f"cannot be granted there", kind="unsupported",
                                 hint="grant it on real Cloud Storage; storage emulators have no IAM") from None
            bindings = [dict(b) for b in policy.bindings]
            updated, changed = iam.with_member(bindings, OBJECT_ROLE, member)
            if not changed:
                return False
            policy.bindings = updated
            try:
                with translate(f"set IAM policy of {self.url}"):
                    self._bucket.set_iam_policy(policy)
                return True
            except CloudError as exc:  # a concurrent change (etag mismatch): read again
                if exc.kind != "conflict":
                    raise
        raise CloudError(f"IAM policy of {self.url} kept changing; access not granted", kind="conflict",
                         hint="re-run")

    # -- objects
    def list(self, prefix: str = "", *, glob: str | None = None) -> Iterator[ObjectInfo]:
        for info in self._list(prefix, glob):
            if not info.name.startswith(PARTS_PREFIX):
                yield info

    def list_internal(self, prefix: str) -> list[ObjectInfo]:
        return list(self._list(prefix))

    def _list(self, prefix: str, glob: str | None = None) -> Iterator[ObjectInfo]:
        # matchGlob is filtered here too: an emulator may ignore it (fake-gcs-server does)
        wanted = glob_matcher(glob) if glob else None
        try:
            with translate(f"list {self.url}/{prefix}"):
                for blob in self.client.list_blobs(self.name, prefix=prefix or None, match_glob=glob,
                                                   retry=_retry()):
                    if blob.name.endswith("/"):  # a console "folder" placeholder, not a file
                        continue
                    if wanted is None or wanted(blob.name):
                        yield _info(blob, metadata=True)
        except ObjectNotFound:
            raise BucketNotFound(f"bucket {self.url} does not exist",
                                 hint="check the name, or create it with --create-bucket") from None

    def stat(self, name: str) -> ObjectInfo | None:
        with translate(f"look up {self.url}/{name}"):
            blob = self._bucket.get_blob(name, retry=_retry())
        return None if blob is None else _info(blob)

    def stat_quietly(self, name: str) -> ObjectInfo | None:
        """``stat``, or None when even that fails: for deciding whether to send again."""
        try:
            return self.stat(name)
        except (CloudError, ObjectNotFound):
            return None

    def read_bytes(self, name: str) -> bytes:
        """One download where Cloud Storage says the CRC32C of what it sent (``x-goog-hash``, which
        the client puts on the blob): a fleet's ``down --idle`` reads hundreds of run records, and a
        metadata request before each doubled them. An endpoint that sends no hash costs a metadata
        read, so the bytes are checked either way."""
        for _ in range(ATTEMPTS):
            blob = self.blob(name)
            try:
                with translate(f"read {self.url}/{name}"):
                    data = blob.download_as_bytes(raw_download=True, checksum=None, retry=_retry())
                    if blob.crc32c is None:
                        blob.reload(retry=_retry())
            except ObjectNotFound:
                raise ObjectNotFound(f"{self.url}/{name} does not exist") from None
            if crc.value(data) == crc.from_b64(blob.crc32c):
                return data
        raise ChecksumMismatch(f"{self.url}/{name}: content does not match its CRC32C")

    def read_range(self, name: str, start: int, length: int) -> bytes:
        """One ranged download (``Range: bytes=start-end``): only the new tail of a growing object."""
        if length <= 0:
            return b""
        try:
            with translate(f"read {self.url}/{name}"):
                return self.blob(name).download_as_bytes(start=start, end=start + length - 1, raw_download=True,
                                                         checksum=None, retry=_retry())
        except ObjectNotFound:
            raise ObjectNotFound(f"{self.url}/{name} does not exist") from None

    def write_bytes(self, name: str, data: bytes, metadata: dict[str, str] | None = None) -> ObjectInfo:
        want = crc.value(data)
        for _ in range(ATTEMPTS):
            blob = self.blob(name)
            if metadata:
                blob.metadata = dict(metadata)
            with translate(f"write {self.url}/{name}"):
                blob.upload_from_string(data, content_type=content_type(name), checksum=None,
                                        crc32c_checksum_value=crc.to_b64(want), retry=_retry())
            info = _info(blob)
            if info.crc32c == want and info.size == len(data):
                return info
            self.delete_generation(name, info.generation)
        raise ChecksumMismatch(f"{self.url}/{name}: stored copy failed CRC32C verification {ATTEMPTS} times")

    def read_versioned(self, name: str) -> tuple[bytes, int] | None:
        """One download: Cloud Storage sends the generation and CRC32C of the bytes it serves in
        ``x-goog-generation`` and ``x-goog-hash``, which the client puts on the blob. (Metadata first
        and then a read pinned to that generation would lose, again and again, to busy writers.)"""
        for _ in range(ATTEMPTS):
            blob = self.blob(name)
            try:
                with translate(f"read {self.url}/{name}"):
                    data = blob.download_as_bytes(raw_download=True, checksum=None, retry=_retry())
            except ObjectNotFound:
                return None
            if blob.generation is None:
                raise CloudError(f"{endpoint()} did not say which generation of {self.url}/{name} it sent "
                                 f"(no x-goog-generation header)", kind="unsupported")
            if blob.crc32c is None or crc.value(data) == crc.from_b64(blob.crc32c):
                return data, int(blob.generation)
        raise ChecksumMismatch(f"{self.url}/{name}: content does not match its CRC32C")

    def write_if_generation(self, name: str, data: bytes, if_generation_match: int) -> ObjectInfo:
        """One upload with ``ifGenerationMatch`` (``0``: only if absent): Cloud Storage decides the
        race and answers 412 to the losers. A retried request whose first try did land also gets 412;
        then the object holds exactly these bytes, which is a win (callers' bytes are unique)."""
        from google.api_core import exceptions as api_exc

        want = crc.value(data)
        blob = self.blob(name)
        try:
            with translate(f"write {self.url}/{name}"):
                try:
                    blob.upload_from_string(data, content_type=content_type(name), checksum=None,
                                            crc32c_checksum_value=crc.to_b64(want),
                                            if_generation_match=if_generation_match, retry=_retry())
                except api_exc.PreconditionFailed:
                    raise PreconditionFailed(f"{self.url}/{name} is no longer at generation "
                                             f"{if_generation_match}") from None
        except PreconditionFailed:
            now = self.read_versioned(name)
            if now is None or now[0] != data:
                raise
            return ObjectInfo(name, len(data), want, now[1])
        info = _info(blob)
        if info.crc32c != want or info.size != len(data):
            self.delete_generation(name, info.generation)
            raise ChecksumMismatch(f"{self.url}/{name}: stored copy failed CRC32C verification")
        return info

    def delete(self, name: str) -> bool:
        try:
            with translate(f"delete {self.url}/{name}"):
                self.blob(name).delete(retry=_retry())
            return True
        except ObjectNotFound:
            return False

    def delete_generation(self, name: str, generation: int | None) -> None:
        """Remove a copy that failed verification, and only that one (not a newer write)."""
        try:
            with translate(f"delete {self.url}/{name}"):
                self.blob(name).delete(if_generation_match=generation, retry=_retry())
        except (ObjectNotFound, CloudError):
            pass

    def delete_many(self, names: list[str]) -> None:
        for name in names:
            self.delete(name)

    def upload_job(self, path: Path, name: str, *, part_size: int,
                   progress: Progress = no_progress) -> TransferJob:
        path = Path(path)
        if parts.in_parts(path.stat().st_size, part_size):
            return _CompositeUpload(self, path, name, part_size, progress)
        return _SingleUpload(self, path, name, progress)

    def download_job(self, info: ObjectInfo, path: Path, *, part_size: int,
                     progress: Progress = no_progress) -> TransferJob:
        return _Download(self, info, Path(path), part_size, progress)

    def clean_internal(self, prefix: str) -> int:
        stale = [o.name for o in self.list_internal(parts.prefix_dir(prefix))]
        self.delete_many(stale)
        return len(stale)
