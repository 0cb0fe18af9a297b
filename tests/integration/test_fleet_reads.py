"""How tpuctl reads a fleet: a constant number of requests, and only the fields it reads.

Over the wire: the GCP provider against the fake cloud (tests/fakegcp), which logs every call and
the size of its answer and honours ``fields`` (partial responses: tests/fakegcp/fields.py). The
fleets are made with the provider's own creates (tests/integration/fleet_build.py), every resource
carrying tpuctl's labels and metadata, startup script included; nothing is in the local cluster
cache, as on a machine that did not make them.
"""

from __future__ import annotations

import json
import shutil

import pytest

from provision.basics.config import home
from tests.conftest import run_tpuctl_process
from tests.integration.fleet_build import build_fleet, name, zone_of

PROJECT = "tpuctl-test"
COMMANDS = {
    "status": ("status",),
    "status --json": ("status", "--json"),
    "cost": ("cost",),
    "down --idle": ("down", "--idle", "--all-zones", "--dry-run"),
}
PER_RESOURCE = {"compute.instances.get", "tpu.v2.nodes.get", "tpu.v1.nodes.get"}
# a TPU's answer with its metadata is ~20 KB (the startup script); what status reads of one is < 2 KB
STATUS_BYTES_PER_CLUSTER = 2_000


@pytest.fixture
def fleet(fakegcp_env):
    fakegcp_env.set_latencies(scale=0)      # every create is done at the next call
    return fakegcp_env


def _requests(fake, tpuctl, argv: tuple[str, ...]) -> tuple[dict[str, int], int]:
    fake.clear_calls()
    r = tpuctl(*argv)
    assert r.code == 0, r.err
    calls = fake.calls()
    counts: dict[str, int] = {}
    for c in calls:
        counts[c["call"]] = counts.get(c["call"], 0) + 1
    return counts, sum(c["bytes"] for c in calls)


def test_requests_do_not_grow_with_the_fleet(fleet, tpuctl):
    """status, cost and down --idle ask the same questions of 5 clusters as of 40: one list per
    kind (one page each here), never a get per VM or TPU."""
    build_fleet(PROJECT, 5)
    assert tpuctl("status").code == 0        # the day's list prices, cached (cloudbilling: once a day)
    small = {what: _requests(fleet, tpuctl, argv) for what, argv in COMMANDS.items()}
    build_fleet(PROJECT, 35, start=5)
    large = {what: _requests(fleet, tpuctl, argv) for what, argv in COMMANDS.items()}
    for what in COMMANDS:
        assert large[what][0] == small[what][0], what
        assert not set(large[what][0]) & PER_RESOURCE, (what, large[what][0])
        assert sum(large[what][0].values()) <= 10, (what, large[what][0])
    # status reads no metadata: its answers hold no startup script, whatever each resource carries
    for what in ("status", "status --json", "cost"):
        assert large[what][1] < 40 * 2 * STATUS_BYTES_PER_CLUSTER, (what, large[what][1])


def test_status_name_reads_one_cluster_not_the_project(fleet):
    """`tpuctl status NAME` (the installed entry point) on a machine without the cluster cache:
    the host VM's zone from a label-filtered Compute list, then that one TPU, never the project's
    TPUs listed."""
    build_fleet(PROJECT, 40)
    fleet.clear_calls()
    r = run_tpuctl_process("status", name(7), "--json", env=fleet.env())
    assert r.code == 0, r.err
    [cluster] = r.json()["clusters"]
    assert cluster["name"] == name(7) and cluster["zone"] == zone_of(7)
    assert cluster["tpu"]["state"] == "READY" and cluster["vm"]["state"] == "RUNNING"
    calls = fleet.calls()
    assert "tpu.v2.nodes.list" not in {c["call"] for c in calls}
    assert [c["path"].rsplit("/", 1)[-1] for c in calls if c["call"] == "tpu.v2.nodes.get"] == [name(7)]
    assert sum(c["bytes"] for c in calls) < 20 * STATUS_BYTES_PER_CLUSTER, calls


def _stable(doc):
    """A command's --json with what changes between two runs (clocks, durations) left out."""
    def volatile(key: str) -> bool:
        return "usd" in key or "hours" in key or "seconds" in key or key in ("now", "idle_since", "reason")

    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if not volatile(k)}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def test_partial_responses_cover_what_tpuctl_reads(fleet, tpuctl, gcs_env, gcs_bucket):
    """The same commands with the fake answering whole bodies, whatever ``fields`` asked: the
    same output. A field tpuctl reads but does not ask for would read as absent and differ."""
    bucket = f"gs://{gcs_bucket}"
    build_fleet(PROJECT, 4, bucket=bucket)
    assert tpuctl("up", "ce", "--zone", "us-east5-a", "-a", "v6e-8", "--spot", "--no-vm",
                  "--bucket", bucket).code == 0
    shutil.rmtree(home() / "clusters", ignore_errors=True)     # buckets come from the clusters' metadata
    runs = [("status", name(1), "--json"), ("status", "--json"), ("cost", "--json"),
            ("down", "--idle", "--dry-run", "--json")]
    outputs, reasons = {}, {}
    for honour in (True, False):
        fleet.honour_fields(honour)
        for argv in runs:
            r = tpuctl(*argv)
            assert r.code == 0, r.err
            outputs[(honour, argv)] = _stable(json.loads(r.out))
        reasons[honour] = [n["reason"] for n in json.loads(r.out)["nodes"]]
    for argv in runs:
        assert outputs[(True, argv)] == outputs[(False, argv)], argv
    # the reaper found every cluster's bucket in what the TPU list carried (none is "unknown")
    nodes = outputs[(True, runs[-1])]["nodes"]
    assert {n["cluster"] for n in nodes} == {"ce", *(name(i) for i in range(4))}
    assert len(reasons[True]) == 5 and not [why for why in reasons[True] if "bucket is unknown" in why], reasons


def test_status_name_of_a_cluster_made_here_reads_its_vm_and_its_tpu(fleet, tpuctl):
    """`tpuctl status NAME` of a cluster this machine's `up` made (so its cache says where the TPU
    is and that it holds no queued resource): two requests, the host VM's label-filtered list and
    the TPU itself, in a project of 40 other clusters; gcloud's describe of the TPU alone is one."""
    build_fleet(PROJECT, 40)
    r = tpuctl("up", "mine", "--zone", "us-central1-b", "--arch", "vm", "--preemptible")
    assert r.code == 0, r.err
    assert tpuctl("status", "mine").code == 0      # the day's list prices, cached (cloudbilling: once a day)
    for argv in (("status", "mine"), ("status", "mine", "--json")):
        counts, _ = _requests(fleet, tpuctl, argv)
        assert counts == {"compute.instances.aggregatedList": 1, "tpu.v2.nodes.get": 1}, (argv, counts)
    r = tpuctl("status", "mine", "--json")
    [cluster] = r.json()["clusters"]
    assert cluster["zone"] == "us-central1-b" and cluster["tpu"]["state"] == "READY"
    assert cluster["tpu"]["preemptible"] and cluster["vm"]["state"] == "RUNNING"
