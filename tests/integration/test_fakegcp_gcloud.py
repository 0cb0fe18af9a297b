"""Google's own gcloud CLI against the fake: the proof that it speaks the real wire protocol.

gcloud takes a second or more per call, so the three lifecycles (TPU VM, TPU Node, instance) run
side by side, each through create, describe, list and delete.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

ZONE = "us-central1-b"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud (google-cloud-cli) is not installed")]


def test_gcloud_creates_describes_lists_and_deletes(fakegcp, tmp_path):
    fakegcp.set_latencies(tpu_create=0.3, tpu_delete=0.2, vm_create=0.3, vm_delete=0.2)
    fakegcp.allow_tpu_nodes()       # `compute tpus create` makes a TPU Node: a project that kept access
    env = {**os.environ, **fakegcp.gcloud_config(tmp_path / "gcloud")}

    def gcloud(*args: str) -> str:
        proc = subprocess.run(["gcloud", *args], check=False, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"gcloud {' '.join(args)} failed:\n{proc.stderr}"
        return proc.stdout

    def lifecycle(group: list[str], name: str, create: list[str]) -> tuple[dict, list]:
        where = f"--zone={ZONE}"
        listing = f"--zones={ZONE}" if group[-1] == "instances" else where
        gcloud(*group, "create", name, where, *create)
        described = json.loads(gcloud(*group, "describe", name, where, "--format=json"))
        listed = json.loads(gcloud(*group, "list", listing, "--format=json"))
        gcloud(*group, "delete", name, where, "--quiet")
        return described, listed

    flows = {
        "tpu-vm": (["compute", "tpus", "tpu-vm"], "bert-vm",
                   ["--accelerator-type=v2-8", "--version=tpu-vm-tf-2.16.1-pjrt", "--preemptible",
                    "--labels=tpuctl-cluster=bert"]),
        "tpu-node": (["compute", "tpus"], "bert-node",
                     ["--accelerator-type=v2-8", "--version=2.12.0", "--range=10.240.1.0/29", "--preemptible"]),
        "instance": (["compute", "instances"], "bert-host",
                     ["--machine-type=n1-standard-2", "--labels=tpuctl-cluster=bert"]),
    }
    with ThreadPoolExecutor(len(flows)) as pool:
        futures = {key: pool.submit(lifecycle, *flow) for key, flow in flows.items()}
        results = {key: f.result() for key, f in futures.items()}

    vm, vm_list = results["tpu-vm"]
    assert (vm["state"], vm["acceleratorType"], vm["apiVersion"]) == ("READY", "v2-8", "V2")
    assert vm["schedulingConfig"] == {"preemptible": True} and vm["labels"] == {"tpuctl-cluster": "bert"}
    assert vm["name"].endswith("/nodes/bert-vm") and vm["networkEndpoints"][0]["port"] == 8470

    node, node_list = results["tpu-node"]
    assert (node["state"], node["cidrBlock"], node["tensorflowVersion"]) == ("READY", "10.240.1.0/29", "2.12.0")
    assert node["networkEndpoints"] == [{"ipAddress": "10.240.1.2", "port": 8470}]

    host, host_list = results["instance"]
    assert host["status"] == "RUNNING" and host["labels"] == {"tpuctl-cluster": "bert"}
    assert [i["name"] for i in host_list] == ["bert-host"]

    # Each TPU list ran while its own node existed (the other flow's node may or may not have).
    assert any(n["name"].endswith("/bert-vm") for n in vm_list)
    assert any(n["name"].endswith("/bert-node") for n in node_list)
    left = fakegcp.resources()
    assert left["nodes"] == [] and left["instances"] == [], "gcloud's deletes did not complete"

    counts = fakegcp.call_counts()
    for call in ("tpu.v2.nodes.create", "tpu.v2.nodes.delete", "tpu.v1.nodes.create", "tpu.v1.nodes.delete",
                 "compute.instances.insert", "compute.instances.delete"):
        assert counts.get(call) == 1, (call, counts)
    assert not [c for c in fakegcp.calls() if c["status"] >= 400], "gcloud hit an error or an unknown path"


def test_gcloud_reports_a_refused_tpu_node_as_google_does(fakegcp, tmp_path):
    """Since 2025 Google refuses new TPU Nodes to projects without Node access. gcloud's output, as
    pasted in skypilot-org/skypilot#5593:

        ERROR: (gcloud.compute.tpus.create) FAILED_PRECONDITION: Your request to provision TPU Node
        has been denied. Please migrate to TPU VM Architecture or contact Cloud TPU team to gain TPU
        Node access. https://cloud.google.com/tpu/docs/system-architecture-tpu-vm#from-tpu-node-to-tpu-vm
    """
    env = {**os.environ, **fakegcp.gcloud_config(tmp_path / "gcloud")}
    proc = subprocess.run(["gcloud", "compute", "tpus", "create", "refused", f"--zone={ZONE}",
                           "--accelerator-type=v2-8", "--version=2.12.0", "--network=default"],
                          check=False, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert ("ERROR: (gcloud.compute.tpus.create) FAILED_PRECONDITION: Your request to provision TPU Node has "
            "been denied. Please migrate to TPU VM Architecture or contact Cloud TPU team to gain TPU Node access."
            in " ".join(proc.stderr.split())), proc.stderr
    assert fakegcp.resources()["nodes"] == []
