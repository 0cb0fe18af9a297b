"""What a process listens on, read from the kernel's socket table of its network namespace
(``/proc/PID/net/tcp`` and ``tcp6``: the sockets of the namespace the process is in), matched to the
process by the socket inodes among its open files. Nothing is sent anywhere: a listener is judged
by the address it is bound to and the namespace it is in."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    address: str
    port: int

    @property
    def loopback_only(self) -> bool:
        ip = ipaddress.ip_address(self.address)
        mapped = getattr(ip, "ipv4_mapped", None)
        return (mapped or ip).is_loopback


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[len("socket:["):-1]))
    return out


def _address(hex_addr: str) -> str:
    if len(hex_addr) == 8:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(hex_addr, 16)))
    words = [struct.pack("<I", int(hex_addr[i:i + 8], 16)) for i in range(0, 32, 8)]
    return socket.inet_ntop(socket.AF_INET6, b"".join(words))


def listeners(pid: int) -> list[Listener]:
    """The TCP sockets ``pid`` listens on, IPv4 and IPv6."""
    mine = _socket_inodes(pid)
    out = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as fh:
                rows = fh.read().splitlines()[1:]
        except FileNotFoundError:          # no IPv6 in this kernel
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == LISTEN and inode in mine:
                hex_addr, hex_port = local.split(":")
                out.append(Listener(_address(hex_addr), int(hex_port, 16)))
    return out


def network_namespace(pid: int | str = "self") -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def exposed(pid: int) -> list[Listener]:
    """``pid``'s listeners that anyone on this machine's networks could reach: bound beyond
    loopback, in this machine's own network namespace (ours)."""
    if network_namespace(pid) != network_namespace():
        return []
    return [sock for sock in listeners(pid) if not sock.loopback_only]


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from the parent of each process in /proc: the
    processes of a run whose listeners a test reads."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out
