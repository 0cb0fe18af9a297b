"""The metadata server as one instance's guest sees it: ``/_guest/PROJECT/ZONE/NAME/computeMetadata/v1/...``.

A host agent standing in for a VM in a test points ``TPUCTL_METADATA_URL`` here. It serves what a
TPU VM's agent reads to learn of its own preemption: ``instance/preempted``, ``TRUE`` from the moment
Compute Engine decides to preempt the VM (``POST /_admin/preempt``) and ``FALSE`` before; with
``?wait_for_change=true`` the answer waits until the value changes (or ``timeout_sec``), as the
metadata server's long poll does (compute/docs/metadata/querying-metadata: wait-for-change,
``timeout_sec``). Requests without ``Metadata-Flavor: Google`` are refused with 403, as the real
server refuses them. Answers are text, with ``Metadata-Flavor: Google`` set.
"""

from __future__ import annotations

from typing import Any

PREFIX = "/_guest/"
MAX_WAIT_S = 60.0


def answer(cloud: Any, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> tuple[int, str]:
    if headers.get("metadata-flavor", "").lower() != "google":
        return 403, "Missing Metadata-Flavor:Google header.\n"
    parts = path[len(PREFIX):].split("/", 3)
    if len(parts) != 4 or not parts[3].startswith("computeMetadata/v1/"):
        return 404, "Not Found\n"
    project, zone, name, rest = parts
    key = rest[len("computeMetadata/v1/"):]
    if key != "instance/preempted":
        # the rest of the guest's view (its attributes: tpuctl's pin, the worker number) is the one
        # metadata server's (metadata_server.py): one guest, one server
        from . import metadata_server

        status, body, _ctype = metadata_server.answer(
            cloud.store, f"{metadata_server.PREFIX}projects/{project}/zones/{zone}/instances/{name}/{rest}",
            query, headers)
        return status, body.decode()
    store = cloud.store

    def value() -> str | None:
        inst = store.instances.get((project, zone, name))
        if inst is None:
            return None
        return "TRUE" if inst.preempted else "FALSE"

    with store.lock:
        store.advance()
        first = value()
    if first is None:
        return 404, "Not Found\n"
    if (query.get("wait_for_change") or [""])[0].lower() == "true":
        try:
            timeout = min(MAX_WAIT_S, float((query.get("timeout_sec") or ["60"])[0]))
        except ValueError:
            return 400, "Bad Request\n"
        store.wait_for(lambda: value() != first, timeout)
        with store.lock:
            now = value()
        return (200, now) if now is not None else (503, "instance is gone\n")
    return 200, first
