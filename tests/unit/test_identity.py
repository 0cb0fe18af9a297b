"""The pure decisions of `up --least-privilege`: the account's name and marker, and whether the
hosts keep external IPs (provision/cluster/identity.py)."""

from __future__ import annotations

import pytest

from provision.cluster import identity

SUB = {"name": "default", "region": "https://x/compute/v1/projects/p/regions/us-central1",
       "network": "https://x/compute/v1/projects/p/global/networks/default", "privateIpGoogleAccess": False}


def router(**nat):
    return {"name": "r", "region": "regions/us-central1", "network": "global/networks/default",
            "nats": [{"name": "n", "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES", **nat}]}


def decide(sub=SUB, routers=(), regions=("us-central1",)):
    nats = [n for r in routers for n in identity.nats_of(r)]
    return identity.egress("default", list(regions), [identity.subnet_of(sub)], nats)


@pytest.mark.parametrize("name", ["a", "lab", "x" * 23, "x" * 24, "a-" * 31 + "a", "bert-pretrain-large-2026"])
def test_account_ids_are_iams(name):
    got = identity.account_id(name)
    assert identity.ACCOUNT_ID_RE.match(got) and 6 <= len(got) <= 30 and got.startswith("tpuctl-")


def test_long_names_do_not_collide_and_short_ones_are_kept():
    assert identity.account_id("lab") == "tpuctl-lab"
    a, b = identity.account_id("bert-pretrain-large-one"), identity.account_id("bert-pretrain-large-two")
    assert a != b


def test_the_marker_names_its_cluster_only():
    acc = {"description": identity.marker("lab")}
    assert identity.ours(acc, "lab") and not identity.ours(acc, "la") and not identity.ours(acc, "lab2")
    assert not identity.ours({"description": "made by hand"}, "lab") and not identity.ours({}, "lab")
    assert identity.email("lab", "example.com:proj") == "tpuctl-lab@proj.example.com.iam.gserviceaccount.com"


def test_a_public_nat_for_vms_drops_the_external_ips():
    assert not decide(routers=[router()]).external_ips
    assert not decide(routers=[router(sourceSubnetworkIpRangesToNat="ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")]
                      ).external_ips
    listed = router(sourceSubnetworkIpRangesToNat="LIST_OF_SUBNETWORKS",
                    subnetworks=[{"name": "regions/us-central1/subnetworks/default"}])
    assert not decide(routers=[listed]).external_ips


@pytest.mark.parametrize("nat", [
    {"type": "PRIVATE"},
    {"endpointTypes": ["ENDPOINT_TYPE_SWG"]},
    {"sourceSubnetworkIpRangesToNat": "LIST_OF_SUBNETWORKS", "subnetworks": [{"name": "x/subnetworks/other"}]},
    {"sourceSubnetworkIpRangesToNat": "LIST_OF_SUBNETWORKS",
     "subnetworks": [{"name": "x/subnetworks/default", "sourceIpRangesToNat": ["LIST_OF_SECONDARY_IP_RANGES"]}]},
])
def test_a_nat_that_does_not_carry_the_hosts_keeps_them(nat):
    assert decide(routers=[router(**nat)]).external_ips


def test_private_google_access_alone_keeps_them_and_says_why():
    got = decide(sub={**SUB, "privateIpGoogleAccess": True})
    assert got.external_ips and "has Private Google Access but no Cloud NAT" in got.line
    assert "gcloud compute routers nats create tpuctl-nat --router tpuctl-nat --region us-central1" in got.line


def test_every_region_asked_must_be_served():
    got = decide(routers=[router()], regions=("us-central1", "europe-west4"))
    assert got.external_ips and "europe-west4" in got.line
