"""The fake cloud as a process: command line, ready line, the environment it hands to tpuctl, and
correctness under the concurrent calls that eight parallel ``tpuctl up`` make."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1, tpu_v1, tpu_v2

from tests.fakegcp import clients
from tests.fakegcp.clients import FAST_POLLING
from tests.fakegcp.fixture import REPO

ZONE = "us-central1-b"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_standalone_server_prints_exactly_one_ready_line_on_the_requested_ports():
    port, grpc_port = _free_port(), _free_port()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakegcp", "--port", str(port),
                             "--grpc-port", str(grpc_port)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        startup = time.monotonic() - started
        # its CPU time to get there (0.6 s here): unlike the wall time (0.7 s on a quiet machine,
        # 3.2 s once among make test's four workers on two cores) it does not grow with the load
        with open(f"/proc/{proc.pid}/stat") as fh:
            ticks = fh.read().rsplit(")", 1)[1].split()
        cpu = (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")
        assert line == f"ready http://127.0.0.1:{port} grpc=127.0.0.1:{grpc_port}\n"
        url = f"http://127.0.0.1:{port}/v2/projects/p/locations/{ZONE}/nodes"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.status == 200 and json.loads(resp.read()) == {}
        assert cpu < 2.0, f"server took {cpu:.2f}s of CPU to start ({startup:.2f}s of wall time)"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out == "", "nothing but the ready line may be printed"


def test_env_points_every_client_library_at_the_fake(fakegcp):
    env = fakegcp.env()
    assert env == {
        "TPUCTL_PROVIDER": "gcp",
        "TPUCTL_PROJECT": fakegcp.project,
        "TPUCTL_CREDENTIALS": "anonymous",
        "TPUCTL_TPU_API_ENDPOINT": fakegcp.url,
        "TPUCTL_COMPUTE_API_ENDPOINT": fakegcp.url,
        "TPUCTL_TPU_GRPC_ENDPOINT": fakegcp.grpc_target,
        "TPUCTL_IAM_API_ENDPOINT": fakegcp.url,
        "TPUCTL_BILLING_API_ENDPOINT": fakegcp.url,
        "TPUCTL_MONITORING_API_ENDPOINT": fakegcp.url,
    }
    parent = f"projects/{fakegcp.project}/locations/{ZONE}"
    assert list(clients.tpu_v2(fakegcp).list_nodes(parent=parent)) == []
    assert list(clients.tpu_v1(fakegcp).list_nodes(parent=parent)) == []
    zones = clients.compute(compute_v1.ZonesClient, fakegcp).list(project=fakegcp.project)
    assert ZONE in {z.name for z in zones}
    counts = fakegcp.call_counts()
    assert counts == {"tpu.v2.nodes.list": 1, "tpu.v1.nodes.list": 1, "compute.zones.list": 1}


def test_compute_endpoint_is_the_bare_base_url(fakegcp):
    """google-cloud-compute's paths carry /compute/v1; an endpoint ending in it doubles the path."""
    from google.auth.credentials import AnonymousCredentials
    wrong = compute_v1.ZonesClient(client_options={"api_endpoint": f"{fakegcp.url}/compute/v1/"},
                                   credentials=AnonymousCredentials())
    with pytest.raises(gexc.NotFound):
        wrong.get(project=fakegcp.project, zone=ZONE)
    (call,) = fakegcp.calls()
    assert call["call"] == "unknown" and call["path"].startswith("/compute/v1//compute/v1/projects/")


def test_fakegcp_env_fixture_exports_the_environment(fakegcp_env):
    import os
    assert {k: os.environ[k] for k in fakegcp_env.env()} == fakegcp_env.env()


def test_reset_forgets_resources_faults_and_calls(fakegcp):
    v2 = clients.tpu_v2(fakegcp)
    parent = f"projects/{fakegcp.project}/locations/{ZONE}"
    v2.create_node(parent=parent, node_id="left-over", node=tpu_v2.Node(
        accelerator_type="v2-8", runtime_version="tpu-vm-tf-2.16.1-pjrt"))
    fakegcp.stockout(ZONE)
    fakegcp.reset()
    assert list(v2.list_nodes(parent=parent)) == []
    assert fakegcp.resources()["faults"]["stockouts"] == []
    assert fakegcp.call_counts() == {"tpu.v2.nodes.list": 1}


def test_dedicated_server_scales_latencies(fakegcp_factory):
    slow = fakegcp_factory(latency_scale=3)
    assert slow.latencies()["scale"] == 3
    v2 = clients.tpu_v2(slow)
    parent = f"projects/{slow.project}/locations/{ZONE}"
    slow.set_latencies(tpu_create=0.2)
    started = time.monotonic()
    v2.create_node(parent=parent, node_id="n", node=tpu_v2.Node(
        accelerator_type="v2-8", runtime_version="tpu-vm-tf-2.16.1-pjrt")).result(timeout=10, polling=FAST_POLLING)
    assert time.monotonic() - started >= 0.6


def test_concurrent_creates_of_one_name_admit_exactly_one(fakegcp):
    fakegcp.set_latencies(tpu_create=0.2)
    parent = f"projects/{fakegcp.project}/locations/{ZONE}"

    def create(_: int) -> str:
        try:
            clients.tpu_v2(fakegcp).create_node(parent=parent, node_id="same", node=tpu_v2.Node(
                accelerator_type="v2-8", runtime_version="tpu-vm-tf-2.16.1-pjrt"))
            return "created"
        except gexc.Conflict as exc:  # REST maps by HTTP status: 409 is Conflict, not AlreadyExists
            assert exc.response.json()["error"]["status"] == "ALREADY_EXISTS"
            return "exists"

    with ThreadPoolExecutor(8) as pool:
        outcomes = sorted(pool.map(create, range(8)))
    assert outcomes == ["created"] + ["exists"] * 7


@pytest.mark.parametrize("how", ["tpu-node", "address"])
def test_concurrent_claims_of_one_range_admit_exactly_one(fakegcp, how):
    """Eight tpuctl processes racing for 10.240.9.0/29: the fake decides atomically."""
    fakegcp.set_latencies(tpu_create=0.3, address_create=0.1)
    fakegcp.allow_tpu_nodes()
    project = fakegcp.project

    def claim(i: int) -> bool:
        if how == "tpu-node":
            op = clients.tpu_v1(fakegcp).create_node(
                parent=f"projects/{project}/locations/{ZONE}", node_id=f"racer-{i}",
                node=tpu_v1.Node(accelerator_type="v2-8", tensorflow_version="2.12.0",
                                 cidr_block="10.240.9.0/29"))
            try:
                op.result(timeout=20, polling=FAST_POLLING)
                return True
            except gexc.InvalidArgument as exc:
                assert "conflicts with another subnet or object" in exc.message
                return False
        addresses = clients.compute(compute_v1.GlobalAddressesClient, fakegcp)
        ops = clients.compute(compute_v1.GlobalOperationsClient, fakegcp)
        op = addresses.insert(project=project, address_resource=compute_v1.Address(
            name=f"racer-{i}", address="10.240.9.0", prefix_length=29, address_type="INTERNAL",
            purpose="VPC_PEERING", network=f"projects/{project}/global/networks/default"))
        done = ops.wait(project=project, operation=op.name)
        assert done.status == compute_v1.Operation.Status.DONE
        return not done.error.errors

    with ThreadPoolExecutor(8) as pool:
        winners = sum(pool.map(claim, range(8)))
    assert winners == 1
