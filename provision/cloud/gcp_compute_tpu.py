"""The Compute Engine TPU handler of the GCP provider: TPU VMs as instances, slices as MIGs.

One handler per TPU path (STYLE.md 3, after SkyPilot's ``GCPManagedInstanceGroup``): the GCP
provider sends a cluster's TPU here when its spec says ``api: compute`` (``up`` chose it: the zone
lists the generation's machine type), and to the Cloud TPU API otherwise; ``get``, ``list`` and
``delete`` see both kinds side by side. Bodies and the mapping onto :class:`TpuNode` are pure
(:mod:`provision.cloud.gce_tpu`); this module calls and sequences.

A slice is made and deleted as one unit. Creating: workload policy, then template, then the MIG at
size 0 (each waited for; a failure deletes what this call made before it raises), then all
workers at once (``createInstances``, BULK) or a flex-start resize request; the returned operation
(``ceslice:``) is done when every worker runs, and fails with the create attempt's error (a
stockout, a quota) or the resize request's (FAILED, CANCELLED). Deleting (``cedel:``): the MIG
with its VMs and requests, then the template, then the policy, each once the one before is gone
(Compute refuses to delete a template or policy a MIG still uses). Nothing is left behind: a
template or policy without its MIG (an ``up`` killed halfway) is listed as a TERMINATED TPU of
its cluster, so ``down`` and a rerun of ``up`` clean it up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..basics.errors import CloudError, NotFound
from ..basics.validate import CLUSTER_LABEL, ROLE_LABEL
from . import gce_tpu
from . import gcp_fields as fields
from .base import Arch, Operation, OperationError, Preemption, TpuNode, TpuState, matches
from .gcp_errors import compute_operation_failure

Json = dict[str, Any]
Call = Callable[..., Json]


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def _parts(zone: str, name: str) -> dict[str, tuple[str, str, str]]:
    """A slice's parts in the order they are deleted: (delete call, path, operation scope)."""
    region = _region(zone)
    return {"mig": ("compute.instanceGroupManagers.delete", f"zones/{zone}/instanceGroupManagers/{name}",
                    f"zones/{zone}"),
            "template": ("compute.instanceTemplates.delete", f"global/instanceTemplates/{name}", "global"),
            "policy": ("compute.resourcePolicies.delete", f"regions/{region}/resourcePolicies/{name}",
                       f"regions/{region}")}


class ComputeTpus:
    """Compute Engine TPU calls of one project; ``call``/``pages``/``aggregated``/``wait`` are the
    provider's retried, classified calls."""

    def __init__(self, project: str, base: str, *, call: Call, pages: Callable[..., Iterator[Json]],
                 aggregated: Callable[..., Iterator[Json]], wait: Callable[[str, str], Json],
                 cluster_instances: Callable[[str], list[Json]] | None = None) -> None:
        self.project = project
        self._gce = base
        self._call = call
        self._pages = pages
        self._aggregated = aggregated
        self._cluster_instances = cluster_instances
        self._wait = wait

    # ---- create ---------------------------------------------------------------------------------
    def create(self, req: gce_tpu.Request) -> Operation:
        zone, name = req.zone, req.spec.name
        if not req.as_mig:
            op = self._call("compute.instances.insert", "POST", f"{self._gce}/zones/{zone}/instances",
                            body=req.instance())
            return Operation(name=f"zone:{op['name']}", zone=zone, verb="create", kind="tpu", target=name)
        made: list[str] = []
        try:
            if req.needs_policy:
                self._done(self._call("compute.resourcePolicies.insert", "POST",
                                      f"{self._gce}/regions/{_region(zone)}/resourcePolicies", body=req.policy()),
                           f"regions/{_region(zone)}", "workload policy")
                made.append("policy")
            self._done(self._call("compute.instanceTemplates.insert", "POST", f"{self._gce}/global/instanceTemplates",
                                  body=req.template()), "global", "instance template")
            made.append("template")
            self._done(self._call("compute.instanceGroupManagers.insert", "POST",
                                  f"{self._gce}/zones/{zone}/instanceGroupManagers", body=req.mig()),
                       f"zones/{zone}", "managed instance group")
            made.append("mig")
            mig = f"{self._gce}/zones/{zone}/instanceGroupManagers/{req.name}"
            if req.capacity.value == "flex-start":
                self._done(self._call("compute.instanceGroupManagerResizeRequests.insert", "POST",
                                      f"{mig}/resizeRequests", body=req.resize_request()), f"zones/{zone}",
                           "flex-start request")
                mode = "flex"
            else:
                self._done(self._call("compute.instanceGroupManagers.createInstances", "POST",
                                      f"{mig}/createInstances", body=req.create_instances()), f"zones/{zone}",
                           "workers")
                mode = "bulk"
        except BaseException:
            self._undo(zone, req.name, made)
            raise
        return Operation(name=f"ceslice:{zone}/{req.name}/{mode}", zone=zone, verb="create", kind="tpu", target=name)

    def _done(self, op: Json, scope: str, what: str) -> Json:
        """Wait for a Compute operation; its error (a quota, a conflict) as a classified CloudError."""
        if op.get("status") != "DONE":
            op = self._wait(scope, op["name"])
        if op.get("error") or op.get("httpErrorStatusCode"):
            from .failures import classify

            code, message = compute_operation_failure(op)
            f = classify(code=code, message=message, where="operation")
            raise CloudError(f"creating the {what} failed: {message}", kind=f.kind.value, hint=f.hint)
        return op

    def _undo(self, zone: str, name: str, made: list[str]) -> None:
        """Delete the parts of a slice this call made, last first (best effort; down finds the rest)."""
        steps = _parts(zone, name)
        for part in reversed(made):
            what, path, scope = steps[part]
            try:
                op = self._call(what, "DELETE", f"{self._gce}/{path}")
                if op.get("status") != "DONE":
                    self._wait(scope, op["name"])
            except (NotFound, CloudError):
                continue

    # ---- poll -------------------------------------------------------------------------------------
    def poll(self, op: Operation, scheme: str, ref: str) -> Operation:
        if scheme == "ceslice":
            zone, name, mode = ref.split("/")
            self._poll_create(op, zone, name, mode)
        else:
            self._poll_delete(op, ref)
        return op

    def _poll_create(self, op: Operation, zone: str, name: str, mode: str) -> None:
        mig_url = f"{self._gce}/zones/{zone}/instanceGroupManagers/{name}"
        try:
            if mode == "flex":
                rr = self._call("compute.instanceGroupManagerResizeRequests.get", "GET",
                                f"{mig_url}/resizeRequests/{name}-flex")
                errors = gce_tpu.resize_error(rr)
                if errors is None and rr.get("state") != "SUCCEEDED":
                    return
            else:
                managed = self._call("compute.instanceGroupManagers.listManagedInstances", "POST",
                                     f"{mig_url}/listManagedInstances").get("managedInstances") or []
                errors = gce_tpu.creation_errors(managed) or None
                if errors is None and not all(m.get("instanceStatus") for m in managed):
                    return
        except NotFound:
            op.done, op.error = True, OperationError(5, f"TPU slice {op.target} disappeared while being created")
            return
        op.done = True
        if errors:
            op.error = OperationError(*_failure(errors, flex=mode == "flex"))

    def delete(self, zone: str, cluster: str) -> Operation:
        """Delete the cluster's TPU in ``zone``: its instance, or its slice (MIG, then template, then policy)."""
        name = gce_tpu.resource_name(cluster)
        try:
            op = self._call("compute.instances.delete", "DELETE", f"{self._gce}/zones/{zone}/instances/{name}")
            return Operation(name=f"zone:{op['name']}", zone=zone, verb="delete", kind="tpu", target=cluster)
        except NotFound:
            pass
        op = Operation(name=f"cedel:{zone}/{name}/mig/-", zone=zone, verb="delete", kind="tpu", target=cluster)
        if not self._step_delete(op, zone, name, "mig"):
            raise NotFound(f"TPU {cluster} not found in {zone}")
        return op

    def _step_delete(self, op: Operation, zone: str, name: str, step: str) -> bool:
        """Delete ``step``, or the first part after it that exists; record in ``op`` which one is
        being deleted (done when none is left). False when no part was there at all."""
        paths = _parts(zone, name)
        order = list(paths)
        found = False
        for part in order[order.index(step):]:
            what, path, scope = paths[part]
            try:
                res = self._call(what, "DELETE", f"{self._gce}/{path}")
            except NotFound:
                continue
            found = True
            if res.get("status") == "DONE" and not res.get("error"):
                continue
            op.name = f"cedel:{zone}/{name}/{part}/{scope}|{res['name']}"
            return True
        op.done = True
        return found

    def _poll_delete(self, op: Operation, ref: str) -> None:
        zone, name, part, rest = ref.split("/", 3)
        scope, _, op_name = rest.partition("|")
        if op_name in ("", "-"):
            self._step_delete(op, zone, name, part)
            return
        res = self._call(f"compute.{_OP_COLLECTION[scope.split('/')[0]]}.get", "GET",
                         f"{self._gce}/{scope}/operations/{op_name}")
        if res.get("status") != "DONE":
            return
        if res.get("error") or res.get("httpErrorStatusCode"):
            code, message = compute_operation_failure(res)
            if code != 5:
                op.done, op.error = True, OperationError(code, f"deleting the slice's {part}: {message}")
                return
        nxt = {"mig": "template", "template": "policy", "policy": None}[part]
        if nxt is None:
            op.done = True
            return
        self._step_delete(op, zone, name, nxt)

    # ---- read -------------------------------------------------------------------------------------
    def get(self, zone: str, cluster: str) -> TpuNode | None:
        name = gce_tpu.resource_name(cluster)
        try:
            inst = self._call("compute.instances.get", "GET", f"{self._gce}/zones/{zone}/instances/{name}")
            node = gce_tpu.node_from_instance(inst)
            if node is not None:
                return node
        except NotFound:
            pass
        try:
            mig = self._call("compute.instanceGroupManagers.get", "GET",
                             f"{self._gce}/zones/{zone}/instanceGroupManagers/{name}")
        except NotFound:
            return None
        workers = list(self._pages("compute.instances.list", f"{self._gce}/zones/{zone}/instances", "items",
                                   {"filter": f'labels.{gce_tpu.SLICE_LABEL} = "{name}"'}))
        return gce_tpu.node_from_slice(mig, workers, waiting=gce_tpu.may_be_waiting(mig, workers)
                                       and self._waiting(zone, mig))

    def preempted(self, cluster: str | None) -> list[Preemption]:
        """Single-host TPU VMs their preemption deleted (termination action DELETE): one
        aggregatedList of every zone's operations, filtered to the instances' lifetime records
        (gce_tpu.preemptions decides which still stand)."""
        ops = self._aggregated("compute.globalOperations.aggregatedList", "operations", "operations",
                               {"filter": gce_tpu.preemptions_filter(cluster)})
        return gce_tpu.preemptions(list(ops))

    def worker_instances(self, zone: str, cluster: str) -> list[Json]:
        """The instances of the cluster's Compute Engine TPU in worker order ([] when there is none)."""
        name = gce_tpu.resource_name(cluster)
        try:
            return [self._call("compute.instances.get", "GET", f"{self._gce}/zones/{zone}/instances/{name}")]
        except NotFound:
            pass
        workers = self._pages("compute.instances.list", f"{self._gce}/zones/{zone}/instances", "items",
                              {"filter": f'labels.{gce_tpu.SLICE_LABEL} = "{name}"'})
        return sorted(workers, key=gce_tpu.worker_number)

    def _waiting(self, zone: str, mig: Json) -> bool:
        about = gce_tpu.about_slice(mig) or {}
        if about.get("capacity") != "flex-start":
            return False
        name = str(mig.get("name") or "")
        try:
            rr = self._call("compute.instanceGroupManagerResizeRequests.get", "GET",
                            f"{self._gce}/zones/{zone}/instanceGroupManagers/{name}/resizeRequests/{name}-flex")
        except NotFound:
            return False
        return rr.get("state") in ("CREATING", "ACCEPTED")

    def list(self, zone: str | None, labels: dict[str, str] | None) -> list[TpuNode]:
        """Every tpuctl TPU on Compute Engine (in ``zone``, or all) whose labels match: single-host
        instances, slices, and for a named cluster the parts of a slice left without their MIG."""
        flt = " AND ".join(f'labels.{k} = "{v}"' for k, v in sorted({**(labels or {}), ROLE_LABEL: "tpu"}.items()))
        cluster = (labels or {}).get(CLUSTER_LABEL)
        with ThreadPoolExecutor(3) as pool:
            inst_f = pool.submit(lambda: list(self._instances(zone, flt, labels)))
            migs_f = pool.submit(lambda: list(self._migs(zone, cluster)))
            left_f = pool.submit(self._remnants, cluster, zone) if cluster else None
            instances, migs = inst_f.result(), migs_f.result()
            remnants = left_f.result() if left_f else []
        out: list[TpuNode] = []
        members: dict[tuple[str, str], list[Json]] = {}
        for inst in instances:
            slice_name = (inst.get("labels") or {}).get(gce_tpu.SLICE_LABEL)
            if slice_name:
                members.setdefault((_short(inst.get("zone")), slice_name), []).append(inst)
                continue
            node = gce_tpu.node_from_instance(inst)
            if node is not None and matches(node.labels, labels):
                out.append(node)
        seen_slices = set()
        for mig in migs:
            mzone = _short(mig.get("zone"))
            workers = members.get((mzone, str(mig.get("name"))), [])
            waiting = gce_tpu.may_be_waiting(mig, workers) and self._waiting(mzone, mig)
            node = gce_tpu.node_from_slice(mig, workers, waiting=waiting)
            if node is not None and matches(node.labels, labels):
                out.append(node)
                seen_slices.add(node.name)
        out.extend(n for n in remnants if n.name not in seen_slices and not any(o.name == n.name for o in out))
        return out

    def of_cluster(self, cluster: str) -> list[TpuNode] | None:
        """The cluster's TPU as the provider's one list of its instances shows it (the list ``status
        NAME`` reads for its host VM anyway): a single-host TPU VM at no further call, a slice from
        its workers and its MIG (listed by name in their zone). A cluster has one TPU, so with it found
        the project-wide MIG list, the remnant lists and the Cloud TPU API could add nothing. None
        where the list shows no TPU of the cluster (its VM preempted and deleted, a flex-start
        slice still waiting for its VMs, an ``up`` cut short): :meth:`list` finds out which."""
        if self._cluster_instances is None:
            return None
        workers = [i for i in self._cluster_instances(cluster) if (i.get("labels") or {}).get(ROLE_LABEL) == "tpu"]
        name = gce_tpu.resource_name(cluster)
        in_slice = [w for w in workers if (w.get("labels") or {}).get(gce_tpu.SLICE_LABEL) == name]
        alone = [n for n in (gce_tpu.node_from_instance(w) for w in workers
                             if not (w.get("labels") or {}).get(gce_tpu.SLICE_LABEL)) if n is not None]
        if len(alone) == 1 and not in_slice:
            return alone if alone[0].labels.get(CLUSTER_LABEL) == cluster else None
        zones = {_short(w.get("zone")) for w in in_slice}
        if alone or len(zones) != 1:
            return None
        (zone,) = zones
        migs = list(self._migs(zone, cluster))
        if len(migs) != 1:
            return None
        node = gce_tpu.node_from_slice(migs[0], in_slice, waiting=gce_tpu.may_be_waiting(migs[0], in_slice)
                                       and self._waiting(zone, migs[0]))
        return [node] if node is not None and node.labels.get(CLUSTER_LABEL) == cluster else None

    def _instances(self, zone: str | None, flt: str, labels: dict[str, str] | None) -> Iterator[Json]:
        """The TPU instances the filter selects, each with what gce_tpu reads of a worker; a
        named cluster's from the provider's one list of its instances (gcp_cluster_reads)."""
        if zone is None and labels and set(labels) == {CLUSTER_LABEL} and self._cluster_instances:
            return (i for i in self._cluster_instances(labels[CLUSTER_LABEL])
                    if (i.get("labels") or {}).get(ROLE_LABEL) == "tpu")
        if zone:
            return self._pages("compute.instances.list", f"{self._gce}/zones/{zone}/instances", "items",
                               {"filter": flt, "fields": fields.listed("items", fields.TPU_INSTANCE)})
        return self._aggregated("compute.instances.aggregatedList", "instances", "instances",
                                {"filter": flt, "fields": fields.aggregated("instances", fields.TPU_INSTANCE)})

    def _migs(self, zone: str | None, cluster: str | None = None) -> Iterator[Json]:
        """tpuctl's slices (a MIG carries no labels: its description says it is tpuctl's), only
        ``cluster``'s when one is named (its MIG is named for it)."""
        flt = (f'name eq "{gce_tpu.resource_name(cluster)}"' if cluster
               else f'description eq "{gce_tpu.DESCRIPTION_PREFIX}.*"')
        if zone:
            return self._pages("compute.instanceGroupManagers.list",
                               f"{self._gce}/zones/{zone}/instanceGroupManagers", "items",
                               {"filter": flt, "fields": fields.listed("items", fields.MIG)})
        return self._aggregated("compute.instanceGroupManagers.aggregatedList", "instanceGroupManagers",
                                "instanceGroupManagers",
                                {"filter": flt, "fields": fields.aggregated("instanceGroupManagers", fields.MIG)})

    def _remnants(self, cluster: str, zone: str | None) -> list[TpuNode]:
        """A template or workload policy named for ``cluster`` (left by an ``up`` cut short): a
        TERMINATED TPU of the cluster (billed nothing), so that deleting it deletes them."""
        name = gce_tpu.resource_name(cluster)
        found: dict[str, list[str]] = {}    # zone -> what is left there
        kinds: dict[str, str] = {}          # zone -> the accelerator type it was for
        # lists filtered by name, not gets: a read that finds nothing answers 200, not 404
        parts = [("instance template", t) for t in self._pages(
            "compute.instanceTemplates.list", f"{self._gce}/global/instanceTemplates", "items",
            {"filter": f'name eq "{name}"'})]
        parts += [("workload policy", p) for p in self._aggregated(
            "compute.resourcePolicies.aggregatedList", "resourcePolicies", "resourcePolicies",
            {"filter": f'name eq "{name}"'})]
        for what, part in parts:
            where = gce_tpu.zone_of(part.get("description"))
            if where:
                found.setdefault(where, []).append(what)
                kinds[where] = kinds.get(where) or gce_tpu.accelerator_in(part.get("description"))
        return [TpuNode(name=cluster, zone=where, arch=Arch.VM, accelerator_type=kinds.get(where, ""),
                        state=TpuState.TERMINATED, health_description=f"only its {' and '.join(what)} remain",
                        api="compute", labels={CLUSTER_LABEL: cluster, ROLE_LABEL: "tpu"})
                for where, what in found.items() if zone is None or where == zone]


def _failure(errors: list[Json], *, flex: bool) -> tuple[int, str]:
    """(code, message) of a slice's failed create. A flex-start request that FAILED for a reason no
    rule reads (its wording is not public) is that zone's failure; a CANCELLED one stops (someone
    cancelled it)."""
    from .failures import FLEX_FAILED, Kind, classify

    code, message = compute_operation_failure({"error": {"errors": errors}})
    if not flex:
        return code, message
    if any(e.get("code") == "CANCELLED" for e in errors):
        return 1, message
    if classify(code=code, message=message, where="operation").kind in (Kind.TRANSIENT, Kind.UNKNOWN, Kind.INVALID,
                                                                       Kind.RATE_LIMIT):
        return 9, f"{FLEX_FAILED}: {message}"
    return code, message


_OP_COLLECTION = {"zones": "zoneOperations", "global": "globalOperations", "regions": "regionOperations"}


def _short(ref: Any) -> str:
    return str(ref or "").rstrip("/").rsplit("/", 1)[-1]
