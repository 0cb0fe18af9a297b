"""How a node, a queued resource and an operation read in each API's JSON.

The REST handlers return these dicts as they are; the gRPC front end parses the same dicts into
the v1 protobuf messages, so both transports agree field for field.
"""

from __future__ import annotations

import copy
from typing import Any

from . import catalog
from .network import network_name, network_path
from .queued import Queued
from .store import Store, rfc3339
from .tpu import Node, Operation


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (None, "", [], {}, False)}


def _copy_json(value: Any) -> Any:
    """A copy of JSON-shaped data (dicts, lists, scalars): what copy.deepcopy makes of it, at a
    fraction of its cost on a fleet's list (no memo, no dispatch on type)."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


def node_v2(node: Node) -> dict[str, Any]:
    acc = catalog.tpu_type(node.accelerator_type)
    out = _drop_empty({
        "name": node.path,
        "description": node.description,
        "acceleratorType": node.accelerator_type,
        "state": node.state,
        "healthDescription": node.health_description,
        "runtimeVersion": node.version if node.api == "v2" else "",
        "networkConfig": _drop_empty({
            "network": network_path(node.project, node.network),
            "subnetwork": (f"projects/{node.project}/regions/{catalog.region_of(node.zone)}/subnetworks/"
                           f"{network_name(node.subnetwork)}" if node.subnetwork else ""),
            "enableExternalIps": node.external_ips,
            "canIpForward": node.can_ip_forward,
        }),
        "cidrBlock": node.cidr_block,
        "serviceAccount": node.service_account,
        "createTime": rfc3339(node.created),
        "schedulingConfig": _drop_empty({"preemptible": node.preemptible, "reserved": node.reserved,
                                         "spot": node.spot}),
        "networkEndpoints": _copy_json(node.endpoints),
        "health": node.health,
        "labels": dict(node.labels),
        "metadata": dict(node.metadata),
        "tags": list(node.tags),
        "id": node.id,
        "dataDisks": _copy_json(node.data_disks),
        "apiVersion": "V2" if node.api == "v2" else "V1",
        "queuedResource": node.queued_resource,
        "acceleratorConfig": ({"type": acc.config_type, "topology": acc.topology} if acc else None),
    })
    out.setdefault("shieldedInstanceConfig", {})
    return out


def node_v1(node: Node) -> dict[str, Any]:
    first = node.endpoints[0] if node.endpoints else None
    return _drop_empty({
        "name": node.path,
        "description": node.description,
        "acceleratorType": node.accelerator_type,
        "ipAddress": first["ipAddress"] if first else "",
        "port": str(first["port"]) if first else "",
        "state": node.state,
        "healthDescription": node.health_description,
        "tensorflowVersion": node.version if node.api == "v1" else "",
        "network": node.network_ref if node.api == "v1" else network_path(node.project, node.network),
        "cidrBlock": node.cidr_block,
        "serviceAccount": (f"service-{catalog.project_number(node.project)}@cloud-tpu.iam.gserviceaccount.com"
                           if node.api == "v1" else (node.service_account or {}).get("email", "")),
        "createTime": rfc3339(node.created),
        "schedulingConfig": _drop_empty({"preemptible": node.preemptible or node.spot,
                                         "reserved": node.reserved}),
        "networkEndpoints": [{"ipAddress": e["ipAddress"], "port": e["port"]} for e in node.endpoints],
        "health": node.health,
        "labels": dict(node.labels),
        "useServiceNetworking": node.use_service_networking,
        "apiVersion": "V1" if node.api == "v1" else "V2_ALPHA1",
    })


def node_view(node: Node, api: str) -> dict[str, Any]:
    return node_v1(node) if api == "v1" else node_v2(node)


def queued_json(qr: Queued) -> dict[str, Any]:
    state: dict[str, Any] = {"state": qr.state, "stateInitiator": qr.initiator}
    data_key = {"CREATING": "creatingData", "ACCEPTED": "acceptedData", "PROVISIONING": "provisioningData",
                "WAITING_FOR_RESOURCES": "waitingForResourcesData", "ACTIVE": "activeData",
                "SUSPENDING": "suspendingData", "SUSPENDED": "suspendedData",
                "DELETING": "deletingData", "FAILED": "failedData"}.get(qr.state)
    if data_key:
        state[data_key] = {"error": qr.error.status_json()} if qr.state == "FAILED" and qr.error else {}
    out: dict[str, Any] = {
        "name": qr.path, "createTime": rfc3339(qr.created),
        "tpu": {"nodeSpec": copy.deepcopy(qr.node_specs)}, "state": state,
    }
    for spec in out["tpu"]["nodeSpec"]:
        spec.setdefault("parent", f"projects/{qr.project}/locations/{qr.zone}")
    if qr.spot:
        out["spot"] = {}
    if qr.guaranteed is not None:
        out["guaranteed"] = qr.guaranteed
    if qr.best_effort:
        out["bestEffort"] = {}
    if qr.queueing_policy:
        out["queueingPolicy"] = qr.queueing_policy
    if qr.reservation_name:
        out["reservationName"] = qr.reservation_name
    return out


def operation_json(op: Operation, api: str | None = None) -> dict[str, Any]:
    api = api or op.api
    pkg = "v1" if api == "v1" else "v2"
    meta: dict[str, Any] = {"@type": f"type.googleapis.com/google.cloud.tpu.{pkg}.OperationMetadata",
                            "createTime": rfc3339(op.created), "target": op.target, "verb": op.verb,
                            "cancelRequested": op.cancel_requested, "apiVersion": pkg}
    if op.ended:
        meta["endTime"] = rfc3339(op.ended)
    out: dict[str, Any] = {"name": op.name, "metadata": meta, "done": op.done}
    if op.done and op.error is not None:
        out["error"] = op.error.status_json()
    elif op.done:
        if isinstance(op.response, Node):
            out["response"] = {"@type": f"type.googleapis.com/google.cloud.tpu.{pkg}.Node",
                               **node_view(op.response, pkg)}
        elif isinstance(op.response, Queued):
            out["response"] = {"@type": "type.googleapis.com/google.cloud.tpu.v2.QueuedResource",
                               **queued_json(op.response)}
        else:
            out["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
    return out


def snapshot_all(store: Store) -> dict[str, Any]:
    return {
        "nodes": [{**node_v2(n), "createdBy": n.api, "zone": n.zone} for n in
                  sorted(store.nodes.values(), key=lambda n: n.seq)],
        "queuedResources": [queued_json(q) for q in sorted(store.queued.values(), key=lambda q: q.seq)],
        "operations": [operation_json(op) for op in store.tpu_ops.values()],
    }
