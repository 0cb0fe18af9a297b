"""TPU slices on Compute Engine: workload policies, instance templates, zonal MIGs, resize requests.

A multi-host TPU slice on Compute Engine is a managed instance group whose workload policy carries
the accelerator topology (tpu/docs/tpus-in-compute-engine; tpu/docs/tpus-and-migs): a regional
``resourcePolicies`` entry ``{workloadPolicy: {type: HIGH_THROUGHPUT, acceleratorTopology}}``, a
global ``instanceTemplates`` entry with the TPU machine type, and a zonal
``instanceGroupManagers`` entry made at ``targetSize: 0`` with ``targetSizePolicy: {mode: BULK}``
and ``resourcePolicies.workloadPolicy``, then ``createInstances`` with one name per VM (BULK: all
or none), or a ``resizeRequests`` entry (flex-start: ``resizeBy`` and ``requestedRunDuration``;
states CREATING, ACCEPTED, SUCCEEDED, FAILED, CANCELLED; ``status.error`` final,
``status.lastAttempt.error`` while it retries). Every body is checked against compute v1's
discovery document (``discovery.check``) and every answer uses its field names.

What the fake does, and where it comes from:

- a BULK ``createInstances`` that meets a stockout creates nothing: each instance stays
  ``currentAction: CREATING`` with the stockout in ``lastAttempt.errors`` (a MIG reports a failed
  create there: kubernetes/kops#18330), and the MIG keeps it until deleted;
- ``status.appliedAcceleratorTopologies[{acceleratorTopology, state}]``: ACTIVATING while its
  VMs start, ACTIVE when all run, ACTIVE_DEGRADED when one is TERMINATED, INCOMPLETE when one is
  gone (discovery document: ACTIVATING ACTIVE ACTIVE_DEGRADED DEACTIVATING FAILED INCOMPLETE
  REACTIVATING); ``POST /_admin/topology`` sets it as a test needs;
- ``status.currentInstanceStatuses`` counts, "only shown for TPU MIGs" (discovery document);
- a MIG made of a template with ``defaultActionOnFailure: DO_NOTHING`` does not repair a member
  (tpuctl recreates a multi-host slice whole: tpu/docs/failure-recovery);
- a template or policy still used by a MIG is not deleted: 400 ``resourceInUseByAnotherResource``,
  "The instance_template resource '...' is already being used by '...'" (Compute's wording, e.g.
  hashicorp/terraform-provider-google issues on replacing templates);
- waiting flex-start VMs are ``PENDING`` (compute/docs/instance-groups/about-resize-requests-mig).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from . import catalog, discovery
from .compute import (
    Instance,
    check_region,
    check_zone,
    get_instance,
    list_page,
    make_instance,
    start_instance,
    stockout_error,
    tpu_stockout,
)
from .compute_ops import OpError, fault_error, new_op, op_json, system_event
from .errors import ApiError
from .network import ensure_project, valid_name
from .routing import Request, Router
from .store import Store, compute_time, rfc3339

SERVICE = "compute.googleapis.com"
P = "/compute/v1/projects/{project}"
TOPOLOGY_STATES = ("ACTIVATING", "ACTIVE", "ACTIVE_DEGRADED", "DEACTIVATING", "FAILED", "INCOMPLETE", "REACTIVATING")
RESIZE_STATES = ("ACCEPTED", "CANCELLED", "CREATING", "FAILED", "STATE_UNSPECIFIED", "SUCCEEDED")


@dataclass
class Policy:
    project: str
    region: str
    name: str
    id: str
    body: dict[str, Any]
    created: float = field(default_factory=time.time)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/regions/{self.region}/resourcePolicies/{self.name}"


@dataclass
class Template:
    project: str
    name: str
    id: str
    body: dict[str, Any]
    created: float = field(default_factory=time.time)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/global/instanceTemplates/{self.name}"


@dataclass
class Member:
    """A managed instance: the name the MIG was asked for, and the instance once it exists."""

    name: str
    metadata: list[dict[str, str]] = field(default_factory=list)
    error: OpError | None = None          # the last create attempt's error (it keeps CREATING)
    pending: bool = False                 # a flex-start VM waiting for capacity (instanceStatus PENDING)
    made: bool = False                    # an instance was created for it


@dataclass
class ResizeRequest:
    name: str
    id: str
    resize_by: int
    run_duration_s: int | None
    state: str = "CREATING"
    error: dict[str, Any] | None = None
    last_error: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    members: list[str] = field(default_factory=list)


@dataclass
class Mig:
    project: str
    zone: str
    name: str
    id: str
    template: str                          # template name
    body: dict[str, Any]
    target_size: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    requests: dict[str, ResizeRequest] = field(default_factory=dict)
    topology_override: str | None = None   # POST /_admin/topology
    deleting: bool = False
    created: float = field(default_factory=time.time)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instanceGroupManagers/{self.name}"

    @property
    def policy(self) -> str | None:
        ref = ((self.body.get("resourcePolicies") or {}).get("workloadPolicy")) or ""
        return ref.rstrip("/").rsplit("/", 1)[-1] or None


def _short(ref: str | None) -> str:
    return (ref or "").rstrip("/").rsplit("/", 1)[-1]


def _check_name(name: str) -> None:
    if not valid_name(name):
        raise ApiError(3, f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", compute_reason="invalid")


def _in_use(kind: str, path: str, user: str) -> ApiError:
    return ApiError(3, f"The {kind} resource '{path}' is already being used by '{user}'",
                    compute_reason="resourceInUseByAnotherResource")


def _exists(store: Store, project: str, scope: str, op_type: str, path: str, target_id: str) -> Any:
    err = OpError("RESOURCE_ALREADY_EXISTS", f"The resource '{path}' already exists", 409)
    return new_op(store, project, scope, op_type, path, target_id, 0.0, err)


# -- resource policies (regional) ----------------------------------------------------------------------
def insert_policy(store: Store, project: str, region: str, body: dict[str, Any]) -> Any:
    check_region(store, project, region)
    discovery.check("compute.resourcePolicies.insert", body)
    name = body.get("name") or ""
    _check_name(name)
    wp = body.get("workloadPolicy") or {}
    if wp.get("acceleratorTopology") and wp.get("maxTopologyDistance"):
        # the discovery document: acceleratorTopology "cannot be set if max topology distance is set"
        raise ApiError(3, "Invalid value for field 'resource.workloadPolicy': acceleratorTopology cannot be set "
                          "with maxTopologyDistance.", compute_reason="invalid")
    key = (project, region, name)
    path = f"projects/{project}/regions/{region}/resourcePolicies/{name}"
    if key in store.resource_policies:
        return _exists(store, project, f"regions/{region}", "insert", path, store.resource_policies[key].id)
    fault = store.take_op_fault()
    if fault is not None:
        return new_op(store, project, f"regions/{region}", "insert", path, store.new_id(), 0.05, fault_error(fault))
    policy = Policy(project, region, name, store.new_id(), dict(body))
    store.resource_policies[key] = policy
    return new_op(store, project, f"regions/{region}", "insert", path, policy.id, store.latencies.of("address_create"))


def get_policy(store: Store, project: str, region: str, name: str) -> Policy:
    check_region(store, project, region)
    policy = store.resource_policies.get((project, region, name))
    if policy is None:
        raise ApiError(5, f"The resource 'projects/{project}/regions/{region}/resourcePolicies/{name}' was not found",
                       compute_reason="notFound")
    return policy


def delete_policy(store: Store, project: str, region: str, name: str) -> Any:
    policy = get_policy(store, project, region, name)
    for mig in store.migs.values():
        if mig.project == project and catalog.region_of(mig.zone) == region and mig.policy == name:
            raise _in_use("resource_policy", policy.path, mig.path)

    def gone() -> None:
        store.resource_policies.pop((project, region, name), None)
    return new_op(store, project, f"regions/{region}", "delete", policy.path, policy.id,
                  store.latencies.of("address_create"), on_done=gone)


def policy_json(store: Store, p: Policy) -> dict[str, Any]:
    out = {"kind": "compute#resourcePolicy", "id": p.id, "creationTimestamp": compute_time(p.created),
           "name": p.name, "region": store.link(f"projects/{p.project}/regions/{p.region}"),
           "selfLink": store.link(p.path), "status": "READY"}
    for key in ("description", "workloadPolicy", "groupPlacementPolicy"):
        if key in p.body:
            out[key] = p.body[key]
    return out


# -- instance templates (global) -----------------------------------------------------------------------
def insert_template(store: Store, project: str, body: dict[str, Any]) -> Any:
    ensure_project(store, project)
    discovery.check("compute.instanceTemplates.insert", body)
    name = body.get("name") or ""
    _check_name(name)
    props = body.get("properties") or {}
    machine = props.get("machineType") or ""
    if not machine or "/" in machine:
        # InstanceProperties.machineType: "This field only accepts a machine type name, not a URL."
        raise ApiError(3, f"Invalid value for field 'resource.properties.machineType': '{machine}'. "
                          "Machine type name must be specified, not a URL.", compute_reason="invalid")
    path = f"projects/{project}/global/instanceTemplates/{name}"
    if (project, name) in store.instance_templates:
        return _exists(store, project, "global", "insert", path, store.instance_templates[(project, name)].id)
    template = Template(project, name, store.new_id(), dict(body))
    store.instance_templates[(project, name)] = template
    return new_op(store, project, "global", "insert", path, template.id, store.latencies.of("address_create"))


def get_template(store: Store, project: str, name: str) -> Template:
    ensure_project(store, project)
    template = store.instance_templates.get((project, name))
    if template is None:
        raise ApiError(5, f"The resource 'projects/{project}/global/instanceTemplates/{name}' was not found",
                       compute_reason="notFound")
    return template


def delete_template(store: Store, project: str, name: str) -> Any:
    template = get_template(store, project, name)
    for mig in store.migs.values():
        if mig.project == project and mig.template == name:
            raise _in_use("instance_template", template.path, mig.path)

    def gone() -> None:
        store.instance_templates.pop((project, name), None)
    return new_op(store, project, "global", "delete", template.path, template.id,
                  store.latencies.of("address_create"), on_done=gone)


def template_json(store: Store, t: Template) -> dict[str, Any]:
    return {"kind": "compute#instanceTemplate", "id": t.id, "creationTimestamp": compute_time(t.created),
            "name": t.name, "description": t.body.get("description", ""), "properties": t.body.get("properties") or {},
            "selfLink": store.link(t.path)}


# -- managed instance groups (zonal) -------------------------------------------------------------------
def insert_mig(store: Store, project: str, zone: str, body: dict[str, Any]) -> Any:
    check_zone(store, project, zone)
    discovery.check("compute.instanceGroupManagers.insert", body)
    name = body.get("name") or ""
    _check_name(name)
    template_ref = body.get("instanceTemplate") or next(
        (v.get("instanceTemplate") for v in body.get("versions") or [] if v.get("instanceTemplate")), "")
    template = get_template(store, project, _short(template_ref))
    policy = _short((body.get("resourcePolicies") or {}).get("workloadPolicy"))
    if policy:
        get_policy(store, project, catalog.region_of(zone), policy)
    path = f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}"
    if (project, zone, name) in store.migs:
        return _exists(store, project, f"zones/{zone}", "insert", path, store.migs[(project, zone, name)].id)
    fault = store.take_op_fault()
    if fault is not None:
        return new_op(store, project, f"zones/{zone}", "insert", path, store.new_id(), 0.05, fault_error(fault))
    mig = Mig(project, zone, name, store.new_id(), template.name, dict(body), int(body.get("targetSize") or 0))
    store.migs[(project, zone, name)] = mig
    return new_op(store, project, f"zones/{zone}", "insert", path, mig.id, store.latencies.of("address_create"))


def get_mig(store: Store, project: str, zone: str, name: str) -> Mig:
    check_zone(store, project, zone)
    mig = store.migs.get((project, zone, name))
    if mig is None:
        raise ApiError(5, f"The resource 'projects/{project}/zones/{zone}/instanceGroupManagers/{name}' was not "
                          "found", compute_reason="notFound")
    return mig


def _instance_body(store: Store, mig: Mig, name: str) -> dict[str, Any]:
    props = dict(get_template(store, mig.project, mig.template).body.get("properties") or {})
    props["name"] = name
    props["machineType"] = props.get("machineType") or ""
    return props


def _create_members(store: Store, mig: Mig, names: list[str]) -> None:
    """Make the instances of ``names`` now, all at once (BULK), as the template describes them."""
    latency = store.latencies.of("vm_create")
    for name in names:
        member = mig.members[name]
        body = _instance_body(store, mig, name)
        extra = [{"key": "created-by", "value": mig.path}] + member.metadata
        inst = make_instance(store, mig.project, mig.zone, body, extra_metadata=extra)
        store.instances[inst.key] = inst
        member.made, member.pending, member.error = True, False, None
        start_instance(store, inst, latency)


def create_instances(store: Store, project: str, zone: str, name: str, body: dict[str, Any]) -> Any:
    mig = get_mig(store, project, zone, name)
    discovery.check("compute.instanceGroupManagers.createInstances", body)
    wanted = [i for i in body.get("instances") or [] if isinstance(i, dict)]
    if not wanted:
        raise ApiError(3, "Invalid value for field 'resource.instances': ''. At least one instance must be "
                          "specified.", compute_reason="invalid")
    names = []
    for item in wanted:
        inst_name = item.get("name") or ""
        _check_name(inst_name)
        if inst_name in mig.members or (project, zone, inst_name) in store.instances:
            raise ApiError(6, f"The resource 'projects/{project}/zones/{zone}/instances/{inst_name}' already exists",
                           compute_reason="alreadyExists")
        meta = ((item.get("preservedState") or {}).get("metadata") or {})
        mig.members[inst_name] = Member(inst_name, [{"key": k, "value": str(v)} for k, v in meta.items()])
        names.append(inst_name)
    mig.target_size += len(names)
    fault = store.take_op_fault()
    props = _instance_body(store, mig, names[0])
    if fault is not None:
        for n in names:
            mig.members[n].error = fault_error(fault)
    elif tpu_stockout(store, zone, _short(props["machineType"]), props.get("scheduling") or {}):
        # BULK: none of them is made while one cannot be; each keeps CREATING with the stockout
        for n in names:
            mig.members[n].error = stockout_error(project, zone, _short(props["machineType"]))
    else:
        _create_members(store, mig, names)
    return new_op(store, project, f"zones/{zone}", "createInstances", mig.path, mig.id, 0.05)


def delete_mig(store: Store, project: str, zone: str, name: str) -> Any:
    """Deletes the group with its instances (and its resize requests)."""
    mig = get_mig(store, project, zone, name)
    mig.deleting = True
    for member in mig.members.values():
        inst = store.instances.get((project, zone, member.name))
        if inst is not None:
            inst.status = "STOPPING"

    def gone() -> None:
        for member in mig.members.values():
            store.instances.pop((project, zone, member.name), None)
        if store.migs.get((project, zone, name)) is mig:
            del store.migs[(project, zone, name)]
    return new_op(store, project, f"zones/{zone}", "delete", mig.path, mig.id, store.latencies.of("vm_delete"),
                  on_done=gone)


def _member_instance(store: Store, mig: Mig, member: Member) -> Instance | None:
    return store.instances.get((mig.project, mig.zone, member.name)) if member.made else None


def managed_instances(store: Store, mig: Mig) -> list[dict[str, Any]]:
    out = []
    for member in mig.members.values():
        inst = _member_instance(store, mig, member)
        entry: dict[str, Any] = {"name": member.name,
                                 "instance": store.link(f"projects/{mig.project}/zones/{mig.zone}/instances/{member.name}"),
                                 "version": {"instanceTemplate": store.link(
                                     f"projects/{mig.project}/global/instanceTemplates/{mig.template}")},
                                 "targetStatus": "RUNNING"}
        if inst is not None:
            entry["id"] = inst.id
            entry["instanceStatus"] = inst.status
            entry["currentAction"] = "DELETING" if mig.deleting else ("NONE" if inst.status == "RUNNING" else "CREATING")
        elif member.pending:
            entry["instanceStatus"] = "PENDING"
            entry["currentAction"] = "CREATING"
        else:
            entry["currentAction"] = "DELETING" if mig.deleting else "CREATING"
        if member.error is not None:
            entry["lastAttempt"] = {"errors": {"errors": member.error.errors
                                               or [{"code": member.error.code, "message": member.error.message}]}}
        out.append(entry)
    return out


def _topology_state(store: Store, mig: Mig) -> str | None:
    if mig.topology_override:
        return mig.topology_override
    if not mig.members:
        return None
    statuses = [(_member_instance(store, mig, m).status if _member_instance(store, mig, m) else None)
                for m in mig.members.values()]
    if mig.deleting:
        return "DEACTIVATING"
    if any(m.made and s is None for m, s in zip(mig.members.values(), statuses)):
        return "INCOMPLETE"
    if any(s == "TERMINATED" for s in statuses):
        return "ACTIVE_DEGRADED"
    if all(s == "RUNNING" for s in statuses):
        return "ACTIVE"
    return "ACTIVATING"


def _topology(store: Store, mig: Mig) -> str | None:
    """The acceleratorTopology of the MIG's workload policy, if it has one."""
    policy = store.resource_policies.get((mig.project, catalog.region_of(mig.zone), mig.policy or ""))
    return ((policy.body.get("workloadPolicy") or {}).get("acceleratorTopology")) if policy else None


def mig_json(store: Store, mig: Mig) -> dict[str, Any]:
    template = store.link(f"projects/{mig.project}/global/instanceTemplates/{mig.template}")
    counts: dict[str, int] = {}
    current = {"creating": 0, "deleting": 0, "none": 0}
    for entry in managed_instances(store, mig):
        status = entry.get("instanceStatus")
        key = {"PENDING": "pending", "PROVISIONING": "provisioning", "STAGING": "staging", "RUNNING": "running",
               "STOPPING": "stopping", "TERMINATED": "terminated"}.get(status or "", "nonExistent")
        counts[key] = counts.get(key, 0) + 1
        action = (entry.get("currentAction") or "NONE").lower()
        current[action] = current.get(action, 0) + 1
    status: dict[str, Any] = {"isStable": current["creating"] == 0 and current["deleting"] == 0,
                              "currentInstanceStatuses": counts}
    topo = _topology(store, mig)
    state = _topology_state(store, mig)
    if topo and state:
        applied: dict[str, Any] = {"acceleratorTopology": topo, "state": state}
        if state in ("ACTIVE_DEGRADED", "FAILED", "INCOMPLETE"):
            applied["stateDetails"] = {"timestamp": rfc3339(time.time()), "error": {"errors": [
                {"code": "ACCELERATOR_TOPOLOGY_" + state, "message": f"The accelerator topology is {state}."}]}}
        status["appliedAcceleratorTopologies"] = [applied]
    out: dict[str, Any] = {
        "kind": "compute#instanceGroupManager", "id": mig.id, "creationTimestamp": compute_time(mig.created),
        "name": mig.name, "zone": store.link(f"projects/{mig.project}/zones/{mig.zone}"),
        "instanceTemplate": template, "versions": [{"instanceTemplate": template}],
        "instanceGroup": store.link(f"projects/{mig.project}/zones/{mig.zone}/instanceGroups/{mig.name}"),
        "targetSize": mig.target_size, "currentActions": current, "status": status,
        "selfLink": store.link(mig.path), "fingerprint": "ZmFrZWdjcA==", "listManagedInstancesResults": "PAGELESS",
    }
    for key in ("description", "targetSizePolicy", "resourcePolicies", "instanceLifecyclePolicy", "baseInstanceName"):
        if key in mig.body:
            out[key] = mig.body[key]
    if out.get("resourcePolicies", {}).get("workloadPolicy"):
        out["resourcePolicies"] = {"workloadPolicy": store.link(
            f"projects/{mig.project}/regions/{catalog.region_of(mig.zone)}/resourcePolicies/{mig.policy}")}
    return out


# -- resize requests (flex-start) ----------------------------------------------------------------------
def insert_resize(store: Store, project: str, zone: str, mig_name: str, body: dict[str, Any]) -> Any:
    mig = get_mig(store, project, zone, mig_name)
    discovery.check("compute.instanceGroupManagerResizeRequests.insert", body)
    name = body.get("name") or ""
    _check_name(name)
    if name in mig.requests:
        return _exists(store, project, f"zones/{zone}", "insert", f"{mig.path}/resizeRequests/{name}",
                       mig.requests[name].id)
    if bool(body.get("resizeBy")) == bool(body.get("instances")):
        raise ApiError(3, "Invalid value for field 'resource': exactly one of resizeBy and instances must be "
                          "specified.", compute_reason="invalid")
    duration = body.get("requestedRunDuration") or {}
    seconds = int(duration.get("seconds") or 0) if duration else None
    if seconds is not None and not 600 <= seconds <= 7 * 86400:
        # about-resize-requests-mig: a run duration from 10 minutes to 7 days
        raise ApiError(3, f"Invalid value for field 'resource.requestedRunDuration.seconds': '{seconds}'. The run "
                          "duration must be between 10 minutes and 7 days.", compute_reason="invalid")
    names = [i["name"] for i in body.get("instances") or [] if isinstance(i, dict) and i.get("name")]
    count = int(body.get("resizeBy") or len(names))
    if not names:
        base = mig.body.get("baseInstanceName") or mig.name
        names = [f"{base}-{store.new_id()[-4:]}" for _ in range(count)]
    for n in names:
        mig.members[n] = Member(n, pending=True)
    rr = ResizeRequest(name, store.new_id(), count, seconds, members=names)
    mig.requests[name] = rr

    def accepted() -> None:
        if rr.state == "CREATING":
            rr.state = "ACCEPTED"
        try_provision()

    def try_provision() -> None:
        if rr.state != "ACCEPTED" or mig.deleting or store.migs.get((project, zone, mig_name)) is not mig:
            return
        props = _instance_body(store, mig, names[0])
        if tpu_stockout(store, zone, _short(props["machineType"]), props.get("scheduling") or {}):
            err = stockout_error(project, zone, _short(props["machineType"]))
            rr.last_error = {"errors": err.errors}
            store.schedule(store.latencies.of("queued_provisioning"), try_provision)   # it waits, and tries again
            return
        rr.state, rr.last_error = "SUCCEEDED", None
        mig.target_size += count
        _create_members(store, mig, names)
    store.schedule(0.02, accepted)
    store.schedule(store.latencies.of("queued_provisioning"), try_provision)
    return new_op(store, project, f"zones/{zone}", "insert", f"{mig.path}/resizeRequests/{name}", rr.id, 0.05)


def get_resize(store: Store, project: str, zone: str, mig_name: str, name: str) -> tuple[Mig, ResizeRequest]:
    mig = get_mig(store, project, zone, mig_name)
    rr = mig.requests.get(name)
    if rr is None:
        raise ApiError(5, f"The resource '{mig.path}/resizeRequests/{name}' was not found", compute_reason="notFound")
    return mig, rr


def end_resize(store: Store, mig: Mig, rr: ResizeRequest, state: str, message: str = "") -> None:
    """FAILED (with ``message`` as status.error) or CANCELLED: its waiting VMs are dropped."""
    rr.state = state
    if state == "FAILED":
        rr.error = {"errors": [{"code": "RESOURCE_POOL_EXHAUSTED" if not message else "FAILED",
                                "message": message or "The resize request could not be fulfilled."}]}
    for n in rr.members:
        member = mig.members.get(n)
        if member is not None and not member.made:
            del mig.members[n]


def resize_json(store: Store, mig: Mig, rr: ResizeRequest) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "compute#instanceGroupManagerResizeRequest", "id": rr.id, "name": rr.name,
                           "creationTimestamp": compute_time(rr.created), "resizeBy": rr.resize_by,
                           "state": rr.state, "zone": store.link(f"projects/{mig.project}/zones/{mig.zone}"),
                           "selfLink": store.link(f"{mig.path}/resizeRequests/{rr.name}")}
    if rr.run_duration_s is not None:
        out["requestedRunDuration"] = {"seconds": str(rr.run_duration_s)}
    status: dict[str, Any] = {}
    if rr.error:
        status["error"] = rr.error
    if rr.last_error:
        status["lastAttempt"] = {"error": rr.last_error}
    if status:
        out["status"] = status
    return out


# -- preemption, as Compute Engine does it to a spot VM ------------------------------------------------
def preempt_instance(store: Store, project: str, zone: str, name: str, *, notice_s: float = 0.0,
                     state: str = "TERMINATED") -> Instance:
    """The guest's metadata turns ``instance/preempted`` TRUE at once; ``notice_s`` later the instance
    is TERMINATED, or deleted when its ``instanceTerminationAction`` is DELETE (Scheduling,
    discovery document; a Spot VM's guest has 30 s after the ACPI soft-off: skipGuestOsShutdown).
    Either way the zone keeps Compute Engine's record of it, a ``compute.instances.preempted``
    operation (compute_ops.system_event): what is left of a deleted one. ``notice_s`` 0 is the
    hard kill: the instance goes with ``instance/preempted`` never TRUE (the notice is the ACPI
    soft-off and the metadata value; without it the guest sees nothing before it is gone)."""
    inst = get_instance(store, project, zone, name)
    if notice_s > 0:
        inst.preempted = True
        store.cond.notify_all()

    def off() -> None:
        if store.instances.get(inst.key) is not inst:
            return
        if state == "TERMINATED":
            system_event(store, project, zone, "compute.instances.preempted", inst.path, inst.id,
                         "Instance was preempted.")
        if (inst.scheduling.get("instanceTerminationAction") == "DELETE") and state == "TERMINATED":
            del store.instances[inst.key]
        else:
            inst.status = state
        store.cond.notify_all()
    if notice_s > 0:
        store.schedule(notice_s, off)
    else:
        off()
    return inst


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str, op_poll: bool = False):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="compute",
                          op_poll=op_poll)

    def checked(req: Request, call: str) -> None:
        discovery.check_query(call, req.query)

    # resource policies
    @route("POST", "/regions/{region}/resourcePolicies", "compute.resourcePolicies.insert",
           "compute.resourcePolicies.create")
    def policy_insert(req: Request) -> Any:
        s, p = store_of(), req.params
        checked(req, "compute.resourcePolicies.insert")
        return op_json(s, insert_policy(s, p["project"], p["region"], req.json()))

    @route("GET", "/regions/{region}/resourcePolicies/{name}", "compute.resourcePolicies.get",
           "compute.resourcePolicies.get")
    def policy_get(req: Request) -> Any:
        s, p = store_of(), req.params
        return policy_json(s, get_policy(s, p["project"], p["region"], p["name"]))

    @route("DELETE", "/regions/{region}/resourcePolicies/{name}", "compute.resourcePolicies.delete",
           "compute.resourcePolicies.delete")
    def policy_delete(req: Request) -> Any:
        s, p = store_of(), req.params
        return op_json(s, delete_policy(s, p["project"], p["region"], p["name"]))

    @route("GET", "/regions/{region}/resourcePolicies", "compute.resourcePolicies.list", "compute.resourcePolicies.list")
    def policy_list(req: Request) -> Any:
        s, p = store_of(), req.params
        check_region(s, p["project"], p["region"])
        items = [policy_json(s, x) for x in s.resource_policies.values()
                 if x.project == p["project"] and x.region == p["region"]]
        where = f"projects/{p['project']}/regions/{p['region']}/resourcePolicies"
        return list_page(s, req, "compute#resourcePolicyList", where, where, items)

    @route("GET", "/aggregated/resourcePolicies", "compute.resourcePolicies.aggregatedList",
           "compute.resourcePolicies.list")
    def policy_aggregated(req: Request) -> Any:
        from .compute import aggregated_page

        s, project = store_of(), req.params["project"]
        ensure_project(s, project)
        scoped: dict[str, list[dict[str, Any]]] = {f"regions/{r}": [] for r in catalog.REGIONS}
        for x in s.resource_policies.values():
            if x.project == project:
                scoped[f"regions/{x.region}"].append(policy_json(s, x))
        return aggregated_page(s, req, "compute#resourcePolicyAggregatedList", project, "resourcePolicies", scoped)

    # instance templates
    @route("POST", "/global/instanceTemplates", "compute.instanceTemplates.insert", "compute.instanceTemplates.create")
    def template_insert(req: Request) -> Any:
        s, p = store_of(), req.params
        checked(req, "compute.instanceTemplates.insert")
        return op_json(s, insert_template(s, p["project"], req.json()))

    @route("GET", "/global/instanceTemplates/{name}", "compute.instanceTemplates.get", "compute.instanceTemplates.get")
    def template_get(req: Request) -> Any:
        s, p = store_of(), req.params
        return template_json(s, get_template(s, p["project"], p["name"]))

    @route("DELETE", "/global/instanceTemplates/{name}", "compute.instanceTemplates.delete",
           "compute.instanceTemplates.delete")
    def template_delete(req: Request) -> Any:
        s, p = store_of(), req.params
        return op_json(s, delete_template(s, p["project"], p["name"]))

    @route("GET", "/global/instanceTemplates", "compute.instanceTemplates.list", "compute.instanceTemplates.list")
    def template_list(req: Request) -> Any:
        s, p = store_of(), req.params
        ensure_project(s, p["project"])
        items = [template_json(s, t) for t in s.instance_templates.values() if t.project == p["project"]]
        where = f"projects/{p['project']}/global/instanceTemplates"
        return list_page(s, req, "compute#instanceTemplateList", where, where, items)

    # managed instance groups
    M = "/zones/{zone}/instanceGroupManagers"

    @route("POST", M, "compute.instanceGroupManagers.insert", "compute.instanceGroupManagers.create")
    def mig_insert(req: Request) -> Any:
        s, p = store_of(), req.params
        checked(req, "compute.instanceGroupManagers.insert")
        return op_json(s, insert_mig(s, p["project"], p["zone"], req.json()))

    @route("GET", M + "/{name}", "compute.instanceGroupManagers.get", "compute.instanceGroupManagers.get")
    def mig_get(req: Request) -> Any:
        s, p = store_of(), req.params
        return mig_json(s, get_mig(s, p["project"], p["zone"], p["name"]))

    @route("GET", M, "compute.instanceGroupManagers.list", "compute.instanceGroupManagers.list")
    def mig_list(req: Request) -> Any:
        s, p = store_of(), req.params
        check_zone(s, p["project"], p["zone"])
        items = [mig_json(s, m) for m in s.migs.values() if m.project == p["project"] and m.zone == p["zone"]]
        where = f"projects/{p['project']}/zones/{p['zone']}/instanceGroupManagers"
        return list_page(s, req, "compute#instanceGroupManagerList", where, where, items)

    @route("GET", "/aggregated/instanceGroupManagers", "compute.instanceGroupManagers.aggregatedList",
           "compute.instanceGroupManagers.list")
    def mig_aggregated(req: Request) -> Any:
        from .compute import aggregated_page

        s, project = store_of(), req.params["project"]
        ensure_project(s, project)
        scoped: dict[str, list[dict[str, Any]]] = {f"zones/{z}": [] for z in catalog.ZONES}
        for m in s.migs.values():
            if m.project == project:
                scoped[f"zones/{m.zone}"].append(mig_json(s, m))
        return aggregated_page(s, req, "compute#instanceGroupManagerAggregatedList", project,
                               "instanceGroupManagers", scoped)

    @route("DELETE", M + "/{name}", "compute.instanceGroupManagers.delete", "compute.instanceGroupManagers.delete")
    def mig_delete(req: Request) -> Any:
        s, p = store_of(), req.params
        return op_json(s, delete_mig(s, p["project"], p["zone"], p["name"]))

    @route("POST", M + "/{name}/createInstances", "compute.instanceGroupManagers.createInstances",
           "compute.instanceGroupManagers.update")
    def mig_create_instances(req: Request) -> Any:
        s, p = store_of(), req.params
        checked(req, "compute.instanceGroupManagers.createInstances")
        return op_json(s, create_instances(s, p["project"], p["zone"], p["name"], req.json()))

    @route("POST", M + "/{name}/listManagedInstances", "compute.instanceGroupManagers.listManagedInstances",
           "compute.instanceGroupManagers.get")
    def mig_managed(req: Request) -> Any:
        s, p = store_of(), req.params
        checked(req, "compute.instanceGroupManagers.listManagedInstances")
        discovery.check("compute.instanceGroupManagers.listManagedInstances", req.body)
        mig = get_mig(s, p["project"], p["zone"], p["name"])
        return {"managedInstances": managed_instances(s, mig)}

    # resize requests
    R = M + "/{name}/resizeRequests"

    @route("POST", R, "compute.instanceGroupManagerResizeRequests.insert", "compute.instanceGroupManagers.update")
    def rr_insert(req: Request) -> Any:
        s, p = store_of(), req.params
        checked(req, "compute.instanceGroupManagerResizeRequests.insert")
        return op_json(s, insert_resize(s, p["project"], p["zone"], p["name"], req.json()))

    @route("GET", R + "/{rr}", "compute.instanceGroupManagerResizeRequests.get", "compute.instanceGroupManagers.get")
    def rr_get(req: Request) -> Any:
        s, p = store_of(), req.params
        mig, rr = get_resize(s, p["project"], p["zone"], p["name"], p["rr"])
        return resize_json(s, mig, rr)

    @route("GET", R, "compute.instanceGroupManagerResizeRequests.list", "compute.instanceGroupManagers.get")
    def rr_list(req: Request) -> Any:
        s, p = store_of(), req.params
        mig = get_mig(s, p["project"], p["zone"], p["name"])
        items = [resize_json(s, mig, rr) for rr in mig.requests.values()]
        return list_page(s, req, "compute#instanceGroupManagerResizeRequestsListResponse", f"{mig.path}/resizeRequests",
                         f"{mig.path}/resizeRequests", items)

    @route("POST", R + "/{rr}/cancel", "compute.instanceGroupManagerResizeRequests.cancel",
           "compute.instanceGroupManagers.update")
    def rr_cancel(req: Request) -> Any:
        s, p = store_of(), req.params
        mig, rr = get_resize(s, p["project"], p["zone"], p["name"], p["rr"])
        if rr.state in ("CREATING", "ACCEPTED"):
            end_resize(s, mig, rr, "CANCELLED")
        return op_json(s, new_op(s, p["project"], f"zones/{p['zone']}", "cancel", f"{mig.path}/resizeRequests/{rr.name}",
                                 rr.id, 0.05))

    @route("DELETE", R + "/{rr}", "compute.instanceGroupManagerResizeRequests.delete",
           "compute.instanceGroupManagers.update")
    def rr_delete(req: Request) -> Any:
        s, p = store_of(), req.params
        mig, rr = get_resize(s, p["project"], p["zone"], p["name"], p["rr"])
        if rr.state in ("CREATING", "ACCEPTED"):
            raise ApiError(3, f"The resize request '{rr.name}' is {rr.state}: cancel it before deleting it.",
                           compute_reason="invalid")
        del mig.requests[rr.name]
        return op_json(s, new_op(s, p["project"], f"zones/{p['zone']}", "delete", f"{mig.path}/resizeRequests/{rr.name}",
                                 rr.id, 0.05))


def register_admin(router: Router, cloud: Any) -> None:
    """``POST /_admin/topology`` and ``POST /_admin/resize-request``: what a test makes happen."""
    def route(method: str, path: str):
        return router.add(method, "/_admin" + path, "admin", service="admin", style="tpu")

    @route("POST", "/topology")
    def topology(req: Request) -> Any:
        b = req.json()
        state = b.get("state")
        if state is not None and state not in TOPOLOGY_STATES:
            raise ApiError(3, f"'state' must be one of {', '.join(TOPOLOGY_STATES)} (or null: computed)")
        mig = get_mig(cloud.store, b.get("project") or cloud.default_project, b["zone"], b["name"])
        mig.topology_override = state
        return mig_json(cloud.store, mig)

    @route("POST", "/resize-request")
    def resize_request(req: Request) -> Any:
        b = req.json()
        state = b.get("state")
        if state not in ("FAILED", "CANCELLED"):
            raise ApiError(3, "'state' must be FAILED or CANCELLED")
        store = cloud.store
        mig = get_mig(store, b.get("project") or cloud.default_project, b["zone"], b["name"])
        done = []
        for rr in list(mig.requests.values()):
            if rr.state in ("CREATING", "ACCEPTED") and b.get("request") in (None, rr.name):
                end_resize(store, mig, rr, state, b.get("message") or "")
                done.append(resize_json(store, mig, rr))
        return {"requests": done}
