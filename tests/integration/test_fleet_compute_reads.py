"""A fleet of Compute Engine TPUs costs the same requests as the TPU API's: none per cluster.

The fleet (tests/fleet_compute.py) is what ``tpuctl up --api compute`` makes: single-host TPU VM
instances, and slices (a MIG with its workload policy and template) that alternate spot and
flex-start, made by the provider's own create over the wire. The installed ``tpuctl`` runs
against the fake cloud, which logs every call; nothing is in the local cluster cache.
"""

from __future__ import annotations

import pytest

from tests import fleet_compute
from tests.conftest import run_tpuctl_process

COMMANDS = {
    "status": ("status",),
    "status --json": ("status", "--json"),
    "cost": ("cost",),
    "down --idle": ("down", "--idle", "--all-zones", "--dry-run"),
}
# a read per instance, per MIG (its flex-start request) or per slice's workers
PER_RESOURCE = {"compute.instances.get", "compute.instanceGroupManagers.get",
                "compute.instanceGroupManagerResizeRequests.get", "compute.instanceGroupManagerResizeRequests.list",
                "compute.instances.list", "tpu.v2.nodes.get"}
SLICE_EVERY = 4         # clusters 3, 7, 11, 15: spot, flex-start, spot, flex-start slices


@pytest.fixture
def fleet(fakegcp_env, tmp_path):
    fakegcp_env.set_latencies(scale=0)
    return fakegcp_env


def _counts(fake, argv: tuple[str, ...]) -> dict[str, int]:
    fake.clear_calls()
    r = run_tpuctl_process(*argv, env=fake.env())
    assert r.code == 0, r.err
    counts: dict[str, int] = {}
    for c in fake.calls():
        if not c["call"].startswith("cloudbilling."):     # the day's prices, read once and cached
            counts[c["call"]] = counts.get(c["call"], 0) + 1
    return counts


def test_compute_engine_fleet_requests_do_not_grow_with_the_fleet(fleet, tmp_path):
    """status, cost, down --idle and status NAME ask the same questions of 4 Compute Engine TPU
    clusters (one slice) as of 16 (four, two of them flex-start): lists, never a read per
    instance or MIG."""
    fleet_compute.build(fleet, None, tmp_path / "home", 4, slice_every=SLICE_EVERY)
    assert run_tpuctl_process("status", env=fleet.env()).code == 0     # the day's prices, cached
    small = {what: _counts(fleet, argv) for what, argv in COMMANDS.items()}
    single, sliced = fleet_compute.fleet.member(1, 0).name, fleet_compute.fleet.member(3, 0).name
    small_named = [_counts(fleet, ("status", name)) for name in (single, sliced)]
    fleet_compute.build(fleet, None, tmp_path / "home", 16, slice_every=SLICE_EVERY, start=4)
    large = {what: _counts(fleet, argv) for what, argv in COMMANDS.items()}
    for what in COMMANDS:
        assert large[what] == small[what], what
        assert not set(large[what]) & PER_RESOURCE, (what, large[what])
        assert sum(large[what].values()) <= 10, (what, large[what])
    flex = fleet_compute.fleet.member(7, 0).name
    for name, before in zip((single, sliced, flex), (*small_named, small_named[1])):
        named = _counts(fleet, ("status", name))
        assert named == before, name
        # one label-filtered instance list serves the host VM, the TPU's workers and the node's zone
        assert named.get("compute.instances.aggregatedList") == 1, named
        assert sum(named.values()) <= 6 and not set(named) & PER_RESOURCE - {"tpu.v2.nodes.get"}, named


def test_each_instance_of_the_fleet_is_listed_once_host_vms_apart_from_tpu_workers(fleet, tmp_path):
    """The host VMs' list asks for role host and the TPUs' for role tpu (server-side filters): on a
    project whose TPUs are instances too, neither list pages through the other's instances (at
    2,000 clusters the host list took 9 pages of 500 instead of 4), and the two run at once."""
    from urllib.parse import parse_qs

    fleet_compute.build(fleet, None, tmp_path / "home", 8, slice_every=SLICE_EVERY)
    for argv in (("status",), ("down", "--idle", "--all-zones", "--dry-run")):
        fleet.clear_calls()
        assert run_tpuctl_process(*argv, env=fleet.env()).code == 0
        filters = sorted(parse_qs(c["query"]).get("filter", [""])[0] for c in fleet.calls()
                         if c["call"] == "compute.instances.aggregatedList")
        assert filters == ['labels.tpuctl-role = "host"', 'labels.tpuctl-role = "tpu"'], (argv, filters)
