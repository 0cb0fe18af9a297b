"""`tpuctl up --least-privilege` and `down` on the GCP provider, over the wire against the fake
cloud (IAM service accounts, Cloud Routers and NAT, subnetworks' Private Google Access) and a
bucket-IAM stub (fake-gcs-server has no bucket IAM: tests/integration/test_stage_iam.py)."""

from __future__ import annotations

import pytest

from provision.cluster import identity
from tests.integration.test_stage_iam import IamStub

PROJECT = "tpuctl-test"
ZONE = "us-central1-b"
REGION = "us-central1"
BUCKET = "gs://iam-bucket"
OBJECT_USER = "roles/storage.objectUser"


@pytest.fixture
def stub(monkeypatch):
    s = IamStub()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", s.url)
    yield s
    s.server.shutdown()


def accounts(fake) -> dict[str, dict]:
    return {a["email"]: a for a in fake.service_accounts()}


def instance(fake, name):
    return next(i for i in fake.resources()["instances"] if i["name"] == name)


def node(fake, name):
    return next(n for n in fake.resources()["nodes"] if n["name"].endswith(f"/nodes/{name}"))


def nat(fake, *, region=REGION, name="nat-router", **nat_fields):
    fake.add_router(name, region, nats=[{"name": "nat", "natIpAllocateOption": "AUTO_ONLY",
                                         "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
                                         **nat_fields}])


def members(stub, role=OBJECT_USER) -> set[str]:
    return {m for b in stub.policy["bindings"] if b["role"] == role for m in b["members"]}


def test_up_makes_the_account_and_the_hosts_carry_it_without_external_ips_behind_nat(fakegcp_env, tpuctl, stub):
    nat(fakegcp_env)
    fakegcp_env.set_private_access(REGION, "default")
    r = tpuctl("up", "lab", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--json")
    assert r.code == 0, r.err
    email = f"tpuctl-lab@{PROJECT}.iam.gserviceaccount.com"
    acc = accounts(fakegcp_env)[email]
    assert acc["description"] == identity.marker("lab") and acc["displayName"] == "tpuctl lab"
    assert members(stub) == {f"serviceAccount:{email}"}            # the run bucket, and only that role
    assert {b["role"] for b in stub.policy["bindings"]} == {"roles/storage.legacyBucketOwner", OBJECT_USER}
    vm = instance(fakegcp_env, "lab")
    assert vm["serviceAccounts"] == [{"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
    assert not any(i.get("accessConfigs") for i in vm["networkInterfaces"])
    tpu = node(fakegcp_env, "lab")
    assert tpu["serviceAccount"]["email"] == email
    assert not tpu["networkConfig"].get("enableExternalIps")
    lines = r.err.splitlines()
    assert (f"hosts: run as service account {email} (created), with only {OBJECT_USER} on {BUCKET}") in lines
    assert ("hosts: no external IPs: Cloud NAT nat on router nat-router serves subnetwork default in us-central1 "
            "(PyPI and apt through it, Google's APIs through Private Google Access)") in lines
    assert not any("default service account" in line for line in lines)
    assert f"service account {email}" in r.json()["created"]

    # up again adopts the account (ours: its marker) and changes nothing
    again = tpuctl("up", "lab", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET)
    assert again.code == 0, again.err
    assert fakegcp_env.call_counts()["iam.projects.serviceAccounts.create"] == 1
    assert "(made by tpuctl earlier, adopted), with only roles/storage.objectUser on gs://iam-bucket (already had it)" \
        in again.err

    down = tpuctl("down", "lab", "--json")
    assert down.code == 0, down.err
    assert f"service account {email}" in down.json()["deleted"]
    assert email not in accounts(fakegcp_env)


@pytest.mark.parametrize("setup, why", [
    (lambda fake: None, ("no Cloud NAT serves subnetwork default in us-central1, and the hosts reach PyPI and "
                        "Google's APIs through them")),
    (lambda fake: fake.set_private_access(REGION, "default"),
     ("subnetwork default in us-central1 has Private Google Access but no Cloud NAT, and the hosts' bootstrap "
     "installs tpuctl's dependencies from PyPI")),
    (lambda fake: nat(fake, type="PRIVATE"), "no Cloud NAT serves"),                    # Private NAT: no internet
    (lambda fake: nat(fake, region="europe-west4"), "no Cloud NAT serves"),             # another region's NAT
    (lambda fake: nat(fake, sourceSubnetworkIpRangesToNat="LIST_OF_SUBNETWORKS",        # another subnetwork's
                      subnetworks=[{"name": f"projects/{PROJECT}/regions/{REGION}/subnetworks/other",
                                    "sourceIpRangesToNat": ["ALL_IP_RANGES"]}]), "no Cloud NAT serves"),
])
def test_external_ips_stay_without_a_nat_that_serves_the_hosts(fakegcp_env, tpuctl, stub, setup, why):
    fakegcp_env.add_subnetwork("other", REGION, "10.200.0.0/24")
    setup(fakegcp_env)
    r = tpuctl("up", "pub", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--no-vm")
    assert r.code == 0, r.err
    line = next(x for x in r.err.splitlines() if x.startswith("hosts: external IPs kept: "))
    assert why in line
    assert line.endswith("to drop them, add NAT: gcloud compute routers create tpuctl-nat --network default --region "
                         "us-central1 && gcloud compute routers nats create tpuctl-nat --router tpuctl-nat --region "
                         "us-central1 --auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges")
    assert node(fakegcp_env, "pub")["networkConfig"]["enableExternalIps"] is True


def test_a_nat_listing_the_subnetwork_serves_it(fakegcp_env, tpuctl, stub):
    fakegcp_env.add_subnetwork("lab-net", REGION, "10.201.0.0/24")
    nat(fakegcp_env, sourceSubnetworkIpRangesToNat="LIST_OF_SUBNETWORKS",
        subnetworks=[{"name": f"projects/{PROJECT}/regions/{REGION}/subnetworks/lab-net",
                      "sourceIpRangesToNat": ["PRIMARY_IP_RANGE"]}])
    r = tpuctl("up", "sub", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--subnetwork", "lab-net")
    assert r.code == 0, r.err
    assert "hosts: no external IPs: Cloud NAT nat on router nat-router serves subnetwork lab-net" in r.err
    assert not any(i.get("accessConfigs") for i in instance(fakegcp_env, "sub")["networkInterfaces"])


def test_down_never_deletes_an_account_tpuctl_did_not_make(fakegcp_env, tpuctl, stub):
    email = f"tpuctl-mine@{PROJECT}.iam.gserviceaccount.com"
    fakegcp_env.create_service_account("tpuctl-mine", description="the team's own account")
    r = tpuctl("up", "mine", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET)
    assert r.code == 2
    assert (f"tpuctl: error: service account {email} exists and tpuctl did not make it for cluster mine; pass "
            f"--service-account {email} to use it as it is, or pick another cluster name") in r.err
    assert not fakegcp_env.call_counts().get("compute.instances.insert")
    # used on purpose, it is the user's: down leaves it
    r = tpuctl("up", "mine", "--zone", ZONE, "--service-account", email, "--bucket", BUCKET)
    assert r.code == 0, r.err
    down = tpuctl("down", "mine", "--json")
    assert down.code == 0 and not any("service account" in d for d in down.json()["deleted"])
    assert email in accounts(fakegcp_env)


def test_dry_run_creates_nothing_and_says_what_it_would(fakegcp_env, tpuctl, stub):
    nat(fakegcp_env)
    r = tpuctl("up", "dry", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--dry-run", "--json")
    assert r.code == 0, r.err
    email = f"tpuctl-dry@{PROJECT}.iam.gserviceaccount.com"
    notes = r.json()["notes"]
    assert f"service account {email}" in r.json()["planned"]
    assert f"hosts: would run as service account {email} (would be created) with only {OBJECT_USER} on {BUCKET}" \
        in notes
    assert any(n.startswith("hosts: no external IPs: Cloud NAT nat") for n in notes)
    counts = fakegcp_env.call_counts()
    assert not counts.get("iam.projects.serviceAccounts.create") and not counts.get("compute.instances.insert")
    assert not stub.puts() and accounts(fakegcp_env) == {}


def test_a_failed_up_deletes_the_account_it_made(fakegcp_env, tpuctl, stub):
    fakegcp_env.deny("tpu.nodes.create")
    r = tpuctl("up", "fails", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--no-vm")
    assert r.code == 1
    assert accounts(fakegcp_env) == {}
    assert "deleted service account tpuctl-fails@" in r.err


def test_autodown_names_the_role_the_hosts_account_lacks(fakegcp_env, tpuctl, stub):
    r = tpuctl("up", "ad", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET, "--autodown", "30m")
    assert r.code == 0, r.err
    email = f"tpuctl-ad@{PROJECT}.iam.gserviceaccount.com"
    assert (f"autodown: the host VM lists and deletes the cluster's TPU as {email}, which has no role for that: "
            f"grant it roles/tpu.admin and roles/compute.viewer on project {PROJECT} (the Cloud TPU API has no "
            f"per-TPU grant), e.g. gcloud projects add-iam-policy-binding {PROJECT} "
            f"--member=serviceAccount:{email} --role=roles/tpu.admin") in r.err.splitlines()

@pytest.mark.parametrize("args, message", [
    (["--service-account", "x-runs@p.iam.gserviceaccount.com", "--bucket", BUCKET],
     "tpuctl: error: --least-privilege and --service-account both given"),
    ([], "tpuctl: error: --least-privilege grants the hosts' account the cluster's bucket only, and names none"),
    (["--bucket", BUCKET, "--provider", "local"], ("tpuctl: error: --least-privilege makes a Google Cloud service "
                                                  "account; the local provider has none")),
])
def test_bad_combinations_are_one_line_exit_2(fakegcp_env, tpuctl, args, message):
    r = tpuctl("up", "bad", "--zone", ZONE, "--least-privilege", *args)
    assert r.code == 2
    assert next(line for line in r.err.splitlines() if line.startswith("tpuctl: error:")).startswith(message)
    assert not fakegcp_env.call_counts().get("iam.projects.serviceAccounts.create")


@pytest.mark.parametrize("cluster, expected", [
    ("lab", "tpuctl-lab"),
    ("a", "tpuctl-a"),
    ("a-very-long-cluster-name-for-bert", None),
])
def test_account_ids_follow_iams_rule(cluster, expected):
    got = identity.account_id(cluster)
    assert identity.ACCOUNT_ID_RE.match(got) and 6 <= len(got) <= 30
    if expected:
        assert got == expected
    else:
        assert got != identity.account_id(cluster + "x")


def test_the_fake_refuses_what_iam_refuses(fakegcp_env):
    import requests

    url = f"{fakegcp_env.url}/v1/projects/{PROJECT}/serviceAccounts"
    r = requests.post(url, json={"accountId": "tpuctl-ok", "serviceAccount": {"email": "x"}}, timeout=10)
    assert r.status_code == 200           # output-only fields are accepted and ignored
    r = requests.post(url, json={"accountId": "tpuctl-ok"}, timeout=10)
    assert r.status_code == 409 and r.json()["error"]["status"] == "ALREADY_EXISTS"
    assert r.json()["error"]["message"] == f"Service account tpuctl-ok already exists within project projects/{PROJECT}."
    r = requests.post(url, json={"accountId": "tpuctl-x", "serviceAccount": {"owner": "me"}}, timeout=10)
    assert r.status_code == 400 and 'Unknown name "owner"' in r.json()["error"]["message"]
    r = requests.post(url, json={"accountId": "ab"}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = requests.get(f"{url}/nobody@{PROJECT}.iam.gserviceaccount.com", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"


def test_a_missing_iam_role_is_one_line_naming_it_before_anything_is_created(fakegcp_env, tpuctl, stub):
    fakegcp_env.deny("iam.serviceAccounts.create")
    r = tpuctl("up", "norole", "--zone", ZONE, "--least-privilege", "--bucket", BUCKET)
    assert r.code == 1
    errors = [line for line in r.err.splitlines() if line.startswith("tpuctl: error:")]
    assert len(errors) == 1 and "roles/iam.serviceAccountCreator" in errors[0], r.err
    assert not fakegcp_env.call_counts().get("compute.instances.insert")
