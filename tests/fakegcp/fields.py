"""Partial responses: Google's ``fields`` system parameter, applied to every JSON answer of the fake.

"To request a partial response, use the fields request parameter to specify the fields you want
returned" (https://cloud.google.com/compute/docs/api/how-tos/performance#partial-response; the
Cloud TPU API takes the same system parameter: https://cloud.google.com/apis/docs/system-parameters).
The documented grammar, parsed by :func:`parse`:

- a comma-separated list selects several fields: ``name,status``;
- ``a/b`` selects ``b`` inside ``a`` (inside each element where ``a`` is an array);
- ``a(b,c)`` selects ``b`` and ``c`` inside ``a``;
- ``*`` stands for every key of an object, as in aggregatedList's ``items/*/instances`` (its
  ``items`` is a map from scope to list).

A selection names fields of the method's response schema, not of one answer: a field the answer
happens to lack (an instance without an external address) selects nothing, and a name the schema
does not have is refused with 400 "Invalid field selection NAME" (the message as Google's APIs
answer it: googleapis/google-api-dotnet-client#1444 "Invalid field selection pagetoken",
google/googleapis.dart#23 "Invalid field selection starred"; the ``errors[].reason``
``invalidParameter`` of the Compute-style body is not shown there, so it is unverified). The
schemas are the discovery documents google-api-python-client ships (compute.v1, tpu.v2, tpu.v1).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .errors import ApiError

# a selection tree: field name -> what to keep inside it (None: all of it)
Tree = dict[str, "Tree | None"]


def _invalid(name: str) -> ApiError:
    return ApiError(3, f"Invalid field selection {name}", compute_reason="invalidParameter")


def parse(text: str) -> Tree:
    """The selection tree of a ``fields`` value; a malformed one is refused as Google refuses it."""
    tree, rest = _selections(text.replace(" ", ""), 0, text)
    if rest != len(text.replace(" ", "")):
        raise _invalid(text)
    return tree


def _selections(s: str, i: int, whole: str) -> tuple[Tree, int]:
    tree: Tree = {}
    while True:
        start = i
        while i < len(s) and s[i] not in ",()":
            i += 1
        path = s[start:i]
        names = path.split("/")
        if not path or any(not n for n in names):
            raise _invalid(path or whole)
        sub: Tree | None = None
        if i < len(s) and s[i] == "(":
            sub, i = _selections(s, i + 1, whole)
            if i >= len(s) or s[i] != ")":
                raise _invalid(whole)
            i += 1
        for name in reversed(names[1:]):
            sub = {name: sub}
        _merge_into(tree, names[0], sub)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        return tree, i


def _merge_into(tree: Tree, name: str, sub: Tree | None) -> None:
    if name not in tree:
        tree[name] = sub
        return
    have = tree[name]
    if have is None or sub is None:
        tree[name] = None
        return
    for key, value in sub.items():
        _merge_into(have, key, value)


def _merged(a: Tree | None, b: Tree | None) -> Tree | None:
    if a is None or b is None:
        return None
    out: Tree = {}
    for tree in (a, b):
        for key, value in tree.items():
            _merge_into(out, key, value)
    return out


def select(value: Any, tree: Tree | None) -> Any:
    """``value`` with only the selected fields (arrays: in each element)."""
    if tree is None:
        return value
    if isinstance(value, list):
        return [select(v, tree) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    wild = tree.get("*", {}) if "*" in tree else False
    for key, item in value.items():
        if key in tree:
            sub = _merged(tree[key], wild) if wild is not False else tree[key]
        elif wild is not False:
            sub = wild
        else:
            continue
        out[key] = select(item, sub)
    return out


# ---- the response schemas: a selection may only name their fields -----------------------------------

@functools.cache
def _document(api: str) -> dict[str, Any]:
    import googleapiclient

    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / f"{api}.json"
    return json.loads(path.read_text(encoding="utf-8"))


@functools.cache
def _responses(api: str) -> dict[str, str]:
    """Every method id of a discovery document -> its response schema."""
    out: dict[str, str] = {}

    def walk(resources: dict[str, Any]) -> None:
        for res in resources.values():
            for m in (res.get("methods") or {}).values():
                if (m.get("response") or {}).get("$ref"):
                    out[m["id"]] = m["response"]["$ref"]
            walk(res.get("resources") or {})

    walk(_document(api).get("resources") or {})
    return out


def response_schema(call: str) -> tuple[str, str] | None:
    """(discovery document, schema) of the answer of the fake's call name (``compute.instances.list``,
    ``tpu.v2.nodes.list``), or None for a call the documents do not describe."""
    if call.startswith("compute."):
        api, method_id = "compute.v1", call
    elif call.startswith(("tpu.v2.", "tpu.v1.")):
        version, rest = call.split(".")[1], call.split(".", 2)[2]
        api, method_id = f"tpu.{version}", f"tpu.projects.locations.{rest}"
        if rest.startswith("locations."):
            method_id = f"tpu.projects.{rest}"
    else:
        return None
    try:
        schema = _responses(api).get(method_id)
    except OSError:
        return None
    return (api, schema) if schema else None


def check(tree: Tree, api: str, schema: str) -> None:
    """Refuse a selection that names a field the response schema does not have."""
    _check(tree, {"$ref": schema}, _document(api)["schemas"])


def _check(tree: Tree, prop: dict[str, Any], schemas: dict[str, Any]) -> None:
    while True:
        if "$ref" in prop:
            prop = schemas.get(prop["$ref"], {})
        elif prop.get("type") == "array":
            prop = prop.get("items") or {}
        else:
            break
    props = prop.get("properties") or {}
    extra = prop.get("additionalProperties")
    for name, sub in tree.items():
        if name == "*":
            if extra is None and not props:
                raise _invalid(name)
            if extra is None:
                continue       # every field of a record: what lies below is checked where it exists
            inner = extra
        elif name in props:
            inner = props[name]
        elif extra is not None:
            inner = extra          # a map's key: any name
        else:
            raise _invalid(name)
        if sub is not None:
            _check(sub, inner, schemas)


def apply(call: str, query: dict[str, list[str]], body: Any) -> Any:
    """The answer to a call that asked for ``fields`` (checked against its response schema)."""
    text = (query.get("fields") or [""])[-1]
    if not text:
        return body
    tree = parse(text)
    found = response_schema(call)
    if found is not None:
        check(tree, *found)
    return select(body, tree)
