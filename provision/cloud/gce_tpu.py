"""Compute Engine TPUs as JSON: the request bodies tpuctl sends, and the TpuNode it reads back. Pure.

Request shapes are compute v1's (discovery document, revision 20261106, as google-api-python-client
2.202.0 ships it); the fake cloud checks every one of these bodies against that document.

- A single-host TPU VM is one instance (``instances.insert``) with a TPU machine type
  (catalog.compute_tpus) and no ``guestAccelerators`` (Google's TPU blueprints set the machine type
  only: GoogleCloudPlatform/cluster-toolkit examples/machine-learning/tpu7x-standard-4t),
  ``scheduling.onHostMaintenance: TERMINATE`` (tpu/docs/spot-compute uses
  ``--maintenance-policy=TERMINATE``), a ``hyperdisk-balanced`` boot disk from the TPU image family.
- A multi-host slice is a regional workload policy ``{type: HIGH_THROUGHPUT, acceleratorTopology}``
  (gcloud compute resource-policies create workload-policy), a global instance template of the same
  instance properties, and a zonal MIG at ``targetSize: 0`` with ``targetSizePolicy.mode: BULK``
  (all VMs at once or none), ``resourcePolicies.workloadPolicy`` and
  ``instanceLifecyclePolicy.defaultActionOnFailure: DO_NOTHING`` (a slice is recovered whole, by
  tpuctl: tpu/docs/failure-recovery), then ``createInstances`` with one name per worker.
- Flex-start is the same MIG grown by a resize request (``requestedRunDuration``), 10 min to 7 days
  (compute/docs/instance-groups/about-resize-requests-mig).

Capacity amends the ``scheduling`` once per kind (:data:`SCHEDULING`), as xpk's ``capacity.py``
does: spot is ``provisioningModel: SPOT`` with ``instanceTerminationAction: DELETE`` (a preempted
VM is gone at once: tpuctl recreates it without first deleting a TERMINATED VM that keeps its boot
disk billed, the fastest recovery); flex-start ``FLEX_START`` (DELETE, no automatic restart, as
Google's resize-request sample sets it); a reservation ``RESERVATION_BOUND`` with
``reservationAffinity{consumeReservationType: SPECIFIC_RESERVATION, key:
compute.googleapis.com/reservation-name, values: [NAME]}`` (cluster-toolkit PR #6351); on demand
``STANDARD``, restarted by Compute Engine after a host failure (automaticRestart).

Workers find each other: Compute Engine is not known to set the TPU worker metadata
(``agent-worker-number``, ``worker-network-endpoints``) on MIG VMs (REFERENCES: not found), so
tpuctl gives each worker ``tpuctl-worker-number`` through the per-instance config's preserved
metadata and derives the coordinator (worker 0) from the VMs' addresses it reads back.

Names are derived from the cluster's: the instance, MIG, template and policy are ``NAME-tpu`` and
the workers ``NAME-tpu-I`` (a MIG, template and policy carry no labels; the MIG's ``description``
holds what tpuctl needs to read the slice back: ``tpuctl:{json}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog import compute_tpus
from ..catalog.accelerators import parse as parse_accelerator
from .base import Arch, ClusterSpec, Endpoint, Health, Preemption, TpuNode, TpuState
from .capacity import Capacity
from .gcp_fields import tpuctl_keys

Json = dict[str, Any]

SUFFIX = "-tpu"
WORKER_KEY = "tpuctl-worker-number"
IMAGE_KEY = "tpuctl-image"
SLICE_LABEL = "tpuctl-slice"
DESCRIPTION_PREFIX = "tpuctl:"
BOOT_DISK_GB = "100"
BOOT_DISK_TYPE = "hyperdisk-balanced"
TPU_PORT = 8470
# the longest cluster name whose derived names fit Compute's 63 characters: NAME-tpu-9999
MAX_CLUSTER_NAME = 63 - len(SUFFIX) - 5

MODEL_OF = {Capacity.SPOT: "SPOT", Capacity.FLEX_START: "FLEX_START", Capacity.RESERVATION: "RESERVATION_BOUND",
            Capacity.ON_DEMAND: "STANDARD"}
CAPACITY_OF = {v: k for k, v in MODEL_OF.items()}


def resource_name(cluster: str) -> str:
    return f"{cluster}{SUFFIX}"


def worker_name(cluster: str, index: int) -> str:
    return f"{cluster}{SUFFIX}-{index}"


def cluster_of(resource: str) -> str | None:
    return resource[: -len(SUFFIX)] if resource.endswith(SUFFIX) else None


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


# ---- capacity: one function per kind, each amending the scheduling (and the instance properties) ----
def _spot(props: Json, spec: ClusterSpec) -> None:
    props["scheduling"].update(provisioningModel="SPOT", instanceTerminationAction="DELETE", automaticRestart=False)


def _flex_start(props: Json, spec: ClusterSpec) -> None:
    props["scheduling"].update(provisioningModel="FLEX_START", instanceTerminationAction="DELETE",
                               automaticRestart=False, maxRunDuration={"seconds": str(int(spec.flex_seconds or 0))})


def _reservation(props: Json, spec: ClusterSpec) -> None:
    props["scheduling"].update(provisioningModel="RESERVATION_BOUND", instanceTerminationAction="DELETE")
    props["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                    "key": "compute.googleapis.com/reservation-name",
                                    "values": [spec.reservation or ""]}


def _on_demand(props: Json, spec: ClusterSpec) -> None:
    props["scheduling"].update(provisioningModel="STANDARD", automaticRestart=True)


SCHEDULING = {Capacity.SPOT: _spot, Capacity.FLEX_START: _flex_start, Capacity.RESERVATION: _reservation,
              Capacity.ON_DEMAND: _on_demand}


# ---- request bodies ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """What to ask Compute Engine for one TPU of ``spec`` in ``zone``."""

    spec: ClusterSpec
    zone: str
    project: str
    image: str                     # the image name (resolved from its family)
    metadata: Mapping[str, str]    # the workers' metadata (startup script, cluster, role, bucket)
    scopes: Sequence[str]

    @property
    def shape(self) -> compute_tpus.ComputeShape:
        got = compute_tpus.shape(self.spec.accelerator)
        if got is None:
            raise ValueError(f"{self.spec.accelerator_type} is not a Compute Engine TPU")
        return got

    @property
    def capacity(self) -> Capacity:
        return self.spec.capacities[0]

    @property
    def name(self) -> str:
        return resource_name(self.spec.name)

    @property
    def as_mig(self) -> bool:
        """A MIG (multi-host, or any flex-start slice: resize requests need a MIG), else one instance."""
        return self.shape.multi_host or self.capacity is Capacity.FLEX_START

    def _properties(self, *, template: bool) -> Json:
        spec, zone, shape = self.spec, self.zone, self.shape
        iface: Json = {"network": f"projects/{self.project}/global/networks/{spec.network}"}
        if spec.subnetwork:
            iface["subnetwork"] = f"projects/{self.project}/regions/{_region(zone)}/subnetworks/{spec.subnetwork}"
        if spec.external_ips:
            iface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
        labels = spec.resource_labels("tpu")
        if self.as_mig:
            labels[SLICE_LABEL] = self.name
        meta = {**self.metadata, IMAGE_KEY: self.image}
        if not self.as_mig:
            meta[WORKER_KEY] = "0"
        disk_type = BOOT_DISK_TYPE if template else f"zones/{zone}/diskTypes/{BOOT_DISK_TYPE}"
        props: Json = {
            "machineType": shape.machine_type if template else f"zones/{zone}/machineTypes/{shape.machine_type}",
            "labels": labels,
            "metadata": {"items": [{"key": k, "value": v} for k, v in meta.items()]},
            "scheduling": {"onHostMaintenance": "TERMINATE"},
            "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
                "sourceImage": f"projects/{compute_tpus.IMAGE_PROJECT}/global/images/{self.image}",
                "diskSizeGb": BOOT_DISK_GB, "diskType": disk_type}}],
            "networkInterfaces": [iface],
            "serviceAccounts": [{"email": spec.service_account or "default", "scopes": list(self.scopes)}],
        }
        SCHEDULING[self.capacity](props, spec)
        return props

    def instance(self) -> Json:
        return {"name": self.name, **self._properties(template=False)}

    @property
    def description(self) -> str:
        """A template's and a policy's: which cluster and zone they are for (read back by zone_of)."""
        return f"tpuctl cluster {self.spec.name}: {self.spec.accelerator_type} in {self.zone}"

    def policy(self) -> Json:
        return {"name": self.name, "description": self.description,
                "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": self.shape.topology}}

    def template(self) -> Json:
        return {"name": self.name, "description": self.description, "properties": self._properties(template=True)}

    @property
    def needs_policy(self) -> bool:
        return self.shape.multi_host

    def mig(self) -> Json:
        about = {"cluster": self.spec.name, "accelerator": self.spec.accelerator_type, "capacity": self.capacity.value,
                 "image": self.image, "labels": self.spec.resource_labels("tpu")}
        body: Json = {
            "name": self.name, "description": DESCRIPTION_PREFIX + json.dumps(about, sort_keys=True, separators=(",", ":")),
            "versions": [{"instanceTemplate": f"projects/{self.project}/global/instanceTemplates/{self.name}"}],
            "targetSize": 0, "targetSizePolicy": {"mode": "BULK"}, "baseInstanceName": self.name,
            "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
        }
        if self.needs_policy:
            body["resourcePolicies"] = {
                "workloadPolicy": f"projects/{self.project}/regions/{_region(self.zone)}/resourcePolicies/{self.name}"}
        return body

    def workers(self) -> list[Json]:
        """One per-instance config per worker: its name and worker number (preserved metadata)."""
        return [{"name": worker_name(self.spec.name, i), "preservedState": {"metadata": {WORKER_KEY: str(i)}}}
                for i in range(self.shape.vms)]

    def create_instances(self) -> Json:
        return {"instances": self.workers()}

    def resize_request(self) -> Json:
        return {"name": f"{self.name}-flex", "instances": self.workers(),
                "requestedRunDuration": {"seconds": str(int(self.spec.flex_seconds or 0))}}


# ---- reading back ----------------------------------------------------------------------------------
def _short(ref: Any) -> str:
    return str(ref or "").rstrip("/").rsplit("/", 1)[-1]


def _metadata(inst: Json) -> dict[str, str]:
    return {str(i.get("key")): str(i.get("value", "")) for i in ((inst.get("metadata") or {}).get("items") or [])
            if isinstance(i, dict)}


def _ip(inst: Json) -> str:
    for iface in inst.get("networkInterfaces") or []:
        if iface.get("networkIP"):
            return str(iface["networkIP"])
    return ""


_PART = re.compile(r": ([a-z0-9]+-[0-9]+) in ([a-z]+-[a-z]+[0-9]+-[a-z0-9]+)$")


def zone_of(description: Any) -> str | None:
    """The zone a template or policy was made for, from its description (:attr:`Request.description`)."""
    m = _PART.search(str(description or ""))
    return m.group(2) if m else None


def accelerator_in(description: Any) -> str:
    """The accelerator type a template or policy was made for ("" when its description does not say)."""
    m = _PART.search(str(description or ""))
    return m.group(1) if m else ""


def worker_number(inst: Json) -> int:
    try:
        return int(_metadata(inst).get(WORKER_KEY, "0"))
    except ValueError:
        return 0


def capacity_of(scheduling: Json) -> str:
    return CAPACITY_OF.get(str(scheduling.get("provisioningModel") or "STANDARD"), Capacity.ON_DEMAND).value


_INSTANCE_STATES = {"PROVISIONING": TpuState.CREATING, "STAGING": TpuState.CREATING, "PENDING": TpuState.CREATING,
                    "RUNNING": TpuState.READY, "REPAIRING": TpuState.REPAIRING, "STOPPING": TpuState.STOPPING,
                    "PENDING_STOP": TpuState.STOPPING, "STOPPED": TpuState.STOPPED, "SUSPENDING": TpuState.STOPPING,
                    "SUSPENDED": TpuState.STOPPED, "DEPROVISIONING": TpuState.DELETING}


def instance_state(status: str, capacity: str) -> TpuState:
    """A TPU VM instance's state as a TPU's: a TERMINATED spot VM was preempted; another is TERMINATED."""
    if status == "TERMINATED":
        return TpuState.PREEMPTED if capacity == Capacity.SPOT.value else TpuState.TERMINATED
    return _INSTANCE_STATES.get(status, TpuState.UNKNOWN)


def _timestamp(value: Any) -> float | None:
    from datetime import datetime

    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _node(name: str, zone: str, accelerator: str, state: TpuState, capacity: str, labels: dict[str, str],
          workers: Sequence[Json], *, image: str | None, machine_type: str | None, created: Any,
          health_description: str = "", network: str | None = None) -> TpuNode:
    ordered = sorted(workers, key=worker_number)
    return TpuNode(name=name, zone=zone, arch=Arch.VM, accelerator_type=accelerator, state=state,
                   health=Health.HEALTHY if state == TpuState.READY else Health.HEALTH_UNSPECIFIED,
                   health_description=health_description, spot=capacity == Capacity.SPOT.value, version=image,
                   network=network, labels=labels, created_at=_timestamp(created),
                   endpoints=[Endpoint(_ip(w), TPU_PORT) for w in ordered], api="compute", capacity=capacity,
                   machine_type=machine_type,
                   metadata=tpuctl_keys(_metadata(ordered[0])) if ordered and "metadata" in ordered[0] else None)


def node_from_instance(inst: Json) -> TpuNode | None:
    """A single-host TPU VM from its instance, or None for an instance that is not tpuctl's TPU."""
    cluster = cluster_of(str(inst.get("name") or ""))
    machine = _short(inst.get("machineType"))
    accelerator = compute_tpus.accelerator_of(machine, 1)
    if cluster is None or accelerator is None:
        return None
    capacity = capacity_of(inst.get("scheduling") or {})
    network = _short(((inst.get("networkInterfaces") or [{}])[0]).get("network")) or None
    return _node(cluster, _short(inst.get("zone")), accelerator,
                 instance_state(str(inst.get("status") or ""), capacity), capacity, dict(inst.get("labels") or {}),
                 [inst], image=_metadata(inst).get(IMAGE_KEY), machine_type=machine,
                 created=inst.get("creationTimestamp"), network=network)


def about_slice(mig: Json) -> dict[str, Any] | None:
    """What tpuctl wrote in a MIG's description, or None for a MIG that is not a tpuctl TPU slice."""
    text = str(mig.get("description") or "")
    if not text.startswith(DESCRIPTION_PREFIX):
        return None
    try:
        about = json.loads(text[len(DESCRIPTION_PREFIX):])
    except ValueError:
        return None
    return about if isinstance(about, dict) else None


# a slice whose topology is one of these can never train again as it is: recreate it whole
DEAD_TOPOLOGY = frozenset({"ACTIVE_DEGRADED", "INCOMPLETE", "FAILED"})


def slice_state(mig: Json, workers: Sequence[Json], capacity: str, vms: int, *,
                waiting: bool = False) -> tuple[TpuState, str]:
    """(state, why) of a slice from its MIG, its workers' instances and whether its request waits."""
    status = mig.get("status") or {}
    topo = next((t for t in status.get("appliedAcceleratorTopologies") or [] if isinstance(t, dict)), {})
    topo_state = str(topo.get("state") or "")
    actions = mig.get("currentActions") or {}
    dead = TpuState.PREEMPTED if capacity == Capacity.SPOT.value else TpuState.TERMINATED
    if topo_state == "DEACTIVATING" or actions.get("deleting"):
        return TpuState.DELETING, "the slice is being deleted"
    if topo_state in DEAD_TOPOLOGY:
        return dead, f"its accelerator topology is {topo_state}"
    statuses = [str(w.get("status") or "") for w in workers]
    if any(s == "TERMINATED" for s in statuses):
        return dead, "a worker is TERMINATED"
    target = int(mig.get("targetSize") or 0)
    if waiting or len(workers) < vms:
        if target and not waiting and len(workers) < target and topo_state in ("ACTIVE", ""):
            return dead, f"{target - len(workers)} of its {target} workers are gone"
        return TpuState.CREATING, "waiting for its workers"
    if all(s == "RUNNING" for s in statuses) and topo_state in ("ACTIVE", ""):
        return TpuState.READY, ""
    return TpuState.CREATING, f"accelerator topology {topo_state or 'not yet applied'}"


def may_be_waiting(mig: Json, workers: Sequence[Json]) -> bool:
    """Whether the slice's state may hang on its flex-start resize request (one call per MIG,
    resizeRequests.get: the MIG's own answer says nothing of it): a flex-start slice that lacks
    some of its workers. A slice with all of them reads the same whatever the request says
    (slice_state), so a fleet of running slices costs no call per slice."""
    about = about_slice(mig) or {}
    if about.get("capacity") != Capacity.FLEX_START.value:
        return False
    try:
        vms = parse_accelerator(str(about.get("accelerator") or "")).hosts
    except Exception:  # noqa: BLE001 - an unknown type read back: ask, as before
        return True
    return len(workers) < vms


def node_from_slice(mig: Json, workers: Sequence[Json], *, waiting: bool = False) -> TpuNode | None:
    about = about_slice(mig)
    cluster = cluster_of(str(mig.get("name") or ""))
    if about is None or cluster is None:
        return None
    accelerator = str(about.get("accelerator") or "")
    capacity = str(about.get("capacity") or Capacity.ON_DEMAND.value)
    try:
        vms = parse_accelerator(accelerator).hosts
    except Exception:  # noqa: BLE001 - an unknown type read back: still listed, so it can be deleted
        vms = len(workers)
    state, why = slice_state(mig, workers, capacity, vms, waiting=waiting)
    machine = _short(workers[0].get("machineType")) if workers else None
    return _node(cluster, _short(mig.get("zone")), accelerator, state, capacity,
                 {str(k): str(v) for k, v in (about.get("labels") or {}).items()}, workers,
                 image=about.get("image"), machine_type=machine, created=mig.get("creationTimestamp"),
                 health_description=why)


def creation_errors(managed: Sequence[Json]) -> list[Json]:
    """The errors of the last create attempt of a slice's workers (a BULK create that cannot be made).

    A BULK create fails every worker alike (a stockout is one error per VM): each distinct error is
    said once, with how many of the slice's VMs it stopped, not once per VM."""
    seen: dict[str, Json] = {}
    vms: dict[str, int] = {}
    for m in managed:
        if m.get("instanceStatus"):
            continue
        errs = ((m.get("lastAttempt") or {}).get("errors") or {}).get("errors") or []
        for key in dict.fromkeys(json.dumps(e, sort_keys=True) for e in errs if isinstance(e, dict)):
            seen.setdefault(key, json.loads(key))
            vms[key] = vms.get(key, 0) + 1
    out: list[Json] = []
    for key, err in seen.items():
        if vms[key] > 1:
            of = "each of the slice's" if vms[key] == len(managed) else f"{vms[key]} of the slice's"
            err = {**err, "message": f"on {of} {len(managed)} VMs: {err.get('message') or err.get('code') or 'failed'}"}
        out.append(err)
    return out


def resize_error(rr: Json) -> list[Json] | None:
    """A resize request's final error (FAILED), a CANCELLED one's reason, or None while it may still succeed."""
    state = str(rr.get("state") or "")
    if state == "FAILED":
        errs = (((rr.get("status") or {}).get("error") or {}).get("errors")) or []
        return [e for e in errs if isinstance(e, dict)] or [{"code": "FAILED", "message": "the resize request failed"}]
    if state == "CANCELLED":
        return [{"code": "CANCELLED", "message": f"the flex-start request {rr.get('name')} was cancelled"}]
    return None


# ---- what is left of a TPU VM its preemption deleted ----------------------------------------------
# Compute Engine records a preemption as a zonal operation of type compute.instances.preempted on the
# instance, by "system" (Google's sample "List preemption history of a Google Compute Engine instance",
# compute/docs/samples/compute-preemptible-history, lists zone operations filtered on that type and
# the instance's targetLink); users' listings show it for Spot VMs whose termination action is DELETE
# too, which is all that is left of such a VM.
PREEMPTED_OP = "compute.instances.preempted"
_LIFETIME_OPS = (PREEMPTED_OP, "insert", "delete")


def preemptions_filter(cluster: str | None) -> str:
    """The aggregatedList filter for the records that decide whether a single-host TPU VM was
    deleted by its preemption: its (or every tpuctl TPU VM's) preemptions, creations, deletions."""
    name = re.escape(resource_name(cluster)) if cluster else "[a-z]([-a-z0-9]*[a-z0-9])?" + re.escape(SUFFIX)
    types = "|".join(re.escape(t) for t in _LIFETIME_OPS)
    return f'(targetLink eq ".*/instances/{name}") (operationType eq "{types}")'


def preemptions(ops: Sequence[Json]) -> list[Preemption]:
    """The TPU VMs whose last recorded lifetime event is their preemption: nobody made the instance
    again (insert) or deleted it (a delete by anyone but the system) since. A record of a VM that
    is back, or that down deleted, says nothing about now."""
    last: dict[tuple[str, str], Json] = {}
    for op in ops:
        kind = str(op.get("operationType") or "")
        if kind not in _LIFETIME_OPS or (kind == "delete" and op.get("user") == "system"):
            continue
        key = (_short(op.get("zone")), _short(op.get("targetLink")))
        if key not in last or (_timestamp(op.get("insertTime")) or 0.0) >= (_timestamp(last[key].get("insertTime")) or 0.0):
            last[key] = op
    out = []
    for (zone, instance), op in sorted(last.items()):
        cluster = cluster_of(instance)
        if op.get("operationType") == PREEMPTED_OP and cluster and zone:
            out.append(Preemption(cluster=cluster, zone=zone, instance=instance, at=_timestamp(op.get("insertTime"))))
    return out
