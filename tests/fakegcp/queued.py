"""Queued resources: ask for TPU capacity and get it when the zone has some.

ACCEPTED, then PROVISIONING (the nodes are created, CREATING) after ``queued_provisioning``
seconds, then ACTIVE once the nodes are READY. While the zone is stocked out the request is
WAITING_FOR_RESOURCES and retries every ``queued_provisioning`` seconds; if its queueing policy's
valid-until passes first it is FAILED. Losing its node (preemption, deletion) SUSPENDS it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import errors
from .errors import ApiError
from .store import Store
from .tpu import (
    Node,
    Operation,
    check_location,
    check_node_id,
    endpoints,
    finish,
    new_operation,
    node_from_body,
    range_conflict,
    snapshot,
)


@dataclass
class Queued:
    project: str
    zone: str
    qr_id: str
    node_specs: list[dict[str, Any]]
    spot: bool = False
    guaranteed: dict[str, Any] | None = None
    best_effort: bool = False
    queueing_policy: dict[str, Any] = field(default_factory=dict)
    reservation_name: str = ""
    created: float = field(default_factory=time.time)
    state: str = "CREATING"
    initiator: str = "USER"
    error: ApiError | None = None
    valid_until: float | None = None          # wall clock
    seq: int = 0

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/queuedResources/{self.qr_id}"

    @property
    def node_keys(self) -> list[tuple[str, str, str]]:
        return [(self.project, self.zone, spec.get("nodeId", "")) for spec in self.node_specs]


def create_queued(store: Store, project: str, zone: str, qr_id: str | None, body: dict[str, Any]) -> Operation:
    check_location(store, project, zone)
    qr_id = check_node_id(qr_id, "queued_resource_id")
    key = (project, zone, qr_id)
    if key in store.queued:
        raise errors.already_exists(f"projects/{project}/locations/{zone}/queuedResources/{qr_id}")
    specs = list(((body.get("tpu") or {}).get("nodeSpec")) or [])
    if not specs:
        raise errors.invalid("Invalid value for field 'queued_resource.tpu.node_spec': at least one "
                             "node spec is required.")
    for spec in specs:
        check_node_id(spec.get("nodeId"), "node_spec.node_id")
        spec_zone = (spec.get("parent") or f"projects/{project}/locations/{zone}").rsplit("/", 1)[-1]
        node_from_body(store, project, spec_zone, spec["nodeId"], spec.get("node") or {}, "v2")
    policy = dict(body.get("queueingPolicy") or {})
    qr = Queued(project, zone, qr_id, specs, spot="spot" in body, guaranteed=body.get("guaranteed"),
                best_effort="bestEffort" in body, queueing_policy=policy,
                reservation_name=body.get("reservationName") or "", seq=store.seq())
    qr.valid_until = _valid_until(policy, qr.created)
    store.queued[key] = qr
    op = new_operation(store, "v2", project, zone, "create", qr.path)
    qr.state = "ACCEPTED"
    finish(store, op, response=snapshot(qr))
    fault = store.take_op_fault()      # POST /_admin/fault, where "operation": the request FAILS
    if fault is not None:
        store.schedule(store.latencies.of("queued_provisioning"), lambda: _fail(store, qr, fault, []))
        return op
    store.schedule(store.latencies.of("queued_provisioning"), lambda: _try_provision(store, qr))
    if qr.valid_until is not None:
        store.schedule(max(0.0, qr.valid_until - time.time()), lambda: _expire(store, qr))
    return op


def _duration(text: Any) -> float:
    return float(str(text).rstrip("s") or 0)


def _valid_until(policy: dict[str, Any], created: float) -> float | None:
    if "validUntilDuration" in policy:
        return created + _duration(policy["validUntilDuration"])
    if "validUntilTime" in policy:
        return datetime.fromisoformat(str(policy["validUntilTime"]).replace("Z", "+00:00")).timestamp()
    interval = policy.get("validInterval") or {}
    if "endTime" in interval:
        return datetime.fromisoformat(str(interval["endTime"]).replace("Z", "+00:00")).timestamp()
    return None


def _live(store: Store, qr: Queued) -> bool:
    return store.queued.get((qr.project, qr.zone, qr.qr_id)) is qr


def _expire(store: Store, qr: Queued) -> None:
    if _live(store, qr) and qr.state in ("ACCEPTED", "WAITING_FOR_RESOURCES", "CREATING"):
        qr.state, qr.initiator = "FAILED", "SERVICE"
        qr.error = ApiError(4, f"The queued resource {qr.path} could not be provisioned before its "
                               "valid-until time.")


def _try_provision(store: Store, qr: Queued) -> None:
    if not _live(store, qr) or qr.state not in ("ACCEPTED", "WAITING_FOR_RESOURCES"):
        return
    if qr.valid_until is not None and time.time() >= qr.valid_until:
        _expire(store, qr)
        return
    if store.faults.take_stockout("tpu", qr.zone):
        qr.state = "WAITING_FOR_RESOURCES"
        store.schedule(store.latencies.of("queued_provisioning"), lambda: _try_provision(store, qr))
        return
    qr.state = "PROVISIONING"
    nodes = []
    for spec in qr.node_specs:
        zone = (spec.get("parent") or f"projects/{qr.project}/locations/{qr.zone}").rsplit("/", 1)[-1]
        if (qr.project, zone, spec["nodeId"]) in store.nodes:
            _fail(store, qr, errors.already_exists(f"projects/{qr.project}/locations/{zone}/nodes/{spec['nodeId']}"),
                  nodes)
            return
        node, _ = node_from_body(store, qr.project, zone, spec["nodeId"], spec.get("node") or {}, "v2")
        node.queued_resource = qr.path
        if qr.spot:
            node.spot = True
        store.nodes[node.key] = node
        nodes.append(node)

    def ready() -> None:
        if not _live(store, qr) or qr.state != "PROVISIONING":
            return
        for node in nodes:
            conflict = range_conflict(store, node)
            if conflict:
                _fail(store, qr, conflict, nodes)
                return
        for node in nodes:
            if store.nodes.get(node.key) is node and node.state == "CREATING":
                node.state, node.health = "READY", "HEALTHY"
                node.endpoints = endpoints(store, node)
        qr.state = "ACTIVE"
    store.schedule(store.latencies.of("tpu_create"), ready)


def _fail(store: Store, qr: Queued, error: ApiError, nodes: list[Node]) -> None:
    for node in nodes:
        if store.nodes.get(node.key) is node:
            del store.nodes[node.key]
    qr.state, qr.initiator, qr.error = "FAILED", "SERVICE", error


def get_queued(store: Store, project: str, zone: str, qr_id: str) -> Queued:
    check_location(store, project, zone)
    qr = store.queued.get((project, zone, qr_id))
    if qr is None:
        raise errors.not_found(f"projects/{project}/locations/{zone}/queuedResources/{qr_id}")
    return qr


def list_queued(store: Store, project: str, zone: str) -> list[Queued]:
    """Zone ``-`` lists every zone, as ``gcloud compute tpus queued-resources list --zone=-`` does."""
    check_location(store, project, zone)
    return sorted((q for q in store.queued.values() if q.project == project and zone in ("-", q.zone)),
                  key=lambda q: q.seq)


def delete_queued(store: Store, project: str, zone: str, qr_id: str, force: bool) -> Operation:
    qr = get_queued(store, project, zone, qr_id)
    live_nodes = [store.nodes[k] for k in qr.node_keys
                  if k in store.nodes and store.nodes[k].queued_resource == qr.path]
    if live_nodes and not force:
        raise ApiError(9, f"Queued resource {qr.path} has nodes ({', '.join(n.node_id for n in live_nodes)}); "
                          "delete them first or pass force=true.")
    for node in live_nodes:
        node.state = "DELETING"
    qr.state = "DELETING"
    op = new_operation(store, "v2", project, zone, "delete", qr.path)

    def gone() -> None:
        for node in live_nodes:
            if store.nodes.get(node.key) is node:
                del store.nodes[node.key]
        store.queued.pop((qr.project, qr.zone, qr.qr_id), None)
        finish(store, op, response="empty")
    store.schedule(store.latencies.of("tpu_delete"), gone)
    return op


def reset_queued(store: Store, project: str, zone: str, qr_id: str) -> Operation:
    qr = get_queued(store, project, zone, qr_id)
    if qr.state not in ("SUSPENDED", "FAILED"):
        raise ApiError(9, f"Queued resource {qr.path} can only be reset when SUSPENDED or FAILED, "
                          f"not {qr.state}.")
    qr.state, qr.initiator, qr.error = "ACCEPTED", "USER", None
    op = new_operation(store, "v2", project, zone, "reset", qr.path)
    finish(store, op, response=snapshot(qr))
    store.schedule(store.latencies.of("queued_provisioning"), lambda: _try_provision(store, qr))
    return op
