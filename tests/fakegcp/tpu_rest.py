"""The Cloud TPU REST surface: ``/v2/`` (TPU VMs, queued resources) and ``/v1/`` (TPU Nodes).

Paths, query parameters and bodies are the ones the google-cloud-tpu REST transport and gcloud
send; ``v2alpha1`` and ``v1alpha1`` (gcloud's alpha track) are served by the same handlers. The
v1 surface (REST and, through it, gRPC) can be told to answer 404 or 403 on every call, for a
world where v1 is gone or closed to the project (``/_admin/tpu-v1``).
"""

from __future__ import annotations

from typing import Any

from . import catalog, queued, tpu, tpu_views
from .errors import ApiError
from .routing import Request, Router
from .store import Store

SERVICE = "tpu.googleapis.com"
LOC = "/projects/{project}/locations/{zone}"


def paginate(items: list[Any], req: Request, key: str) -> dict[str, Any]:
    try:
        size = int(req.arg("pageSize") or 0)
        start = int(req.arg("pageToken") or 0)
    except ValueError:
        raise ApiError(3, "Invalid value for field 'page_token'.") from None
    page = items[start:start + size] if size > 0 else items[start:]
    out: dict[str, Any] = {key: page} if page else {}  # proto3 JSON omits an empty list
    if size > 0 and start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out


def _v1_surface(fn: Any, store_of: Any) -> Any:
    """A v1 handler that answers as a v1 API gone (404) or closed to the project (403) when told to."""

    def handler(req: Request) -> Any:
        status = store_of().tpu_v1_status
        if status == 404:
            raise ApiError(5, f"The requested URL {req.path} was not found on this server.", http=404)
        if status == 403:
            raise ApiError(7, "The caller does not have permission")
        return fn(req)
    return handler


def register_admin(router: Router, cloud: Any) -> None:
    """``/_admin/tpu-node-access`` and ``/_admin/tpu-v1`` (docs/fakegcp.md)."""

    def route(path: str):
        return router.add("POST", "/_admin" + path, "admin", service="admin", style="tpu")

    @route("/tpu-node-access")
    def node_access(req: Request) -> Any:
        b = req.json()
        project = b.get("project") or cloud.default_project
        store: Store = cloud.store
        if b.get("allowed", True):
            store.tpu_node_projects.add(project)
        else:
            store.tpu_node_projects.discard(project)
        return {"project": project, "allowed": project in store.tpu_node_projects,
                "projects": sorted(store.tpu_node_projects)}

    @route("/tpu-v1")
    def v1_surface(req: Request) -> Any:
        status = req.json().get("status")
        if status not in (None, 403, 404):
            raise ApiError(3, "'status' must be 403, 404 or null (v1 served)")
        cloud.store.tpu_v1_status = status
        return {"status": status}


def register(router: Router, store_of: Any) -> None:
    """``store_of()`` returns the live store (it changes on reset)."""

    def route(method: str, path: str, call: str, permission: str, versions: tuple[str, ...],
              op_poll: bool = False):
        def deco(fn):
            for ver in versions:
                handler = _v1_surface(fn, store_of) if ver.startswith("v1") else fn
                router.add(method, f"/{ver}{path}", call.format(v="v1" if ver.startswith("v1") else "v2"),
                           permission=permission, service=SERVICE, style="tpu", op_poll=op_poll)(handler)
            return fn
        return deco

    V2 = ("v2", "v2alpha1")
    V1 = ("v1", "v1alpha1")
    BOTH = V2 + V1

    def api_of(req: Request) -> str:
        return "v1" if req.path.startswith("/v1") else "v2"

    # -- nodes ---------------------------------------------------------------------------------
    @route("POST", LOC + "/nodes", "tpu.{v}.nodes.create", "tpu.nodes.create", BOTH)
    def create_node(req: Request) -> Any:
        s: Store = store_of()
        p = req.params
        op = tpu.create_node(s, p["project"], p["zone"], req.arg("nodeId"), req.json(), api_of(req))
        return tpu_views.operation_json(op)

    @route("GET", LOC + "/nodes", "tpu.{v}.nodes.list", "tpu.nodes.list", BOTH)
    def list_nodes(req: Request) -> Any:
        s: Store = store_of()
        api = api_of(req)
        nodes = [tpu_views.node_view(n, api) for n in tpu.list_nodes(s, req.params["project"], req.params["zone"])]
        return paginate(nodes, req, "nodes")

    @route("GET", LOC + "/nodes/{node}", "tpu.{v}.nodes.get", "tpu.nodes.get", BOTH)
    def get_node(req: Request) -> Any:
        p = req.params
        return tpu_views.node_view(tpu.get_node(store_of(), p["project"], p["zone"], p["node"]), api_of(req))

    @route("DELETE", LOC + "/nodes/{node}", "tpu.{v}.nodes.delete", "tpu.nodes.delete", BOTH)
    def delete_node(req: Request) -> Any:
        p = req.params
        return tpu_views.operation_json(tpu.delete_node(store_of(), p["project"], p["zone"], p["node"], api_of(req)))

    for verb in ("stop", "start"):
        def action(req: Request, verb: str = verb) -> Any:
            p = req.params
            op = tpu.transition(store_of(), p["project"], p["zone"], p["node"], api_of(req), verb)
            return tpu_views.operation_json(op)
        route("POST", LOC + "/nodes/{node}:" + verb, "tpu.{v}.nodes." + verb, "tpu.nodes." + verb, BOTH)(action)

    @route("POST", LOC + "/nodes/{node}:reimage", "tpu.v1.nodes.reimage", "tpu.nodes.reimage", V1)
    def reimage(req: Request) -> Any:
        p = req.params
        op = tpu.transition(store_of(), p["project"], p["zone"], p["node"], "v1", "reimage",
                            version=req.json().get("tensorflowVersion"))
        return tpu_views.operation_json(op)

    @route("PATCH", LOC + "/nodes/{node}", "tpu.v2.nodes.update", "tpu.nodes.update", V2)
    def update(req: Request) -> Any:
        p = req.params
        op = tpu.update_node(store_of(), p["project"], p["zone"], p["node"], req.json(),
                             req.arg("updateMask"), "v2")
        return tpu_views.operation_json(op)

    # -- operations ----------------------------------------------------------------------------
    def op_name(req: Request) -> str:
        p = req.params
        return f"projects/{p['project']}/locations/{p['zone']}/operations/{p['op']}"

    @route("GET", LOC + "/operations/{op}", "tpu.{v}.operations.get", "tpu.operations.get", BOTH, op_poll=True)
    def get_op(req: Request) -> Any:
        return tpu_views.operation_json(tpu.get_operation(store_of(), op_name(req)), api_of(req))

    @route("GET", LOC + "/operations", "tpu.{v}.operations.list", "tpu.operations.list", BOTH, op_poll=True)
    def list_ops(req: Request) -> Any:
        p = req.params
        tpu.check_location(store_of(), p["project"], p["zone"])
        ops = [tpu_views.operation_json(o, api_of(req)) for o in tpu.list_operations(store_of(), p["project"], p["zone"])]
        return paginate(ops, req, "operations")

    @route("DELETE", LOC + "/operations/{op}", "tpu.{v}.operations.delete", "tpu.operations.delete", BOTH)
    def delete_op(req: Request) -> Any:
        store_of().tpu_ops.pop(tpu.get_operation(store_of(), op_name(req)).name, None)
        return {}

    @route("POST", LOC + "/operations/{op}:cancel", "tpu.{v}.operations.cancel", "tpu.operations.cancel", BOTH)
    def cancel_op(req: Request) -> Any:
        tpu.get_operation(store_of(), op_name(req)).cancel_requested = True
        return {}

    # -- queued resources ------------------------------------------------------------------------
    @route("POST", LOC + "/queuedResources", "tpu.v2.queuedResources.create", "tpu.queuedResources.create", V2)
    def create_qr(req: Request) -> Any:
        p = req.params
        op = queued.create_queued(store_of(), p["project"], p["zone"], req.arg("queuedResourceId"), req.json())
        return tpu_views.operation_json(op)

    @route("GET", LOC + "/queuedResources", "tpu.v2.queuedResources.list", "tpu.queuedResources.list", V2)
    def list_qr(req: Request) -> Any:
        p = req.params
        items = [tpu_views.queued_json(q) for q in queued.list_queued(store_of(), p["project"], p["zone"])]
        return paginate(items, req, "queuedResources")

    @route("GET", LOC + "/queuedResources/{qr}", "tpu.v2.queuedResources.get", "tpu.queuedResources.get", V2)
    def get_qr(req: Request) -> Any:
        p = req.params
        return tpu_views.queued_json(queued.get_queued(store_of(), p["project"], p["zone"], p["qr"]))

    @route("DELETE", LOC + "/queuedResources/{qr}", "tpu.v2.queuedResources.delete",
           "tpu.queuedResources.delete", V2)
    def delete_qr(req: Request) -> Any:
        p = req.params
        op = queued.delete_queued(store_of(), p["project"], p["zone"], p["qr"], req.flag("force"))
        return tpu_views.operation_json(op)

    @route("POST", LOC + "/queuedResources/{qr}:reset", "tpu.v2.queuedResources.reset",
           "tpu.queuedResources.reset", V2)
    def reset_qr(req: Request) -> Any:
        p = req.params
        return tpu_views.operation_json(queued.reset_queued(store_of(), p["project"], p["zone"], p["qr"]))

    # -- catalogue -----------------------------------------------------------------------------
    def _types(req: Request) -> list[dict[str, Any]]:
        p = req.params
        tpu.check_location(store_of(), p["project"], p["zone"])
        out = []
        for name in catalog.tpu_types_in(p["zone"], store_of().extra_tpu_types):
            item: dict[str, Any] = {"name": f"projects/{p['project']}/locations/{p['zone']}/acceleratorTypes/{name}",
                                    "type": name}
            acc = catalog.tpu_type(name)
            if acc and api_of(req) == "v2":
                item["acceleratorConfigs"] = [{"type": acc.config_type, "topology": acc.topology}]
            out.append(item)
        return out

    @route("GET", LOC + "/acceleratorTypes", "tpu.{v}.acceleratorTypes.list", "tpu.acceleratortypes.list", BOTH)
    def list_types(req: Request) -> Any:
        return paginate(_types(req), req, "acceleratorTypes")

    @route("GET", LOC + "/acceleratorTypes/{type}", "tpu.{v}.acceleratorTypes.get", "tpu.acceleratortypes.get", BOTH)
    def get_type(req: Request) -> Any:
        for item in _types(req):
            if item["type"] == req.params["type"]:
                return item
        raise ApiError(5, f"Resource '{req.path.split('/', 2)[2]}' was not found")

    def _versions(req: Request, kind: str) -> list[dict[str, Any]]:
        p = req.params
        tpu.check_location(store_of(), p["project"], p["zone"])
        names = (catalog.runtime_versions_in(p["zone"], store_of().extra_tpu_types) if kind == "runtimeVersions"
                 else catalog.TENSORFLOW_VERSIONS)
        return [{"name": f"projects/{p['project']}/locations/{p['zone']}/{kind}/{v}", "version": v}
                for v in names]

    @route("GET", LOC + "/runtimeVersions", "tpu.v2.runtimeVersions.list", "tpu.runtimeversions.list", V2)
    def list_runtimes(req: Request) -> Any:
        return paginate(_versions(req, "runtimeVersions"), req, "runtimeVersions")

    @route("GET", LOC + "/runtimeVersions/{ver}", "tpu.v2.runtimeVersions.get", "tpu.runtimeversions.get", V2)
    def get_runtime(req: Request) -> Any:
        for item in _versions(req, "runtimeVersions"):
            if item["version"] == req.params["ver"]:
                return item
        raise ApiError(5, f"Resource '{req.path.split('/', 2)[2]}' was not found")

    @route("GET", LOC + "/tensorflowVersions", "tpu.v1.tensorflowVersions.list", "tpu.tensorflowversions.list", V1)
    def list_tf(req: Request) -> Any:
        return paginate(_versions(req, "tensorflowVersions"), req, "tensorflowVersions")

    @route("GET", LOC + "/tensorflowVersions/{ver}", "tpu.v1.tensorflowVersions.get", "tpu.tensorflowversions.get", V1)
    def get_tf(req: Request) -> Any:
        for item in _versions(req, "tensorflowVersions"):
            if item["version"] == req.params["ver"]:
                return item
        raise ApiError(5, f"Resource '{req.path.split('/', 2)[2]}' was not found")

    def _location(project: str, zone: str) -> dict[str, Any]:
        return {"name": f"projects/{project}/locations/{zone}", "locationId": zone,
                "labels": {"cloud.googleapis.com/region": catalog.region_of(zone)}}

    @route("GET", "/projects/{project}/locations", "tpu.{v}.locations.list", "tpu.locations.list", BOTH)
    def list_locations(req: Request) -> Any:
        zones = catalog.tpu_zones(store_of().extra_tpu_types)
        return paginate([_location(req.params["project"], z) for z in zones], req, "locations")

    @route("GET", LOC, "tpu.{v}.locations.get", "tpu.locations.get", BOTH)
    def get_location(req: Request) -> Any:
        tpu.check_location(store_of(), req.params["project"], req.params["zone"])
        return _location(req.params["project"], req.params["zone"])

    @route("POST", LOC + ":generateServiceIdentity", "tpu.v2.generateServiceIdentity",
           "tpu.locations.generateServiceIdentity", V2)
    def service_identity(req: Request) -> Any:
        project = req.params["project"]
        tpu.check_location(store_of(), project, req.params["zone"])
        number = catalog.project_number(project)
        return {"identity": {"email": f"service-{number}@cloud-tpu.iam.gserviceaccount.com",
                             "uniqueId": str(int(number) * 1000 + 7)}}
