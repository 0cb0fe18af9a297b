"""Request bodies checked against Google's compute v1 discovery document, as the real API checks them.

The document is the one google-api-python-client ships
(``googleapiclient/discovery_cache/documents/compute.v1.json``; the test extra installs it). For a
method such as ``compute.instanceGroupManagers.insert`` it names the request schema
(``InstanceGroupManager``); :func:`check` walks the body against it and refuses what Google's front
end refuses, in its words:

- a field the schema does not have: ``Invalid JSON payload received. Unknown name "x" at
  'resource.scheduling': Cannot find field.`` (Google's JSON decoding error, as its APIs answer it:
  e.g. ``Unknown name "document_title" at 'form.info'`` from the Forms API, quoted in a public review);
- an enum value the schema does not list, or a value of the wrong JSON type: ``Invalid value at
  'resource.scheduling.provisioning_model' (type.googleapis.com/google.cloud.compute.v1.Scheduling),
  "X"`` (the same decoder's form, e.g. ``Invalid value at 'resource.notify_preference'
  (type.googleapis.com/google.walletobjects.v1.NotificationSettingsForUpdates), "NOTIFY"``).

Both are HTTP 400 INVALID_ARGUMENT. Output-only fields are accepted and ignored, as Google does.
Every route of the Compute Engine TPU resources (``compute_tpu.py``) checks its body here, so a
request the fake accepts is one the discovery document allows.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from .errors import ApiError

PACKAGE_PATH = "googleapiclient/discovery_cache/documents/compute.v1.json"
# The protobuf package each document's schemas live in, as Google's decoding errors name them
PROTO_PACKAGES = {"compute.v1": "google.cloud.compute.v1", "iam.v1": "google.iam.admin.v1",
                  "monitoring.v3": "google.monitoring.v3"}


@functools.cache
def document(name: str = "compute.v1") -> dict[str, Any]:
    """A discovery document as google-api-python-client ships it (compute v1 by default; iam.v1,
    monitoring.v3)."""
    import googleapiclient

    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def revision() -> str:
    return str(document().get("revision") or "")


def method(method_id: str, doc: str = "compute.v1") -> dict[str, Any]:
    """The discovery entry of ``compute.<resource>.<method>``, or of a nested resource's
    (``iam.projects.serviceAccounts.create``); KeyError if the API has none."""
    *resources, name = method_id.split(".")[1:]
    node: dict[str, Any] = document(doc)
    for resource in resources:
        node = node["resources"][resource]
    return node["methods"][name]


def request_schema(method_id: str, doc: str = "compute.v1") -> str | None:
    ref = method(method_id, doc).get("request") or {}
    return ref.get("$ref")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _invalid_value(path: str, schema: str, value: Any, doc: str = "compute.v1") -> ApiError:
    shown = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    return ApiError(3, f"Invalid value at '{path}' (type.googleapis.com/{PROTO_PACKAGES.get(doc, doc)}.{schema}), "
                       f"{shown}", compute_reason="invalid")


def _unknown(name: str, path: str) -> ApiError:
    at = f" at '{path}'" if path else ""       # a field of the request message itself: no path
    return ApiError(3, f"Invalid JSON payload received. Unknown name \"{name}\"{at}: Cannot find field.",
                    compute_reason="invalid")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _check_value(prop: dict[str, Any], value: Any, path: str, owner: str, doc: str = "compute.v1") -> None:
    if "$ref" in prop:
        _check_object(prop["$ref"], value, path, doc)
        return
    kind = prop.get("type")
    if kind == "array":
        if not isinstance(value, list):
            raise _invalid_value(path, owner, value, doc)
        for i, item in enumerate(value):
            _check_value(prop.get("items") or {}, item, f"{path}[{i}]", owner, doc)
    elif kind == "object":
        if not isinstance(value, dict):
            raise _invalid_value(path, owner, value, doc)
        extra = prop.get("additionalProperties")
        if extra:
            for key, item in value.items():
                _check_value(extra, item, f"{path}[{key}]", owner, doc)
    elif kind == "string":
        # int64 fields travel as strings, and Google also takes a JSON number for them
        if not isinstance(value, str) and not (prop.get("format") in ("int64", "uint64")
                                               and isinstance(value, int) and not isinstance(value, bool)):
            raise _invalid_value(path, owner, value, doc)
        if "enum" in prop and value not in prop["enum"]:
            raise _invalid_value(path, owner, value, doc)
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _invalid_value(path, owner, value, doc)
        try:
            int(value)
        except ValueError:
            raise _invalid_value(path, owner, value, doc) from None
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise _invalid_value(path, owner, value, doc)
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _invalid_value(path, owner, value, doc)


def _check_object(schema_name: str, value: Any, path: str, doc: str = "compute.v1") -> None:
    schema = document(doc)["schemas"][schema_name]
    if not isinstance(value, dict):
        raise _invalid_value(path, schema_name, value, doc)
    props = schema.get("properties") or {}
    for key, item in value.items():
        if key not in props:
            raise _unknown(key, path)
        _check_value(props[key], item, _join(path, _snake(key)), schema_name, doc)


def check(method_id: str, body: Any, doc: str = "compute.v1", root: str = "resource") -> None:
    """Refuse ``body`` (an ApiError, HTTP 400) unless ``method_id`` of ``doc`` (compute v1) takes it.

    ``root``: the field of the request message the body is (Compute's inserts: ``resource``); ""
    where the body is the whole request message (``body: "*"``, as Monitoring's create), so
    paths start at its fields (``time_series[0].metric``)."""
    schema = request_schema(method_id, doc)
    if schema is None:
        if body not in (None, {}, b"", ""):
            raise ApiError(3, f"{method_id} takes no request body", compute_reason="invalid")
        return
    _check_object(schema, body if body is not None else {}, root, doc)


def check_query(method_id: str, query: dict[str, list[str]]) -> None:
    """Refuse a query parameter the method does not have (Google: 400 "Cannot bind query parameter")."""
    params = method(method_id).get("parameters") or {}
    common = document().get("parameters") or {}
    for name in query:
        if name not in params and name not in common:
            raise ApiError(3, f"Invalid JSON payload received. Unknown name \"{name}\": Cannot bind query "
                              f"parameter. Field '{name}' could not be found in request message.",
                           compute_reason="invalid")
