"""Error classification: the one place that decides what a cloud error means for tpuctl.

Every provider turns its exceptions and operation errors into a :class:`Failure`; the callers
(retry, zone failover, rollback, the supervisor) act on ``kind`` and ``scope`` only. Each kind has
one scope (:data:`SCOPE_OF_KIND`), so a kind carried as a string (``CloudError.kind``) still says
what to do next.

Google says what went wrong in structured fields first and in words last, and so does this module:
``google.rpc`` details (``ErrorInfo.reason``, ``QuotaFailure`` violations, ``RetryInfo``), the
legacy ``errors[].reason`` of the JSON APIs (Compute's ``rateLimitExceeded``, ``quotaExceeded``),
the ``errors[].code`` and ``errorDetails`` of a failed Compute operation, then the message text.
The texts matched are the stable parts of what Google actually sends; tests/corpus holds the real
responses, each with its public source, that this module must read right:

- a rate limit (429 ``RATE_LIMIT_EXCEEDED``; Compute's 403 ``rateLimitExceeded``) is retried with
  backoff; a 429 with a ``QuotaFailure`` is a hard quota (unless it is a per-minute quota that
  says when to retry);
- a TPU quota is per zone ("... in zone europe-west4-a": that zone only), per region ("... in region
  us-east5": the region) or global ("_ALL_REGIONS", "globally": stop);
- "Location us-east1-d is not found or access is unauthorized." and location policy violations:
  this zone is not served to the project, try the next one;
- stockouts ("There is no more capacity in the zone", "Insufficient reserved capacity" with code 8
  or 9, ``ZONE_RESOURCE_POOL_EXHAUSTED`` with ``zonesAvailable``) and a spot TPU preempted while it
  was being created (code 3, "... in state PREEMPTED"): the next zone;
- "FLEX_START provisioning model is not supported for accelerator type "v6e-1" in location ...":
  this zone does not offer the type that way, the next zone may;
- a bare 429 ``RESOURCE_EXHAUSTED`` whose only words are Google's default "Resource has been
  exhausted (e.g. check quota)." names no quota: retried with backoff, as throttling is;
- Compute's 400 "Machine type with name 'e2-standard-2' does not exist in zone 'us-east5-a'." on a
  host VM insert: that zone lacks the type, another zone may have it; the next zone;
- a create operation that ends "Reservation not found" although tpuctl never names a reservation
  (an on-demand TPU VM create in us-east5-a): that zone cannot serve the request as asked; the next
  zone, as a stockout would. Any other create operation that ends ``NOT_FOUND`` names something
  missing from the request itself (a network, a service account): no zone can fix it, so it stops;
- a FAILED queued resource whose ``failedData`` carries no error (:data:`QUEUED_NO_REASON`): its
  zone did not grant it and Google said not why; the next zone.

Pure: no I/O. :mod:`provision.cloud.gcp_errors` reads the client libraries' exceptions into the
plain dicts classified here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Kind(str, enum.Enum):
    TRANSIENT = "transient"        # retry the same call with backoff
    RATE_LIMIT = "rate_limit"      # too many requests per minute: retry with backoff
    STOCKOUT = "stockout"          # no capacity in this zone: try the next zone
    ZONE_UNAVAILABLE = "zone_unavailable"  # this zone is not served to the project: next zone
    ZONE_QUOTA = "zone_quota"      # a per-zone quota is exhausted: next zone
    QUOTA = "quota"                # a per-region quota is exhausted: every zone of the region fails
    GLOBAL_QUOTA = "global_quota"  # a quota of all regions is exhausted: no zone can help
    PERMISSION = "permission"      # missing IAM role: the user must grant it
    API_DISABLED = "api_disabled"  # the API is not enabled in the project
    REQUEST_FAILED = "request_failed"  # a queued resource FAILED and Google said not why: next zone
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


SCOPE_OF_KIND: dict[Kind, Scope] = {
    Kind.TRANSIENT: Scope.CALL, Kind.RATE_LIMIT: Scope.CALL, Kind.STOCKOUT: Scope.ZONE,
    Kind.ZONE_UNAVAILABLE: Scope.ZONE, Kind.ZONE_QUOTA: Scope.ZONE, Kind.REQUEST_FAILED: Scope.ZONE,
    Kind.QUOTA: Scope.REGION,
    Kind.GLOBAL_QUOTA: Scope.CLOUD, Kind.PERMISSION: Scope.CLOUD, Kind.API_DISABLED: Scope.CLOUD,
    Kind.CIDR_CONFLICT: Scope.CALL, Kind.EXISTS: Scope.CALL, Kind.NOT_FOUND: Scope.CALL,
    Kind.INVALID: Scope.CLOUD, Kind.UNKNOWN: Scope.CLOUD,
}


def kind_of(value: str | None) -> Kind:
    """The Kind named ``value`` (a ``CloudError.kind``); anything else is UNKNOWN."""
    try:
        return Kind(value or "unknown")
    except ValueError:
        return Kind.UNKNOWN


def scope_of(kind: Kind | str | None) -> Scope:
    """What a failure of this kind blocks: the call, the zone, the region or everything."""
    return SCOPE_OF_KIND[kind if isinstance(kind, Kind) else kind_of(kind)]


@dataclass(frozen=True)
class Failure:
    kind: Kind
    scope: Scope
    message: str
    hint: str | None = None
    zones_available: tuple[str, ...] = ()   # Compute's errorInfo zonesAvailable, when it names some
    retry_after: float | None = None        # RetryInfo.retryDelay, in seconds

    @property
    def retriable(self) -> bool:
        return self.kind in (Kind.TRANSIENT, Kind.RATE_LIMIT)


def failure(kind: Kind | str, message: str, hint: str | None = None, **extra: Any) -> Failure:
    """A Failure of ``kind`` with that kind's scope (``kind`` may be a ``CloudError.kind`` string)."""
    k = kind if isinstance(kind, Kind) else kind_of(kind)
    return Failure(k, SCOPE_OF_KIND[k], message, hint, **extra)


# google.rpc.Code numbers
OK, CANCELLED, UNKNOWN_CODE, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND_CODE, ALREADY_EXISTS = 0, 1, 2, 3, 4, 5, 6
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED = 7, 8, 9, 10
INTERNAL, UNAVAILABLE, UNAUTHENTICATED = 13, 14, 16

STATUS_CODES = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
                "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
                "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
                "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}

_HTTP_TO_CODE = {400: INVALID_ARGUMENT, 401: UNAUTHENTICATED, 403: PERMISSION_DENIED, 404: NOT_FOUND_CODE,
                 409: ALREADY_EXISTS, 412: FAILED_PRECONDITION, 429: RESOURCE_EXHAUSTED, 499: CANCELLED,
                 500: INTERNAL, 501: 12, 502: UNAVAILABLE, 503: UNAVAILABLE, 504: DEADLINE_EXCEEDED}

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
LOCALIZED_MESSAGE = "type.googleapis.com/google.rpc.LocalizedMessage"
PRECONDITION_FAILURE = "type.googleapis.com/google.rpc.PreconditionFailure"

# --- what the structured fields say -----------------------------------------------------------
RATE_LIMIT_REASONS = {"RATE_LIMIT_EXCEEDED"}                       # ErrorInfo.reason
LEGACY_RATE_LIMIT_REASONS = {"rateLimitExceeded", "userRateLimitExceeded"}  # errors[].reason
LEGACY_QUOTA_REASONS = {"quotaExceeded"}
LEGACY_DISABLED_REASONS = {"accessNotConfigured"}
DISABLED_REASONS = {"SERVICE_DISABLED", "API_DISABLED"}
ZONE_POLICY_REASONS = {"LOCATION_POLICY_VIOLATED"}
TOKEN_SCOPE_REASONS = {"ACCESS_TOKEN_SCOPE_INSUFFICIENT"}                 # ErrorInfo.reason
LEGACY_TOKEN_SCOPE_REASONS = {"insufficientPermissions"}                 # errors[].reason
STOCKOUT_INFO_REASONS = {"resource_availability"}                  # Compute errorDetails.errorInfo.reason
# Compute Engine operation error codes (error.errors[].code)
COMPUTE_STOCKOUT_CODES = {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                          "RESOURCE_POOL_EXHAUSTED", "insufficientCapacity",
                          # seen when a VM is preempted while being created (SkyPilot's failover notes)
                          "UNSUPPORTED_OPERATION"}
COMPUTE_QUOTA_CODES = {"QUOTA_EXCEEDED", "quotaExceeded"}
COMPUTE_RATE_CODES = {"RATE_LIMIT_EXCEEDED", "rateLimitExceeded"}
COMPUTE_ZONE_CODES = {"LOCATION_POLICY_VIOLATED"}
COMPUTE_CODE_KINDS = {"RESOURCE_ALREADY_EXISTS": Kind.EXISTS, "RESOURCE_NOT_FOUND": Kind.NOT_FOUND,
                      "PERMISSIONS_ERROR": Kind.PERMISSION}

# --- what the words say (stable parts of Google's texts; see tests/corpus) ----------------------
_STOCKOUT = re.compile(
    r"no more capacity in the zone|ZONE_RESOURCE_POOL_EXHAUSTED|resource pool exhausted|"
    r"does not have enough resources available|Insufficient reserved capacity|insufficient capacity|"
    r"\bstockout\b|is currently unavailable in the [a-z0-9-]+ zone", re.IGNORECASE)
# a spot/preemptible TPU preempted while it was being created: its create operation ends with code 3
_PREEMPTED_IN_CREATION = re.compile(r"while in state PREEMPTED|was preempted", re.IGNORECASE)
_ZONE_UNAVAILABLE = re.compile(
    r"Location [\w/-]+ is not found or access is unauthorized|LOCATION_POLICY_VIOLATED|"
    r"violates constraint constraints/gcp\.resourceLocations|"
    r"\bzone\b[^.;]{0,80}\bis not (?:supported|available)\b|"
    r"received an invalid AcceleratorType, \"[^\"]+\" for zone|"
    r"provisioning model is not supported for accelerator type \"?[\w-]+\"? in location|"
    r"the accelerator [\w-]+ was not found in zone|"
    r"Machine type with name '[^']+' does not exist in zone", re.IGNORECASE)
# Compute's words for a machine type the zone lacks (tests/corpus: terratest#1132)
_MACHINE_TYPE_NOT_IN_ZONE = re.compile(r"Machine type with name '([^']+)' does not exist in zone '([^']+)'")
# an operation that ends "Reservation not found" for a request that named none (tpuctl never does)
_RESERVATION_NOT_FOUND = re.compile(r"\bReservation not found\b", re.IGNORECASE)
_RATE_TEXT = re.compile(
    r"\bRate Limit Exceeded\b|"
    r"Quota exceeded for quota (?:metric|group) '[^']*' and limit '[^']*per (?:minute|second|100 seconds)|"
    r"Maximum number of \w+ requests per (?:minute|second)", re.IGNORECASE)
# Google's statements of an exhausted quota: they mean quota whatever the code says
_QUOTA_STATEMENT = re.compile(
    r"Quota '[^']+' (?:exceeded|exhausted)|Quota limit '[^']+' has been exceeded|QUOTA_EXCEEDED|"
    r"quota metrics? exceed|Insufficient regional quota")
_QUOTA_WORD = re.compile(r"\bquota\b", re.IGNORECASE)
# Google's default text for RESOURCE_EXHAUSTED: its "check quota" names no quota (tests/corpus)
_GENERIC_EXHAUSTED = re.compile(r"Resource has been exhausted \(e\.g\. check quota\)\.?", re.IGNORECASE)
_PROVISIONING_MODEL = re.compile(r"provisioning model is not supported for accelerator type", re.IGNORECASE)
_TOKEN_SCOPES = re.compile(r"insufficient authentication scopes|ACCESS_TOKEN_SCOPE_INSUFFICIENT", re.IGNORECASE)
# What tpuctl says of a FAILED queued resource whose failedData carries no error (gcp_errors writes
# it, this module reads it back: an operation error is only a code and a message)
QUEUED_NO_REASON = "FAILED and Google gave no reason"
# ... and of a Compute Engine flex-start resize request that ended FAILED for a reason no other rule reads
FLEX_FAILED = "flex-start request FAILED"
_QUOTA_NAME = re.compile(r"Quota(?: limit)? '([^']+)'")
_IN_ZONE = re.compile(r"\bin zone ([a-z]+-[a-z]+\d+-[a-z])\b")
_IN_REGION = re.compile(r"\bin region ([a-z]+-[a-z]+\d+)\b")
_GLOBAL_QUOTA = re.compile(r"_ALL_REGIONS\b|\bglobally\b", re.IGNORECASE)
_RETRY_TEXT = re.compile(r"unable to complete the operation\. Please try again|an internal error has occurred|"
                         r"try again later", re.IGNORECASE)
_CIDR = re.compile(r"CIDR Range.*conflicts with|conflicts with another subnet", re.IGNORECASE)
_DISABLED = re.compile(r"SERVICE_DISABLED|has not been used in project \S+ before or it is disabled|"
                       r"API has not been used|accessNotConfigured", re.IGNORECASE)
_NODE_DENIED = re.compile(r"request to provision TPU Node has been denied", re.IGNORECASE)
_BILLING = re.compile(r"free-trial billing account|billing (?:is )?(?:disabled|not enabled)|BILLING_DISABLED",
                      re.IGNORECASE)
_PERMISSION_NAME = re.compile(r"\b((?:tpu|compute|storage|iam|resourcemanager|monitoring)\.[a-zA-Z]+\.[a-zA-Z]+)\b")
_API_NAME = re.compile(r"\b([a-z]+\.googleapis\.com)\b")
_ZONES_AVAILABLE = re.compile(r"zones available: ([a-z0-9, -]+)")
_ZONE_NAME = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
_PER_MINUTE = re.compile(r"per ?minute|PerMinute|per ?second|PerSecond|per 100 seconds", re.IGNORECASE)

# The narrowest predefined role that carries each family of permissions tpuctl uses (the longest
# matching prefix wins). docs/reliability.md lists which account needs which, and where to grant it.
ROLE_FOR_PERMISSION_PREFIX = {
    "tpu.": "roles/tpu.admin",
    "compute.instances.": "roles/compute.instanceAdmin.v1",
    "compute.projects.": "roles/compute.instanceAdmin.v1",   # the TPU range reservations in project metadata
    "compute.globalAddresses.": "roles/compute.networkAdmin",
    # up --create-firewall-rule and the down that removes that rule; reading rules is a viewer's
    "compute.firewalls.": "roles/compute.securityAdmin",
    "compute.firewalls.get": "roles/compute.networkViewer",
    "compute.firewalls.list": "roles/compute.networkViewer",
    "compute.networks.updatePolicy": "roles/compute.securityAdmin",
    "compute.networks.": "roles/compute.networkViewer",
    "compute.subnetworks.": "roles/compute.networkViewer",
    "compute.routes.": "roles/compute.networkViewer",
    "compute.routers.get": "roles/compute.networkViewer",      # up --least-privilege: is there a Cloud NAT
    "compute.routers.list": "roles/compute.networkViewer",
    "compute.": "roles/compute.instanceAdmin.v1",
    "storage.objects.": "roles/storage.objectUser (on the bucket)",
    "storage.multipartUploads.": "roles/storage.objectUser (on the bucket)",
    "storage.buckets.get": "roles/storage.legacyBucketReader (on the bucket)",
    "storage.buckets.list": "roles/storage.legacyBucketReader (on the bucket)",
    "storage.buckets.getIamPolicy": "roles/storage.admin (on the bucket)",
    "storage.buckets.setIamPolicy": "roles/storage.admin (on the bucket)",
    "storage.": "roles/storage.admin",
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser (on the service account)",
    "iam.serviceAccounts.create": "roles/iam.serviceAccountCreator",     # up --least-privilege
    "iam.serviceAccounts.get": "roles/iam.serviceAccountViewer",
    "iam.serviceAccounts.delete": "roles/iam.serviceAccountDeleter",     # down of such a cluster
    "monitoring.": "roles/monitoring.viewer",    # the duty cycle (down --idle --min-duty-cycle)
    "monitoring.timeSeries.create": "roles/monitoring.metricWriter",   # status NAME --export-monitoring
}


def role_for(permission: str) -> str | None:
    best = None
    for prefix, role in ROLE_FOR_PERMISSION_PREFIX.items():
        if permission.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, role)
    return best[1] if best else None


# --- one error, read into plain fields ---------------------------------------------------------
@dataclass(frozen=True)
class ErrorReport:
    """Everything an error says, from whichever transport carried it, as plain values."""

    message: str = ""
    code: int | None = None                 # google.rpc.Code
    http_status: int | None = None
    reasons: tuple[str, ...] = ()           # ErrorInfo.reason
    metadata: Mapping[str, str] = field(default_factory=dict)   # ErrorInfo.metadata (merged)
    legacy_reasons: tuple[str, ...] = ()    # errors[].reason (JSON APIs, Compute calls)
    compute_codes: tuple[str, ...] = ()     # errors[].code (Compute operations)
    violations: tuple[Mapping[str, Any], ...] = ()   # QuotaFailure.violations, Compute quotaInfo
    retry_after: float | None = None        # RetryInfo.retryDelay
    zones_available: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()             # every other message the error carries
    where: str | None = None                # "call" or "operation"

    @property
    def text(self) -> str:
        return " ".join((self.message,) + self.texts + self.compute_codes + self.reasons)


def _duration_s(value: Any) -> float | None:
    """RetryInfo.retryDelay: "26s" in JSON, {"seconds": 26} or a Duration message elsewhere."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([\d.]+)s\s*", value)
        return float(m.group(1)) if m else None
    if isinstance(value, Mapping):
        try:
            return float(value.get("seconds") or 0) + float(value.get("nanos") or 0) / 1e9
        except (TypeError, ValueError):
            return None
    return None


def _zones(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(z.strip() for z in value if isinstance(z, str) and _ZONE_NAME.match(z.strip()))


def read_details(details: Iterable[Any]) -> dict[str, Any]:
    """google.rpc details (dicts with ``@type``, as JSON carries them) into report fields."""
    out: dict[str, Any] = {"reasons": [], "metadata": {}, "violations": [], "texts": [], "retry_after": None,
                           "zones_available": ()}
    for d in details or ():
        if not isinstance(d, Mapping):
            continue
        t = str(d.get("@type") or "")
        if t == ERROR_INFO or ("reason" in d and "domain" in d and not t):
            if d.get("reason"):
                out["reasons"].append(str(d["reason"]))
            meta = d.get("metadata") or d.get("metadatas") or {}
            if isinstance(meta, Mapping):
                out["metadata"].update({str(k): str(v) for k, v in meta.items()})
                out["zones_available"] = out["zones_available"] or _zones(meta.get("zonesAvailable"))
        elif t == QUOTA_FAILURE:
            out["violations"].extend(v for v in d.get("violations") or () if isinstance(v, Mapping))
        elif t == RETRY_INFO:
            out["retry_after"] = _duration_s(d.get("retryDelay"))
        elif t == LOCALIZED_MESSAGE and d.get("message"):
            out["texts"].append(str(d["message"]))
        elif t == PRECONDITION_FAILURE:
            for v in d.get("violations") or ():
                if isinstance(v, Mapping):
                    out["texts"].append(" ".join(str(v.get(k) or "") for k in ("type", "description")))
    return out


def _read_compute_error_details(items: Iterable[Any], acc: dict[str, Any]) -> None:
    """A Compute operation error's ``errorDetails[]``: errorInfo, quotaInfo, localizedMessage, help."""
    for item in items or ():
        if not isinstance(item, Mapping):
            continue
        info = item.get("errorInfo")
        if isinstance(info, Mapping):
            if info.get("reason"):
                acc["reasons"].append(str(info["reason"]))
            meta = info.get("metadatas") or info.get("metadata") or {}
            if isinstance(meta, Mapping):
                acc["metadata"].update({str(k): str(v) for k, v in meta.items()})
                acc["zones_available"] = acc["zones_available"] or _zones(meta.get("zonesAvailable"))
        quota = item.get("quotaInfo")
        if isinstance(quota, Mapping):
            acc["violations"].append(quota)
        loc = item.get("localizedMessage")
        if isinstance(loc, Mapping) and loc.get("message"):
            acc["texts"].append(str(loc["message"]))


def read_body(body: Mapping[str, Any], *, http_status: int | None = None, where: str | None = None) -> ErrorReport:
    """An error as Google's JSON carries it: a REST error body ``{"error": {...}}``, a TPU operation's
    ``error`` (a google.rpc.Status), or a Compute operation (``error.errors[]`` and
    ``httpErrorStatusCode``)."""
    err: Mapping[str, Any] = body.get("error") if isinstance(body.get("error"), Mapping) else body  # type: ignore[assignment]
    if http_status is None and isinstance(body.get("httpErrorStatusCode"), int):
        http_status = body["httpErrorStatusCode"]
    raw_code = err.get("code")
    code: int | None = None
    if isinstance(raw_code, int):
        if raw_code >= 100:   # REST bodies carry the HTTP status in "code"
            http_status = http_status or raw_code
        else:
            code = raw_code
    status = err.get("status")
    if isinstance(status, str) and status in STATUS_CODES:
        code = STATUS_CODES[status]
    acc = read_details(err.get("details") or ())
    legacy, compute_codes, messages = [], [], []
    for e in err.get("errors") or ():
        if not isinstance(e, Mapping):
            continue
        if e.get("reason"):
            legacy.append(str(e["reason"]))
        if e.get("code"):
            compute_codes.append(str(e["code"]))
        if e.get("message"):
            messages.append(str(e["message"]))
        _read_compute_error_details(e.get("errorDetails") or (), acc)
    message = str(err.get("message") or (messages[0] if messages else "") or "")
    texts = [m for m in messages if m != message] + acc["texts"]
    if body.get("httpErrorMessage"):
        texts.append(str(body["httpErrorMessage"]))
    return ErrorReport(message=message, code=code, http_status=http_status, reasons=tuple(acc["reasons"]),
                       metadata=dict(acc["metadata"]), legacy_reasons=tuple(legacy),
                       compute_codes=tuple(compute_codes), violations=tuple(acc["violations"]),
                       retry_after=acc["retry_after"], zones_available=tuple(acc["zones_available"]),
                       texts=tuple(texts), where=where)


def classify_body(body: Mapping[str, Any], *, http_status: int | None = None, where: str | None = None) -> Failure:
    return classify_report(read_body(body, http_status=http_status, where=where))


def classify(*, code: int | None = None, http_status: int | None = None, message: str = "",
             reason: str | None = None, quota_scope: str | None = None,
             details: Sequence[Any] = (), errors: Sequence[Any] = (), where: str | None = None) -> Failure:
    """Classify an error by its google.rpc code (or HTTP status), ErrorInfo reason, details, legacy
    ``errors[]`` and message (an operation error is often only a code and a message)."""
    acc = read_details(details)
    legacy = tuple(str(e.get("reason")) for e in errors if isinstance(e, Mapping) and e.get("reason"))
    compute_codes = tuple(str(e.get("code")) for e in errors if isinstance(e, Mapping) and e.get("code"))
    violations = tuple(acc["violations"])
    if quota_scope and not violations:
        violations = ({"quotaDimensions": {}},)
    reasons = tuple(acc["reasons"]) + ((reason,) if reason and reason not in acc["reasons"] else ())
    zones = tuple(acc["zones_available"]) or _zones((_ZONES_AVAILABLE.search(message) or [None, ""])[1])
    return classify_report(ErrorReport(message=message, code=code, http_status=http_status, reasons=reasons,
                                       metadata=dict(acc["metadata"]), legacy_reasons=legacy,
                                       compute_codes=compute_codes, violations=violations,
                                       retry_after=acc["retry_after"], zones_available=zones,
                                       texts=tuple(acc["texts"]), where=where))


# --- the decision --------------------------------------------------------------------------------
def _quota_failure(r: ErrorReport, text: str) -> Failure:
    """Zone, region or global: from the violation's dimensions, else from the words."""
    name = ""
    scope = None
    for v in r.violations:
        dims = v.get("quotaDimensions") or v.get("dimensions") or {}
        name = name or str(v.get("quotaId") or v.get("metricName") or v.get("limitName") or
                           str(v.get("quotaMetric") or "").rsplit("/", 1)[-1] or "")
        if isinstance(dims, Mapping):
            if dims.get("zone"):
                scope = scope or ("zone", str(dims["zone"]))
            elif dims.get("region") and dims.get("region") != "global":
                scope = scope or ("region", str(dims["region"]))
            elif dims.get("region") == "global":
                scope = scope or ("global", "")
        desc = " ".join(str(v.get(k) or "") for k in ("description", "subject"))
        if scope is None:
            if _IN_ZONE.search(desc):
                scope = ("zone", _IN_ZONE.search(desc).group(1))    # type: ignore[union-attr]
            elif _IN_REGION.search(desc):
                scope = ("region", _IN_REGION.search(desc).group(1))  # type: ignore[union-attr]
    m = _QUOTA_NAME.search(text)
    name = name or (m.group(1) if m else "")
    if scope is None:
        z, g = _IN_ZONE.search(text), _IN_REGION.search(text)
        if _GLOBAL_QUOTA.search(text) or name.endswith("_ALL_REGIONS"):
            scope = ("global", "")
        elif z:
            scope = ("zone", z.group(1))
        elif g:
            scope = ("region", g.group(1))
        elif "PerZone" in name:
            scope = ("zone", "")
        else:
            scope = ("region", "")
    what = f"quota {name}" if name else "the quota"
    where, place = scope
    if where == "global" or name.endswith("_ALL_REGIONS"):
        return failure(Kind.GLOBAL_QUOTA, r.message,
                       f"{what} counts every region, so no zone can help: request more "
                       "(IAM & Admin > Quotas) or free some")
    if where == "zone":
        return failure(Kind.ZONE_QUOTA, r.message,
                       f"request more of {what}{' in ' + place if place else ''} (IAM & Admin > Quotas); "
                       "tpuctl tries the next zone of --zone")
    return failure(Kind.QUOTA, r.message,
                   f"request more of {what}{' in ' + place if place else ''} (IAM & Admin > Quotas), "
                   "or use a zone in another region")


def _is_rate_limit(r: ErrorReport, text: str) -> bool:
    if set(r.reasons) & RATE_LIMIT_REASONS or set(r.legacy_reasons) & LEGACY_RATE_LIMIT_REASONS:
        return True
    if set(r.compute_codes) & COMPUTE_RATE_CODES:
        return True
    if r.violations:
        # a 429 with a QuotaFailure is a hard quota, unless it is a per-minute quota that says when
        # to retry (RetryInfo)
        ids = " ".join(str(v.get("quotaId") or v.get("limitName") or "") for v in r.violations)
        return r.retry_after is not None and bool(_PER_MINUTE.search(ids))
    return bool(_RATE_TEXT.search(text))


def classify_report(r: ErrorReport) -> Failure:
    code = r.code
    if code is None and r.http_status is not None:
        code = _HTTP_TO_CODE.get(r.http_status, UNKNOWN_CODE if r.http_status >= 500 else INVALID_ARGUMENT)
    text = r.text
    reasons, legacy, ccodes = set(r.reasons), set(r.legacy_reasons), set(r.compute_codes)
    message = r.message

    if QUEUED_NO_REASON in message:     # tpuctl's words, read first: the request's name may hold any other
        return failure(Kind.REQUEST_FAILED, message,
                       "Google failed the queued resource without saying why (FAILED means a problem with the "
                       "request, or no capacity within its time window): tpuctl tries the next zone of --zone")
    if FLEX_FAILED in message:
        return failure(Kind.REQUEST_FAILED, message,
                       "Compute Engine could not fill the flex-start request there: tpuctl tries the next zone "
                       "or capacity")
    if _CIDR.search(text):
        return failure(Kind.CIDR_CONFLICT, message, "tpuctl takes the next free block")
    if reasons & DISABLED_REASONS or legacy & LEGACY_DISABLED_REASONS or _DISABLED.search(text):
        name = r.metadata.get("service") or ((_API_NAME.search(text) or [None, None])[1]) or "tpu.googleapis.com"
        return failure(Kind.API_DISABLED, message, f"enable it: gcloud services enable {name}")
    if _is_rate_limit(r, text):
        return failure(Kind.RATE_LIMIT, message,
                       "too many requests per minute: retried with backoff; retry in a minute, or raise the "
                       "API's requests-per-minute quota", retry_after=r.retry_after)
    said = _GENERIC_EXHAUSTED.sub(" ", text)    # what is left once Google's default words are gone
    if (r.violations or legacy & LEGACY_QUOTA_REASONS or ccodes & COMPUTE_QUOTA_CODES
            or (not _STOCKOUT.search(text)
                and (_QUOTA_STATEMENT.search(said)
                     or (_QUOTA_WORD.search(said)
                         and code in (RESOURCE_EXHAUSTED, PERMISSION_DENIED, FAILED_PRECONDITION, None))))):
        return _quota_failure(r, text)
    if ccodes & COMPUTE_STOCKOUT_CODES or reasons & STOCKOUT_INFO_REASONS or _STOCKOUT.search(text):
        return failure(Kind.STOCKOUT, message, "no capacity there now: tpuctl tries the next zone of --zone",
                       zones_available=r.zones_available)
    if code == INVALID_ARGUMENT and _PREEMPTED_IN_CREATION.search(text):
        return failure(Kind.STOCKOUT, message,
                       "the spot/preemptible TPU was preempted while being created: tpuctl tries the next zone")
    if _PROVISIONING_MODEL.search(text):
        return failure(Kind.ZONE_UNAVAILABLE, message,
                       "this zone does not offer that accelerator type with that provisioning model: tpuctl "
                       "tries the next zone of --zone")
    if r.where != "call" and _RESERVATION_NOT_FOUND.search(text):
        return failure(Kind.ZONE_UNAVAILABLE, message,
                       "Google answered 'Reservation not found' to a request that names no reservation: this "
                       "zone cannot serve it as asked; tpuctl tries the next zone of --zone")
    machine = _MACHINE_TYPE_NOT_IN_ZONE.search(text)
    if machine:
        return failure(Kind.ZONE_UNAVAILABLE, message,
                       f"zone {machine.group(2)} has no machine type {machine.group(1)}: tpuctl tries the next "
                       "zone of --zone")
    if reasons & ZONE_POLICY_REASONS or ccodes & COMPUTE_ZONE_CODES or _ZONE_UNAVAILABLE.search(text):
        return failure(Kind.ZONE_UNAVAILABLE, message,
                       "this zone is not served to the project (not offered there, or not allowed by an "
                       "organization policy): tpuctl tries the next zone of --zone")
    if _RETRY_TEXT.search(text) and code in (INVALID_ARGUMENT, INTERNAL, UNAVAILABLE, UNKNOWN_CODE, ABORTED, None):
        return failure(Kind.TRANSIENT, message)
    if code == RESOURCE_EXHAUSTED or r.http_status == 429:
        # 429 without quota or capacity words (at most Google's default "check quota"): throttling, retried
        return failure(Kind.RATE_LIMIT, message,
                       "Google named no quota (a bare RESOURCE_EXHAUSTED): retried with backoff; if it persists, "
                       "look at the TPU quotas (IAM & Admin > Quotas) or retry later", retry_after=r.retry_after)
    if code == NOT_FOUND_CODE and r.where == "operation":
        # a create operation that ends NOT_FOUND: something the request names is missing; no zone can help
        return failure(Kind.INVALID, message,
                       "something the request names (network, subnetwork, service account) does not exist")
    if code in (UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED, ABORTED, UNKNOWN_CODE) or (
            r.http_status is not None and r.http_status >= 500):
        return failure(Kind.TRANSIENT, message)
    for c in ccodes:
        if c in COMPUTE_CODE_KINDS:
            return failure(COMPUTE_CODE_KINDS[c], message)
    if _NODE_DENIED.search(text):
        return failure(Kind.INVALID, message,
                       "this project cannot create TPU Nodes: use --arch vm (TPU VMs), or ask the Cloud TPU "
                       "team for TPU Node access")
    if code in (PERMISSION_DENIED, UNAUTHENTICATED) or legacy & {"forbidden"}:
        named = _PERMISSION_NAME.search(text)
        perm = r.metadata.get("permission") or (named.group(1) if named else None)
        if reasons & TOKEN_SCOPE_REASONS or legacy & LEGACY_TOKEN_SCOPE_REASONS or _TOKEN_SCOPES.search(text):
            hint = ("the access token lacks the OAuth scope this API needs: use credentials with the "
                    "cloud-platform scope (gcloud auth application-default login; on a VM, its access scopes)")
        elif _BILLING.search(text):
            hint = "link the project to a paid billing account (Billing > Account management)"
        elif perm:
            role = role_for(perm) or "a role that grants it"
            hint = f"grant {role} (it carries {perm}) to the account tpuctl runs as"
        elif code == UNAUTHENTICATED:
            hint = "run gcloud auth application-default login"
        else:
            hint = "grant roles/tpu.admin and roles/compute.instanceAdmin.v1 to the account tpuctl runs as"
        return failure(Kind.PERMISSION, message, hint)
    if code == ALREADY_EXISTS:
        return failure(Kind.EXISTS, message)
    if code == NOT_FOUND_CODE:
        return failure(Kind.NOT_FOUND, message)
    if code in (INVALID_ARGUMENT, FAILED_PRECONDITION):
        return failure(Kind.INVALID, message)
    return failure(Kind.UNKNOWN, message)
