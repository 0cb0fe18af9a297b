"""Compute Engine networking reads, and reserved global address ranges (tpuctl's range lock).

An INTERNAL global address with a ``prefixLength`` reserves a range on a network. Its insert is
checked atomically, under the store lock, against subnets (primary and secondary), peered ranges,
other reserved ranges and TPU Node blocks; an overlap makes the insert's operation fail with the
message Compute Engine uses. Two concurrent reservations of one range: exactly one wins.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from . import catalog
from .compute import SERVICE, P, aggregated_page, check_region, list_page
from .compute_ops import OpError, new_op, op_json
from .errors import ApiError
from .network import (
    Address,
    address_json,
    ensure_project,
    get_network,
    network_json,
    network_name,
    network_path,
    route_json,
    subnet_json,
    used_ranges,
    valid_name,
)
from .routing import Request, Router
from .store import Store


def _range_users(store: Store, project: str, network: str) -> list[tuple[ipaddress.IPv4Network, str]]:
    out: list[tuple[ipaddress.IPv4Network, str]] = []
    for u in used_ranges(store, project, network):
        if "/global/routes/" in u.source:
            continue  # subnet routes duplicate the subnets; static routes do not block reservations
        out.append((u.cidr, u.source))
    for node in store.nodes.values():
        if node.project == project and node.network == network and node.cidr_block:
            out.append((ipaddress.ip_network(node.cidr_block), node.path))
    return out


def insert_address(store: Store, project: str, body: dict[str, Any]) -> Any:
    ensure_project(store, project)
    name = body.get("name") or ""
    if not valid_name(name):
        raise ApiError(3, f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", compute_reason="invalid")
    target = f"projects/{project}/global/addresses/{name}"
    latency = store.latencies.of("address_create")
    if (project, name) in store.addresses:
        return new_op(store, project, "global", "insert", target, store.addresses[(project, name)].id, 0.0,
                      OpError("RESOURCE_ALREADY_EXISTS", f"The resource '{target}' already exists", 409))
    address_type = body.get("addressType") or "EXTERNAL"
    purpose = body.get("purpose")
    prefix = body.get("prefixLength")
    network = body.get("network")
    if address_type == "INTERNAL" and prefix is not None:
        if not network:
            raise ApiError(3, "Invalid value for field 'resource.network': ''. A network is required "
                              "for an internal address range.", compute_reason="invalid")
        net_name = network_name(network)
        get_network(store, project, net_name)
        taken = _range_users(store, project, net_name)
        prefix = int(prefix)
        if body.get("address"):
            try:
                rng = ipaddress.ip_network(f"{body['address']}/{prefix}", strict=True)
            except ValueError:
                raise ApiError(3, f"Invalid value for field 'resource.address': '{body['address']}'. "
                                  f"It is not the start of a /{prefix} range.", compute_reason="invalid") from None
            for used, source in taken:
                if rng.overlaps(used):
                    err = OpError("INVALID_USAGE", f"Invalid IP CIDR range: {rng} conflicts with IP range "
                                                   f"{used} that was allocated by resource {source}.", 400)
                    return new_op(store, project, "global", "insert", target, store.new_id(), latency, err)
        else:
            rng = next((c for c in ipaddress.ip_network("10.0.0.0/8").subnets(new_prefix=prefix)
                        if not any(c.overlaps(u) for u, _ in taken)), None)
            if rng is None:
                raise ApiError(8, "No free IP range of the requested size is left.", http=403,
                               compute_reason="quotaExceeded")
        address = str(rng.network_address)
    else:
        address = body.get("address") or store.next_external_ip()
        prefix = int(prefix) if prefix is not None else None
    addr = Address(project, name, store.new_id(), address, prefix, address_type, purpose, network,
                   dict(body.get("labels") or {}), body.get("description") or "", status="RESERVING")
    store.addresses[(project, name)] = addr

    def reserved() -> None:
        if addr.status == "RESERVING":
            addr.status = "RESERVED"
    return new_op(store, project, "global", "insert", target, addr.id, latency, on_done=reserved)


def get_address(store: Store, project: str, name: str) -> Address:
    ensure_project(store, project)
    addr = store.addresses.get((project, name))
    if addr is None:
        raise ApiError(5, f"The resource 'projects/{project}/global/addresses/{name}' was not found",
                       compute_reason="notFound")
    return addr


def delete_address(store: Store, project: str, name: str) -> Any:
    addr = get_address(store, project, name)

    def gone() -> None:
        if store.addresses.get((project, name)) is addr:
            del store.addresses[(project, name)]
    return new_op(store, project, "global", "delete", f"projects/{project}/global/addresses/{name}", addr.id,
                  store.latencies.of("address_create"), on_done=gone)


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="compute")

    @route("GET", "/global/networks", "compute.networks.list", "compute.networks.list")
    def list_networks(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        items = [network_json(s, n) for n in s.networks.values() if n.project == project]
        return list_page(s, req, "compute#networkList", f"projects/{project}/global/networks",
                         f"projects/{project}/global/networks", items)

    @route("GET", "/global/networks/{network}", "compute.networks.get", "compute.networks.get")
    def get_net(req: Request) -> Any:
        s = store_of()
        return network_json(s, get_network(s, req.params["project"], req.params["network"]))

    @route("GET", "/global/networks/{network}/listPeeringRoutes", "compute.networks.listPeeringRoutes",
           "compute.networks.listPeeringRoutes")
    def peering_routes(req: Request) -> Any:
        s = store_of()
        net = get_network(s, req.params["project"], req.params["network"])
        wanted = req.arg("peeringName")
        direction = req.arg("direction") or "INCOMING"
        items = []
        if direction == "INCOMING":
            for peering in net.peerings:
                if wanted and peering.name != wanted:
                    continue
                for rng in peering.imported_ranges:
                    items.append({"destRange": rng, "type": "SUBNET_PEERING_ROUTE", "imported": True,
                                  "nextHopRegion": req.arg("region") or "", "priority": 0, "state": "ACTIVE"})
        return list_page(s, req, "compute#exchangedPeeringRoutesList", "", network_path(net.project, net.name)
                         + "/listPeeringRoutes", items)

    def subnets_in(s: Store, project: str, region: str | None) -> list[dict[str, Any]]:
        return [subnet_json(s, sub) for sub in s.subnets.values()
                if sub.project == project and (region is None or sub.region == region)]

    @route("GET", "/regions/{region}/subnetworks", "compute.subnetworks.list", "compute.subnetworks.list")
    def list_subnets(req: Request) -> Any:
        s = store_of()
        p = req.params
        check_region(s, p["project"], p["region"])
        path = f"projects/{p['project']}/regions/{p['region']}/subnetworks"
        return list_page(s, req, "compute#subnetworkList", path, path, subnets_in(s, p["project"], p["region"]))

    @route("GET", "/regions/{region}/subnetworks/{name}", "compute.subnetworks.get", "compute.subnetworks.get")
    def get_subnet(req: Request) -> Any:
        s = store_of()
        p = req.params
        check_region(s, p["project"], p["region"])
        sub = s.subnets.get((p["project"], p["region"], p["name"]))
        if sub is None:
            raise ApiError(5, f"The resource 'projects/{p['project']}/regions/{p['region']}/subnetworks/"
                              f"{p['name']}' was not found", compute_reason="notFound")
        return subnet_json(s, sub)

    @route("GET", "/aggregated/subnetworks", "compute.subnetworks.aggregatedList", "compute.subnetworks.list")
    def aggregated_subnets(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        scoped = {f"regions/{r}": subnets_in(s, project, r) for r in catalog.REGIONS}
        return aggregated_page(s, req, "compute#subnetworkAggregatedList", project, "subnetworks", scoped)

    @route("GET", "/global/routes", "compute.routes.list", "compute.routes.list")
    def list_routes(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        items = [route_json(s, r) for r in s.routes.values() if r.project == project]
        return list_page(s, req, "compute#routeList", f"projects/{project}/global/routes",
                         f"projects/{project}/global/routes", items)

    @route("GET", "/global/routes/{name}", "compute.routes.get", "compute.routes.get")
    def get_route(req: Request) -> Any:
        s = store_of()
        p = req.params
        ensure_project(s, p["project"])
        r = s.routes.get((p["project"], p["name"]))
        if r is None:
            raise ApiError(5, f"The resource 'projects/{p['project']}/global/routes/{p['name']}' was not found",
                           compute_reason="notFound")
        return route_json(s, r)

    @route("POST", "/global/addresses", "compute.globalAddresses.insert", "compute.globalAddresses.create")
    def insert_addr(req: Request) -> Any:
        s = store_of()
        return op_json(s, insert_address(s, req.params["project"], req.json()))

    @route("GET", "/global/addresses", "compute.globalAddresses.list", "compute.globalAddresses.list")
    def list_addr(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        items = [address_json(s, a) for a in s.addresses.values() if a.project == project]
        return list_page(s, req, "compute#addressList", f"projects/{project}/global/addresses",
                         f"projects/{project}/global/addresses", items)

    @route("GET", "/aggregated/addresses", "compute.addresses.aggregatedList", "compute.addresses.list")
    def aggregated_addr(req: Request) -> Any:
        """gcloud's ``addresses list``: global ones under ``global``; the fake has no regional ones."""
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        scoped = {"global": [address_json(s, a) for a in s.addresses.values() if a.project == project]}
        scoped.update({f"regions/{r}": [] for r in catalog.REGIONS})
        return aggregated_page(s, req, "compute#addressAggregatedList", project, "addresses", scoped)

    @route("GET", "/global/addresses/{name}", "compute.globalAddresses.get", "compute.globalAddresses.get")
    def get_addr(req: Request) -> Any:
        s = store_of()
        return address_json(s, get_address(s, req.params["project"], req.params["name"]))

    @route("DELETE", "/global/addresses/{name}", "compute.globalAddresses.delete", "compute.globalAddresses.delete")
    def delete_addr(req: Request) -> Any:
        s = store_of()
        return op_json(s, delete_address(s, req.params["project"], req.params["name"]))


