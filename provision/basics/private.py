"""Files and directories only their owner can use: tpuctl's home on a machine others share.

Two rules live here. Everything tpuctl creates under ``$TPUCTL_HOME`` (run records, logs, which
can quote anything, wheels, the local provider's buckets with the user's code and checkpoints) is
made 0700 (directories) and 0600 (files) whatever the umask (:func:`make_dirs`, :func:`opener`);
directories that already exist keep their mode, since tpuctl never changes the mode of a
directory it did not make.

Where a host *runs* something the rule is stricter (:func:`private_dir`): a host's agent (root on
a GCP host) writes a job's spec and log and starts ``python -m jobs`` in its working directory,
which Python puts first on ``sys.path``. A directory at a predictable place another local user can
create first (``/tmp/tpuctl-work/...``) would let them plant a ``jobs/__init__.py`` that runs as
root, or a symlink that sends the log over a file of their choice. So these directories live
under ``$TPUCTL_HOME`` (``/var/lib/tpuctl`` on a host), each level made mode 0700 by this user,
and one that already exists is used only if it is a real directory (not a symlink) owned by this
user with no group or other permission bits.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import TpuctlError

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dirs(path: str | Path) -> Path:
    """``mkdir -p path`` whose every new directory (parents included) is 0700."""
    path = Path(path)
    missing = []
    cur = path
    while not cur.is_dir():
        missing.append(cur)
        if cur.parent == cur:
            break
        cur = cur.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue          # another process made it first: its mode is its maker's
        os.chmod(directory, DIR_MODE)
    return path


def opener(path: str, flags: int) -> int:
    """For ``open(path, mode, opener=opener)``: a file created 0600 (one that exists keeps its
    mode unless this process owns it)."""
    fd = os.open(path, flags, FILE_MODE)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd




class UnsafeDirectory(TpuctlError):
    """A directory tpuctl would run or log in is not private to this user."""


def _check(path: Path, *, strict: bool) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory (a symlink or a file): not using it",
                              hint=f"remove it; tpuctl makes it itself, mode 0700 (uid {os.geteuid()})")
    if st.st_uid != os.geteuid():
        raise UnsafeDirectory(f"{path} is owned by uid {st.st_uid}, not this user (uid {os.geteuid()}): not using it",
                              hint="remove it; tpuctl makes it itself, mode 0700")
    if strict and st.st_mode & 0o077:
        raise UnsafeDirectory(f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: not private to this user (0700)",
                              hint=f"chmod 700 {path}, or remove it")
    if st.st_mode & 0o002:
        raise UnsafeDirectory(f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: anyone may write into it",
                              hint=f"chmod o-w {path}, or remove it")


def private_dir(base: Path, *parts: str) -> Path:
    """``base/parts...``, every level below ``base`` made mode 0700 or checked to be private;
    ``base`` itself (``$TPUCTL_HOME``) must be this user's and not writable by others."""
    base = Path(base)
    if not base.exists():
        base.mkdir(mode=0o700, parents=True)
    _check(base, strict=False)
    path = base
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\0" in part:
            raise UnsafeDirectory(f"{part!r:.60} is not a plain directory name", hint="use a run or worker id")
        path = path / part
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        _check(path, strict=True)
    return path


def open_append(path: Path) -> int:
    """A file descriptor appending to ``path`` (created mode 0600), never through a symlink."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
