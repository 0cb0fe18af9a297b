"""Compute Engine operations: zonal and global, PENDING -> RUNNING -> DONE, with ``wait``.

Errors are reported the way Compute Engine reports them: ``error.errors[{code, message}]`` plus
``httpErrorStatusCode``/``httpErrorMessage``, which is what ``ExtendedOperation`` and gcloud read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError
from .store import Store, compute_time

HTTP_MESSAGES = {400: "BAD REQUEST", 403: "FORBIDDEN", 404: "NOT FOUND", 409: "CONFLICT",
                 412: "PRECONDITION FAILED", 429: "TOO MANY REQUESTS", 500: "INTERNAL SERVER ERROR",
                 503: "SERVICE UNAVAILABLE"}


@dataclass
class OpError:
    code: str                       # "ZONE_RESOURCE_POOL_EXHAUSTED", "RESOURCE_ALREADY_EXISTS", ...
    message: str
    http: int | None
    errors: list[dict[str, Any]] | None = None   # error.errors[] verbatim (POST /_admin/fault)


@dataclass
class ComputeOp:
    project: str
    scope: str                      # "zones/us-central1-b" or "global"
    name: str
    id: str
    op_type: str                    # "insert", "delete", ...
    target: str                     # "projects/p/zones/z/instances/x"
    target_id: str
    created: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    status: str = "PENDING"
    error: OpError | None = None
    user: str = "fakegcp@example.iam.gserviceaccount.com"
    status_message: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.scope, self.name)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/{self.scope}/operations/{self.name}"


def new_op(store: Store, project: str, scope: str, op_type: str, target: str, target_id: str,
           duration: float, error: OpError | None = None, on_done: Any = None) -> ComputeOp:
    """Create an operation that runs for ``duration`` seconds, then is DONE (with ``error``)."""
    op = ComputeOp(project, scope, f"operation-{store.op_suffix()}", store.new_id(), op_type, target,
                   target_id)
    store.compute_ops[op.key] = op

    def start() -> None:
        if op.status == "PENDING":
            op.status, op.started = "RUNNING", time.time()

    def done() -> None:
        result = on_done() if on_done else None
        finish(store, op, result if isinstance(result, OpError) else error)

    store.schedule(min(0.05, duration / 4), start)
    store.schedule(duration, done)
    return op


def system_event(store: Store, project: str, zone: str, op_type: str, target: str, target_id: str,
                 message: str) -> ComputeOp:
    """What Compute Engine records of something it did itself, such as a preemption: a zonal
    operation, DONE at once, by ``system``, named ``systemevent-...``. Google's sample "List
    preemption history of a Google Compute Engine instance" (compute/docs/samples/
    compute-preemptible-history) finds preemptions by listing zone operations with
    ``operationType="compute.instances.preempted"`` (and the instance's ``targetLink``); users'
    listings show the record's user as ``system``, also for a Spot VM whose termination action is
    DELETE, and Cloud Audit Logs give the event's status as "Instance was preempted."."""
    now = time.time()
    op = ComputeOp(project, f"zones/{zone}", f"systemevent-{int(now * 1000)}-{store.op_suffix()[:8]}",
                   store.new_id(), op_type, target, target_id, created=now, started=now, ended=now,
                   status="DONE", user="system", status_message=message)
    store.compute_ops[op.key] = op
    return op


def finish(store: Store, op: ComputeOp, error: OpError | None = None) -> None:
    now = time.time()
    op.started = op.started or now
    op.status, op.ended, op.error = "DONE", now, error
    store.cond.notify_all()


def op_json(store: Store, op: ComputeOp) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "compute#operation", "id": op.id, "name": op.name, "operationType": op.op_type,
        "targetLink": store.link(op.target), "targetId": op.target_id, "status": op.status,
        "user": op.user,
        "progress": 100 if op.status == "DONE" else 0,
        "insertTime": compute_time(op.created), "selfLink": store.link(op.path),
        "selfLinkWithId": store.link(f"projects/{op.project}/{op.scope}/operations/{op.id}"),
    }
    if op.scope.startswith("zones/"):
        out["zone"] = store.link(f"projects/{op.project}/{op.scope}")
    elif op.scope.startswith("regions/"):
        out["region"] = store.link(f"projects/{op.project}/{op.scope}")
    if op.status_message:
        out["statusMessage"] = op.status_message
    if op.started:
        out["startTime"] = compute_time(op.started)
    if op.ended:
        out["endTime"] = compute_time(op.ended)
    if op.error:
        out["error"] = {"errors": op.error.errors or [{"code": op.error.code, "message": op.error.message}]}
        if op.error.http:
            out["httpErrorStatusCode"] = op.error.http
            out["httpErrorMessage"] = HTTP_MESSAGES.get(op.error.http, "ERROR")
    return out


def fault_error(err: ApiError) -> OpError:
    """An operation fault (``POST /_admin/fault``, api compute.v1) as the operation's error."""
    errors = err.compute_errors or [{"code": err.status, "message": err.message}]
    return OpError(str(errors[0].get("code") or err.status), err.message, err.http, errors)


def get_op(store: Store, project: str, scope: str, name: str) -> ComputeOp:
    op = store.compute_ops.get((project, scope, name))
    if op is None:
        raise ApiError(5, f"The resource 'projects/{project}/{scope}/operations/{name}' was not found",
                       compute_reason="notFound")
    return op


def wait_op(store: Store, project: str, scope: str, name: str, timeout: float = 120.0) -> ComputeOp:
    """Compute's ``wait``: returns when DONE or after about two minutes, whichever is first."""
    op = get_op(store, project, scope, name)
    store.wait_for(lambda: op.status == "DONE", timeout)
    return op
