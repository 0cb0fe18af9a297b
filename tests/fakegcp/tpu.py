"""Cloud TPU nodes and their long-running operations, for both API versions.

One store of nodes serves two views. A node records which API created it (``api`` "v1" for a TPU
Node, "v2" for a TPU VM) and both APIs list every node in a zone, each rendering it in its own
schema with ``apiVersion`` saying who created it (v1's enum has no V2, so a TPU VM reads
``V2_ALPHA1`` there). Creation outcomes that the real service reports late (stockout, CIDR
conflict, quota when configured so) are decided at create time but delivered when the operation
completes, after ``tpu_create`` seconds.

TPU Nodes are closed: a v1 create is refused (FAILED_PRECONDITION) unless the project has been
granted Node access (``store.tpu_node_projects``, the admin's ``tpu-node-access``), as Google has
refused new TPU Nodes since 2025 to every project the Cloud TPU team did not allow.
"""

from __future__ import annotations

import copy
import ipaddress
import math
import time
from dataclasses import dataclass, field
from typing import Any

from . import catalog, errors
from .errors import ApiError
from .network import (
    allocate_ip,
    ensure_project,
    get_network,
    network_name,
    network_path,
    subnet_for,
    used_ranges,
    valid_name,
)
from .store import Store

PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]


@dataclass
class Node:
    project: str
    zone: str
    node_id: str
    api: str                                  # "v1" (TPU Node) or "v2" (TPU VM)
    accelerator_type: str
    version: str                              # runtimeVersion (v2) or tensorflowVersion (v1)
    network: str = "default"
    network_ref: str = "default"              # as the caller spelled it (v1 echoes it back)
    subnetwork: str | None = None
    cidr_block: str | None = None
    description: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    preemptible: bool = False
    spot: bool = False
    reserved: bool = False
    external_ips: bool = False
    can_ip_forward: bool = False
    service_account: dict[str, Any] | None = None
    use_service_networking: bool = False
    data_disks: list[dict[str, Any]] = field(default_factory=list)
    accelerator_config: dict[str, Any] | None = None
    queued_resource: str | None = None
    id: str = ""
    seq: int = 0
    created: float = field(default_factory=time.time)
    state: str = "CREATING"
    health: str = ""
    health_description: str = ""
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    preempted: bool = False       # its workers' metadata says instance/preempted TRUE (notice given)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.node_id}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.zone, self.node_id)


@dataclass
class Operation:
    name: str
    api: str
    zone: str
    verb: str
    target: str
    created: float = field(default_factory=time.time)
    done: bool = False
    ended: float | None = None
    error: ApiError | None = None
    response: Any = None                      # a Node or Queued snapshot, or "empty"
    cancel_requested: bool = False


# -- validation ------------------------------------------------------------------------------------
def check_location(store: Store, project: str, zone: str) -> None:
    """Known zones, and ``-`` (every zone) for lists, as the real API accepts."""
    ensure_project(store, project)
    if zone != "-" and zone not in catalog.ZONES and zone not in store.extra_tpu_types:
        raise ApiError(5, f"Location projects/{project}/locations/{zone} is not found or access is "
                          "unauthorized.")


def check_node_id(node_id: str | None, what: str = "node_id") -> str:
    if not node_id or not valid_name(node_id):
        raise errors.invalid(f"Invalid value for field '{what}': '{node_id or ''}'. Must be 1-63 "
                             "characters: lowercase letters, digits and hyphens, starting with a letter.")
    return node_id


def required_prefix(acc: catalog.TpuType) -> int:
    """A TPU Node block needs two addresses per host and is at least a /29."""
    return 32 - math.ceil(math.log2(max(8, 2 * acc.hosts)))


def _check_cidr(cidr: str, acc: catalog.TpuType) -> str:
    try:
        net = ipaddress.ip_network(cidr, strict=True)
    except ValueError:
        raise errors.invalid(f"Invalid value for field 'node.cidr_block': '{cidr}'. "
                             "Must be a valid IPv4 CIDR block such as 10.240.0.0/29.") from None
    if net.version != 4 or not any(net.subnet_of(p) for p in PRIVATE):
        raise errors.invalid(f"Invalid value for field 'node.cidr_block': '{cidr}'. The CIDR block "
                             "must be within 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16.")
    need = required_prefix(acc)
    if net.prefixlen > need:
        raise errors.invalid(f"Invalid value for field 'node.cidr_block': '{cidr}'. Accelerator "
                             f"type {acc.name} needs a /{need} block or larger.")
    return str(net)


def _resolve_type(store: Store, zone: str, name: str | None) -> catalog.TpuType:
    acc = catalog.tpu_type(name or "")
    if acc is None:
        raise errors.invalid(f"Invalid value for field 'node.accelerator_type': '{name or ''}'. "
                             "Unknown accelerator type.")
    if name not in catalog.tpu_types_in(zone, store.extra_tpu_types):
        raise errors.invalid(f"Accelerator type \"{name}\" is not available in zone \"{zone}\"; "
                             "see https://cloud.google.com/tpu/docs/regions-zones")
    return acc


def node_from_body(store: Store, project: str, zone: str, node_id: str, body: dict[str, Any],
                   api: str) -> tuple[Node, catalog.TpuType]:
    """Validate a create request (v1 or v2 JSON) into a CREATING node."""
    sched = body.get("schedulingConfig") or {}
    if api == "v1":
        acc_name = body.get("acceleratorType")
        version = body.get("tensorflowVersion") or ""
        if not catalog.tensorflow_version_ok(version):
            raise errors.invalid(f"Invalid value for field 'node.tensorflow_version': '{version}'. "
                                 "Unknown TensorFlow version.")
        net_ref = body.get("network") or "default"
        subnetwork, external, can_fwd = None, False, False
    else:
        acc_name = body.get("acceleratorType") or catalog.type_from_config(body.get("acceleratorConfig") or {})
        version = body.get("runtimeVersion") or ""
        acc = _resolve_type(store, zone, acc_name)
        if version not in catalog.runtime_versions_in(zone, store.extra_tpu_types) \
                or not catalog.runtime_serves(version, acc.generation):
            # No pasted v2 refusal of an unknown runtime version was found in public issue threads;
            # the closest is the v1 API's for an unknown TensorFlow version (tensorflow/tpu#877):
            # 'Error 400: Cloud TPU received an invalid argument. The field "TensorflowVersion"
            # cannot be "2.4". [EID: 0x90dfdfda32f61e59], badRequest'. Same wording, v2 field name.
            raise errors.invalid(f'Cloud TPU received an invalid argument. The field "RuntimeVersion" cannot '
                                 f'be "{version}".')
        netcfg = body.get("networkConfig") or {}
        net_ref = netcfg.get("network") or "default"
        subnetwork = netcfg.get("subnetwork") or None
        external = bool(netcfg.get("enableExternalIps", False))
        can_fwd = bool(netcfg.get("canIpForward", False))
    acc = _resolve_type(store, zone, acc_name)
    network = network_name(net_ref)
    get_network(store, project, network)  # NOT_FOUND for an unknown network
    cidr = body.get("cidrBlock") or None
    if cidr:
        cidr = _check_cidr(cidr, acc)
    config = body.get("acceleratorConfig")
    node = Node(
        project=project, zone=zone, node_id=node_id, api=api, accelerator_type=acc.name,
        version=version, network=network, network_ref=net_ref, subnetwork=subnetwork,
        cidr_block=cidr, description=body.get("description") or "",
        labels=dict(body.get("labels") or {}), metadata=dict(body.get("metadata") or {}),
        tags=list(body.get("tags") or []), preemptible=bool(sched.get("preemptible", False)),
        spot=bool(sched.get("spot", False)), reserved=bool(sched.get("reserved", False)),
        external_ips=external, can_ip_forward=can_fwd,
        service_account=body.get("serviceAccount") if isinstance(body.get("serviceAccount"), dict) else None,
        use_service_networking=bool(body.get("useServiceNetworking", False)),
        data_disks=list(body.get("dataDisks") or []),
        accelerator_config=dict(config) if isinstance(config, dict) else None,
        id=store.new_id(), seq=store.seq(),
    )
    return node, acc


# -- operations ---------------------------------------------------------------------------------
def new_operation(store: Store, api: str, project: str, zone: str, verb: str, target: str) -> Operation:
    name = f"projects/{project}/locations/{zone}/operations/operation-{store.op_suffix()}"
    op = Operation(name, api, zone, verb, target)
    store.tpu_ops[name] = op
    return op


def finish(store: Store, op: Operation, *, error: ApiError | None = None, response: Any = None) -> None:
    op.done, op.ended, op.error = True, time.time(), error
    op.response = None if error else response
    store.cond.notify_all()


def get_operation(store: Store, name: str) -> Operation:
    op = store.tpu_ops.get(name)
    if op is None:
        raise errors.not_found(name)
    return op


def list_operations(store: Store, project: str, zone: str) -> list[Operation]:
    prefix = f"projects/{project}/locations/{zone}/operations/"
    return [op for op in store.tpu_ops.values() if op.name.startswith(prefix)]


# -- nodes ----------------------------------------------------------------------------------------
def create_node(store: Store, project: str, zone: str, node_id: str | None, body: dict[str, Any],
                api: str) -> Operation:
    check_location(store, project, zone)
    if zone == "-":
        raise errors.invalid("Invalid value for field 'parent': a node is created in one zone, not '-'.")
    node_id = check_node_id(node_id)
    if (project, zone, node_id) in store.nodes:
        raise errors.already_exists(f"projects/{project}/locations/{zone}/nodes/{node_id}")
    node, acc = node_from_body(store, project, zone, node_id, body, api)
    if api == "v1" and (store.faults.node_arch_denied or project not in store.tpu_node_projects):
        raise node_denied()
    region = catalog.region_of(zone)
    rule = store.faults.take_quota(region, "call", zone)
    if rule:
        raise _quota_error(rule, acc, node, region)
    if api == "v1" and not node.cidr_block:
        node.cidr_block = _auto_block(store, node, acc)
    fate: ApiError | None = store.take_op_fault()      # POST /_admin/fault, where "operation"
    if fate is not None:
        pass
    elif store.faults.take_stockout("tpu", zone):
        fate = errors.stockout(zone)
    elif (rule := store.faults.take_quota(region, "operation", zone)) is not None:
        fate = _quota_error(rule, acc, node, region)
    elif store.faults.take_cidr_conflict():
        fate = errors.cidr_conflict(node.cidr_block or _subnet_range(store, node),
                                    network_path(project, node.network))
    store.nodes[node.key] = node
    op = new_operation(store, api, project, zone, "create", node.path)
    store.schedule(store.latencies.of("tpu_create"), lambda: _complete_create(store, node, op, fate))
    return op


def node_denied() -> ApiError:
    """Google's refusal of a new TPU Node (v1 create) to a project without Node access, since 2025.

    Quoted from gcloud's output in skypilot-org/skypilot#5593 ("ERROR: (gcloud.compute.tpus.create)
    FAILED_PRECONDITION: Your request to provision TPU Node has been denied. ..."): the create call
    itself fails, FAILED_PRECONDITION (HTTP 400), before any operation exists.
    """
    return ApiError(9, "Your request to provision TPU Node has been denied. Please migrate to TPU "
                       "VM Architecture or contact Cloud TPU team to gain TPU Node access. "
                       "https://cloud.google.com/tpu/docs/system-architecture-tpu-vm#from-tpu-node-to-tpu-vm")


def _quota_error(rule: Any, acc: catalog.TpuType, node: Node, region: str) -> ApiError:
    if rule.metric:
        metric = rule.metric
    else:
        prefix = {"v2": "TPUV2s", "v3": "TPUV3s", "v4": "TPUV4s", "v5p": "TPUV5ps",
                  "v5litepod": "TPUV5s", "v6e": "TPUV6E"}[acc.generation]
        kind = "Preemptible" if (node.preemptible or node.spot) else ""
        shape = "Litepod" if acc.generation == "v5litepod" else ("Pod" if acc.hosts > 1 else "")
        per = "Zone" if getattr(rule, "zone", None) else "Region"
        metric = f"{prefix}{kind}{shape}PerProjectPer{per}ForTPUAPI"
    return errors.quota_exceeded(metric, rule.limit, region, at=rule.at, zone=getattr(rule, "zone", None))


def _subnet_range(store: Store, node: Node) -> str:
    try:
        return subnet_for(store, node.project, node.network, catalog.region_of(node.zone), node.subnetwork).cidr
    except ApiError:
        return "0.0.0.0/0"


def _auto_block(store: Store, node: Node, acc: catalog.TpuType) -> str:
    """The API picks a free block when a TPU Node names none (first fit in 10.240.0.0/16)."""
    prefix = required_prefix(acc)
    taken = [u.cidr for u in used_ranges(store, node.project, node.network)]
    taken += [ipaddress.ip_network(n.cidr_block) for n in store.nodes.values()
              if n.cidr_block and n.project == node.project and n.network == node.network]
    for cand in ipaddress.ip_network("10.240.0.0/16").subnets(new_prefix=prefix):
        if not any(cand.overlaps(t) for t in taken):
            return str(cand)
    raise ApiError(8, "No free IP range of the required size is left on the network.")


def range_conflict(store: Store, node: Node) -> ApiError | None:
    """The check the real service makes when it wires the TPU's block into the network."""
    if not node.cidr_block:
        return None
    block = ipaddress.ip_network(node.cidr_block)
    for used in used_ranges(store, node.project, node.network):
        if used.owner_node == node.node_id:
            continue  # an address reserved for this very node
        if block.overlaps(used.cidr):
            return errors.cidr_conflict(node.cidr_block, network_path(node.project, node.network))
    for other in store.nodes.values():
        if (other is not node and other.cidr_block and other.project == node.project
                and other.network == node.network and other.seq < node.seq
                and block.overlaps(ipaddress.ip_network(other.cidr_block))):
            return errors.cidr_conflict(node.cidr_block, network_path(node.project, node.network))
    return None


def _complete_create(store: Store, node: Node, op: Operation, fate: ApiError | None) -> None:
    if store.nodes.get(node.key) is not node:
        finish(store, op, error=ApiError(10, f"The node {node.path} was deleted before it finished creating."))
        return
    if node.state != "CREATING":       # preempted (or otherwise changed) while creating
        finish(store, op, response=snapshot(node))
        return
    fate = fate or range_conflict(store, node)
    if fate:
        del store.nodes[node.key]
        _on_node_gone(store, node)
        finish(store, op, error=fate)
        return
    node.state, node.health = "READY", "HEALTHY"
    node.endpoints = endpoints(store, node)
    finish(store, op, response=snapshot(node))


def endpoints(store: Store, node: Node) -> list[dict[str, Any]]:
    acc = catalog.tpu_type(node.accelerator_type)
    hosts = acc.hosts if acc else 1
    if node.api == "v1" and node.cidr_block:
        base = ipaddress.ip_network(node.cidr_block).network_address
        return [{"ipAddress": str(base + 2 + i), "port": 8470} for i in range(hosts)]
    sub = subnet_for(store, node.project, node.network, catalog.region_of(node.zone), node.subnetwork)
    out = []
    for _ in range(hosts):
        ep: dict[str, Any] = {"ipAddress": allocate_ip(store, sub), "port": 8470}
        if node.external_ips:
            ep["accessConfig"] = {"externalIp": store.next_external_ip()}
        out.append(ep)
    return out


def snapshot(obj: Any) -> Any:
    return copy.deepcopy(obj)


def get_node(store: Store, project: str, zone: str, node_id: str) -> Node:
    check_location(store, project, zone)
    node = store.nodes.get((project, zone, node_id))
    if node is None:
        raise errors.not_found(f"projects/{project}/locations/{zone}/nodes/{node_id}")
    return node


def list_nodes(store: Store, project: str, zone: str) -> list[Node]:
    check_location(store, project, zone)
    if zone == "-":
        nodes = [n for n in store.nodes.values() if n.project == project]
    else:
        nodes = [n for n in store.nodes.values() if n.project == project and n.zone == zone]
    return sorted(nodes, key=lambda n: n.seq)


def delete_node(store: Store, project: str, zone: str, node_id: str, api: str) -> Operation:
    node = get_node(store, project, zone, node_id)
    op = new_operation(store, api, project, zone, "delete", node.path)
    if node.state != "DELETING":
        node.state = "DELETING"

    def gone() -> None:
        if store.nodes.get(node.key) is node:
            del store.nodes[node.key]
            _on_node_gone(store, node)
        # v1's DeleteNode answers with the deleted Node, v2's with Empty.
        finish(store, op, response=snapshot(node) if api == "v1" else "empty")
    store.schedule(store.latencies.of("tpu_delete"), gone)
    return op


def _on_node_gone(store: Store, node: Node) -> None:
    """A queued resource whose node disappears is SUSPENDED, as the service does after a preemption."""
    if node.queued_resource:
        for qr in store.queued.values():
            if qr.path == node.queued_resource and qr.state == "ACTIVE":
                qr.state, qr.initiator = "SUSPENDED", "SERVICE"


def transition(store: Store, project: str, zone: str, node_id: str, api: str, verb: str,
               version: str | None = None) -> Operation:
    """stop, start and reimage: READY <-> STOPPED, READY -> REIMAGING -> READY."""
    node = get_node(store, project, zone, node_id)
    allowed = {"stop": ("READY",), "start": ("STOPPED",), "reimage": ("READY",)}[verb]
    if node.state not in allowed:
        raise ApiError(9, f"Cannot {verb} node {node.path} in state {node.state}.")
    passing, final, latency = {"stop": ("STOPPING", "STOPPED", "tpu_stop"),
                               "start": ("STARTING", "READY", "tpu_start"),
                               "reimage": ("REIMAGING", "READY", "tpu_create")}[verb]
    node.state = passing
    op = new_operation(store, api, project, zone, verb, node.path)

    def done() -> None:
        if store.nodes.get(node.key) is node and node.state == passing:
            node.state = final
            node.health = "HEALTHY" if final == "READY" else ""
            if version:
                node.version = version
        finish(store, op, response=snapshot(node))
    store.schedule(store.latencies.of(latency), done)
    return op


def update_node(store: Store, project: str, zone: str, node_id: str, body: dict[str, Any],
                mask: str | None, api: str) -> Operation:
    node = get_node(store, project, zone, node_id)
    fields = [f.strip() for f in (mask or "").split(",") if f.strip()] or list(body)
    for f in fields:
        if f == "labels":
            node.labels = dict(body.get("labels") or {})
        elif f == "description":
            node.description = body.get("description") or ""
        elif f == "metadata":
            node.metadata = dict(body.get("metadata") or {})
        elif f == "tags":
            node.tags = list(body.get("tags") or [])
        elif f not in ("name",):
            raise errors.invalid(f"Invalid value for field 'update_mask': '{f}' cannot be updated.")
    op = new_operation(store, api, project, zone, "update", node.path)
    finish(store, op, response=snapshot(node))
    return op


def preempt_node(store: Store, project: str, zone: str, node_id: str, *, notice_s: float = 0.0) -> Node:
    """The service preempts a TPU VM: every worker's metadata server answers ``instance/preempted``
    TRUE at once, and ``notice_s`` later the node is PREEMPTED (its workers powered off).

    A TPU VM's workers are Compute Engine VMs ("TPU VMs are instances of Compute Engine VMs with
    attached TPU hardware", docs.cloud.google.com/tpu/docs/prepare-for-maintenance; TPU Spot VMs
    defer to "the Compute Engine documentation about Spot VMs", tpu/docs/spot), so their guests are
    told as a Compute Engine Spot VM's is: ``instance/preempted`` turns TRUE with the ACPI soft-off,
    and the power-off follows 30 s later (compute v1 discovery document,
    ``Scheduling.skipGuestOsShutdown``). What the TPU API then reports is the node's state going
    from READY to PREEMPTED (tpu/docs/preemptible). A TPU Node (v1) has no guest of its own: the
    flag is set, but nothing of the user's reads it. A node deleted (or recreated under the same
    name) within the notice is left alone: the power-off was for the node that got the notice.
    ``notice_s`` 0 is the hard kill: the node is PREEMPTED with ``instance/preempted`` never TRUE
    (no notice reached its workers, so nothing of the user's could have saved on one)."""
    node = get_node(store, project, zone, node_id)
    if notice_s > 0:
        node.preempted = True
        store.cond.notify_all()

    def off() -> None:
        if store.nodes.get(node.key) is not node or node.state in ("DELETING", "PREEMPTED", "TERMINATED"):
            return
        set_node_state(store, project, zone, node_id, "PREEMPTED", None, None)
        store.cond.notify_all()

    if notice_s > 0:
        store.schedule(notice_s, off)
    else:
        off()
    return node


def set_node_state(store: Store, project: str, zone: str, node_id: str, state: str | None,
                   health: str | None, description: str | None) -> Node:
    """The admin's preemption, termination or health change, as the service would apply it."""
    node = get_node(store, project, zone, node_id)
    if state:
        node.state = state
        if state in ("PREEMPTED", "TERMINATED"):
            node.health = ""
            _on_node_gone(store, node)
    if health is not None:
        node.health = health
    if description is not None:
        node.health_description = description
    return node
