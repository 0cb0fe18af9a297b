"""The metadata server as one VM or TPU VM worker sees it, for host-side code run on this machine.

On Google Cloud a process reads its own machine's metadata from ``http://metadata.google.internal
/computeMetadata/v1/``; tpuctl's host agent reads its pin there (``TPUCTL_METADATA_URL`` replaces
the address). The fake serves each machine's view under its own prefix, so an agent run here as
a stand-in for a host sees exactly what tpuctl wrote through the Compute and TPU APIs:

    /_metadata/projects/{p}/zones/{z}/instances/{name}/computeMetadata/v1/...          a Compute VM
    /_metadata/projects/{p}/locations/{z}/nodes/{name}/workers/{n}/computeMetadata/v1/... a TPU VM worker

Served as Google documents it ("Access VM metadata", cloud.google.com/compute/docs/metadata/
querying-metadata): every request must carry ``Metadata-Flavor: Google`` (else 403), every answer
carries it; ``instance/attributes/KEY`` is the value as text, 404 when the key is not set;
``instance/attributes/?recursive=true`` all of them as one JSON object; ``project/project-id``.
``wait_for_change`` on an attribute answers at once (the value as it is). Metadata written with
``instances.setMetadata`` or ``nodes.patch`` is visible on the next read.

``instance/preempted`` is the preemption notice: ``FALSE`` until the cloud decides to preempt the
machine (``POST /_admin/preempt``), ``TRUE`` from then on. A TPU VM's workers are Compute Engine
VMs underneath ("TPU VMs are instances of Compute Engine VMs with attached TPU hardware",
tpu/docs/prepare-for-maintenance), so every worker of a preempted node reads TRUE at once, as
the instance's guest does (tests/fakegcp/guest.py). This key is the one long-polled: with
``?wait_for_change=true`` the answer waits until the value differs from the one whose ``ETag``
is given as ``last_etag`` (without it: from the value at the time of the request), or until
``timeout_sec``, as the metadata server's wait-for-change does (compute/docs/metadata/
querying-metadata: "wait_for_change", "last_etag", "timeout_sec"); every answer carries its ETag.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .errors import ApiError

PREFIX = "/_metadata/"
PREEMPTED = "instance/preempted"
MAX_WAIT_S = 60.0
_VM = re.compile(r"^/_metadata/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)/computeMetadata/v1/(.*)$")
_TPU = re.compile(r"^/_metadata/projects/([^/]+)/locations/([^/]+)/nodes/([^/]+)/workers/(\d+)/computeMetadata/v1/(.*)$")


def etag(value: str) -> str:
    """The ETag of a value: the same value, the same tag (the metadata server's are opaque hashes)."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def answer(store: Any, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> tuple[int, bytes, str]:
    """(HTTP status, body, content type) of one metadata-server request."""
    if headers.get("metadata-flavor") != "Google":
        return 403, b"Missing Metadata-Flavor:Google header.", "text/html; charset=UTF-8"
    if path.endswith("/computeMetadata/v1/" + PREEMPTED):
        return _preempted(store, path, query)
    attrs = _attributes(store, path)
    if attrs is None:
        return 404, b"Not Found", "text/html; charset=UTF-8"
    project, rest = attrs
    values, key = project[1], rest
    if key == "project/project-id":
        return 200, project[0].encode(), "application/text"
    if key in ("instance/attributes/", "instance/attributes"):
        if (query.get("recursive") or [""])[0].lower() == "true":
            return 200, json.dumps(values).encode(), "application/json"
        return 200, "".join(f"{k}\n" for k in values).encode(), "application/text"
    if key.startswith("instance/attributes/") and key[len("instance/attributes/"):] in values:
        return 200, values[key[len("instance/attributes/"):]].encode(), "application/text"
    return 404, b"Not Found", "text/html; charset=UTF-8"


def _attributes(store: Any, path: str) -> tuple[tuple[str, dict[str, str]], str] | None:
    """((project, the machine's attributes), the path under computeMetadata/v1), or None."""
    from .compute import get_instance
    from .tpu import get_node

    with store.lock:
        try:
            m = _VM.match(path)
            if m:
                inst = get_instance(store, m[1], m[2], m[3])
                return (m[1], {i["key"]: i.get("value", "") for i in inst.metadata}), m[4]
            m = _TPU.match(path)
            if m:
                node = get_node(store, m[1], m[2], m[3])
                # each worker of a slice also sees its own number (what the bootstrap reads)
                return (m[1], {**node.metadata, "agent-worker-number": m[4]}), m[5]
        except ApiError:
            return None
    return None


def _preempted_value(store: Any, path: str) -> str | None:
    """``TRUE`` or ``FALSE`` for the machine of ``path``; None when it does not exist (any more)."""
    from .compute import get_instance
    from .tpu import get_node

    try:
        m = _VM.match(path)
        if m:
            return "TRUE" if get_instance(store, m[1], m[2], m[3]).preempted else "FALSE"
        m = _TPU.match(path)
        if m:
            return "TRUE" if get_node(store, m[1], m[2], m[3]).preempted else "FALSE"
    except ApiError:
        return None
    return None


def _preempted(store: Any, path: str, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
    with store.lock:
        store.advance()
        first = _preempted_value(store, path)
    if first is None:
        return 404, b"Not Found", "text/html; charset=UTF-8"
    if (query.get("wait_for_change") or [""])[0].lower() == "true":
        try:
            timeout = min(MAX_WAIT_S, float((query.get("timeout_sec") or ["60"])[0]))
        except ValueError:
            return 400, b"Bad Request", "text/html; charset=UTF-8"
        seen = (query.get("last_etag") or [""])[0] or etag(first)
        store.wait_for(lambda: (v := _preempted_value(store, path)) is None or etag(v) != seen, timeout)
        with store.lock:
            first = _preempted_value(store, path)
        if first is None:
            return 503, b"instance is gone", "text/html; charset=UTF-8"
    return 200, first.encode(), "application/text"
