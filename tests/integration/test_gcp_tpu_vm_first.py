"""TPU VMs are the architecture: Google refuses new TPU Nodes (2025), and v1 may be closed or gone.

The installed ``tpuctl`` as a subprocess against the fake cloud. The fake refuses v1 Node creates
to every project not granted Node access, as Google does (FAILED_PRECONDITION, HTTP 400: "Your
request to provision TPU Node has been denied. Please migrate to TPU VM Architecture or contact
Cloud TPU team to gain TPU Node access.", quoted in skypilot-org/skypilot#5593), and can make the
v1 surface answer 404 (gone) or 403 (closed). The v2 API lists every node, a Node included with
``apiVersion`` V1 ("The API version that created this Node": API_VERSION_UNSPECIFIED, V1_ALPHA1,
V1, V2_ALPHA1, V2 in gcloud 528's tpu v2 API definitions and google-cloud-tpu's ``tpu_v2.Node``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_tpuctl_process

ZONE = "us-central1-b"


def _v1_calls(fake, since: int = 0) -> list[str]:
    return [f"{c['method']} {c['path']}" for c in fake.calls(since) if c["call"].startswith("tpu.v1.")]


def _last_seq(fake) -> int:
    calls = fake.calls()
    return calls[-1]["seq"] if calls else 0


def test_a_tpu_vm_cluster_never_calls_v1(fakegcp_env):
    fake = fakegcp_env
    up = run_tpuctl_process("up", "vmc", "--zone", ZONE, "--arch", "vm", "--preemptible", "--json")
    assert up.code == 0, up.err
    assert up.json()["tpu"]["arch"] == "vm" and up.json()["vm"]["state"] == "RUNNING"
    status = run_tpuctl_process("status", "vmc", "--json")
    assert status.code == 0, status.err
    [view] = status.json()["clusters"]
    assert view["tpu"]["state"] == "READY" and view["vm"]["state"] == "RUNNING"
    assert run_tpuctl_process("status", "--json").code == 0
    down = run_tpuctl_process("down", "vmc", "--json")
    assert down.code == 0, down.err
    assert _v1_calls(fake) == []
    assert not [c for c in fake.calls() if c["transport"] == "grpc"]
    assert fake.resources()["nodes"] == [] and fake.resources()["instances"] == []


@pytest.mark.parametrize("status", [404, 403])
def test_tpu_vm_clusters_work_when_v1_is_gone_or_closed(fakegcp_env, status):
    """A TPU Node made while v1 served stays visible (its v2 view) once v1 answers 404 or 403;
    TPU VM clusters come up, show and go without a single v1 call."""
    fake = fakegcp_env
    fake.allow_tpu_nodes()
    legacy = run_tpuctl_process("up", "legacy", "--zone", ZONE, "--arch", "node", "--json")
    assert legacy.code == 0, legacy.err
    fake.tpu_v1_unavailable(status)
    seq = _last_seq(fake)

    up = run_tpuctl_process("up", "vmc", "--zone", ZONE, "--arch", "vm", "--no-vm", "--json")
    assert up.code == 0, up.err
    one = run_tpuctl_process("status", "vmc", "--json")
    assert one.code == 0, one.err
    assert [c["name"] for c in one.json()["clusters"]] == ["vmc"]
    down = run_tpuctl_process("down", "vmc", "--json")
    assert down.code == 0, down.err
    assert down.json()["deleted"] == ["TPU vmc (us-central1-b)"]
    assert _v1_calls(fake, seq) == []

    # every cluster: the Node is shown from its v2 view (v1 may be asked, and may refuse)
    every = run_tpuctl_process("status", "--json")
    assert every.code == 0, every.err
    [node] = every.json()["clusters"]
    assert node["name"] == "legacy" and node["tpu"]["arch"] == "node" and node["tpu"]["state"] == "READY"
    assert node["tpu"]["cidr_block"] == legacy.json()["cidr"]
    # and it can still be deleted: v2 deletes a node of either architecture
    gone = run_tpuctl_process("down", "legacy", "--json")
    assert gone.code == 0, gone.err
    assert fake.resources()["nodes"] == [] and fake.resources()["instances"] == []


def test_tpu_node_refused_in_one_line_naming_arch_vm_and_nothing_left(fakegcp_env):
    fake = fakegcp_env
    r = run_tpuctl_process("up", "old", "--zone", ZONE, "--arch", "node", "--preemptible")
    assert r.code == 1
    errors = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(errors) == 1 and "--arch vm" in errors[0] and "TPU Node" in errors[0], r.err
    assert "Traceback" not in r.err
    counts = fake.call_counts()
    assert counts.get("tpu.v1.nodes.create") == 1
    assert "compute.instances.insert" not in counts         # the host is asked for after the TPU
    res = fake.resources()
    assert res["nodes"] == [] and res["instances"] == []
    # its range reservation was released
    status = run_tpuctl_process("status", "--json")
    assert status.code == 0 and status.json()["clusters"] == []
    from tests.integration.reservations import range_reservations

    assert "old" not in range_reservations(fake)


def test_tpu_node_created_when_the_project_kept_node_access(fakegcp_env):
    fake = fakegcp_env
    fake.allow_tpu_nodes()
    r = run_tpuctl_process("up", "old", "--zone", ZONE, "--arch", "node", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["tpu"]["arch"] == "node" and doc["tpu"]["version"] == "2.16.1" and doc["cidr"]
    assert fake.call_counts()["tpu.v1.nodes.create"] == 1
    status = run_tpuctl_process("status", "old", "--json")
    assert status.json()["clusters"][0]["tpu"]["version"] == "2.16.1"    # the Node's own (v1) view
    assert run_tpuctl_process("down", "old").code == 0
    assert fake.resources()["nodes"] == []


def test_status_of_a_tpu_vm_cluster_loads_no_generated_client(fakegcp_env):
    """`status NAME` reads VMs, TPUs of both APIs and queued resources (which hold quota without a
    node), all at once: it imports neither Compute's nor the TPU's generated clients, nor
    gRPC, nor (when every call succeeds) google-api-core's exceptions."""
    fake = fakegcp_env
    assert run_tpuctl_process("up", "vmc", "--zone", ZONE, "--no-vm").code == 0
    fake.clear_calls()
    code = ("import sys\nfrom provision.cli import main\n"
            "rc = main(['status', 'vmc', '--provider', 'gcp', '--json'])\n"
            "print(json.dumps({'rc': rc, 'modules': sorted(sys.modules)}))")
    proc = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    heavy = [m for m in doc["modules"] if m.startswith(("google.cloud", "grpc", "google.api_core.exceptions",
                                                        "proto", "tenacity"))]
    assert heavy == []
    # the cluster's instances in one list (its host VM and any Compute Engine TPU workers) and its
    # Cloud TPU node read where the cluster cache says it is: found there, no Compute Engine slice
    # list and (made without --queued) no queued resources are asked for (status NAME in 2 requests)
    assert fake.call_counts() == {"tpu.v2.nodes.get": 1, "compute.instances.aggregatedList": 1}
