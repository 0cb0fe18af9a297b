"""Compute Engine VPC firewall rules: ``firewalls.list/get/insert/delete`` under
``/compute/v1/projects/P/global/firewalls`` (compute.v1 discovery document), each write a global
operation. A project's auto-mode ``default`` network comes with Google's four prepopulated rules
(network.py ``DEFAULT_FIREWALLS``); a network made through the admin API has none, as Google
documents for every network but ``default`` ("No manually created network has automatically
created firewall rules", https://cloud.google.com/firewall/docs/firewalls#default_firewall_rules).
"""

from __future__ import annotations

from typing import Any

from .compute import SERVICE, P, list_page
from .compute_ops import OpError, new_op, op_json
from .errors import ApiError
from .network import Firewall, ensure_project, firewall_json, get_network, network_name, valid_name
from .routing import Request, Router
from .store import Store


def _strings(body: dict[str, Any], key: str) -> list[str]:
    return [str(v) for v in body.get(key) or []]


def insert_firewall(store: Store, project: str, body: dict[str, Any]) -> Any:
    ensure_project(store, project)
    name = body.get("name") or ""
    if not valid_name(name):
        raise ApiError(3, f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                          "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", compute_reason="invalid")
    # "If not specified when creating a firewall rule, the default network is used" (Firewall.network)
    net = network_name(body.get("network") or "global/networks/default")
    get_network(store, project, net)
    target = f"projects/{project}/global/firewalls/{name}"
    latency = store.latencies.of("address_create")
    if (project, name) in store.firewalls:
        return new_op(store, project, "global", "insert", target, store.firewalls[(project, name)].id, 0.0,
                      OpError("RESOURCE_ALREADY_EXISTS", f"The resource '{target}' already exists", 409))
    rule = Firewall(project, name, net, store.new_id(), direction=body.get("direction") or "INGRESS",
                    priority=int(body.get("priority", 1000)), source_ranges=_strings(body, "sourceRanges"),
                    destination_ranges=_strings(body, "destinationRanges"),
                    source_tags=_strings(body, "sourceTags"), target_tags=_strings(body, "targetTags"),
                    source_service_accounts=_strings(body, "sourceServiceAccounts"),
                    target_service_accounts=_strings(body, "targetServiceAccounts"),
                    allowed=[dict(a) for a in body.get("allowed") or []],
                    denied=[dict(d) for d in body.get("denied") or []],
                    disabled=bool(body.get("disabled", False)), description=body.get("description") or "")
    store.firewalls[(project, name)] = rule
    return new_op(store, project, "global", "insert", target, rule.id, latency)


def get_firewall(store: Store, project: str, name: str) -> Firewall:
    ensure_project(store, project)
    rule = store.firewalls.get((project, name))
    if rule is None:
        raise ApiError(5, f"The resource 'projects/{project}/global/firewalls/{name}' was not found",
                       compute_reason="notFound")
    return rule


def delete_firewall(store: Store, project: str, name: str) -> Any:
    rule = get_firewall(store, project, name)

    def gone() -> None:
        if store.firewalls.get((project, name)) is rule:
            del store.firewalls[(project, name)]
    return new_op(store, project, "global", "delete", f"projects/{project}/global/firewalls/{name}", rule.id,
                  store.latencies.of("address_create"), on_done=gone)


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="compute")

    @route("GET", "/global/firewalls", "compute.firewalls.list", "compute.firewalls.list")
    def list_rules(req: Request) -> Any:
        s = store_of()
        project = req.params["project"]
        ensure_project(s, project)
        items = [firewall_json(s, r) for r in s.firewalls.values() if r.project == project]
        return list_page(s, req, "compute#firewallList", f"projects/{project}/global/firewalls",
                         f"projects/{project}/global/firewalls", items)

    @route("GET", "/global/firewalls/{name}", "compute.firewalls.get", "compute.firewalls.get")
    def get_rule(req: Request) -> Any:
        s = store_of()
        return firewall_json(s, get_firewall(s, req.params["project"], req.params["name"]))

    @route("POST", "/global/firewalls", "compute.firewalls.insert", "compute.firewalls.create")
    def insert_rule(req: Request) -> Any:
        s = store_of()
        return op_json(s, insert_firewall(s, req.params["project"], req.json()))

    @route("DELETE", "/global/firewalls/{name}", "compute.firewalls.delete", "compute.firewalls.delete")
    def delete_rule(req: Request) -> Any:
        s = store_of()
        return op_json(s, delete_firewall(s, req.params["project"], req.params["name"]))
