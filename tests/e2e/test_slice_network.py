"""An emulated multi-host slice's hosts run in a network of their own (provision/cloud/netns.py):
TensorFlow's gRPC server listens on every interface, so outside such a network anyone who reaches
this machine could use it. Here, with plain processes standing in for the hosts' servers (the
chaos slices test checks TensorFlow's own, tests/chaos/slices.py): the first host makes the
network, the second joins it and reaches the first on 127.0.0.1, and the listener bound to
0.0.0.0 is in no network but theirs -- read from the socket table, nothing sent beyond loopback.
Where no such network can be made (a user namespace with nested ones disabled and no
capability, made here for the installed tpuctl), `up` of a slice is one line, exit 2, unless
TPUCTL_SLICE_GRPC_ON_ALL_INTERFACES=1 accepts the exposure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.basics.config import home
from provision.cloud import netns
from tests.conftest import REPO, TPUCTL_BIN
from tests.netcheck import exposed, listeners, network_namespace

HOST = """
import socket, sys
from provision.cloud import netns
netns.{how}
if sys.argv[1] == "serve":
    server = socket.socket()
    server.bind(("0.0.0.0", 0))          # as TensorFlow's server binds
    server.listen()
    print(server.getsockname()[1], flush=True)
    conn, _ = server.accept()
    conn.sendall(b"hello from host 0")
    conn.recv(1)
else:
    with socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10) as conn:
        print(conn.recv(100).decode(), flush=True)
"""


def _host(how: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOST.format(how=how), *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.skipif(not netns.available(), reason="this machine makes no network namespace: "
                                                  "test_a_slice_is_refused_where_no_private_network_can_be_made")
def test_the_hosts_of_a_slice_share_a_network_that_only_they_are_in():
    first = _host("enter_new()", "serve")
    try:
        inode = netns.wait_for_new(first)
        assert inode is not None and inode != network_namespace(), first.stderr.read() if first.poll() else ""
        port = int(first.stdout.readline())
        assert [(s.address, s.port) for s in listeners(first.pid)] == [("0.0.0.0", port)]
        assert exposed(first.pid) == []                    # bound to every interface, of a network only it has
        with pytest.raises(OSError):
            netns.join(first.pid, inode + 1)               # a pid reused by another process is never joined
        second = _host(f"join({first.pid}, {inode})", "connect", str(port))
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0 and out.strip() == "hello from host 0", err   # 127.0.0.1 of their network
    finally:
        first.kill()
        first.wait()


# A user namespace of this test's user in which no namespace can be made (nested user namespaces
# are limited to 0 there, and no capability is left), then the installed tpuctl in it.
NO_NAMESPACES = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.geteuid(), os.getegid()
if libc.unshare(0x10000000) == 0:                       # CLONE_NEWUSER
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("0")
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)                      # PR_CAPBSET_DROP: exec gets no capability
os.execv(sys.argv[1], sys.argv[1:])
"""


def _tpuctl_without_namespaces(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_NAMESPACES, str(TPUCTL_BIN), *args, "--provider", "local"],
                          cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_slice_is_refused_where_no_private_network_can_be_made():
    probe = subprocess.run([sys.executable, "-c", NO_NAMESPACES, sys.executable, "-m", "provision.cloud.netns",
                            "probe"], cwd=REPO, capture_output=True, check=False)
    assert probe.returncode == 1, probe.stderr          # the machine as the refusal is about
    refused = _tpuctl_without_namespaces("up", "pod", "-a", "v4-16", "--zone", "us-central2-b")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        "tpuctl: error: an emulated v4-16 runs a TensorFlow gRPC server for each of its 2 hosts, on every network "
        "interface of this machine, and this machine cannot give them a network of their own (a Linux network "
        "namespace: root, or unprivileged user namespaces); whoever reaches this machine could then read and "
        "write your files through them: use a one-host type such as v2-8, or set "
        "TPUCTL_SLICE_GRPC_ON_ALL_INTERFACES=1 to accept that")
    assert not (home() / "local" / "tpus").exists()      # nothing was created
    assert _tpuctl_without_namespaces("up", "one", "-a", "v2-8").returncode == 0    # one host opens no server
    accepted = _tpuctl_without_namespaces("up", "pod", "-a", "v4-16", "--zone", "us-central2-b", "--json",
                                          env={"TPUCTL_SLICE_GRPC_ON_ALL_INTERFACES": "1"})
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["tpu"]["accelerator_type"] == "v4-16"
    assert Path(home() / "local" / "tpus").is_dir()
