"""Queued resources are resources: `tpuctl up --queued`, `status`, `down` and `down --idle` over the wire.

A queued resource without a node (WAITING_FOR_RESOURCES, FAILED, SUSPENDED) bills nothing but holds
quota until deleted, and a waiting one becomes a billed TPU once capacity frees up: Ctrl-C and
``--timeout`` of ``up --queued`` delete it, ``status`` shows it, ``down`` deletes it, a re-run of
``up`` adopts it, and ``down --idle`` reaps a FAILED or SUSPENDED one, naming the quota it frees.

The installed ``tpuctl`` runs as a subprocess against the fake cloud. What the fake does with
queued resources follows Google, with the sources cited in tests/integration/test_fakegcp_queued.py:
its states (google-cloud-tpu ``tpu_v2.QueuedResourceState.State``), delete with ``force`` only for
a request holding a node (``tpu_v2.DeleteQueuedResourceRequest.force``; gcloud 528's ``--force``
help), 409 ALREADY_EXISTS on re-create (google/rpc/code.proto), FAILED requests staying until
deleted (cloud.google.com/tpu/docs/queued-resources), and the leak itself: Ctrl-C of a script
waiting on a queued resource left it behind holding quota (marin-community/marin#87, quoting
stanford-crfm/levanter#666). A request waits here because the zone is stocked out until cleared
(``POST /_admin/stockout`` with no count): the fake keeps it WAITING_FOR_RESOURCES.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.fakegcp import clients
from tests.integration.reservations import range_reservations

ZONE = "us-central1-b"
RUNTIME = "tpu-vm-tf-2.16.1-pjrt"
PROJECT = "tpuctl-test"


@pytest.fixture
def fake(fakegcp_env):
    fakegcp_env.set_latencies(tpu_create=0.2, tpu_delete=0.1, vm_create=0.2, vm_delete=0.1,
                              queued_provisioning=0.1)
    return fakegcp_env


def tpuctl(*args: str, timeout: float = 120):
    return run_tpuctl_process(*args, timeout=timeout)


def start(*args: str) -> subprocess.Popen:
    """``tpuctl ARGS`` in the background, as a user's terminal runs it."""
    return subprocess.Popen([str(TPUCTL_BIN), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ), cwd=REPO)


def wait_for(what, timeout: float = 60.0, why: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {why or what}")


def requests(fake) -> dict[str, dict]:
    return {q["name"].rsplit("/", 1)[-1]: q for q in fake.resources()["queuedResources"]}


def state_of(fake, name: str) -> str | None:
    q = requests(fake).get(name)
    return q["state"]["state"] if q else None


def left_of(fake, name: str) -> list[str]:
    """Everything of cluster ``name`` still in the cloud: nodes, VMs, queued resources, range reservation."""
    res = fake.resources()
    left = [f"node {n['name']}" for n in res["nodes"] if n["name"].endswith(f"/{name}")]
    left += [f"instance {i['name']}" for i in res["instances"] if i["name"] == name]
    left += [f"queued resource {q['name']}" for q in res["queuedResources"] if q["name"].endswith(f"/{name}")]
    left += [f"range reservation {name}"] if name in range_reservations(fake) else []
    return left


def error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(lines) == 1, err
    return lines[0]


def deletes(fake, name: str) -> list[str]:
    """The query string of every queued-resource delete of ``name`` (``force=true`` or not)."""
    return [c.get("query") or "" for c in fake.calls()
            if c["call"] == "tpu.v2.queuedResources.delete" and c["path"].endswith(f"/queuedResources/{name}")]


# ---- leaks: Ctrl-C and --timeout of `up --queued` ------------------------------------------------------

def test_ctrl_c_while_the_request_waits_deletes_it_and_the_host_vm(fake):
    fake.stockout(ZONE)
    proc = start("up", "qc", "--zone", ZONE, "--queued", "--preemptible")
    try:
        wait_for(lambda: state_of(fake, "qc") == "WAITING_FOR_RESOURCES"
                 and any(i["name"] == "qc" and i["status"] == "RUNNING" for i in fake.resources()["instances"]),
                 why="the request to wait and the host VM to run")
        assert fake.resources()["nodes"] == []            # nothing billed yet but the VM; the request holds quota
        proc.send_signal(signal.SIGINT)                   # Ctrl-C
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    line = error_line(err)
    assert "up interrupted; rolled back: " in line, line
    assert f"queued resource qc ({ZONE})" in line and f"VM qc ({ZONE})" in line, line
    assert left_of(fake, "qc") == []
    # a waiting request holds no node: Google deletes it without force
    assert deletes(fake, "qc") == [""]


def test_timeout_while_the_request_waits_deletes_it(fake):
    fake.stockout(ZONE)
    r = tpuctl("up", "qt", "--zone", ZONE, "--queued", "--no-vm", "--timeout", "4s")
    assert r.code == 1, r.err
    line = error_line(r.err)
    assert "up timed out waiting for create queued-resource qt in us-central1-b" in line, line
    assert f"rolled back queued resource qt ({ZONE})" in line, line
    assert left_of(fake, "qt") == []


def test_keep_on_failure_names_the_waiting_request_and_status_and_down_handle_it(fake):
    fake.stockout(ZONE)
    r = tpuctl("up", "qk", "--zone", ZONE, "--queued", "--timeout", "4s", "--keep-on-failure")
    assert r.code == 1, r.err
    line = error_line(r.err)
    assert f"queued resource qk in {ZONE} (holds quota and becomes a billed TPU once capacity frees up" in line, line
    assert f"gcloud compute tpus queued-resources delete qk --zone {ZONE} --force" in line, line
    assert f"VM qk in {ZONE}" in line, line

    # status: a cluster whose TPU is still a request, in JSON and in the table
    doc = tpuctl("status", "--json").json()
    [view] = doc["clusters"]
    assert view["name"] == "qk" and view["tpu"] is None and view["vm"]["state"] == "RUNNING"
    q = view["queued"]
    assert (q["name"], q["zone"], q["state"], q["accelerator_type"]) == ("qk", ZONE, "WAITING_FOR_RESOURCES", "v2-8")
    assert q["quota"] == "v2-8: 8 TensorCores, 4 chips (on-demand)" and q["node_names"] == ["qk"]
    table = tpuctl("status")
    assert table.code == 0, table.err
    row = next(ln for ln in table.out.splitlines() if ln.startswith("qk "))
    assert "v2-8 (queued)" in row and "WAITING_FOR_RESOURCES" in row
    assert (f"qk: queued resource qk in {ZONE} is WAITING_FOR_RESOURCES" in table.out
            and "no TPU billed yet, but it holds quota (v2-8: 8 TensorCores, 4 chips (on-demand)) and becomes a "
                "billed TPU once capacity frees up: tpuctl down qk deletes it" in table.out), table.out

    # down --idle keeps a request whose cluster still has its host VM
    reap = tpuctl("down", "--idle", "--json").json()
    [kept] = reap["queued_resources"]
    assert kept["verdict"] == "keep" and "cluster qk, which still exists" in kept["reason"], kept
    assert state_of(fake, "qk") == "WAITING_FOR_RESOURCES"

    # down NAME deletes it (no force: it holds no node) and the host VM
    down = tpuctl("down", "qk", "--json")
    assert down.code == 0, down.err
    assert sorted(down.json()["deleted"]) == [f"VM qk ({ZONE})", f"queued resource qk ({ZONE})"]
    assert any("frees the quota it held (v2-8: 8 TensorCores, 4 chips (on-demand))" in n
               for n in down.json()["notes"])
    assert deletes(fake, "qk") == [""]
    assert left_of(fake, "qk") == []


# ---- re-running `up` adopts the request ----------------------------------------------------------------

def test_rerun_after_a_crash_adopts_the_waiting_request(fake):
    fake.stockout(ZONE)
    proc = start("up", "qa", "--zone", ZONE, "--queued", "--no-vm")
    try:
        wait_for(lambda: state_of(fake, "qa") == "WAITING_FOR_RESOURCES", why="the request to wait")
    finally:
        proc.kill()                                        # a crash: no rollback
        proc.communicate(timeout=30)
    fake.clear_calls()
    rerun = start("up", "qa", "--zone", ZONE, "--queued", "--no-vm", "--json")
    try:
        wait_for(lambda: fake.call_counts().get("tpu.v2.queuedResources.list"), why="the re-run to look")
        fake.clear_stockout(ZONE)                          # capacity frees up once it has seen the request wait
        out, err = rerun.communicate(timeout=120)
    finally:
        if rerun.poll() is None:
            rerun.kill()
    assert rerun.returncode == 0, err
    doc = json.loads(out)
    assert any(a.startswith("queued resource qa (us-central1-b, ") for a in doc["adopted"]), doc
    assert doc["tpu"]["state"] == "READY"
    assert "tpu.v2.queuedResources.create" not in fake.call_counts()      # asked once (by the crashed up)
    # the node is the request's: down deletes both, through the request, with force (it holds a node)
    down = tpuctl("down", "qa", "--json")
    assert down.code == 0 and down.json()["deleted"] == [f"TPU qa ({ZONE})"], down.err
    assert deletes(fake, "qa") == ["force=true"]
    assert left_of(fake, "qa") == []


def test_a_request_made_between_look_and_create_is_adopted_not_a_409_abort(fake):
    """Another ``up`` of the cluster asked between this one's look and its create: the create is
    refused with 409 ALREADY_EXISTS, and this ``up`` waits for that request instead of aborting."""
    from google.cloud import tpu_v2

    from provision.cloud.base import ClusterSpec
    from provision.cloud.gcp import GcpProvider
    from provision.cluster import up

    fake.stockout(ZONE, count=3)
    parent = f"projects/{PROJECT}/locations/{ZONE}"
    node = tpu_v2.Node(accelerator_type="v2-8", runtime_version=RUNTIME,
                       labels={"tpuctl-cluster": "race", "tpuctl-role": "tpu"})
    clients.tpu_v2(fake).create_queued_resource(parent=parent, queued_resource_id="race", queued_resource=(
        tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[
            tpu_v2.QueuedResource.Tpu.NodeSpec(parent=parent, node_id="race", node=node)]))))

    class LookedBefore(GcpProvider):
        def list_queued(self, zone=None, labels=None):
            return []                                      # what the look saw, before the other create

    spec = ClusterSpec(name="race", accelerator_type="v2-8", zones=(ZONE,), provider="gcp", project=PROJECT,
                       machine_type=None, queued=True)
    lines: list[str] = []
    result = up(LookedBefore(PROJECT), spec, timeout=60, log=lines.append)
    assert result.tpu is not None and result.tpu.state.value == "READY"
    assert any("already exists: another tpuctl up of this cluster asked for it" in ln for ln in lines), lines
    creates = [c for c in fake.calls() if c["call"] == "tpu.v2.queuedResources.create"]
    assert [c["status"] for c in creates] == [200, 409]
    assert len(fake.resources()["queuedResources"]) == 1


def test_a_request_of_the_same_name_that_is_not_the_clusters_is_named_with_its_fix(fake):
    from google.cloud import tpu_v2

    fake.stockout(ZONE)
    parent = f"projects/{PROJECT}/locations/{ZONE}"
    clients.tpu_v2(fake).create_queued_resource(parent=parent, queued_resource_id="theirs", queued_resource=(
        tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(
            parent=parent, node_id="theirs", node=tpu_v2.Node(accelerator_type="v2-8", runtime_version=RUNTIME))]))))
    r = tpuctl("up", "theirs", "--zone", ZONE, "--queued")
    assert r.code == 1, r.err
    line = error_line(r.err)
    assert f"a queued resource named theirs already exists in {ZONE}" in line, line
    assert f"gcloud compute tpus queued-resources delete theirs --zone {ZONE} --force" in line, line
    assert f"rolled back VM theirs ({ZONE}), nothing remains" in line, line
    assert fake.resources()["instances"] == []
    assert state_of(fake, "theirs") == "WAITING_FOR_RESOURCES"     # not ours: untouched


# ---- down --idle reaps dead requests and names the quota they free ------------------------------------

def test_down_idle_reaps_a_failed_request_left_by_a_crash_and_names_its_quota(fake):
    fake.stockout(ZONE)
    proc = start("up", "qf", "--zone", ZONE, "--queued", "--no-vm", "--valid-until", "2s")
    try:
        wait_for(lambda: state_of(fake, "qf") == "WAITING_FOR_RESOURCES", why="the request to wait")
    finally:
        proc.kill()                                        # a crash: the request stays
        proc.communicate(timeout=30)
    wait_for(lambda: state_of(fake, "qf") == "FAILED", why="valid-until to pass")

    doc = tpuctl("status", "qf", "--json").json()
    assert doc["clusters"][0]["queued"]["state"] == "FAILED"
    assert "valid-until" in doc["clusters"][0]["queued"]["error"]

    dry = tpuctl("down", "--idle", "--dry-run")
    assert dry.code == 0, dry.err
    assert (f"would delete queued resource qf ({ZONE}, FAILED): bills nothing; would free the quota it held: "
            "v2-8: 8 TensorCores, 4 chips (on-demand)") in dry.out, dry.out
    assert "would delete 0 TPU(s) and 1 queued resource(s)" in dry.out
    assert state_of(fake, "qf") == "FAILED"

    r = tpuctl("down", "--idle")
    assert r.code == 0, r.err
    assert (f"deleted queued resource qf ({ZONE}, FAILED): bills nothing; frees the quota it held: "
            "v2-8: 8 TensorCores, 4 chips (on-demand)") in r.out, r.out
    assert deletes(fake, "qf") == [""]                     # FAILED: no node, no force
    assert left_of(fake, "qf") == []


def test_down_idle_reaps_a_suspended_request_whose_node_is_gone(fake):
    r = tpuctl("up", "qs", "--zone", ZONE, "--queued", "--spot", "--no-vm", "--json")
    assert r.code == 0, r.err
    # the node goes (as a spot TPU's does when it is preempted and deleted): the request is SUSPENDED
    clients.tpu_v2(fake).delete_node(name=f"projects/{PROJECT}/locations/{ZONE}/nodes/qs").result(timeout=30)
    assert state_of(fake, "qs") == "SUSPENDED"
    doc = tpuctl("down", "--idle", "--json").json()
    assert doc["deleted"] == [f"queued resource qs ({ZONE})"], doc
    [q] = doc["queued_resources"]
    assert q["quota"] == "v2-8: 8 TensorCores, 4 chips (spot)" and q["deleted"]
    assert "SUSPENDED: never provisions again, and holds its quota until deleted" in q["reason"]
    assert left_of(fake, "qs") == []


# ---- --preemptible --queued asks for the spot tier, as gcloud does ----------------------------------

def test_preemptible_queued_sends_the_spot_tier_and_no_scheduling_config(fake):
    r = tpuctl("up", "qp", "--zone", ZONE, "--queued", "--preemptible", "--no-vm", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert any(n.startswith("--preemptible with --queued asks for the spot tier, as gcloud does") for n in doc["notes"])
    assert "--preemptible with --queued asks for the spot tier" in r.err     # said while it happens, too
    q = requests(fake)["qp"]
    assert q["spot"] == {}                                                     # the request's tier
    assert "schedulingConfig" not in q["tpu"]["nodeSpec"][0]["node"]           # none in its node spec
    assert doc["tpu"]["spot"] and not doc["tpu"]["preemptible"]
    status = tpuctl("status", "qp")
    row = next(ln for ln in status.out.splitlines() if ln.startswith("qp "))
    assert " spot " in row
    assert tpuctl("down", "qp").code == 0 and left_of(fake, "qp") == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud (google-cloud-cli) is not installed")
def test_gcloud_spot_request_has_the_shape_tpuctl_sends(fake, tmp_path):
    """gcloud 528's own ``queued-resources create --spot`` against the fake: the request it sends
    carries ``spot: {}`` and no ``schedulingConfig`` in its node spec (util.py CreateNodeSpec and
    SetSpot), which is what tpuctl sends for --spot and --preemptible."""
    env = {**os.environ, **fake.gcloud_config(tmp_path / "gcloud")}
    proc = subprocess.run(["gcloud", "compute", "tpus", "queued-resources", "create", "gq", "--node-id=gq",
                           f"--zone={ZONE}", "--accelerator-type=v2-8", f"--runtime-version={RUNTIME}", "--spot"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    r = tpuctl("up", "tq", "--zone", ZONE, "--queued", "--preemptible", "--no-vm")
    assert r.code == 0, r.err
    reqs = requests(fake)
    theirs, ours = reqs["gq"], reqs["tq"]
    assert theirs["spot"] == ours["spot"] == {}
    assert "schedulingConfig" not in theirs["tpu"]["nodeSpec"][0]["node"]
    assert "schedulingConfig" not in ours["tpu"]["nodeSpec"][0]["node"]


# ---- the local provider has none ------------------------------------------------------------------------

def test_local_provider_has_no_queued_resources_and_says_so(tpuctl_process):
    r = tpuctl_process("up", "lq", "--provider", "local", "--queued", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert any("the local provider has no queued resources: --queued created the TPU directly" in n
               for n in r.json()["notes"]), r.json()["notes"]
    assert tpuctl_process("down", "lq", "--provider", "local").code == 0


def test_a_request_that_got_its_node_since_the_look_is_deleted_with_force(fake):
    """Looked at while waiting, deleted after it got its node: Google refuses the delete without
    force (FAILED_PRECONDITION, DeleteQueuedResourceRequest.force), so it is asked again with force."""
    from provision.cloud.base import QueuedRequest, QueuedState
    from provision.cloud.gcp import GcpProvider
    from provision.cluster import delete_request

    r = tpuctl("up", "qr", "--zone", ZONE, "--queued", "--no-vm")
    assert r.code == 0, r.err
    looked = QueuedRequest("qr", ZONE, QueuedState.WAITING_FOR_RESOURCES, "v2-8", node_names=["qr"],
                           labels={"tpuctl-cluster": "qr"})
    lines: list[str] = []
    prov = GcpProvider(PROJECT)
    op = delete_request(prov, looked, nodes=[], log=lines.append)
    assert op is not None and any("deleting it and its node (force)" in ln for ln in lines), lines
    wait_for(lambda: not left_of(fake, "qr"), why="the request and its node to go")
    statuses = [(c.get("query") or "", c["status"]) for c in fake.calls()
                if c["call"] == "tpu.v2.queuedResources.delete"]
    assert statuses == [("", 400), ("force=true", 200)]
