"""An emulated slice's own network: its hosts' TensorFlow servers are reachable from nowhere else.

The local provider emulates a multi-host slice with one process per host on this machine, joined
by ``MultiWorkerMirroredStrategy`` through ``TF_CONFIG`` (``127.0.0.1:PORT`` each). TensorFlow's
gRPC server has no bind-address option: it listens on every interface (``0.0.0.0``/``::``), and
whoever reaches this machine can open a session on it (``tf.compat.v1.Session("grpc://HOST:PORT")``)
and read and write files as the user. So the hosts of one slice run in a network namespace of
their own that has only a loopback interface: they reach each other on 127.0.0.1 there, and
nothing outside reaches them. The supervisor talks to them only through the bucket (a directory
here) and signals, which a network namespace does not affect; the hosts have no other network.

How one is made, on Linux: with ``CAP_SYS_ADMIN`` (root) ``unshare(CLONE_NEWNET)``; without it,
in a new unprivileged user namespace too (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``, the user
mapped to itself: like ``unshare -n`` run as root, or ``unshare -rn`` without the root mapping),
where the kernel allows that. The loopback interface is brought up with an ``SIOCSIFFLAGS`` ioctl
(no ``ip`` binary). The first host's agent makes the namespace (:func:`enter_new`); the others join
it through ``/proc/PID/ns/net``, checked by its inode (:func:`join`). :func:`available` asks a
child process whether this machine can do it; where it cannot (not Linux; not root and user
namespaces disabled: ``kernel.unprivileged_userns_clone=0``, AppArmor's
``kernel.apparmor_restrict_unprivileged_userns=1``, ``user.max_user_namespaces=0``, a container's
seccomp profile), the slice runs only if the user accepts what it exposes
(:func:`provision.runs.launch.slice_network` decides).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import socket
import struct
import subprocess
import sys
import time
from typing import Any

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PROBE_TIMEOUT_S = 20.0


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    if not sys.platform.startswith("linux") or not hasattr(libc, "unshare") or not hasattr(libc, "setns"):
        raise OSError(errno.ENOSYS, "network namespaces are a Linux feature")
    return libc


def _call(fn: Any, *args: int) -> None:
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter_new() -> None:
    """Move this process (single-threaded: call it first) into a new network namespace with only
    an up loopback interface; its children inherit it. Raises OSError where that is not allowed."""
    libc = _libc()
    try:
        _call(libc.unshare, CLONE_NEWNET)
    except PermissionError:
        uid, gid = os.geteuid(), os.getegid()
        _call(libc.unshare, CLONE_NEWUSER | CLONE_NEWNET)
        # the user stays itself inside (no root mapping): files it makes are still its own
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    _loopback_up()


def join(pid: int, inode: int) -> None:
    """Move this process (single-threaded) into the network namespace of ``pid`` -- the one whose
    inode is ``inode``, so a pid reused by another process is never joined -- and, when that
    namespace belongs to a user namespace of its own, into that first."""
    libc = _libc()
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if os.fstat(net).st_ino != inode:
            raise OSError(errno.ESRCH, f"process {pid} is no longer in the slice's network")
        user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        try:
            if os.fstat(user).st_ino != os.stat("/proc/self/ns/user").st_ino:
                _call(libc.setns, user, CLONE_NEWUSER)
        finally:
            os.close(user)
        _call(libc.setns, net, CLONE_NEWNET)
    finally:
        os.close(net)
    _loopback_up()


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def namespace_of(pid: int | str = "self") -> int:
    """The inode of the network namespace ``pid`` is in (``self``: this process)."""
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def wait_for_new(proc: subprocess.Popen, timeout: float = 60.0) -> int | None:
    """The inode of the network namespace ``proc`` made for itself (:func:`enter_new`), once it
    has; None if it exited first or did not within ``timeout`` seconds."""
    ours = namespace_of()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            inode = namespace_of(proc.pid)
        except OSError:
            return None
        if inode != ours:
            return inode
        time.sleep(0.01)
    return None


@functools.cache
def available() -> bool:
    """Whether a process here can make a private network for a slice: a child tries (namespaces
    are per process, and this one may be multi-threaded). Asked once per process."""
    try:
        _libc()
    except OSError:
        return False
    try:
        return subprocess.run([sys.executable, "-m", __name__, "probe"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=PROBE_TIMEOUT_S, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _probe() -> int:
    try:
        enter_new()
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_probe() if sys.argv[1:] == ["probe"] else 2)
