"""A pod slice's workers must reach each other through the network's firewall: checked before
``up`` creates anything, fixed on request with ``--create-firewall-rule``, undone by ``down``.

The installed ``tpuctl`` runs as a subprocess against the fake cloud, whose ``default`` network
carries Google's prepopulated rules and whose other networks start with none (docs/fakegcp.md;
tests/fakegcp/firewalls.py cites both). The fake's firewall surface is also read and written
with Google's own client (google-cloud-compute ``FirewallsClient``), so its shapes are the ones
the library parses.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

from tests.fakegcp import clients

ZONE = "us-central2-b"          # v4: a v4-16 is 2 hosts, a v4-8 one
SUBNET = "10.10.0.0/24"


@pytest.fixture
def lab_net(fakegcp_env):
    fakegcp_env.admin("POST", "networks", {"name": "lab-net", "autoCreateSubnetworks": False})
    fakegcp_env.admin("POST", "subnetworks", {"name": "lab-sub", "network": "lab-net", "region": "us-central2",
                                              "ipCidrRange": SUBNET})
    return fakegcp_env


def _firewalls(fake) -> dict[str, dict]:
    return {f["name"]: f for f in fake.resources()["firewalls"]}


def _nodes(fake) -> list[str]:
    return [n["name"].rsplit("/", 1)[-1] for n in fake.resources()["nodes"]]


def test_a_pod_slice_on_a_network_that_cuts_its_workers_off_is_refused_before_anything_is_created(
        lab_net, tpuctl_process):
    before = _firewalls(lab_net)
    r = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm",
                       "--network", "lab-net")
    assert r.code == 2, r.err
    lines = [line for line in r.err.splitlines() if line.startswith("tpuctl: error:")]
    assert len(lines) == 1, r.err
    assert "firewall of network lab-net keeps the workers of a v4-16 from reaching each other" in lines[0]
    assert "tcp:1-65535 not allowed by any rule, from 10.10.0.0/24" in lines[0]
    assert ("gcloud compute firewall-rules create tpuctl-pod-workers --project tpuctl-test --network lab-net "
            "--direction INGRESS --action ALLOW --rules tcp:0-65535,udp:0-65535,icmp --source-ranges 10.10.0.0/24"
            ) in lines[0]
    assert "--create-firewall-rule" in lines[0]
    assert _nodes(lab_net) == [] and _firewalls(lab_net) == before
    assert "tpu.v2.nodes.create" not in lab_net.call_counts()


def test_the_flag_creates_the_rule_up_succeeds_and_down_deletes_it(lab_net, tpuctl_process):
    dry = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm",
                         "--network", "lab-net", "--create-firewall-rule", "--dry-run")
    assert dry.code == 0, dry.err
    assert "would create firewall rule tpuctl-pod-workers on network lab-net" in dry.out
    assert "tpuctl-pod-workers" not in _firewalls(lab_net)

    r = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm",
                       "--network", "lab-net", "--create-firewall-rule", "--json")
    assert r.code == 0, r.err
    rule = _firewalls(lab_net)["tpuctl-pod-workers"]
    assert rule["network"].endswith("/projects/tpuctl-test/global/networks/lab-net")
    assert rule["direction"] == "INGRESS" and rule["sourceRanges"] == [SUBNET] and rule["priority"] == 1000
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": ["0-65535"]},
                               {"IPProtocol": "udp", "ports": ["0-65535"]}, {"IPProtocol": "icmp"}]
    assert "tpuctl-cluster=pod" in rule["description"]
    assert any("firewall rule tpuctl-pod-workers" in n for n in r.json()["notes"])
    assert _nodes(lab_net) == ["pod"]
    # a re-run adopts the cluster: the rule is there, nothing more is made
    again = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm",
                           "--network", "lab-net", "--create-firewall-rule", "--json")
    assert again.code == 0, again.err
    assert lab_net.call_counts().get("compute.firewalls.insert") == 1

    planned = tpuctl_process("down", "pod", "--dry-run", "--json")
    assert planned.code == 0 and "firewall rule tpuctl-pod-workers" in planned.json()["deleted"]
    assert "tpuctl-pod-workers" in _firewalls(lab_net)
    down = tpuctl_process("down", "pod", "--json")
    assert down.code == 0, down.err
    assert "firewall rule tpuctl-pod-workers" in down.json()["deleted"]
    assert "tpuctl-pod-workers" not in _firewalls(lab_net)


def test_a_refused_rule_names_the_role_that_carries_the_permission(lab_net, tpuctl_process):
    """Compute refuses firewalls.insert in its legacy words ("Required 'compute.firewalls.create'
    permission for ..."): the fix is roles/compute.securityAdmin, not roles/compute.instanceAdmin.v1."""
    lab_net.deny("compute.firewalls.create")
    r = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm",
                       "--network", "lab-net", "--create-firewall-rule")
    assert r.code == 1, r.err
    lines = [line for line in r.err.splitlines() if line.startswith("tpuctl: error:")]
    assert len(lines) == 1, r.err
    assert "Required 'compute.firewalls.create' permission for 'projects/tpuctl-test/global/firewalls'" in lines[0]
    assert "grant roles/compute.securityAdmin (it carries compute.firewalls.create)" in lines[0], lines[0]
    assert "instanceAdmin" not in lines[0]
    assert _nodes(lab_net) == [] and "tpuctl-pod-workers" not in _firewalls(lab_net)


def test_a_single_host_slice_needs_no_check(lab_net, tpuctl_process):
    r = tpuctl_process("up", "one", "--zone", ZONE, "--accelerator-type", "v4-8", "--no-vm",
                       "--network", "lab-net", "--json")
    assert r.code == 0, r.err
    assert "compute.firewalls.list" not in lab_net.call_counts()


def test_the_default_network_passes_until_its_internal_rule_is_deleted(fakegcp_env, tpuctl_process):
    from google.cloud import compute_v1

    rules = clients.compute(compute_v1.FirewallsClient, fakegcp_env)
    listed = {f.name: f for f in rules.list(project=fakegcp_env.project)}
    assert sorted(listed) == ["default-allow-icmp", "default-allow-internal", "default-allow-rdp",
                              "default-allow-ssh"]
    internal = listed["default-allow-internal"]
    assert list(internal.source_ranges) == ["10.128.0.0/9"] and internal.priority == 65534
    assert [(a.I_p_protocol, list(a.ports)) for a in internal.allowed] == [
        ("tcp", ["0-65535"]), ("udp", ["0-65535"]), ("icmp", [])]
    # dry runs: the check reads the rules and creates nothing
    ok = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm", "--dry-run")
    assert ok.code == 0, ok.err

    op = rules.delete(project=fakegcp_env.project, firewall="default-allow-internal")
    ops = clients.compute(compute_v1.GlobalOperationsClient, fakegcp_env)
    while ops.get(project=fakegcp_env.project, operation=op.name).status != compute_v1.Operation.Status.DONE:
        pass
    cut = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm", "--dry-run")
    assert cut.code == 2 and "firewall of network default" in cut.err and "10.130.0.0/20" in cut.err


def test_an_up_that_fails_after_creating_the_rule_takes_it_back(lab_net, tpuctl_process):
    lab_net.stockout(ZONE)          # the slice cannot be had: up rolls back what it made
    r = tpuctl_process("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm",
                       "--network", "lab-net", "--create-firewall-rule", "--timeout", "20s")
    assert r.code == 1, r.err
    assert lab_net.call_counts().get("compute.firewalls.insert") == 1
    assert "tpuctl-pod-workers" not in _firewalls(lab_net) and _nodes(lab_net) == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud (google-cloud-cli) is not installed")
def test_the_gcloud_command_up_names_is_the_fix(lab_net, tpuctl_process, tmp_path):
    """The command in the refusal, run by Google's gcloud against the fake, makes up succeed."""
    args = ("up", "pod", "--zone", ZONE, "--accelerator-type", "v4-16", "--no-vm", "--network", "lab-net")
    refused = tpuctl_process(*args)
    assert refused.code == 2, refused.err
    command = re.search(r"create the rule: (gcloud [^(]+?) \(or re-run", refused.err).group(1)
    env = {**os.environ, **lab_net.gcloud_config(tmp_path / "gcloud")}
    proc = subprocess.run([*shlex.split(command), "--quiet"], check=False, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    made = _firewalls(lab_net)["tpuctl-pod-workers"]
    assert made["sourceRanges"] == [SUBNET] and made["direction"] == "INGRESS"
    ok = tpuctl_process(*args, "--json")
    assert ok.code == 0, ok.err
    assert lab_net.call_counts().get("compute.firewalls.insert") == 1     # gcloud's, not tpuctl's
    # a rule the user made is the user's: down leaves it
    down = tpuctl_process("down", "pod", "--json")
    assert down.code == 0 and "tpuctl-pod-workers" in _firewalls(lab_net)
