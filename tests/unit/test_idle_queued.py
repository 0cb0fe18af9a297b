"""Pure: which queued resources without a node ``down --idle`` deletes, and what quota they hold.

States are google-cloud-tpu's ``tpu_v2.QueuedResourceState.State``. A FAILED request "remains in
the queue until it is explicitly deleted" and a SUSPENDED one is "no longer eligible for further
allocation" (cloud.google.com/tpu/docs/queued-resources); both keep holding quota
(marin-community/marin#87), so they go. A waiting one is kept while its cluster has anything else.
"""

from __future__ import annotations

import pytest

from provision.billing.idle import judge_queued
from provision.cloud.base import QueuedRequest, QueuedState, TpuNode

NOW = 1_000_000.0
HOUR = 3600.0


def req(state: str, *, age: float = 10.0, labels: dict | None = None, **kw) -> QueuedRequest:
    return QueuedRequest(name="bert", zone="us-central1-b", state=QueuedState(state), accelerator_type="v2-8",
                         created_at=NOW - age, node_names=["bert"],
                         labels={"tpuctl-cluster": "bert", **(labels or {})}, **kw)


@pytest.mark.parametrize("state", ["FAILED", "SUSPENDED"])
@pytest.mark.parametrize("more", [True, False])
def test_dead_requests_go_whatever_else_the_cluster_has(state, more):
    v = judge_queued(req(state, error="no capacity"), now=NOW, idle_for=HOUR, cluster_has_more=more)
    assert v.delete and v.reason.startswith(state) and "holds its quota until deleted" in v.reason


@pytest.mark.parametrize("state", ["WAITING_FOR_RESOURCES", "ACCEPTED", "CREATING"])
def test_a_waiting_request_is_kept_while_its_cluster_exists(state):
    v = judge_queued(req(state, age=10 * HOUR), now=NOW, idle_for=HOUR, cluster_has_more=True)
    assert not v.delete and "which still exists" in v.reason


def test_a_waiting_request_of_a_cluster_with_nothing_else_goes_after_idle_for():
    young = judge_queued(req("WAITING_FOR_RESOURCES", age=60), now=NOW, idle_for=HOUR, cluster_has_more=False)
    old = judge_queued(req("WAITING_FOR_RESOURCES", age=2 * HOUR), now=NOW, idle_for=HOUR, cluster_has_more=False)
    assert not young.delete and "under --idle-for" in young.reason
    assert old.delete and "nothing else left" in old.reason


@pytest.mark.parametrize("state", ["PROVISIONING", "ACTIVE", "SUSPENDING"])
def test_a_request_with_a_node_is_judged_through_its_node(state):
    assert not judge_queued(req(state, age=10 * HOUR), now=NOW, idle_for=HOUR, cluster_has_more=False).delete


def test_keep_label_and_deleting_are_never_touched():
    for r in (req("FAILED", labels={"tpuctl-keep": "true"}), req("DELETING")):
        assert not judge_queued(r, now=NOW, idle_for=HOUR, cluster_has_more=False).delete


def test_quota_comes_from_the_catalogue():
    assert req("FAILED").quota() == "v2-8: 8 TensorCores, 4 chips (on-demand)"
    assert QueuedRequest("x", "z", QueuedState.FAILED, "v5litepod-8", spot=True).quota() == \
        "v5litepod-8: 8 TensorCores, 8 chips (spot)"
    assert QueuedRequest("x", "z", QueuedState.FAILED, "").quota() == "an unknown TPU type (on-demand)"


def test_force_is_for_requests_that_hold_nodes_and_a_request_owns_its_node():
    assert {s for s in QueuedState if req(s.value).holds_nodes} == {
        QueuedState.PROVISIONING, QueuedState.ACTIVE, QueuedState.SUSPENDING}
    from provision.cloud.base import Arch, TpuState

    mine = TpuNode("bert", "us-central1-b", Arch.VM, "v2-8", TpuState.READY)
    other_zone = TpuNode("bert", "us-central1-c", Arch.VM, "v2-8", TpuState.READY)
    assert req("ACTIVE").owns(mine) and not req("ACTIVE").owns(other_zone)
