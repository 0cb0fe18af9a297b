"""A fleet's views are linear in its size: ``status`` joins 20,000 clusters' VMs, TPUs and queued
resources, and ``cost`` groups their live nodes and runs, by indexing each list once (no cloud:
the lists are given). Label look-ups are counted, not timed, so a loaded machine cannot make the
test pass or fail: a scan per cluster needs about N*N/2 of them and stops the test at 20 per item."""

from __future__ import annotations

import pytest

from provision.basics.validate import CLUSTER_LABEL
from provision.billing import costs
from provision.cloud.base import Arch, QueuedRequest, QueuedState, TpuNode, TpuState, Vm, VmState
from provision.cluster.view import status

N = 20_000
ZONE = "us-central1-b"


class Budget:
    """How many cluster-label look-ups the code under test may make in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


class CountedLabels(dict):
    """A resource's labels that count each read of its cluster label against a shared budget."""

    def __init__(self, budget: Budget, cluster: str) -> None:
        super().__init__({CLUSTER_LABEL: cluster})
        self.budget = budget

    def __getitem__(self, key: str) -> str:
        if key == CLUSTER_LABEL:
            self.budget.used += 1
            if self.budget.used > self.budget.limit:
                pytest.fail(f"more than {self.budget.limit} cluster-label look-ups for {N} clusters: "
                            "a list is searched once per cluster")
        return super().__getitem__(key)


class Listed:
    """A provider as ``status`` reads it: three lists, given (no cloud)."""

    name = "gcp"
    project = "fleet"      # status reads this machine's cluster cache of it (none here): no preemption records read

    def __init__(self, vms: list[Vm], tpus: list[TpuNode], queued: list[QueuedRequest]) -> None:
        self.vms, self.tpus, self.queued = vms, tpus, queued

    def list_vms(self, zone, selector, *, metadata=False):
        return self.vms

    def list_tpus(self, zone, selector, *, metadata=False, near=(), api=None):
        return self.tpus

    def list_queued(self, zone, selector):
        return self.queued

    def price_book(self):
        return None


def names() -> list[str]:
    return [f"c{i:05d}" for i in range(N)]


def test_status_of_20000_clusters_joins_each_list_once():
    budget = Budget(limit=20 * 3 * N)
    vms = [Vm(name=f"{n}-host", zone=ZONE, state=VmState.RUNNING, labels=CountedLabels(budget, n))
           for n in reversed(names())]
    tpus = [TpuNode(name=n, zone=ZONE, arch=Arch.VM, accelerator_type="v5litepod-8", state=TpuState.READY,
                    labels=CountedLabels(budget, n)) for n in names()[::2]]
    # every third cluster has a queued resource too; its TPU (if any) is the one the request owns
    queued = [QueuedRequest(name=f"{n}-q", zone=ZONE, state=QueuedState.ACTIVE, accelerator_type="v5litepod-8",
                            node_names=[n], labels=CountedLabels(budget, n)) for n in names()[::3]]
    queued.append(QueuedRequest(name="lonely-q", zone="europe-west4-a", state=QueuedState.WAITING_FOR_RESOURCES,
                                accelerator_type="v5litepod-8", labels=CountedLabels(budget, "lonely")))

    views = status(Listed(vms, tpus, queued))

    assert [v.name for v in views] == sorted([*names(), "lonely"])
    by_name = {v.name: v for v in views}
    c6, c7 = by_name["c00006"], by_name["c00007"]
    assert c6.vm.name == "c00006-host" and c6.tpu.name == "c00006" and c6.queued.name == "c00006-q"
    assert c7.vm.name == "c00007-host" and c7.tpu is None and c7.queued is None
    assert by_name["lonely"].vm is None and by_name["lonely"].zone == "europe-west4-a"
    assert budget.used <= 20 * 3 * N


def test_cost_groups_a_fleets_live_nodes_and_runs_once_in_their_order():
    live = [{"cluster": n, "node": n, "zone": ZONE, "created_at": float(i)} for i, n in enumerate(names())]
    live += [{"cluster": "c00042", "node": "c00042-b", "zone": ZONE, "created_at": 1e9}]
    grouped = costs.group_by_cluster(live)
    assert len(grouped) == N
    assert [n["node"] for n in grouped["c00042"]] == ["c00042", "c00042-b"]
    assert grouped["c19999"] == [live[N - 1]]
