"""The admin API under ``/_admin/``: latencies, injected failures, network setup, inspection, reset.

JSON in, JSON out; documented in docs/fakegcp.md. Admin calls are not logged as API calls and are
never subject to injected faults, so a test can always steer and inspect the fake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import catalog, compute, compute_tpu, network, tpu, tpu_views
from .compute_ops import op_json
from .errors import ApiError
from .routing import Request, Router
from .store import Burst, Counted, DenyRule, Fault, QuotaRule

if TYPE_CHECKING:
    from .server import FakeCloud

SERVICES = {"tpu": "tpu.googleapis.com", "compute": "compute.googleapis.com"}
FAULT_APIS = ("tpu.v2", "tpu.v1", "compute.v1")


def _count(body: dict[str, Any]) -> int | None:
    value = body.get("count")
    return None if value is None else int(value)


def register(router: Router, cloud: FakeCloud) -> None:
    def route(method: str, path: str):
        return router.add(method, "/_admin" + path, "admin", service="admin", style="tpu")

    def body_project(req: Request) -> str:
        return req.json().get("project") or cloud.default_project

    @route("GET", "/health")
    def health(req: Request) -> Any:
        return {"ok": True, "url": cloud.base_url, "grpc": cloud.grpc_target, "project": cloud.default_project}

    @route("POST", "/reset")
    def reset(req: Request) -> Any:
        store = cloud.reset()
        if req.json().get("latencies"):
            store.latencies.update(req.json()["latencies"])
        return {"ok": True, "latencies": vars(store.latencies)}

    @route("GET", "/latencies")
    def get_latencies(req: Request) -> Any:
        return vars(cloud.store.latencies)

    @route("POST", "/latencies")
    def set_latencies(req: Request) -> Any:
        try:
            cloud.store.latencies.update(req.json())
        except KeyError as exc:
            raise ApiError(3, f"Unknown latency {exc.args[0]!r}; known: "
                              f"{', '.join(vars(cloud.store.latencies))}") from None
        return vars(cloud.store.latencies)

    @route("POST", "/fields")
    def honour_fields(req: Request) -> Any:
        """Whether the API answers honour ``fields`` (partial responses; tests/fakegcp/fields.py).
        ``{"honour": false}`` answers every call with its whole body, as a baseline to compare with."""
        cloud.store.honour_fields = bool(req.json().get("honour", True))
        return {"honour": cloud.store.honour_fields}

    @route("POST", "/preempt")
    def preempt(req: Request) -> Any:
        b = req.json()
        store, project = cloud.store, body_project(req)
        state = (b.get("state") or "PREEMPTED").upper()
        if (b.get("kind") or "tpu") == "vm":
            if state in ("PREEMPTED", "TERMINATED"):
                # as Compute Engine preempts a VM: the guest is told at once (instance/preempted TRUE),
                # and ``notice`` seconds later it is TERMINATED, or deleted if its termination action says so
                inst = compute_tpu.preempt_instance(store, project, b["zone"], b["name"],
                                                    notice_s=float(b.get("notice") or 0))
            else:
                inst = compute.set_instance_state(store, project, b["zone"], b["name"], state)
            return compute.instance_json(store, inst)
        if state == "UNHEALTHY":
            node = tpu.set_node_state(store, project, b["zone"], b["name"], None,
                                      b.get("health") or "UNHEALTHY_TENSORFLOW",
                                      b.get("description", "The TPU is unhealthy."))
        elif state == "PREEMPTED" and not b.get("health") and not b.get("description"):
            # as the service preempts a TPU VM: its workers are told at once (instance/preempted
            # TRUE on each), and ``notice`` seconds later the node is PREEMPTED
            node = tpu.preempt_node(store, project, b["zone"], b["name"], notice_s=float(b.get("notice") or 0))
        elif state in ("PREEMPTED", "TERMINATED", "READY", "STOPPED", "REPAIRING", "UNKNOWN"):
            node = tpu.set_node_state(store, project, b["zone"], b["name"], state, b.get("health"),
                                      b.get("description"))
        else:
            raise ApiError(3, f"Unsupported state {state!r}: use PREEMPTED, TERMINATED or UNHEALTHY")
        return tpu_views.node_v2(node)

    @route("POST", "/stockout")
    def stockout(req: Request) -> Any:
        b = req.json()
        kind = b.get("kind") or "tpu"
        if b.get("model"):          # compute-tpu stockouts of one provisioning model (SPOT, FLEX_START, ...)
            kind = f"{kind}:{b['model']}"
        cloud.store.faults.stockouts[(kind, b["zone"])] = Counted(_count(b))
        return cloud.store.faults.to_dict()

    @route("POST", "/stockout/clear")
    def clear_stockout(req: Request) -> Any:
        b = req.json()
        faults = cloud.store.faults
        for key in list(faults.stockouts):
            if b.get("zone") in (None, key[1]) and b.get("kind") in (None, key[0]):
                del faults.stockouts[key]
        return faults.to_dict()

    @route("POST", "/quota")
    def quota(req: Request) -> Any:
        b = req.json()
        region = b.get("region") or catalog.region_of(b["zone"])
        at = b.get("at") or "call"
        if at not in ("call", "operation"):
            raise ApiError(3, "'at' must be 'call' or 'operation'")
        per = b.get("per") or "region"
        if per not in ("region", "zone") or (per == "zone" and not b.get("zone")):
            raise ApiError(3, "'per' must be 'region', or 'zone' with a 'zone'")
        cloud.store.faults.quotas.append(QuotaRule(_count(b), region=region, metric=b.get("metric"),
                                                   limit=int(b.get("limit", 0)), at=at,
                                                   zone=b["zone"] if per == "zone" else None))
        return cloud.store.faults.to_dict()

    @route("POST", "/fault")
    def fault(req: Request) -> Any:
        """Any error as Google sends it, on matching calls or their long-running operations."""
        import re

        b = req.json()
        api, where = b.get("api"), b.get("where") or "call"
        if api not in FAULT_APIS:
            raise ApiError(3, f"'api' must be one of {', '.join(FAULT_APIS)}")
        if where not in ("call", "operation"):
            raise ApiError(3, "'where' must be 'call' or 'operation'")
        path = b.get("path")
        if not isinstance(path, str) or not path:
            raise ApiError(3, "'path' must be a regex searched in the request path, e.g. "
                              "^/v2/projects/[^/]+/locations/us-central1-b/nodes$")
        try:
            re.compile(path)
        except re.error as exc:
            raise ApiError(3, f"'path' is not a valid regex: {exc}") from None
        body = b.get("body")
        if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
            raise ApiError(3, "'body' must be the error as Google sends it: {\"error\": {...}}")
        status = b.get("status")
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise ApiError(3, "'status' must be an HTTP error status (400-599)")
        if where == "call" and status is None:
            code = body["error"].get("code")
            if not (isinstance(code, int) and 400 <= code <= 599):
                raise ApiError(3, "a call fault needs 'status' (or body.error.code as the HTTP status)")
            status = code
        count = b.get("count", 1)
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ApiError(3, "'count' must be a positive number of calls, or null (until cleared)")
        rule = Fault(count, id=next(cloud.store.fault_ids), api=api, method=str(b.get("method") or "POST").upper(),
                     path=path, where=where, status=status, body=body)
        cloud.store.faults.generic.append(rule)
        return {"id": rule.id, "faults": cloud.store.faults.to_dict()["faults"]}

    @route("POST", "/deny")
    def deny(req: Request) -> Any:
        b = req.json()
        cloud.store.faults.denials.append(DenyRule(_count(b), permission=b["permission"]))
        return cloud.store.faults.to_dict()

    def _service(req: Request) -> str:
        name = req.json()["service"]
        return SERVICES.get(name, name)

    @route("POST", "/disable")
    def disable(req: Request) -> Any:
        cloud.store.faults.disabled.add(_service(req))
        return cloud.store.faults.to_dict()

    @route("POST", "/enable")
    def enable(req: Request) -> Any:
        cloud.store.faults.disabled.discard(_service(req))
        return cloud.store.faults.to_dict()

    @route("POST", "/burst")
    def burst(req: Request) -> Any:
        b = req.json()
        status = int(b.get("status", 503))
        if status not in (429, 500, 502, 503, 504):
            raise ApiError(3, "burst status must be one of 429, 500, 502, 503, 504")
        cloud.store.faults.bursts.append(Burst(_count(b) if "count" in b else 1, status=status,
                                               method=b.get("method"), path=b.get("path"),
                                               message=b.get("message")))
        return cloud.store.faults.to_dict()

    @route("POST", "/echo-credentials")
    def echo_credentials(req: Request) -> Any:
        b = req.json()
        status = int(b.get("status", 400))
        if status not in (400, 403, 409, 500, 503):
            raise ApiError(3, "echo status must be one of 400, 403, 409, 500, 503")
        cloud.store.faults.echoes.append(Burst(_count(b) if "count" in b else 1, status=status,
                                               method=b.get("method"), path=b.get("path")))
        return cloud.store.faults.to_dict()

    @route("POST", "/token")
    def token(req: Request) -> Any:
        b = req.json()
        if b.get("access_token"):
            cloud.store.access_token = str(b["access_token"])
        if "fail" in b:
            cloud.store.faults.token_failures = Counted(_count({"count": b["fail"]})) if b["fail"] else None
        return {"access_token": cloud.store.access_token, "requests": cloud.store.token_requests}

    @route("POST", "/cidr-conflicts")
    def cidr_conflicts(req: Request) -> Any:
        cloud.store.faults.cidr_conflicts = int(req.json().get("count", 1))
        return cloud.store.faults.to_dict()

    @route("POST", "/node-arch-denied")
    def node_arch_denied(req: Request) -> Any:
        cloud.store.faults.node_arch_denied = bool(req.json().get("enabled", True))
        return cloud.store.faults.to_dict()

    @route("GET", "/faults")
    def faults(req: Request) -> Any:
        return cloud.store.faults.to_dict()

    @route("POST", "/faults/clear")
    def clear_faults(req: Request) -> Any:
        from .store import Faults
        cloud.store.faults = Faults()
        return cloud.store.faults.to_dict()

    # -- inspection --------------------------------------------------------------------------------
    @route("GET", "/resources")
    def resources(req: Request) -> Any:
        s = cloud.store
        out = tpu_views.snapshot_all(s)
        out["instances"] = [compute.instance_json(s, i) for i in sorted(s.instances.values(), key=lambda i: i.seq)]
        out["resourcePolicies"] = [compute_tpu.policy_json(s, p) for p in s.resource_policies.values()]
        out["instanceTemplates"] = [compute_tpu.template_json(s, t) for t in s.instance_templates.values()]
        out["instanceGroupManagers"] = [compute_tpu.mig_json(s, m) for m in s.migs.values()]
        out["computeOperations"] = [op_json(s, o) for o in s.compute_ops.values()]
        out["networks"] = [network.network_json(s, n) for n in s.networks.values()]
        out["subnetworks"] = [network.subnet_json(s, n) for n in s.subnets.values()]
        out["routes"] = [network.route_json(s, r) for r in s.routes.values()]
        out["addresses"] = [network.address_json(s, a) for a in s.addresses.values()]
        out["firewalls"] = [network.firewall_json(s, f) for f in s.firewalls.values()]
        out["faults"] = s.faults.to_dict()
        out["latencies"] = vars(s.latencies)
        return out

    @route("GET", "/calls")
    def calls(req: Request) -> Any:
        s = cloud.store
        since = int(req.arg("since") or 0)
        entries = [vars(c) for c in s.calls if c.seq > since]
        return {"counts": dict(s.call_counts), "total": len(s.calls), "calls": entries,
                "bytes": sum(c.bytes for c in s.calls)}

    @route("DELETE", "/calls")
    def clear_calls(req: Request) -> Any:
        s = cloud.store
        s.calls.clear()
        s.call_counts.clear()
        return {"ok": True}

    @route("POST", "/bulk")
    def bulk(req: Request) -> Any:
        """Resources put in place at once, already RUNNING / READY (a fleet for a benchmark): each
        body is the one ``instances.insert`` or ``nodes.create`` gets, checked the same way, with
        an optional ``status``/``state`` and ``created`` (unix seconds) of its own."""
        s, b = cloud.store, req.json()
        project = body_project(req)
        network.ensure_project(s, project)
        for item in b.get("instances") or []:
            compute.check_zone(s, project, item["zone"])
            compute.check_instance_body(s, project, item["zone"], item["body"])
            inst = compute.make_instance(s, project, item["zone"], item["body"])
            inst.status = item.get("status") or "RUNNING"
            inst.created = float(item.get("created") or inst.created)
            s.instances[inst.key] = inst
        for item in b.get("nodes") or []:
            tpu.check_location(s, project, item["zone"])
            node, _ = tpu.node_from_body(s, project, item["zone"], tpu.check_node_id(item["nodeId"]),
                                         item["body"], "v2")
            node.state = item.get("state") or "READY"
            node.health = "HEALTHY" if node.state == "READY" else ""
            node.created = float(item.get("created") or node.created)
            node.endpoints = tpu.endpoints(s, node)
            s.nodes[node.key] = node
        return {"instances": len(b.get("instances") or []), "nodes": len(b.get("nodes") or [])}

    # -- network setup -------------------------------------------------------------------------------
    @route("POST", "/networks")
    def add_network(req: Request) -> Any:
        b = req.json()
        net = network.add_network(cloud.store, body_project(req), b["name"],
                                  bool(b.get("autoCreateSubnetworks", False)))
        return network.network_json(cloud.store, net)

    @route("POST", "/subnetworks")
    def add_subnetwork(req: Request) -> Any:
        b = req.json()
        sub = network.add_subnet(cloud.store, body_project(req), b["region"], b["name"],
                                 b.get("network") or "default", b["ipCidrRange"],
                                 list(b.get("secondaryIpRanges") or []))
        return network.subnet_json(cloud.store, sub)

    @route("POST", "/routes")
    def add_route(req: Request) -> Any:
        b = req.json()
        project = body_project(req)
        network.ensure_project(cloud.store, project)
        net = b.get("network") or "default"
        network.get_network(cloud.store, project, net)
        hop = {"nextHopIp": b["nextHopIp"]} if b.get("nextHopIp") else \
            {"nextHopGateway": f"projects/{project}/global/gateways/default-internet-gateway"}
        r = network.add_route(cloud.store, project, net, b["destRange"], hop, name=b.get("name"),
                              priority=int(b.get("priority", 1000)))
        return network.route_json(cloud.store, r)

    @route("POST", "/peerings")
    def add_peering(req: Request) -> Any:
        b = req.json()
        project = body_project(req)
        peer = b.get("peerNetwork") or f"projects/{b['name']}-peer/global/networks/default"
        network.add_peering(cloud.store, project, b.get("network") or "default", b["name"], peer,
                            list(b.get("importedRanges") or []))
        return network.network_json(cloud.store, network.get_network(cloud.store, project,
                                                                     b.get("network") or "default"))

    @route("POST", "/accelerator-types")
    def add_types(req: Request) -> Any:
        b = req.json()
        cloud.store.extra_tpu_types.setdefault(b["zone"], set()).update(b["types"])
        return {"zone": b["zone"], "types": catalog.tpu_types_in(b["zone"], cloud.store.extra_tpu_types)}
