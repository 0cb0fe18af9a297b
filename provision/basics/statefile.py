"""JSON records on disk that several tpuctl processes can share without corrupting them.

Every write goes to a temporary file in the same directory, is fsynced, and replaces the record
with ``os.replace`` (atomic on POSIX), so a reader never sees half a file and a crash never leaves
one. Read-modify-write cycles hold an exclusive ``flock`` on a sibling ``.lock`` file, so two
processes updating the same record serialize instead of losing an update.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import TpuctlError
from .private import make_dirs


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = 60.0) -> Iterator[None]:
    """Hold an exclusive lock associated with ``path`` (the file need not exist)."""
    make_dirs(path.parent)
    fd = os.open(_lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise TpuctlError(f"timed out waiting for the lock on {path}",
                                      hint="another tpuctl holds it; retry when it finishes") from None
                time.sleep(0.01)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_json(path: Path, data: Any) -> None:
    """Atomically replace ``path`` with ``data`` as JSON (mode 0600: it may hold run details;
    new directories 0700)."""
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path, default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default
    except json.JSONDecodeError as exc:
        raise TpuctlError(f"state file {path} is not valid JSON ({exc.msg})",
                          hint="remove it; the cloud is the source of truth and tpuctl rebuilds it") from None


def update_json(path: Path, fn: Callable[[Any], Any], default: Any = None) -> Any:
    """Read, transform and write ``path`` under its lock; returns what ``fn`` returned.

    ``fn`` receives the current value (or ``default``) and returns the new value; returning the
    sentinel :data:`DELETE` removes the record.
    """
    with locked(path):
        current = read_json(path, default)
        new = fn(current)
        if new is DELETE:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            write_json(path, new)
        return new


class _Delete:
    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "DELETE"


DELETE: Any = _Delete()


def remove(path: Path) -> bool:
    with locked(path):
        try:
            path.unlink()
            return True
        except FileNotFoundError:
            return False
