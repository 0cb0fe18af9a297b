"""Private networks and service accounts, end to end against the fake cloud.

``--no-external-ips`` must reach both machines: the TPU VM (``networkConfig.enableExternalIps:
false``) and the host VM (no access config), for both architectures; ``--service-account`` must
be the identity of both; without it, tpuctl says the default compute account is used.
"""

from __future__ import annotations

import pytest

ZONE = "us-central1-b"
SA = "tpuctl-host@tpuctl-test.iam.gserviceaccount.com"


def _instance(fake, name):
    return next(i for i in fake.resources()["instances"] if i["name"] == name)


def _node(fake, name):
    return next(n for n in fake.resources()["nodes"] if n["name"].rsplit("/", 1)[-1] == name)


def test_no_external_ips_reaches_the_tpu_vm_and_the_host_vm(fakegcp_env, tpuctl):
    r = tpuctl("up", "private", "--zone", ZONE, "--no-external-ips", "--service-account", SA, "--json")
    assert r.code == 0, r.err
    inst = _instance(fakegcp_env, "private")
    nic = inst["networkInterfaces"][0]
    assert not nic.get("accessConfigs"), nic          # no external IP on the host VM
    assert r.json()["vm"]["external_ip"] is None and r.json()["vm"]["internal_ip"]
    assert [a["email"] for a in inst["serviceAccounts"]] == [SA]
    assert inst["serviceAccounts"][0]["scopes"] == ["https://www.googleapis.com/auth/cloud-platform"]

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import tpu_v2

    client = tpu_v2.TpuClient(credentials=AnonymousCredentials(), transport="rest",
                              client_options={"api_endpoint": fakegcp_env.url})
    node = client.get_node(name=f"projects/tpuctl-test/locations/{ZONE}/nodes/private")
    assert node.network_config.enable_external_ips is False
    assert node.service_account.email == SA
    assert "default compute" not in r.err      # an explicit account: no warning


def test_the_host_vm_of_a_tpu_node_can_be_private_too(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    r = tpuctl("up", "private-node", "--zone", ZONE, "--arch", "node", "--no-external-ips", "--json")
    assert r.code == 0, r.err
    assert not _instance(fakegcp_env, "private-node")["networkInterfaces"][0].get("accessConfigs")
    assert "Compute Engine default service account" in r.err    # the broad-default warning


def test_external_ips_stay_the_default(fakegcp_env, tpuctl):
    r = tpuctl("up", "public", "--zone", ZONE, "--json")
    assert r.code == 0, r.err
    assert _instance(fakegcp_env, "public")["networkInterfaces"][0]["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"
    assert _node(fakegcp_env, "public")["networkConfig"]["enableExternalIps"] is True


@pytest.mark.parametrize("args, fragment", [
    (["--arch", "node", "--no-vm", "--no-external-ips"], "drop --no-vm or the flag"),
    (["--service-account", "evil; rm -rf /"], "invalid service account"),
    (["--service-account", "user@gmail.com"], "invalid service account"),
    (["--network", "../../projects/other/global/networks/x"], "invalid network name"),
    (["--subnetwork", "sub net"], "invalid subnetwork name"),
])
def test_bad_network_and_identity_flags_create_nothing(fakegcp_env, tpuctl, args, fragment):
    fakegcp_env.clear_calls()
    r = tpuctl("up", "bad", "--zone", ZONE, *args)
    assert r.code == 2, r.err
    assert fragment in r.err and len([ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]) == 1
    assert not fakegcp_env.call_counts()
