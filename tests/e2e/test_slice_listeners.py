"""A multi-host run listens exactly where its pinned launch says, and nowhere else.

An emulated v4-16 on the local provider (2 hosts: 2 processes joined by MultiWorkerMirroredStrategy
through ``TF_CONFIG``) trains a user's Keras model through the installed ``tpuctl train``. While it
trains, every process of the run (the supervisor, the hosts' attempt wrappers, the jobs) is read
from the kernel's socket tables (tests/netcheck.py): the only listening sockets are the jobs'
TensorFlow servers, each on the port its worker's ``TF_CONFIG`` names in the attempt's
``command.json`` -- the command whose launch digest is the one pinned in the hosts' metadata --
each job has the environment of that command, and each server is in the slice's own network,
whose only interface is loopback: nothing of the run listens on this machine's networks. A fake
cloud's TPU VM workers run no job (no TensorFlow server to read), so the emulated slice is where
the real servers are.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from provision.cloud import netns
from provision.runs.pins import KEY, Pin, launch_digest
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.e2e.test_keras_local import user_dir
from tests.netcheck import descendants, listeners, network_namespace

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("tf-e2e"),
              pytest.mark.skipif(not netns.available(), reason="this machine makes no network namespace: an "
                                 "emulated slice is refused here (tests/e2e/test_slice_network.py)")]


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    return dict(kv.decode(errors="replace").split("=", 1) for kv in raw.split(b"\0") if b"=" in kv)


def _interfaces(pid: int) -> set[str]:
    with open(f"/proc/{pid}/net/dev") as fh:
        return {line.split(":", 1)[0].strip() for line in fh.read().splitlines()[2:]}


def test_a_slices_servers_listen_only_where_its_pinned_command_says(tmp_path):
    home = Path(os.environ["TPUCTL_HOME"])
    code = user_dir(tmp_path)
    assert run_tpuctl_process("up", "pod", "-a", "v4-16", "--zone", "us-central2-b").code == 0
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "pod", "--job", str(code / "spec.yaml"), "--workdir", str(code),
                             "--set", "num_train_steps=400", "--poll", "1", "--json", "--on-interrupt", "stop"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs"
    seen: dict[str, tuple[int, dict[str, str], list]] = {}     # worker -> (job pid, its environ, its listeners)
    everyone: dict[int, list] = {}                            # every process of the run that listened
    command = None
    deadline = time.time() + 240
    try:
        while proc.poll() is None and time.time() < deadline and len(seen) < 2:
            time.sleep(0.3)
            found = sorted(runs.glob("*/attempts/1/command.json")) if runs.is_dir() else []
            if not found:
                continue
            command = json.loads(found[0].read_text())
            for pid in descendants(proc.pid):
                socks = listeners(pid) if os.path.exists(f"/proc/{pid}") else []
                if socks:
                    everyone[pid] = socks
                env = _environ(pid)
                if "TF_CONFIG" not in env or pid in {p for p, _e, _s in seen.values()}:
                    continue
                index = str(json.loads(env["TF_CONFIG"])["task"]["index"])
                port = int(json.loads(env["TF_CONFIG"])["cluster"]["worker"][int(index)].rsplit(":", 1)[1])
                if port in {s.port for s in socks}:          # its server is up: read it now
                    seen[index] = (pid, env, socks)
                    assert network_namespace(pid) != network_namespace(), f"worker {index} is in this machine's network"
                    assert _interfaces(pid) == {"lo"}, _interfaces(pid)
        # the run goes on to its end
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert len(seen) == 2, f"the hosts' servers were not seen listening: {err[-3000:]}"
    assert json.loads(out)["run"]["status"] == "finished", err[-3000:]
    run_id = found[0].parts[-4]

    # the command the hosts ran is the one whose launch is pinned in their metadata
    from provision.basics.config import home as tpuctl_home
    from provision.cloud.local import LocalProvider

    pinned = Pin.parse(LocalProvider(tpuctl_home()).metadata_of("vm", "", "pod").get(KEY)).entry("run", run_id)
    assert pinned is not None and pinned["launch"] == launch_digest(command)
    planned = {}
    for index, (pid, env, socks) in seen.items():
        named = command["workers"][index]["env"]
        assert command["workers"][index]["run"] and env["TF_CONFIG"] == named["TF_CONFIG"]
        assert env["TPUCTL_DEVICE"] == named["TPUCTL_DEVICE"] == "cpu"
        cluster = json.loads(named["TF_CONFIG"])["cluster"]["worker"]
        host, port = cluster[int(index)].rsplit(":", 1)
        assert host == "127.0.0.1"
        planned[index] = int(port)
        # its one listener: its own TF_CONFIG port (on every interface of a network whose only one is loopback)
        assert [(s.address, s.port) for s in socks] in ([("0.0.0.0", int(port))], [("::", int(port))]), socks
    assert sorted(planned) == ["0", "1"] and len(set(planned.values())) == 2
    # no other process of the run listened anywhere: the supervisor and the wrappers open no server
    jobs = {pid for pid, _e, _s in seen.values()}
    assert {pid: socks for pid, socks in everyone.items() if pid not in jobs} == {}, everyone
