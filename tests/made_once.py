"""Test inputs made once and kept: a content-addressed cache shared by sessions and xdist workers.

Making the tiny BERT directory or training a tiny model starts TensorFlow and takes seconds to
minutes; most tests need *a* model, not the act of making it. ``made_once(name, key, make, out)``
gives ``out`` a copy of what ``make(dir)`` wrote for that ``key``, running ``make`` only when no
entry with that key exists. The key is the sha256 of everything the result depends on: the
job-side source files (``source_key``), the versions of the libraries that compute it, and the
spec, so a change to any of them makes a new entry and the old one is pruned a day later.

The cache lives in ``$XDG_CACHE_HOME/tpuctl-tests`` (``~/.cache/tpuctl-tests``), a directory
private to this user (0700, refused if someone else owns it or others may write to it). An entry is
made in a temporary directory beside it and renamed into place, and each name has a lock file
(``fcntl.flock``), so two xdist workers, or two sessions, asking at once make it once. Tests get a
copy, so one that writes into its model changes nothing for the next.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRUNE_AFTER_S = 24 * 3600
LIBRARIES = ("tensorflow", "keras", "numpy")


def cache_root() -> Path:
    """The private cache directory, made if missing."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = base / "tpuctl-tests"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(f"{root} must be a directory of this user that others cannot write to; "
                           "remove it (the tests make it again)")
    return root


def source_key(paths: Iterable[Path], *extra: str) -> str:
    """sha256 of the Python files under ``paths`` (path and bytes, in order), the library versions
    and interpreter that run them, and ``extra`` (a spec, a step count)."""
    digest = hashlib.sha256()
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py"))})
    for f in files:
        name = f.relative_to(REPO) if f.is_relative_to(REPO) else f  # the same in any clone
        digest.update(name.as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    for lib in LIBRARIES:
        try:
            digest.update(f"{lib}=={metadata.version(lib)}\0".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{lib} missing\0".encode())
    digest.update(f"{sys.version}\0".encode())
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()


@contextmanager
def _locked(path: Path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _prune(root: Path, name: str, keep: Path) -> None:
    """Entries of ``name`` under other keys, unused for a day (a source change left them)."""
    cutoff = time.time() - PRUNE_AFTER_S
    for entry in root.glob(f"{name}-*"):
        if entry != keep and entry.is_dir() and entry.stat().st_mtime < cutoff:
            shutil.rmtree(entry, ignore_errors=True)


def made_once(name: str, key: str, make: Callable[[Path], None], out: Path) -> Path:
    """``out``, a fresh copy of what ``make(directory)`` writes for ``key``; ``make`` runs only when
    the cache has no entry for it (then under the name's lock, so once for all workers)."""
    root = cache_root()
    entry = root / f"{name}-{key[:32]}"
    with _locked(root / f"{name}.lock"):
        if not entry.is_dir():
            work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                make(work)
                os.rename(work, entry)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        os.utime(entry)
        _prune(root, name, entry)
        shutil.copytree(entry, out, symlinks=True)
    return out
