"""A run's workdir as one archive: packed here, staged content-addressed, unpacked on each host.

``tpuctl train --workdir DIR`` (and ``tpuctl sweep``) ships the user's code as a gzipped tar of
exactly the files :func:`provision.staging.selection.select` keeps (no dot path, no symlink,
nothing ``.gitignore``/``.tpuctlignore`` excludes). The archive is deterministic (sorted names,
no times, owners or modes beyond 0644/0755), so the same files give the same bytes and the same
sha256: it is staged once per bucket under ``tpuctl/workdirs/<sha256>.tar.gz``, and unchanged
code is not sent again. The run's pin holds that sha256 (docs/security.md); a host derives the
object's name from the pin, checks the bytes against it and unpacks only regular files and
directories below its own directory (:func:`unpack`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..basics.errors import UsageError
from .selection import Selection

PREFIX = "tpuctl/workdirs"
# the files a workdir may hold, before compression: code and small configuration, not data
MAX_BYTES = 100 << 20
MAX_FILES = 20000


@dataclass(frozen=True)
class Packed:
    data: bytes          # the .tar.gz
    digest: str          # its sha256: the pin's ``workdir``, and the object's name
    files: int
    size: int            # bytes of the files, before compression

    @property
    def object_name(self) -> str:
        return object_name(self.digest)


def object_name(digest: str) -> str:
    return f"{PREFIX}/{digest}.tar.gz"


def check_size(sel: Selection, flag: str = "--workdir") -> int:
    """The bytes the selection holds; a UsageError naming the biggest files when it is over
    :data:`MAX_BYTES` or :data:`MAX_FILES` (before anything is packed or created)."""
    sizes = [(os.stat(sel.root / rel, follow_symlinks=False).st_size, rel) for rel in sel.files]
    total = sum(s for s, _ in sizes)
    if total > MAX_BYTES or len(sizes) > MAX_FILES:
        biggest = ", ".join(f"{rel} ({size / (1 << 20):.1f} MiB)" for size, rel in sorted(sizes, reverse=True)[:3])
        raise UsageError(f"{flag} {sel.root} holds {len(sizes)} files of {total / (1 << 20):.1f} MiB to stage, over the "
                         f"limit of {MAX_FILES} files and {MAX_BYTES >> 20} MiB (the biggest: {biggest})",
                         hint="leave data and outputs out with a .tpuctlignore (or .gitignore) line, and stage data "
                              "with tpuctl stage; or pass --workdir a smaller directory")
    return total


def pack(sel: Selection) -> Packed:
    """The deterministic archive of the selection (check its size first: :func:`check_size`)."""
    raw = io.BytesIO()
    dirs: set[str] = set()
    size = 0
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sel.files:
            parts = rel.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    tar.addfile(_info(d, tarfile.DIRTYPE, 0o755, 0))
            path = sel.root / rel
            st = os.stat(path, follow_symlinks=False)
            mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
            with open(path, "rb") as fh:
                data = fh.read()
            size += len(data)
            tar.addfile(_info(rel, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
    out = raw.getvalue()
    return Packed(out, hashlib.sha256(out).hexdigest(), len(sel.files), size)


def _info(name: str, kind: bytes, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class UnsafeArchive(ValueError):
    """An archive with a member that is not a plain file or directory below the target."""


def unpack(data: bytes, target: Path) -> int:
    """Unpack an archive whose digest was checked into the empty directory ``target`` (mode 0700):
    regular files and directories only, each below ``target``; returns the files written.
    Anything else (a link, a device, an absolute or ``..`` path) is refused before it is written."""
    count = 0
    root = target.resolve()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            path = (root / m.name).resolve()
            if os.path.isabs(m.name) or ".." in m.name.split("/") or not path.is_relative_to(root) or path == root:
                raise UnsafeArchive(f"a workdir member outside its directory: {m.name!r:.80}")
            if not (m.isreg() or m.isdir()):
                raise UnsafeArchive(f"a workdir member that is not a file or directory: {m.name!r:.80}")
        for m in members:
            path = root / m.name
            if m.isdir():
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
                continue
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700 if m.mode & 0o100 else 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(src.read())
            count += 1
    return count
