"""Which process is alive, and which one is tpuctl's autodown agent: the one home of both facts
(the local provider records agents, the host code starts and stops them)."""

from __future__ import annotations

import os

# The module the local provider's autodown agent runs as (``python -m``): how a pid is recognised.
AUTODOWN_MODULE = "provision.host.autodown"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still answers kill(0); treat it as gone
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def is_autodown_agent(pid: int) -> bool:
    """A live tpuctl autodown agent (checked by command line, so a reused pid is never signalled)."""
    if not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return AUTODOWN_MODULE.encode() in fh.read()
    except OSError:
        return True  # no /proc (macOS): trust the live pid


def _table() -> list[tuple[int, int, int, str]]:
    """(pid, ppid, pgid, state) of every process this user may see: /proc on Linux (the hosts),
    ``ps`` elsewhere (a laptop's local provider). Empty when neither answers."""
    rows = []
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    rest = fh.read().rsplit(") ", 1)[1].split()
                rows.append((int(entry), int(rest[1]), int(rest[2]), rest[0]))
            except (OSError, IndexError, ValueError):
                continue
        return rows
    import subprocess

    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,pgid=,stat="], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit() and parts[2].isdigit():
            rows.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3][:1]))
    return rows


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies left out) of process group ``pgid``: a program's group after
    its leader exited still holds whatever it started and did not wait for."""
    return [pid for pid, _ppid, group, state in _table() if group == pgid and state != "Z"]


def child_groups(pids: list[int]) -> list[int]:
    """The process groups that children of ``pids`` lead apart from their parent's own (a job's
    program runs in a session of its own under the attempt wrapper): what must die with them
    when their "VM" does."""
    wanted = set(pids)
    table = _table()
    group_of = {pid: group for pid, _ppid, group, _state in table}
    return sorted({group for pid, ppid, group, state in table
                   if ppid in wanted and state != "Z" and group == pid and group != group_of.get(ppid)})


def wait_for_group(pgid: int, deadline: float) -> bool:
    """Wait until group ``pgid`` has no live process or ``time.monotonic()`` passes ``deadline``;
    whether it emptied."""
    import time

    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
