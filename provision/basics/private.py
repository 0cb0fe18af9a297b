"""Files and directories only their owner can read: tpuctl's home on a machine others share.

``$TPUCTL_HOME`` holds run records, logs (a job's output can quote anything), the wheels, and the
local provider's buckets (the user's code, specs, checkpoints). Made with the process umask,
they would be 0644 files in 0755 directories, readable by every user of the machine. Everything
tpuctl creates there goes through these helpers instead: directories 0700 and files 0600 whatever
the umask (the mode is set again after creation, since ``mkdir`` and ``open`` apply the umask).
Directories that already exist are left as they are: tpuctl never changes the mode of a
directory it did not make (``$TPUCTL_HOME`` may be one the user shares on purpose).
"""

from __future__ import annotations

import os
from pathlib import Path

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
