"""Buckets as directories: the local provider's ``gs://BUCKET`` and plain local paths.

A write goes to a hidden partial file beside its target (``.tpuctl-partial.NAME.RANDOM``), is
re-read and compared by CRC32C with the bytes read from the source, then renamed into place: an
interrupted copy never leaves a file that looks complete, and listings skip partials. Bulk copies
are not fsynced (a killed process loses nothing the page cache holds; after a power loss the next
stage re-verifies every file by CRC32C); small records written with ``write_bytes`` are.

The local provider's buckets live in ``$TPUCTL_HOME`` on a machine others may share: their
objects are 0600 and their directories 0700 (:mod:`provision.basics.private`), as a Cloud Storage
bucket is readable only by whom its policy names. A plain directory that ``tpuctl stage`` reads
or fills is the user's: its files get the umask's modes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from ...basics import private as private_files
from ...basics.errors import NotAvailable, UsageError
from . import crc, iam
from .base import (
    META_PREFIX,
    OBJECT_ROLE,
    PARTIAL_PREFIX,
    Bucket,
    ChecksumMismatch,
    ObjectInfo,
    PreconditionFailed,
    Progress,
    TransferJob,
    glob_matcher,
    no_progress,
)


def check_name(name: str) -> list[str]:
    """The path segments of an object name that can live on a filesystem; UsageError if not."""
    segs = name.split("/")
    if (not name or name.startswith("/") or "\x00" in name
            or any(s in ("", ".", "..") for s in segs)):
        raise UsageError(f"object name {name!r} cannot be a local file",
                         hint="exclude it with --exclude, or rename it in the bucket")
    return segs


def meta_path(dest: Path) -> Path:
    """Where the custom metadata of the object at ``dest`` is kept: a hidden file beside it that
    names the generation (mtime) it belongs to, so a listing never pairs bytes with another
    write's metadata (between the two renames the object simply has none)."""
    return dest.parent / f"{META_PREFIX}{_sidecar_base(dest)}"


def _read_meta(path: Path, generation: int) -> dict[str, str]:
    try:
        kept = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(kept, dict) or kept.get("generation") != generation:
        return {}
    return {str(k): str(v) for k, v in (kept.get("metadata") or {}).items()}


def _sidecar_base(dest: Path) -> str:
    """The part of a file beside ``dest`` that names it: its name, or a hash of a name so long that
    a prefix and suffix would pass the file system's 255-byte limit."""
    return dest.name if len(dest.name) < 180 else hashlib.sha1(dest.name.encode()).hexdigest()


def partial_path(dest: Path) -> Path:
    return dest.parent / f"{PARTIAL_PREFIX}{_sidecar_base(dest)}.{uuid.uuid4().hex[:8]}"


class CopyJob(TransferJob):
    """One local file to another: copy to a partial file, verify by re-reading, rename."""

    def __init__(self, src: Path, dest: Path, label: str, progress: Progress = no_progress, *,
                 private: bool = False):
        try:
            size = src.stat().st_size
        except FileNotFoundError:
            size = 0  # reported by prepare
        super().__init__(label, size, progress)
        self.src, self.dest = src, dest
        self.private = private          # dest is in a local provider's bucket: 0600, dirs 0700
        self.tmp: Path | None = None
        self.crc = 0

    def prepare(self) -> list[Callable[[], None]]:
        return [self._copy]

    def _copy(self) -> None:
        st = os.stat(self.src)
        before = (st.st_size, st.st_mtime_ns)
        _make_dirs(self.dest.parent, self.private)
        self.tmp = partial_path(self.dest)
        crc_value, size = 0, 0
        with open(self.src, "rb", buffering=0) as fin, \
                open(self.tmp, "wb", buffering=0, opener=_opener(self.private)) as fout:
            while True:
                self.check_cancelled()
                block = fin.read(crc.BLOCK)
                if not block:
                    break
                crc_value = crc.extend(crc_value, block)
                view = memoryview(block)
                while view:
                    view = view[fout.write(view):]
                size += len(block)
                self.progress(len(block))
        self.crc, self.size, self.sent = crc_value, size, size
        st = os.stat(self.src)
        if (st.st_size, st.st_mtime_ns) != before:
            raise ChecksumMismatch(f"{self.src} changed while it was being copied")

    def finish(self) -> ObjectInfo:
        assert self.tmp is not None
        landed = crc.of_file(self.tmp)
        if landed != self.crc:
            self.abort()
            raise ChecksumMismatch(f"{self.label}: the copy's CRC32C {crc.to_b64(landed)} differs from "
                                   f"the source's {crc.to_b64(self.crc)}")
        os.replace(self.tmp, self.dest)
        self.tmp = None
        st = self.dest.stat()
        return ObjectInfo(self.label, st.st_size, self.crc, st.st_mtime_ns)

    def abort(self) -> None:
        if self.tmp is not None:
            try:
                self.tmp.unlink()
            except FileNotFoundError:
                pass
            self.tmp = None


class LocalBucket(Bucket):
    """A directory tree; ``meta_path`` (local provider buckets only) holds location and IAM;
    ``private``: what it writes is its owner's alone (a local provider's bucket)."""

    kind = "local"

    def __init__(self, root: str | Path, *, url: str | None = None, meta_path: Path | None = None,
                 private: bool = False):
        self.root = Path(root)
        self.url = url or str(self.root)
        self.meta_path = meta_path
        self.private = private

    def describe(self) -> str:
        return f"{self.url} (directory {self.root})" if self.url != str(self.root) else str(self.root)

    def path(self, name: str) -> Path:
        return self.root.joinpath(*check_name(name))

    # -- the bucket itself
    def exists(self) -> bool:
        return self.root.is_dir()

    def create(self, location: str) -> None:
        _make_dirs(self.root, self.private)
        if self.meta_path is not None:
            meta = self._meta()
            meta.setdefault("location", location)
            meta["uniform_bucket_level_access"] = True
            self._save_meta(meta)

    def grant_object_access(self, member: str) -> bool:
        iam.check_member(member)
        if self.meta_path is None:
            raise NotAvailable(f"{self.root} is a plain directory and has no access policy",
                               hint="grant access on a gs:// bucket")
        meta = self._meta()
        stored = [{"role": r, "members": m} for r, m in (meta.get("iam") or {}).items()]
        bindings, changed = iam.with_member(stored, OBJECT_ROLE, member)
        if changed:
            meta["iam"] = {b["role"]: sorted(b["members"]) for b in bindings}
            self._save_meta(meta)
        return changed

    def policy(self) -> dict[str, list[str]]:
        return dict(self._meta().get("iam") or {})

    def _meta(self) -> dict:
        assert self.meta_path is not None
        try:
            return json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            return {}

    def _save_meta(self, meta: dict) -> None:
        assert self.meta_path is not None
        _make_dirs(self.meta_path.parent, self.private)
        tmp = partial_path(self.meta_path)
        with open(tmp, "w", encoding="utf-8", opener=_opener(self.private)) as fh:
            fh.write(json.dumps(meta, indent=2, sort_keys=True))
        os.replace(tmp, self.meta_path)

    # -- objects
    def list(self, prefix: str = "", *, glob: str | None = None) -> Iterator[ObjectInfo]:
        base = prefix.rpartition("/")[0]
        start = self.root.joinpath(*check_name(base)) if base else self.root
        if not start.is_dir():
            return
        root = str(self.root)
        wanted = glob_matcher(glob) if glob else None
        # a glob without "**" names files at one depth: the folders below it are not walked
        depth = glob.count("/") if glob and "**" not in glob else None
        seen: set[tuple[int, int]] = set()
        for dirpath, dirnames, filenames in os.walk(start, followlinks=True):
            st = os.stat(dirpath)
            if (st.st_dev, st.st_ino) in seen:  # a symlink loop
                dirnames[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            if depth is not None and (0 if rel == "." else rel.count(os.sep) + 1) >= depth:
                dirnames[:] = []
            kept = {fn for fn in filenames if fn.startswith(META_PREFIX)}
            for fn in sorted(filenames):
                if fn.startswith((PARTIAL_PREFIX, META_PREFIX)):
                    continue
                full = os.path.join(dirpath, fn)
                name = os.path.relpath(full, root).replace(os.sep, "/")
                if not name.startswith(prefix) or (wanted is not None and not wanted(name)):
                    continue
                try:
                    fst = os.stat(full)
                except OSError:  # a broken symlink
                    continue
                if not _is_regular(fst):
                    continue
                meta = meta_path(Path(full))
                yield ObjectInfo(name, fst.st_size, None, fst.st_mtime_ns,
                                 _read_meta(meta, fst.st_mtime_ns) if meta.name in kept else {})

    def stat(self, name: str) -> ObjectInfo | None:
        path = self.path(name)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not _is_regular(st):
            return None
        return ObjectInfo(name, st.st_size, crc.of_file(path), st.st_mtime_ns)

    def read_bytes(self, name: str) -> bytes:
        from .base import ObjectNotFound

        try:
            return self.path(name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(f"{self.url}/{name} does not exist") from None

    def write_bytes(self, name: str, data: bytes, metadata: dict[str, str] | None = None) -> ObjectInfo:
        dest = self.path(name)
        _make_dirs(dest.parent, self.private)
        tmp = partial_path(dest)
        try:
            with open(tmp, "wb", opener=_opener(self.private)) as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            want = crc.value(data)
            if crc.of_file(tmp) != want:
                raise ChecksumMismatch(f"{self.url}/{name}: written file does not match")
            self._set_meta(dest, tmp, metadata)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
        st = dest.stat()
        return ObjectInfo(name, st.st_size, want, st.st_mtime_ns)

    def _set_meta(self, dest: Path, tmp: Path, metadata: dict[str, str] | None) -> None:
        """Before ``tmp`` replaces ``dest``: keep ``metadata`` for its generation (a new mtime, later
        than the replaced file's), or drop what the replaced bytes had."""
        meta = meta_path(dest)
        if not metadata:
            with contextlib.suppress(FileNotFoundError):
                meta.unlink()
            return
        try:
            current = dest.stat().st_mtime_ns
        except FileNotFoundError:
            current = 0
        gen = max(time.time_ns(), current + 1)
        os.utime(tmp, ns=(gen, gen))
        body = json.dumps({"generation": tmp.stat().st_mtime_ns, "metadata": dict(metadata)}).encode()
        side = partial_path(meta)
        with open(side, "wb", opener=_opener(self.private)) as fh:
            fh.write(body)
        os.replace(side, meta)

    def read_versioned(self, name: str) -> tuple[bytes, int] | None:
        # one open file: the bytes and the mtime are the same inode's (writes replace, never modify)
        try:
            fh = open(self.path(name), "rb")  # noqa: SIM115 - closed below
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        with fh:
            gen = os.fstat(fh.fileno()).st_mtime_ns
            return fh.read(), gen

    def write_if_generation(self, name: str, data: bytes, if_generation_match: int) -> ObjectInfo:
        """Compare and swap under an exclusive lock of the object's directory. The generation is the
        file's mtime in nanoseconds, set here to at least one more than the one it replaces, so it
        changes with every conditional write even within one tick of the filesystem's clock."""
        dest = self.path(name)
        want = crc.value(data)
        with _locked_dir(dest.parent, self.private):
            try:
                current = dest.stat().st_mtime_ns
            except FileNotFoundError:
                current = 0
            if current != if_generation_match:
                raise PreconditionFailed(f"{self.url}/{name} is at generation {current}, "
                                         f"not {if_generation_match}")
            tmp = partial_path(dest)
            try:
                with open(tmp, "wb", opener=_opener(self.private)) as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                if crc.of_file(tmp) != want:
                    raise ChecksumMismatch(f"{self.url}/{name}: written file does not match")
                gen = max(time.time_ns(), current + 1)
                os.utime(tmp, ns=(gen, gen))
                gen = tmp.stat().st_mtime_ns
                os.replace(tmp, dest)
            finally:
                if tmp.exists():
                    tmp.unlink()
        return ObjectInfo(name, len(data), want, gen)

    def delete(self, name: str) -> bool:
        path = self.path(name)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return False
        with contextlib.suppress(FileNotFoundError):
            meta_path(path).unlink()
        self._prune(path.parent)
        return True

    def _prune(self, directory: Path) -> None:
        """Remove directories left empty, up to the root: buckets have no empty folders."""
        root = self.root.resolve()
        while directory.resolve() != root and root in directory.resolve().parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def upload_job(self, path: Path, name: str, *, part_size: int,
                   progress: Progress = no_progress) -> TransferJob:
        return CopyJob(Path(path), self.path(name), name, progress, private=self.private)

    def download_job(self, info: ObjectInfo, path: Path, *, part_size: int,
                     progress: Progress = no_progress) -> TransferJob:
        return CopyJob(self.path(info.name), Path(path), info.name, progress)

    def clean_internal(self, prefix: str) -> int:
        base = prefix.rstrip("/")
        start = self.root.joinpath(*check_name(base)) if base else self.root
        removed = 0
        if not start.is_dir():
            return 0
        for dirpath, _dirs, filenames in os.walk(start):
            for fn in filenames:
                if fn.startswith(PARTIAL_PREFIX):
                    try:
                        os.unlink(os.path.join(dirpath, fn))
                        removed += 1
                    except FileNotFoundError:
                        pass
        return removed


@contextlib.contextmanager
def _locked_dir(directory: Path, private: bool = False):
    """Hold an exclusive ``flock`` on ``directory``: every process and thread that opens it for a
    conditional write queues here. Retried when the directory was pruned and made again while
    waiting (a lock on the old inode would exclude nobody)."""
    import fcntl

    while True:
        _make_dirs(directory, private)
        fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(directory).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield
                return
        finally:
            os.close(fd)


def _make_dirs(directory: Path, private: bool) -> None:
    if private:
        private_files.make_dirs(directory)
    else:
        directory.mkdir(parents=True, exist_ok=True)


def _opener(private: bool) -> Callable[[str, int], int] | None:
    """``open``'s opener: 0600 in a private bucket, the umask's mode elsewhere."""
    return private_files.opener if private else None


def _is_regular(st: os.stat_result) -> bool:
    import stat

    return stat.S_ISREG(st.st_mode)
