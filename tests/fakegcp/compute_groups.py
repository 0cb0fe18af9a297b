"""What gcloud reads beside a slice's MIG: its instance group, autoscalers, templates in aggregate.

tpuctl makes a multi-host Compute Engine TPU as a zonal MIG of a global instance template
(compute_tpu.py); Google's own CLI, pointed at the fake, must see them as it sees them on Google
Cloud. These are the requests gcloud 528 sends for them (``--log-http``), and nothing else:

- ``gcloud compute instance-groups managed list`` reads ``aggregated/instanceGroupManagers``, then
  ``zones/{z}/instanceGroups`` of every zone with a MIG (its SIZE column is the size of the
  instance group whose selfLink is the MIG's with ``instanceGroupManagers`` replaced by
  ``instanceGroups``: googlecloudsdk/api_lib/compute/managed_instance_groups_utils.py,
  ``_ComputeInstanceGroupSize``), then ``zones/{z}/autoscalers`` of those zones (its AUTOSCALED
  column, ``AutoscalersForLocations``);
- ``gcloud compute instance-groups list`` reads ``aggregated/instanceGroups`` (then each zone's
  ``instanceGroupManagers``, served in compute_tpu.py), and ``instance-groups list-instances`` posts
  ``zones/{z}/instanceGroups/{g}/listInstances``;
- ``gcloud compute instance-templates list`` reads ``aggregated/instanceTemplates``, whose scopes
  are ``global`` and each region (regional templates).

Every MIG has its instance group, named as the MIG and in its zone (``InstanceGroupManager.instanceGroup``,
discovery document); its ``size`` counts the instances that exist (``InstanceGroup.size``: "the
total number of instances in the instance group"). tpuctl makes no autoscaler, and neither does
anything else the fake serves, so the autoscaler lists are empty. Shapes are compute v1's
discovery document (``InstanceGroup``, ``InstanceGroupList``, ``InstanceGroupAggregatedList``,
``AutoscalerList``, ``InstanceTemplateAggregatedList``); an empty list has no ``items``.
"""

from __future__ import annotations

from typing import Any

from . import catalog, discovery
from .compute import Instance, aggregated_page, check_zone, list_page
from .compute_tpu import Mig, template_json
from .errors import ApiError
from .network import ensure_project
from .routing import Request, Router
from .store import Store, compute_time

SERVICE = "compute.googleapis.com"
P = "/compute/v1/projects/{project}"


def _alive(store: Store, mig: Mig) -> list[Instance]:
    """The MIG's instances that exist now, in the order it was asked for them."""
    made = [store.instances.get((mig.project, mig.zone, m.name)) for m in mig.members.values() if m.made]
    return [i for i in made if i is not None]


def group_json(store: Store, mig: Mig) -> dict[str, Any]:
    """The instance group of ``mig``: same name, zone and creation time, the instances that exist."""
    alive = _alive(store, mig)
    out: dict[str, Any] = {
        "kind": "compute#instanceGroup", "id": mig.id, "creationTimestamp": compute_time(mig.created),
        "name": mig.name, "zone": store.link(f"projects/{mig.project}/zones/{mig.zone}"),
        "size": len(alive), "fingerprint": "ZmFrZWdjcA==",
        "selfLink": store.link(f"projects/{mig.project}/zones/{mig.zone}/instanceGroups/{mig.name}"),
    }
    if alive:
        out["network"] = store.link(f"projects/{mig.project}/global/networks/{alive[0].network}")
        out["subnetwork"] = store.link(
            f"projects/{mig.project}/regions/{catalog.region_of(mig.zone)}/subnetworks/{alive[0].subnetwork}")
    return out


def get_group(store: Store, project: str, zone: str, name: str) -> Mig:
    check_zone(store, project, zone)
    mig = store.migs.get((project, zone, name))
    if mig is None:
        raise ApiError(5, f"The resource 'projects/{project}/zones/{zone}/instanceGroups/{name}' was not found",
                       compute_reason="notFound")
    return mig


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="compute")

    @route("GET", "/zones/{zone}/instanceGroups", "compute.instanceGroups.list", "compute.instanceGroups.list")
    def group_list(req: Request) -> Any:
        s, p = store_of(), req.params
        check_zone(s, p["project"], p["zone"])
        migs = [m for m in s.migs.values() if m.project == p["project"] and m.zone == p["zone"]]
        where = f"projects/{p['project']}/zones/{p['zone']}/instanceGroups"
        return list_page(s, req, "compute#instanceGroupList", where, where, migs, render=lambda m: group_json(s, m))

    @route("GET", "/zones/{zone}/instanceGroups/{name}", "compute.instanceGroups.get", "compute.instanceGroups.get")
    def group_get(req: Request) -> Any:
        s, p = store_of(), req.params
        return group_json(s, get_group(s, p["project"], p["zone"], p["name"]))

    @route("POST", "/zones/{zone}/instanceGroups/{name}/listInstances", "compute.instanceGroups.listInstances",
           "compute.instanceGroups.list")
    def group_instances(req: Request) -> Any:
        """``InstanceGroupsListInstances``: each instance that exists, with its status; ``instanceState:
        RUNNING`` keeps the running ones (InstanceGroupsListInstancesRequest)."""
        s, p = store_of(), req.params
        discovery.check_query("compute.instanceGroups.listInstances", req.query)
        discovery.check("compute.instanceGroups.listInstances", req.body)
        mig = get_group(s, p["project"], p["zone"], p["name"])
        running_only = (req.body or {}).get("instanceState") == "RUNNING"
        items = [{"instance": s.link(i.path), "status": i.status} for i in _alive(s, mig)
                 if not running_only or i.status == "RUNNING"]
        where = f"{mig.path.replace('/instanceGroupManagers/', '/instanceGroups/')}/listInstances"
        return list_page(s, req, "compute#instanceGroupsListInstances", where, where, items)

    @route("GET", "/aggregated/instanceGroups", "compute.instanceGroups.aggregatedList", "compute.instanceGroups.list")
    def group_aggregated(req: Request) -> Any:
        s, project = store_of(), req.params["project"]
        ensure_project(s, project)
        scoped: dict[str, list[Any]] = {f"zones/{z}": [] for z in catalog.ZONES}
        for m in s.migs.values():
            if m.project == project:
                scoped[f"zones/{m.zone}"].append(m)
        return aggregated_page(s, req, "compute#instanceGroupAggregatedList", project, "instanceGroups", scoped,
                               render=lambda m: group_json(s, m))

    @route("GET", "/zones/{zone}/autoscalers", "compute.autoscalers.list", "compute.autoscalers.list")
    def autoscaler_list(req: Request) -> Any:
        s, p = store_of(), req.params
        check_zone(s, p["project"], p["zone"])
        where = f"projects/{p['project']}/zones/{p['zone']}/autoscalers"
        return list_page(s, req, "compute#autoscalerList", where, where, [])

    @route("GET", "/aggregated/instanceTemplates", "compute.instanceTemplates.aggregatedList",
           "compute.instanceTemplates.list")
    def template_aggregated(req: Request) -> Any:
        s, project = store_of(), req.params["project"]
        ensure_project(s, project)
        scoped: dict[str, list[Any]] = {"global": [t for t in s.instance_templates.values() if t.project == project]}
        scoped.update({f"regions/{r}": [] for r in catalog.REGIONS})
        return aggregated_page(s, req, "compute#instanceTemplateAggregatedList", project, "instanceTemplates", scoped,
                               render=lambda t: template_json(s, t))
