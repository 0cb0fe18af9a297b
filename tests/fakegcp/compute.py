"""Compute Engine instances, zones, regions, projects and images under ``/compute/v1/``.

Instances go PROVISIONING -> STAGING -> RUNNING over ``vm_create`` seconds and STOPPING -> gone
over ``vm_delete``; the insert and delete operations finish when they get there. As on the real
API, a duplicate name is not refused by ``insert`` itself: its operation fails (409).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import catalog, discovery
from .compute_ops import OpError, fault_error, get_op, new_op, op_json, wait_op
from .errors import ApiError
from .filters import compile_with_roots
from .metadata import instance_fingerprint, project_metadata
from .network import (
    allocate_ip,
    ensure_project,
    get_network,
    network_name,
    network_path,
    subnet_for,
    valid_name,
)
from .routing import Request, Router
from .store import Store, compute_time

SERVICE = "compute.googleapis.com"
P = "/compute/v1/projects/{project}"


@dataclass
class Instance:
    project: str
    zone: str
    name: str
    id: str
    machine_type: str
    network: str
    subnetwork: str
    internal_ip: str
    external_ip: str | None
    labels: dict[str, str] = field(default_factory=dict)
    metadata: list[dict[str, str]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    disks: list[dict[str, Any]] = field(default_factory=list)
    scheduling: dict[str, Any] = field(default_factory=dict)
    service_accounts: list[dict[str, Any]] = field(default_factory=list)
    description: str = ""
    created: float = field(default_factory=time.time)
    status: str = "PROVISIONING"
    seq: int = 0
    preempted: bool = False       # the guest's metadata says instance/preempted TRUE (notice given)
    reservation_affinity: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.zone, self.name)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"


def check_zone(store: Store, project: str, zone: str) -> None:
    ensure_project(store, project)
    if zone not in catalog.ZONES:
        raise ApiError(3, f"Invalid value for field 'zone': '{zone}'. Unknown zone.", http=400,
                       compute_reason="invalid")


def check_region(store: Store, project: str, region: str) -> None:
    ensure_project(store, project)
    if region not in catalog.REGIONS:
        raise ApiError(5, f"The resource 'projects/{project}/regions/{region}' was not found",
                       compute_reason="notFound")


def _short(ref: str | None) -> str:
    return (ref or "").rstrip("/").rsplit("/", 1)[-1]


def insert_instance(store: Store, project: str, zone: str, body: dict[str, Any]) -> Any:
    check_zone(store, project, zone)
    discovery.check("compute.instances.insert", body)
    name = body.get("name") or ""
    check_instance_body(store, project, zone, body)
    target = f"projects/{project}/zones/{zone}/instances/{name}"
    latency = store.latencies.of("vm_create")
    if (project, zone, name) in store.instances:
        err = OpError("RESOURCE_ALREADY_EXISTS", f"The resource '{target}' already exists", 409)
        return new_op(store, project, f"zones/{zone}", "insert", target, store.instances[(project, zone, name)].id,
                      0.0, err)
    fault = store.take_op_fault()      # POST /_admin/fault, where "operation"
    if fault is not None:
        return new_op(store, project, f"zones/{zone}", "insert", target, store.new_id(), latency, fault_error(fault))
    vm_type = _short(body["machineType"])
    if tpu_stockout(store, zone, vm_type, body.get("scheduling") or {}):
        return new_op(store, project, f"zones/{zone}", "insert", target, store.new_id(), latency,
                      stockout_error(project, zone, vm_type))
    inst = make_instance(store, project, zone, body)
    store.instances[inst.key] = inst
    start_instance(store, inst, latency)
    return new_op(store, project, f"zones/{zone}", "insert", target, inst.id, latency)


def check_instance_body(store: Store, project: str, zone: str, body: dict[str, Any]) -> None:
    """What Compute refuses at the call: a bad name, no machine type, one the zone does not list."""
    name = body.get("name") or ""
    if not valid_name(name):
        raise ApiError(3, f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", compute_reason="invalid")
    if not body.get("machineType"):
        raise ApiError(3, "Invalid value for field 'resource.machineType': ''. Machine type must be "
                          "specified.", compute_reason="invalid")
    vm_type = _short(body["machineType"])
    if vm_type not in catalog.machine_types_in(zone):
        # as Compute words it (GoogleCloudPlatform/bank-of-anthos#1234, taskcluster/community-tc-config#75)
        raise ApiError(3, f"Invalid value for field 'resource.machineType': '{body['machineType']}'. Machine type "
                          f"with name '{vm_type}' does not exist in zone '{zone}'.", compute_reason="invalid")
    nic = (body.get("networkInterfaces") or [{}])[0]
    get_network(store, project, network_name(nic.get("network") or "default"))


def tpu_stockout(store: Store, zone: str, machine_type: str, scheduling: dict[str, Any]) -> bool:
    """An injected stockout for this create: ``vm`` for any instance (as before), ``compute-tpu``
    for a TPU machine type, ``compute-tpu:MODEL`` for one provisioning model (SPOT, STANDARD,
    FLEX_START, RESERVATION_BOUND) only."""
    if machine_type not in catalog.TPU_MACHINE_TYPES:
        return store.faults.take_stockout("vm", zone)
    model = scheduling.get("provisioningModel") or "STANDARD"
    return (store.faults.take_stockout(f"compute-tpu:{model}", zone)
            or store.faults.take_stockout("compute-tpu", zone) or store.faults.take_stockout("vm", zone))


def stockout_error(project: str, zone: str, vm_type: str) -> OpError:
    """A stockout as Compute words it since 2024 (tests/corpus: compute-stockout-details-k8s-9834,
    compute-stockout-details-empty-ai-on-gke-849: errorDetails with a localized message and errorInfo
    resource_availability, whose zonesAvailable may be empty)."""
    message = (f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
               "available to fulfill the request.  Try a different zone, or try again later.")
    return OpError("ZONE_RESOURCE_POOL_EXHAUSTED", message, 503, [{
        "code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": message, "errorDetails": [
            {"help": {"links": [{"description": "Troubleshooting documentation",
                                 "url": "https://cloud.google.com/compute/docs/resource-error"}]}},
            {"localizedMessage": {"locale": "en-US", "message": (
                f"A {vm_type} VM instance is currently unavailable in the {zone} zone. Alternatively, you can "
                "try your request again with a different VM hardware configuration or at a later time. For "
                "more information, see the troubleshooting documentation.")}},
            {"errorInfo": {"domain": "compute.googleapis.com", "reason": "resource_availability",
                           "metadatas": {"attachment": "", "vmType": vm_type, "zone": zone,
                                         "zonesAvailable": ""}}}]}])


def make_instance(store: Store, project: str, zone: str, body: dict[str, Any], *,
                  extra_metadata: list[dict[str, str]] | None = None) -> Instance:
    """An instance as ``body`` (an instance, or a template's properties plus a name) describes it."""
    nic = (body.get("networkInterfaces") or [{}])[0]
    network = network_name(nic.get("network") or "default")
    get_network(store, project, network)
    sub = subnet_for(store, project, network, catalog.region_of(zone), nic.get("subnetwork"))
    metadata = list((body.get("metadata") or {}).get("items") or [])
    for item in extra_metadata or []:
        metadata = [m for m in metadata if m.get("key") != item.get("key")] + [item]
    return Instance(
        project=project, zone=zone, name=body["name"], id=store.new_id(), machine_type=_short(body["machineType"]),
        network=network, subnetwork=sub.name, internal_ip=allocate_ip(store, sub),
        external_ip=store.next_external_ip() if nic.get("accessConfigs") else None,
        labels=dict(body.get("labels") or {}), metadata=metadata,
        tags=list((body.get("tags") or {}).get("items") or []), disks=list(body.get("disks") or []),
        scheduling=dict(body.get("scheduling") or {}),
        service_accounts=list(body.get("serviceAccounts") or []),
        description=body.get("description") or "", seq=store.seq(),
        reservation_affinity=dict(body.get("reservationAffinity") or {}),
    )


def start_instance(store: Store, inst: Instance, latency: float) -> None:
    """PROVISIONING -> STAGING -> RUNNING over ``latency`` seconds."""
    def staging() -> None:
        if inst.status == "PROVISIONING":
            inst.status = "STAGING"

    def running() -> None:
        if store.instances.get(inst.key) is inst and inst.status == "STAGING":
            inst.status = "RUNNING"
    store.schedule(latency * 0.4, staging)
    store.schedule(latency, running)


def get_instance(store: Store, project: str, zone: str, name: str) -> Instance:
    check_zone(store, project, zone)
    inst = store.instances.get((project, zone, name))
    if inst is None:
        raise ApiError(5, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
                       compute_reason="notFound")
    return inst


def delete_instance(store: Store, project: str, zone: str, name: str) -> Any:
    inst = get_instance(store, project, zone, name)
    inst.status = "STOPPING"

    def gone() -> None:
        if store.instances.get(inst.key) is inst:
            del store.instances[inst.key]
    return new_op(store, project, f"zones/{zone}", "delete", inst.path, inst.id,
                  store.latencies.of("vm_delete"), on_done=gone)


def set_instance_state(store: Store, project: str, zone: str, name: str, status: str) -> Instance:
    """The admin's preemption of a VM: TERMINATED, as Compute Engine leaves a preempted VM."""
    inst = get_instance(store, project, zone, name)
    inst.status = status
    return inst


def instance_json(store: Store, inst: Instance) -> dict[str, Any]:
    nic: dict[str, Any] = {
        "kind": "compute#networkInterface", "name": "nic0", "networkIP": inst.internal_ip,
        "network": store.link(network_path(inst.project, inst.network)),
        "subnetwork": store.link(f"projects/{inst.project}/regions/{catalog.region_of(inst.zone)}"
                                 f"/subnetworks/{inst.subnetwork}"),
        "fingerprint": "ZGVmYXVsdA==", "stackType": "IPV4_ONLY",
    }
    if inst.external_ip:
        nic["accessConfigs"] = [{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT",
                                 "name": "External NAT", "natIP": inst.external_ip,
                                 "networkTier": "PREMIUM"}]
    disks = []
    for i, d in enumerate(inst.disks or [{"boot": True, "autoDelete": True}]):
        disks.append({"kind": "compute#attachedDisk", "type": d.get("type", "PERSISTENT"), "mode": "READ_WRITE",
                      "source": store.link(f"projects/{inst.project}/zones/{inst.zone}/disks/"
                                           f"{d.get('deviceName') or (inst.name if i == 0 else f'{inst.name}-{i}')}"),
                      "deviceName": d.get("deviceName") or (inst.name if i == 0 else f"{inst.name}-{i}"),
                      "index": i, "boot": bool(d.get("boot", i == 0)), "autoDelete": bool(d.get("autoDelete", True)),
                      "interface": "SCSI", "diskSizeGb": str((d.get("initializeParams") or {}).get("diskSizeGb", 10))})
    scheduling = {"onHostMaintenance": "MIGRATE", "automaticRestart": True, "preemptible": False,
                  "provisioningModel": "STANDARD", **inst.scheduling}
    out: dict[str, Any] = {
        "kind": "compute#instance", "id": inst.id, "creationTimestamp": compute_time(inst.created),
        "name": inst.name, "description": inst.description, "tags": {"items": inst.tags, "fingerprint": "42WmSpB8rSM="}
        if inst.tags else {"fingerprint": "42WmSpB8rSM="},
        "machineType": store.link(f"projects/{inst.project}/zones/{inst.zone}/machineTypes/{inst.machine_type}"),
        "status": inst.status, "zone": store.link(f"projects/{inst.project}/zones/{inst.zone}"),
        "canIpForward": False, "networkInterfaces": [nic], "disks": disks,
        "metadata": {"kind": "compute#metadata", "fingerprint": instance_fingerprint(inst), "items": inst.metadata}
        if inst.metadata else {"kind": "compute#metadata", "fingerprint": instance_fingerprint(inst)},
        "serviceAccounts": inst.service_accounts, "selfLink": store.link(inst.path),
        "scheduling": scheduling, "cpuPlatform": "Intel Broadwell", "labelFingerprint": "42WmSpB8rSM=",
        "startRestricted": False, "deletionProtection": False, "fingerprint": "c2lnbmF0dXJl",
        "lastStartTimestamp": compute_time(inst.created),
    }
    if inst.labels:
        out["labels"] = dict(inst.labels)
    if inst.reservation_affinity:
        out["reservationAffinity"] = dict(inst.reservation_affinity)
    if not out["serviceAccounts"]:
        del out["serviceAccounts"]
    return out


def _instance_probe(inst: Instance) -> dict[str, Any]:
    out: dict[str, Any] = {"name": inst.name, "status": inst.status, "description": inst.description}
    if inst.labels:
        out["labels"] = dict(inst.labels)
    return out


# what instance_json answers of these fields, without the rest
INSTANCE_PROBE = (frozenset({"name", "status", "description", "labels"}), _instance_probe)


# -- listing ------------------------------------------------------------------------------------
# Compute list and aggregatedList pages: maxResults "Acceptable values are 0 to 500, inclusive.
# (Default: 500)" (REST reference of instances.list and instances.aggregatedList,
# https://cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList); a page that
# is not the last carries nextPageToken. A larger maxResults is served as 500 here (the reference
# says nothing of the refusal, if any).
MAX_RESULTS = 500


def _page_bounds(req: Request) -> tuple[int, int]:
    try:
        size = int(req.arg("maxResults") or MAX_RESULTS)
        start = int(req.arg("pageToken") or 0)
    except ValueError:
        raise ApiError(3, "Invalid value for field 'pageToken'.", compute_reason="invalid") from None
    if size < 0 or start < 0:
        raise ApiError(3, "Invalid value for field 'maxResults'.", compute_reason="invalid")
    return start, min(size or MAX_RESULTS, MAX_RESULTS)


def list_page(store: Store, req: Request, kind: str, list_id: str, self_path: str,
              items: list[Any], render: Callable[[Any], dict[str, Any]] | None = None,
              probe: Probe | None = None) -> dict[str, Any]:
    """A Compute list response: filter, then maxResults/pageToken paging; no ``items`` when empty.
    ``items`` are answers, or resources that ``render`` turns into answers (see :func:`_matching`)."""
    items = _matching(req, items, render, probe)
    start, size = _page_bounds(req)
    page = [_rendered(i, render) for i in items[start:start + size]]
    out: dict[str, Any] = {"kind": kind, "id": list_id, "selfLink": store.link(self_path)}
    if page:
        out["items"] = page
    if start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out


def aggregated_page(store: Store, req: Request, kind: str, project: str, collection: str,
                    scoped: dict[str, list[Any]], render: Callable[[Any], dict[str, Any]] | None = None,
                    probe: Probe | None = None) -> dict[str, Any]:
    """An aggregatedList page: at most maxResults items over all scopes, in scope order; every
    scope with none on this page says so with the NO_RESULTS_ON_PAGE warning."""
    flat = [(scope, i) for scope, items in scoped.items() for i in _matching(req, items, render, probe)]
    start, size = _page_bounds(req)
    on_page: dict[str, list[dict[str, Any]]] = {}
    for scope, item in flat[start:start + size]:
        on_page.setdefault(scope, []).append(_rendered(item, render))
    out_items: dict[str, Any] = {}
    for scope in scoped:
        if on_page.get(scope):
            out_items[scope] = {collection: on_page[scope]}
        else:
            out_items[scope] = {"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": f"There are no results for scope '{scope}' on this page.",
                "data": [{"key": "scope", "value": scope}]}}
    out = {"kind": kind, "id": f"projects/{project}/aggregated/{collection}", "items": out_items,
           "selfLink": store.link(f"projects/{project}/aggregated/{collection}")}
    if start + size < len(flat):
        out["nextPageToken"] = str(start + size)
    return out


# (the top-level fields a probe carries, probe): a few fields of a resource, cheap to make
Probe = tuple[frozenset[str], Callable[[Any], dict[str, Any]]]


def _rendered(item: Any, render: Callable[[Any], dict[str, Any]] | None) -> dict[str, Any]:
    return render(item) if render else item


def _matching(req: Request, items: list[Any], render: Callable[[Any], dict[str, Any]] | None,
              probe: Probe | None) -> list[Any]:
    """The items the request's ``filter`` keeps. The fake's speed, not Google's answer: a filter
    that reads only what ``probe`` carries (labels, name, status) is tested on the probe, so a
    fleet's list renders only the resources on the page, not every one to keep a few."""
    pred, roots = compile_with_roots(req.arg("filter"))
    if not roots:
        return list(items)
    if probe is not None and roots <= probe[0]:
        return [i for i in items if pred(probe[1](i))]
    return [i for i in items if pred(_rendered(i, render))]


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str, op_poll: bool = False):
        return router.add(method, P + path, call, permission=permission, service=SERVICE,
                          style="compute", op_poll=op_poll)

    # -- instances -------------------------------------------------------------------------------
    @route("POST", "/zones/{zone}/instances", "compute.instances.insert", "compute.instances.create")
    def insert(req: Request) -> Any:
        s = store_of()
        return op_json(s, insert_instance(s, req.params["project"], req.params["zone"], req.json()))

    @route("GET", "/zones/{zone}/instances", "compute.instances.list", "compute.instances.list")
    def list_instances(req: Request) -> Any:
        s = store_of()
        p = req.params
        check_zone(s, p["project"], p["zone"])
        items = [i for i in sorted(s.instances.values(), key=lambda i: i.seq)
                 if i.project == p["project"] and i.zone == p["zone"]]
        return list_page(s, req, "compute#instanceList", f"projects/{p['project']}/zones/{p['zone']}/instances",
                         f"projects/{p['project']}/zones/{p['zone']}/instances", items,
                         lambda i: instance_json(s, i), INSTANCE_PROBE)

    @route("GET", "/aggregated/instances", "compute.instances.aggregatedList", "compute.instances.list")
    def aggregated(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        scoped: dict[str, list[Instance]] = {f"zones/{z}": [] for z in catalog.ZONES}
        for inst in sorted(s.instances.values(), key=lambda i: i.seq):
            if inst.project == project:
                scoped[f"zones/{inst.zone}"].append(inst)
        return aggregated_page(s, req, "compute#instanceAggregatedList", project, "instances", scoped,
                               lambda i: instance_json(s, i), INSTANCE_PROBE)

    @route("GET", "/zones/{zone}/instances/{name}", "compute.instances.get", "compute.instances.get")
    def get(req: Request) -> Any:
        s = store_of()
        p = req.params
        return instance_json(s, get_instance(s, p["project"], p["zone"], p["name"]))

    @route("DELETE", "/zones/{zone}/instances/{name}", "compute.instances.delete", "compute.instances.delete")
    def delete(req: Request) -> Any:
        s = store_of()
        p = req.params
        return op_json(s, delete_instance(s, p["project"], p["zone"], p["name"]))

    # -- operations --------------------------------------------------------------------------------
    for scope_tpl, scope_name, coll in (("/zones/{zone}", "zones/{zone}", "zoneOperations"),
                                        ("/global", "global", "globalOperations"),
                                        ("/regions/{region}", "regions/{region}", "regionOperations")):
        def scope_of(req: Request, scope_name: str = scope_name) -> str:
            return scope_name.format(**req.params)

        def op_get(req: Request, scope_of: Any = scope_of) -> Any:
            s = store_of()
            return op_json(s, get_op(s, req.params["project"], scope_of(req), req.params["op"]))

        def op_wait(req: Request, scope_of: Any = scope_of) -> Any:
            s = store_of()
            return op_json(s, wait_op(s, req.params["project"], scope_of(req), req.params["op"]))

        def op_delete(req: Request, scope_of: Any = scope_of) -> Any:
            s = store_of()
            op = get_op(s, req.params["project"], scope_of(req), req.params["op"])
            del s.compute_ops[op.key]
            return {}

        def op_list(req: Request, scope_of: Any = scope_of) -> Any:
            s = store_of()
            project, scope = req.params["project"], scope_of(req)
            ensure_project(s, project)
            items = [op_json(s, o) for o in s.compute_ops.values() if o.project == project and o.scope == scope]
            return list_page(s, req, "compute#operationList", f"projects/{project}/{scope}/operations",
                             f"projects/{project}/{scope}/operations", items)

        route("GET", scope_tpl + "/operations/{op}", f"compute.{coll}.get", f"compute.{coll}.get", True)(op_get)
        route("POST", scope_tpl + "/operations/{op}/wait", f"compute.{coll}.wait", f"compute.{coll}.get",
              True)(op_wait)
        route("DELETE", scope_tpl + "/operations/{op}", f"compute.{coll}.delete", f"compute.{coll}.delete")(op_delete)
        route("GET", scope_tpl + "/operations", f"compute.{coll}.list", f"compute.{coll}.list", True)(op_list)

    @route("GET", "/aggregated/operations", "compute.globalOperations.aggregatedList", "compute.globalOperations.list")
    def operations_aggregated(req: Request) -> Any:
        """Every scope's operations in one list (globalOperations.aggregatedList): ``global``, each
        region's and each zone's, as Google keys them (``zones/Z``)."""
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        scoped: dict[str, list[Any]] = {"global": []}
        scoped.update({f"regions/{r}": [] for r in sorted(catalog.REGIONS)})
        scoped.update({f"zones/{z}": [] for z in catalog.ZONES})
        for o in list(s.compute_ops.values()):
            if o.project == project and o.scope in scoped:
                scoped[o.scope].append(o)
        return aggregated_page(s, req, "compute#operationAggregatedList", project, "operations", scoped,
                               lambda o: op_json(s, o))

    # -- zones, regions, projects, images, machine types -------------------------------------------------
    def zone_json(s: Store, project: str, zone: str) -> dict[str, Any]:
        region = catalog.region_of(zone)
        return {"kind": "compute#zone", "id": str(2000 + sorted(catalog.ZONES).index(zone)),
                "creationTimestamp": "1969-12-31T16:00:00.000-08:00", "name": zone,
                "description": zone, "status": "UP",
                "region": s.link(f"projects/{project}/regions/{region}"),
                "selfLink": s.link(f"projects/{project}/zones/{zone}"),
                "availableCpuPlatforms": ["Intel Broadwell", "Intel Cascade Lake", "AMD Milan"],
                "supportsPzs": False}

    @route("GET", "/zones", "compute.zones.list", "compute.zones.list")
    def zones(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        items = [zone_json(s, project, z) for z in sorted(catalog.ZONES)]
        return list_page(s, req, "compute#zoneList", f"projects/{project}/zones", f"projects/{project}/zones", items)

    @route("GET", "/zones/{zone}", "compute.zones.get", "compute.zones.get")
    def zone(req: Request) -> Any:
        s = store_of()
        p = req.params
        if p["zone"] not in catalog.ZONES:
            raise ApiError(5, f"The resource 'projects/{p['project']}/zones/{p['zone']}' was not found",
                           compute_reason="notFound")
        return zone_json(s, p["project"], p["zone"])

    def region_json(s: Store, project: str, region: str) -> dict[str, Any]:
        return {"kind": "compute#region", "id": str(1000 + sorted(catalog.REGIONS).index(region)),
                "creationTimestamp": "1969-12-31T16:00:00.000-08:00", "name": region,
                "description": region, "status": "UP",
                "zones": [s.link(f"projects/{project}/zones/{z}") for z, r in catalog.ZONES.items() if r == region],
                "quotas": [{"metric": "CPUS", "limit": 24, "usage": 0},
                           {"metric": "PREEMPTIBLE_CPUS", "limit": 0, "usage": 0},
                           {"metric": "IN_USE_ADDRESSES", "limit": 8, "usage": 0}],
                "selfLink": s.link(f"projects/{project}/regions/{region}"), "supportsPzs": False}

    @route("GET", "/regions", "compute.regions.list", "compute.regions.list")
    def regions(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        items = [region_json(s, project, r) for r in sorted(catalog.REGIONS)]
        return list_page(s, req, "compute#regionList", f"projects/{project}/regions",
                         f"projects/{project}/regions", items)

    @route("GET", "/regions/{region}", "compute.regions.get", "compute.regions.get")
    def region(req: Request) -> Any:
        s = store_of()
        check_region(s, req.params["project"], req.params["region"])
        return region_json(s, req.params["project"], req.params["region"])

    @route("GET", "", "compute.projects.get", "compute.projects.get")
    def project(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        number = catalog.project_number(project)
        return {"kind": "compute#project", "id": number, "name": project,
                "creationTimestamp": "2020-01-01T00:00:00.000-08:00",
                "commonInstanceMetadata": project_metadata(s, project),
                "quotas": [{"metric": "NETWORKS", "limit": 15, "usage": 1},
                           {"metric": "GLOBAL_INTERNAL_ADDRESSES", "limit": 5000, "usage": 0}],
                "selfLink": s.link(f"projects/{project}"),
                "defaultServiceAccount": f"{number}-compute@developer.gserviceaccount.com",
                "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS", "defaultNetworkTier": "PREMIUM",
                "vmDnsSetting": "ZONAL_ONLY"}

    def image_json(s: Store, project: str, name: str, family: str) -> dict[str, Any]:
        return {"kind": "compute#image", "id": str(abs(hash((project, name))) % 10**18),
                "creationTimestamp": "2024-01-01T00:00:00.000-08:00", "name": name, "family": family,
                "sourceType": "RAW", "status": "READY", "archiveSizeBytes": "1000000000",
                "diskSizeGb": "10", "selfLink": s.link(f"projects/{project}/global/images/{name}"),
                "architecture": "X86_64", "labelFingerprint": "42WmSpB8rSM="}

    @route("GET", "/global/images/family/{family}", "compute.images.getFromFamily", "compute.images.getFromFamily")
    def image_family(req: Request) -> Any:
        p = req.params
        if p["project"] == catalog.ACCELERATOR_IMAGE_PROJECT:
            # the TPU images: only the families public use shows, each as its newest image
            if p["family"] not in catalog.ACCELERATOR_IMAGES:
                raise ApiError(5, f"The resource 'projects/{p['project']}/global/images/family/{p['family']}' "
                                  "was not found", compute_reason="notFound")
            return image_json(store_of(), p["project"], catalog.ACCELERATOR_IMAGES[p["family"]], p["family"])
        return image_json(store_of(), p["project"], f"{p['family']}-v20240110", p["family"])

    @route("GET", "/global/images/{image}", "compute.images.get", "compute.images.get")
    def image(req: Request) -> Any:
        p = req.params
        family = p["image"].rsplit("-v", 1)[0]
        return image_json(store_of(), p["project"], p["image"], family)

    def machine_type_json(s: Store, project: str, zone: str, name: str) -> dict[str, Any]:
        cpus = catalog.machine_type_cpus(name)
        gib_per_cpu = 3.75 if name.startswith("n1-") else 4      # n1-standard: 3.75 GiB per vCPU, e2/n2: 4
        gb = catalog.TPU_MACHINE_TYPES[name][1] if name in catalog.TPU_MACHINE_TYPES else gib_per_cpu * cpus
        out = {"kind": "compute#machineType", "id": str(abs(hash(name)) % 10**12), "name": name,
               "description": f"{cpus} vCPUs, {gb:g} GB RAM", "guestCpus": cpus,
               "memoryMb": int(gb * 1024), "maximumPersistentDisks": 128,
               "maximumPersistentDisksSizeGb": "263168", "zone": zone, "isSharedCpu": False,
               "selfLink": s.link(f"projects/{project}/zones/{zone}/machineTypes/{name}")}
        if name in catalog.TPU_MACHINE_TYPES:
            # the machine type carries the chips (no guestAccelerators to ask for): accelerators[]
            # {guestAcceleratorType, guestAcceleratorCount}, as MachineType describes them
            out["accelerators"] = [{"guestAcceleratorType": name.split("-")[0],
                                    "guestAcceleratorCount": catalog.TPU_MACHINE_TYPES[name][2]}]
        return out

    @route("GET", "/zones/{zone}/machineTypes/{mt}", "compute.machineTypes.get", "compute.machineTypes.get")
    def machine_type(req: Request) -> Any:
        s = store_of()
        p = req.params
        check_zone(s, p["project"], p["zone"])
        if p["mt"] not in catalog.machine_types_in(p["zone"]):
            raise ApiError(5, f"The resource 'projects/{p['project']}/zones/{p['zone']}/machineTypes/{p['mt']}' "
                              "was not found", compute_reason="notFound")
        return machine_type_json(s, p["project"], p["zone"], p["mt"])

    @route("GET", "/zones/{zone}/machineTypes", "compute.machineTypes.list", "compute.machineTypes.list")
    def machine_types(req: Request) -> Any:
        s = store_of()
        p = req.params
        check_zone(s, p["project"], p["zone"])
        items = [machine_type_json(s, p["project"], p["zone"], n) for n in catalog.machine_types_in(p["zone"])]
        return list_page(s, req, "compute#machineTypeList", f"projects/{p['project']}/zones/{p['zone']}/machineTypes",
                         f"projects/{p['project']}/zones/{p['zone']}/machineTypes", items)

    @route("GET", "/aggregated/machineTypes", "compute.machineTypes.aggregatedList", "compute.machineTypes.list")
    def machine_types_aggregated(req: Request) -> Any:
        """Every zone's machine types, scoped ``zones/Z`` (MachineTypeAggregatedList): what
        ``gcloud compute machine-types list --filter=name=X`` reads, and tpuctl's question of which
        zones sell a TPU machine type on Compute Engine."""
        s, project = store_of(), req.params["project"]
        ensure_project(s, project)
        scoped = {f"zones/{z}": [machine_type_json(s, project, z, n) for n in catalog.machine_types_in(z)]
                  for z in catalog.ZONES}
        return aggregated_page(s, req, "compute#machineTypeAggregatedList", project, "machineTypes", scoped)

