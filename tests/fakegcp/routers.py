"""Cloud Routers with their Cloud NAT, and a subnetwork's Private Google Access.

What ``tpuctl up --least-privilege`` reads to decide whether the hosts need external IPs:
``regions/{r}/routers`` insert, get, list, delete (a ``Router`` with ``network`` and ``nats[]``,
each body checked against compute v1's discovery document like every Compute body here), and a
subnetwork's ``privateIpGoogleAccess``, set by ``subnetworks/{s}/setPrivateIpGoogleAccess``
(``SubnetworksSetPrivateIpGoogleAccessRequest``) or by the admin API. Each write is a region
operation. The fake routes nothing: a NAT changes no answer but the router's own.

Admin: ``POST /_admin/routers`` (a ``Router`` body plus ``region`` and ``project``: inserted
through the same code, so it is checked the same way) and ``POST /_admin/private-access``
(``{region, name, enabled}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import discovery
from .compute import SERVICE, P, check_region, list_page
from .compute_ops import OpError, new_op, op_json
from .errors import ApiError
from .network import get_network, network_name, network_path, valid_name
from .routing import Request, Router
from .store import Store, compute_time


@dataclass
class CloudRouter:
    project: str
    region: str
    name: str
    id: str
    network: str
    body: dict[str, Any] = field(default_factory=dict)   # what was inserted (nats, bgp, description...)
    created: float = 0.0


def router_json(store: Store, r: CloudRouter) -> dict[str, Any]:
    out = {k: v for k, v in r.body.items() if k not in ("network", "region", "name")}
    out.update({"kind": "compute#router", "id": r.id, "creationTimestamp": compute_time(r.created),
                "name": r.name, "network": store.link(network_path(r.project, r.network)),
                "region": store.link(f"projects/{r.project}/regions/{r.region}"),
                "selfLink": store.link(f"projects/{r.project}/regions/{r.region}/routers/{r.name}")})
    return out


def insert_router(store: Store, project: str, region: str, body: dict[str, Any]) -> Any:
    import time

    check_region(store, project, region)
    discovery.check("compute.routers.insert", body)
    name = body.get("name") or ""
    if not valid_name(name):
        raise ApiError(3, f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", compute_reason="invalid")
    if not body.get("network"):
        raise ApiError(3, "Invalid value for field 'resource.network': ''. The network is required.",
                       compute_reason="invalid")
    net = network_name(body["network"])
    get_network(store, project, net)
    target = f"projects/{project}/regions/{region}/routers/{name}"
    if (project, region, name) in store.routers:
        return new_op(store, project, f"regions/{region}", "insert", target, store.routers[(project, region, name)].id,
                      0.0, OpError("RESOURCE_ALREADY_EXISTS", f"The resource '{target}' already exists", 409))
    r = CloudRouter(project, region, name, store.new_id(), net, dict(body), time.time())
    store.routers[(project, region, name)] = r
    return new_op(store, project, f"regions/{region}", "insert", target, r.id, 0.0)


def get_router(store: Store, project: str, region: str, name: str) -> CloudRouter:
    check_region(store, project, region)
    r = store.routers.get((project, region, name))
    if r is None:
        raise ApiError(5, f"The resource 'projects/{project}/regions/{region}/routers/{name}' was not found",
                       compute_reason="notFound")
    return r


def set_private_access(store: Store, project: str, region: str, name: str, enabled: bool) -> Any:
    check_region(store, project, region)
    sub = store.subnets.get((project, region, name))
    if sub is None:
        raise ApiError(5, f"The resource 'projects/{project}/regions/{region}/subnetworks/{name}' was not found",
                       compute_reason="notFound")
    sub.private_google_access = bool(enabled)
    return new_op(store, project, f"regions/{region}", "setPrivateIpGoogleAccess",
                  f"projects/{project}/regions/{region}/subnetworks/{name}", sub.id, 0.0)


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="compute")

    @route("GET", "/regions/{region}/routers", "compute.routers.list", "compute.routers.list")
    def list_routers(req: Request) -> Any:
        s = store_of()
        p = req.params
        check_region(s, p["project"], p["region"])
        path = f"projects/{p['project']}/regions/{p['region']}/routers"
        items = [router_json(s, r) for (proj, reg, _), r in sorted(s.routers.items())
                 if proj == p["project"] and reg == p["region"]]
        return list_page(s, req, "compute#routerList", path, path, items)

    @route("GET", "/regions/{region}/routers/{name}", "compute.routers.get", "compute.routers.get")
    def get_one(req: Request) -> Any:
        s = store_of()
        p = req.params
        return router_json(s, get_router(s, p["project"], p["region"], p["name"]))

    @route("POST", "/regions/{region}/routers", "compute.routers.insert", "compute.routers.create")
    def insert(req: Request) -> Any:
        s = store_of()
        p = req.params
        return op_json(s, insert_router(s, p["project"], p["region"], req.json()))

    @route("DELETE", "/regions/{region}/routers/{name}", "compute.routers.delete", "compute.routers.delete")
    def delete(req: Request) -> Any:
        s = store_of()
        p = req.params
        r = get_router(s, p["project"], p["region"], p["name"])
        del s.routers[(r.project, r.region, r.name)]
        return op_json(s, new_op(s, r.project, f"regions/{r.region}", "delete",
                                 f"projects/{r.project}/regions/{r.region}/routers/{r.name}", r.id, 0.0))

    @route("POST", "/regions/{region}/subnetworks/{name}/setPrivateIpGoogleAccess",
           "compute.subnetworks.setPrivateIpGoogleAccess", "compute.subnetworks.setPrivateIpGoogleAccess")
    def set_pga(req: Request) -> Any:
        s = store_of()
        p = req.params
        discovery.check("compute.subnetworks.setPrivateIpGoogleAccess", req.json())
        enabled = req.json().get("privateIpGoogleAccess")
        return op_json(s, set_private_access(s, p["project"], p["region"], p["name"], bool(enabled)))


def register_admin(router: Router, cloud: Any) -> None:
    def route(method: str, path: str):
        return router.add(method, "/_admin" + path, "admin", service="admin", style="tpu")

    @route("POST", "/routers")
    def add_router(req: Request) -> Any:
        b = dict(req.json())
        project = b.pop("project", None) or cloud.default_project
        region = b.pop("region")
        b.setdefault("network", f"projects/{project}/global/networks/default")
        insert_router(cloud.store, project, region, b)
        return router_json(cloud.store, get_router(cloud.store, project, region, b["name"]))

    @route("POST", "/private-access")
    def private_access(req: Request) -> Any:
        b = req.json()
        project = b.get("project") or cloud.default_project
        set_private_access(cloud.store, project, b["region"], b["name"], bool(b.get("enabled", True)))
        return {"region": b["region"], "name": b["name"], "privateIpGoogleAccess": bool(b.get("enabled", True))}
