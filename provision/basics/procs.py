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
