"""Error classification: the one place that decides what a cloud error means for tpuctl.

Every provider turns its exceptions and operation errors into a :class:`Failure`; the callers
(retry, zone failover, rollback, the supervisor) act on ``kind`` and ``scope`` only. The classes
follow what SkyPilot learned on GCP: 429/500/503/deadline are transient and retried; a stockout
blocks a zone; a quota error blocks the whole region; permission and disabled-API errors block
the whole cloud and need the user.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Kind(str, enum.Enum):
    TRANSIENT = "transient"        # retry the same call with backoff
    STOCKOUT = "stockout"          # no capacity in this zone: try the next zone
    QUOTA = "quota"                # quota exhausted: every zone of the region fails the same way
    PERMISSION = "permission"      # missing IAM role: the user must grant it
    API_DISABLED = "api_disabled"  # the API is not enabled in the project
    CIDR_CONFLICT = "cidr_conflict"  # the TPU block overlaps something: take the next block
    EXISTS = "exists"              # a resource of that name exists already
    NOT_FOUND = "not_found"
    INVALID = "invalid"            # the request itself is wrong
    UNKNOWN = "unknown"


class Scope(str, enum.Enum):
    CALL = "call"      # retry the call
    ZONE = "zone"      # skip this zone
    REGION = "region"  # skip every zone of this region
    CLOUD = "cloud"    # stop


@dataclass(frozen=True)
class Failure:
    kind: Kind
    scope: Scope
    message: str
    hint: str | None = None

    @property
    def retriable(self) -> bool:
        return self.kind == Kind.TRANSIENT


# google.rpc.Code numbers
OK, CANCELLED, UNKNOWN_CODE, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND_CODE, ALREADY_EXISTS = 0, 1, 2, 3, 4, 5, 6
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED = 7, 8, 9, 10
INTERNAL, UNAVAILABLE, UNAUTHENTICATED = 13, 14, 16

_HTTP_TO_CODE = {400: INVALID_ARGUMENT, 401: UNAUTHENTICATED, 403: PERMISSION_DENIED, 404: NOT_FOUND_CODE,
                 409: ALREADY_EXISTS, 429: RESOURCE_EXHAUSTED, 500: INTERNAL, 502: UNAVAILABLE,
                 503: UNAVAILABLE, 504: DEADLINE_EXCEEDED}

_STOCKOUT = re.compile(r"no more capacity|ZONE_RESOURCE_POOL_EXHAUSTED|resource pool exhausted|"
                       r"does not have enough resources|insufficient capacity|stockout|"
                       r"currently unavailable in the .* zone", re.IGNORECASE)
_QUOTA = re.compile(r"quota", re.IGNORECASE)
_CIDR = re.compile(r"CIDR Range.*conflicts with|conflicts with another subnet", re.IGNORECASE)
_DISABLED = re.compile(r"SERVICE_DISABLED|API has not been used|is disabled|accessNotConfigured", re.IGNORECASE)
_PERMISSION_NAME = re.compile(r"\b((?:tpu|compute|storage|iam|resourcemanager)\.[a-zA-Z]+\.[a-zA-Z]+)\b")
_API_NAME = re.compile(r"\b([a-z]+\.googleapis\.com)\b")

# The narrowest predefined role that carries each family of permissions tpuctl uses (the longest
# matching prefix wins). docs/reliability.md lists which account needs which, and where to grant it.
ROLE_FOR_PERMISSION_PREFIX = {
    "tpu.": "roles/tpu.admin",
    "compute.instances.": "roles/compute.instanceAdmin.v1",
    "compute.projects.": "roles/compute.instanceAdmin.v1",   # the TPU range reservations in project metadata
    "compute.globalAddresses.": "roles/compute.networkAdmin",
    "compute.networks.": "roles/compute.networkViewer",
    "compute.subnetworks.": "roles/compute.networkViewer",
    "compute.routes.": "roles/compute.networkViewer",
    "compute.": "roles/compute.instanceAdmin.v1",
    "storage.objects.": "roles/storage.objectUser (on the bucket)",
    "storage.multipartUploads.": "roles/storage.objectUser (on the bucket)",
    "storage.buckets.get": "roles/storage.legacyBucketReader (on the bucket)",
    "storage.buckets.list": "roles/storage.legacyBucketReader (on the bucket)",
    "storage.buckets.getIamPolicy": "roles/storage.admin (on the bucket)",
    "storage.buckets.setIamPolicy": "roles/storage.admin (on the bucket)",
    "storage.": "roles/storage.admin",
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser (on the service account)",
}


def role_for(permission: str) -> str | None:
    best = None
    for prefix, role in ROLE_FOR_PERMISSION_PREFIX.items():
        if permission.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, role)
    return best[1] if best else None


def classify(*, code: int | None = None, http_status: int | None = None, message: str = "",
             reason: str | None = None, quota_scope: str | None = None) -> Failure:
    """Classify an error by its google.rpc code (or HTTP status), message and ErrorInfo reason."""
    if code is None and http_status is not None:
        code = _HTTP_TO_CODE.get(http_status, UNKNOWN_CODE if http_status >= 500 else INVALID_ARGUMENT)
    text = f"{reason or ''} {message}"

    if _CIDR.search(text):
        return Failure(Kind.CIDR_CONFLICT, Scope.CALL, message, "tpuctl takes the next free block")
    if _DISABLED.search(text) or reason == "SERVICE_DISABLED":
        api = _API_NAME.search(text)
        name = api.group(1) if api else "tpu.googleapis.com"
        return Failure(Kind.API_DISABLED, Scope.CLOUD, message,
                       f"enable it: gcloud services enable {name}")
    if code == RESOURCE_EXHAUSTED or http_status == 429:
        if _STOCKOUT.search(text):
            return Failure(Kind.STOCKOUT, Scope.ZONE, message, "tpuctl tries the next zone of --zone")
        if _QUOTA.search(text) or quota_scope:
            scope = Scope.REGION
            return Failure(Kind.QUOTA, scope, message,
                           "request more quota (IAM & Admin > Quotas) or use another region")
        # 429 without quota or capacity words: rate limiting, retried
        return Failure(Kind.TRANSIENT, Scope.CALL, message)
    if _STOCKOUT.search(text):
        return Failure(Kind.STOCKOUT, Scope.ZONE, message, "tpuctl tries the next zone of --zone")
    if code in (UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED, ABORTED, UNKNOWN_CODE) or (
            http_status is not None and http_status >= 500):
        return Failure(Kind.TRANSIENT, Scope.CALL, message)
    if code in (PERMISSION_DENIED, UNAUTHENTICATED):
        perm = _PERMISSION_NAME.search(text)
        if perm:
            role = role_for(perm.group(1)) or "a role that grants it"
            hint = f"grant {role} (it carries {perm.group(1)}) to the account tpuctl runs as"
        elif code == UNAUTHENTICATED:
            hint = "run gcloud auth application-default login"
        else:
            hint = "grant roles/tpu.admin and roles/compute.instanceAdmin.v1 to the account tpuctl runs as"
        return Failure(Kind.PERMISSION, Scope.CLOUD, message, hint)
    if code == ALREADY_EXISTS:
        return Failure(Kind.EXISTS, Scope.CALL, message)
    if code == NOT_FOUND_CODE:
        return Failure(Kind.NOT_FOUND, Scope.CALL, message)
    if code == FAILED_PRECONDITION and _QUOTA.search(text):
        return Failure(Kind.QUOTA, Scope.REGION, message, "request more quota or use another region")
    if code in (INVALID_ARGUMENT, FAILED_PRECONDITION):
        return Failure(Kind.INVALID, Scope.CLOUD, message)
    return Failure(Kind.UNKNOWN, Scope.CLOUD, message)
