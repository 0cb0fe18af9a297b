"""Project and instance metadata, with the fingerprint check Compute Engine does on every write.

``setCommonInstanceMetadata`` and ``instances.setMetadata`` replace the whole item list and must
carry the fingerprint of the metadata they replace; a stale fingerprint fails with 412
``conditionNotMet``, as on the real API. That check is what makes a read-modify-write of project
metadata a compare-and-swap (tpuctl keeps its TPU range reservations there).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from .compute_ops import new_op, op_json
from .errors import ApiError
from .network import ensure_project
from .routing import Request, Router
from .store import Store

SERVICE = "compute.googleapis.com"
P = "/compute/v1/projects/{project}"


def fingerprint(items: list[dict[str, str]], generation: int) -> str:
    digest = hashlib.sha256(repr((generation, items)).encode()).digest()[:8]
    return base64.b64encode(digest).decode()


def project_metadata(store: Store, project: str) -> dict[str, Any]:
    meta = store.project_metadata.setdefault(project, {"items": [], "generation": 0})
    out: dict[str, Any] = {"kind": "compute#metadata", "fingerprint": fingerprint(meta["items"], meta["generation"])}
    if meta["items"]:
        out["items"] = meta["items"]
    return out


def _check_items(items: Any) -> list[dict[str, str]]:
    if not isinstance(items, list):
        raise ApiError(3, "Invalid value for field 'resource.items'", compute_reason="invalid")
    keys = set()
    total = 0
    for item in items:
        key, value = item.get("key"), item.get("value", "")
        if not key or key in keys:
            raise ApiError(3, f"Invalid value for field 'resource.items[].key': '{key}'. Keys must be unique "
                              "and non-empty.", compute_reason="invalid")
        keys.add(key)
        total += len(key) + len(value or "")
    if total > 512 * 1024:
        raise ApiError(3, "Metadata exceeds the 512 KB limit.", compute_reason="invalid")
    return [{"key": i["key"], "value": i.get("value", "")} for i in items]


def set_project_metadata(store: Store, project: str, body: dict[str, Any]) -> Any:
    ensure_project(store, project)
    meta = store.project_metadata.setdefault(project, {"items": [], "generation": 0})
    current = fingerprint(meta["items"], meta["generation"])
    if body.get("fingerprint") != current:
        raise ApiError(9, "Supplied fingerprint does not match current metadata fingerprint.", http=412,
                       compute_reason="conditionNotMet")
    meta["items"] = _check_items(body.get("items") or [])
    meta["generation"] += 1
    return new_op(store, project, "global", "setCommonInstanceMetadata", f"projects/{project}",
                  store.new_id(), store.latencies.of("address_create"))


def instance_fingerprint(inst: Any) -> str:
    """The instance's metadata fingerprint, kept with the items it was made of: a list of a fleet's
    instances hashes each one's metadata once, not on every list (items are replaced, never edited
    in place: set_instance_metadata assigns a new list)."""
    generation = getattr(inst, "metadata_generation", 0)
    kept = getattr(inst, "_fingerprint_of", None)
    if kept is not None and kept[0] is inst.metadata and kept[1] == generation:
        return kept[2]
    value = fingerprint(inst.metadata, generation)
    inst._fingerprint_of = (inst.metadata, generation, value)
    return value


def set_instance_metadata(store: Store, inst: Any, body: dict[str, Any]) -> Any:
    if body.get("fingerprint") != instance_fingerprint(inst):
        raise ApiError(9, "Supplied fingerprint does not match current metadata fingerprint.", http=412,
                       compute_reason="conditionNotMet")
    inst.metadata = _check_items(body.get("items") or [])
    inst.metadata_generation = getattr(inst, "metadata_generation", 0) + 1
    return new_op(store, inst.project, f"zones/{inst.zone}", "setMetadata", inst.path, inst.id, 0.05)


def register(router: Router, store_of: Any) -> None:
    from .compute import get_instance

    def route(method: str, path: str, call: str, permission: str):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="compute")

    @route("POST", "/setCommonInstanceMetadata", "compute.projects.setCommonInstanceMetadata",
           "compute.projects.setCommonInstanceMetadata")
    def set_common(req: Request) -> Any:
        s = store_of()
        return op_json(s, set_project_metadata(s, req.params["project"], req.json()))

    @route("POST", "/zones/{zone}/instances/{name}/setMetadata", "compute.instances.setMetadata",
           "compute.instances.setMetadata")
    def set_meta(req: Request) -> Any:
        s = store_of()
        inst = get_instance(s, req.params["project"], req.params["zone"], req.params["name"])
        return op_json(s, set_instance_metadata(s, inst, req.json()))
