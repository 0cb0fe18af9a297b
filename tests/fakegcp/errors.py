"""Google API errors, in the shapes the real services return them.

One ``ApiError`` renders three ways: the REST JSON body of the TPU API (``code``, ``message``,
``status``, ``details``), the Compute Engine body (the same plus ``errors[]`` with a legacy
``reason``), and a gRPC status with packed details for the v1 TPU service. The client libraries
turn each into a ``google.api_core.exceptions`` subclass, so tpuctl sees what it would see from
Google: a ``reason`` from ``ErrorInfo``, a ``QuotaFailure`` violation, the gRPC code.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

# google.rpc.Code -> (canonical name, HTTP status)
CODES: dict[int, tuple[str, int]] = {
    0: ("OK", 200),
    1: ("CANCELLED", 499),
    2: ("UNKNOWN", 500),
    3: ("INVALID_ARGUMENT", 400),
    4: ("DEADLINE_EXCEEDED", 504),
    5: ("NOT_FOUND", 404),
    6: ("ALREADY_EXISTS", 409),
    7: ("PERMISSION_DENIED", 403),
    8: ("RESOURCE_EXHAUSTED", 429),
    9: ("FAILED_PRECONDITION", 400),
    10: ("ABORTED", 409),
    11: ("OUT_OF_RANGE", 400),
    12: ("UNIMPLEMENTED", 501),
    13: ("INTERNAL", 500),
    14: ("UNAVAILABLE", 503),
    15: ("DATA_LOSS", 500),
    16: ("UNAUTHENTICATED", 401),
}
HTTP_TO_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 429: 8, 499: 1, 500: 13, 501: 12,
                503: 14, 504: 4}

# Compute Engine's legacy per-error reason for each HTTP status.
_COMPUTE_REASON = {400: "invalid", 403: "forbidden", 404: "notFound", 409: "alreadyExists",
                   412: "conditionNotMet", 429: "rateLimitExceeded", 500: "backendError",
                   503: "backendError"}

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
HELP = "type.googleapis.com/google.rpc.Help"
LOCALIZED = "type.googleapis.com/google.rpc.LocalizedMessage"


@dataclass
class ApiError(Exception):
    """A failed call; ``code`` is the google.rpc.Code, ``http`` the HTTP status if it differs."""

    code: int
    message: str
    details: list[dict[str, Any]] = field(default_factory=list)
    http: int | None = None
    compute_reason: str | None = None
    raw_body: dict[str, Any] | None = None   # sent verbatim over REST (POST /_admin/fault)
    compute_errors: list[dict[str, Any]] | None = None   # a Compute operation's error.errors[], verbatim

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def http_status(self) -> int:
        return self.http or CODES.get(self.code, ("UNKNOWN", 500))[1]

    @property
    def status(self) -> str:
        return CODES.get(self.code, ("UNKNOWN", 500))[0]

    def rest_body(self) -> dict[str, Any]:
        if self.raw_body is not None:
            return self.raw_body
        err: dict[str, Any] = {"code": self.http_status, "message": self.message, "status": self.status}
        if self.details:
            err["details"] = self.details
        return {"error": err}

    def compute_body(self) -> dict[str, Any]:
        if self.raw_body is not None:
            return self.raw_body
        body = self.rest_body()
        reason = self.compute_reason or _COMPUTE_REASON.get(self.http_status, "backendError")
        domain = "usageLimits" if reason in ("rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded") \
            else "global"
        body["error"]["errors"] = [{"message": self.message, "domain": domain, "reason": reason}]
        return body

    def status_json(self) -> dict[str, Any]:
        """As a google.rpc.Status inside a TPU operation's ``error`` (or a queued resource's
        ``failedData.error``), in proto3's JSON form: fields at their default (code 0, "") are left
        out, so an empty Status is ``{}``."""
        out: dict[str, Any] = {}
        if self.code:
            out["code"] = self.code
        if self.message:
            out["message"] = self.message
        if self.details:
            out["details"] = self.details
        return out


def eid() -> str:
    """The error id Cloud TPU appends to its messages: " [EID: 0x9f48947a7d57c8d]"."""
    return f" [EID: 0x{secrets.randbits(60):x}]"


def from_fault_body(body: dict[str, Any], status: int | None = None, *, where: str = "call") -> ApiError:
    """An error given as Google sends it (``{"error": {...}}``) for ``POST /_admin/fault``.

    Over REST a failed call answers ``body`` verbatim with ``status``; the v1 gRPC service answers
    the status code, message and details it carries. For ``where`` "operation" it is the
    operation's error: a TPU operation's google.rpc.Status, a Compute operation's ``errors[]``.
    """
    err = body.get("error") if isinstance(body.get("error"), dict) else {}
    raw_code = err.get("code")
    names = {name: code for code, (name, _http) in CODES.items()}
    if isinstance(err.get("status"), str) and err["status"] in names:
        code = names[err["status"]]
    elif isinstance(raw_code, int) and raw_code < 100:
        code = raw_code
    elif isinstance(raw_code, int) or status:
        code = HTTP_TO_CODE.get(int(status or raw_code), 2)
    elif where == "operation" and not err:
        code = 0     # an empty google.rpc.Status: a queued resource FAILED with no reason given
    else:
        code = 2
    http = int(status) if status else (raw_code if isinstance(raw_code, int) and raw_code >= 100 else None)
    errors = [e for e in err.get("errors") or [] if isinstance(e, dict)]
    message = str(err.get("message") or (errors[0].get("message") if errors else "") or "")
    details = [d for d in err.get("details") or [] if isinstance(d, dict)]
    if where == "operation":
        http = body.get("httpErrorStatusCode") or http
        return ApiError(code, message, details, http=http, compute_errors=errors or None)
    return ApiError(code, message, details, http=http or CODES.get(code, ("UNKNOWN", 500))[1], raw_body=body)


def from_http(status: int, message: str | None = None) -> ApiError:
    code = HTTP_TO_CODE.get(status, 2)
    default = {429: "Resource has been exhausted (e.g. check quota).",
               500: "Internal error encountered.",
               503: "The service is currently unavailable.",
               504: "The request timed out."}.get(status, CODES.get(code, ("UNKNOWN", 500))[0])
    return ApiError(code, message or default, http=status)


def burst(status: int, message: str | None, service: str, project_number: str, method: str = "POST") -> ApiError:
    """A burst failure as Google words it. A 429 is a rate limit, with ``ErrorInfo`` reason
    ``RATE_LIMIT_EXCEEDED`` (and, from the JSON APIs such as Compute, ``errors[].reason``
    ``rateLimitExceeded``): "Quota exceeded for quota metric 'Requests' and limit 'Requests per
    minute' ...", or Compute's reads "... quota group 'ReadGroup' and limit 'Read requests per 100
    seconds' ..." (tests/corpus)."""
    if status != 429:
        return from_http(status, message)
    consumer = f"'project_number:{project_number}'"
    if service == "compute.googleapis.com" and method.upper() == "GET":
        text = (f"Quota exceeded for quota group 'ReadGroup' and limit 'Read requests per 100 seconds' of service "
                f"'{service}' for consumer {consumer}.")
    else:
        text = (f"Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service "
                f"'{service}' for consumer {consumer}.")
    return ApiError(8, message or text, http=429, compute_reason="rateLimitExceeded", details=[
        {"@type": ERROR_INFO, "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
         "metadata": {"service": service, "consumer": f"projects/{project_number}"}},
        {"@type": HELP, "links": [{"description": "Request a higher quota limit.",
                                   "url": "https://cloud.google.com/docs/quotas/help/request_increase"}]},
    ])


def not_found(resource: str) -> ApiError:
    return ApiError(5, f"Resource '{resource}' was not found")


def already_exists(resource: str) -> ApiError:
    return ApiError(6, f"Resource '{resource}' already exists")


def invalid(message: str) -> ApiError:
    return ApiError(3, message)


def service_disabled(service: str, title: str, project_number: str) -> ApiError:
    consumer = f"projects/{project_number}"
    url = (f"https://console.developers.google.com/apis/api/{service}/overview"
           f"?project={project_number}")
    message = (f"{title} has not been used in project {project_number} before or it is disabled. "
               f"Enable it by visiting {url} then retry. If you enabled this API recently, wait a "
               "few minutes for the action to propagate to our systems and retry.")
    return ApiError(7, message, compute_reason="accessNotConfigured", details=[
        {"@type": ERROR_INFO, "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
         "metadata": {"service": service, "consumer": consumer, "serviceTitle": title,
                      "activationUrl": url, "containerInfo": project_number}},
        {"@type": LOCALIZED, "locale": "en-US", "message": message},
        {"@type": HELP, "links": [{"description": "Google developers console API activation",
                                   "url": url}]},
    ])


def permission_denied(permission: str, resource: str, service: str) -> ApiError:
    """A missing permission, as the service words it: Compute Engine's JSON API still answers in its
    legacy form, "Required 'compute.firewalls.create' permission for 'projects/P'" with
    ``errors[].reason`` forbidden and no details (tests/corpus: bosh-google-cpi-release#118,
    forseti-security#3424); the other APIs name the permission in IAM's words and ErrorInfo."""
    if service == "compute.googleapis.com":
        return ApiError(7, f"Required '{permission}' permission for '{resource}'", compute_reason="forbidden")
    full = f"//{service}/{resource}"
    return ApiError(7, f"Permission '{permission}' denied on resource '{full}' (or it may not exist).",
                    details=[{"@type": ERROR_INFO, "reason": "IAM_PERMISSION_DENIED",
                              "domain": "iam.googleapis.com",
                              "metadata": {"permission": permission, "resource": resource}}])


def quota_exceeded(metric: str, limit: int, region: str, *, at: str = "call",
                   service: str = "tpu.googleapis.com", zone: str | None = None) -> ApiError:
    """The create call's 429 and a failed operation word it differently; both name the region (a
    per-zone quota: the zone), as Google's do ("Quota limit 'M' has been exceeded. Limit: 0 in region
    us-east5.", "Quota 'M' exhausted. Limit 32 in zone europe-west4-a": tests/corpus)."""
    where = f"zone {zone}" if zone else f"region {region}"
    if at == "call":
        message = f"Quota limit '{metric}' has been exceeded. Limit: {limit} in {where}."
    else:
        message = f"Quota '{metric}' exhausted. Limit {limit} in {where}"
    return ApiError(8, message, details=[{
        "@type": QUOTA_FAILURE,
        "violations": [{
            "subject": f"quota/{metric}",
            "description": f"Quota '{metric}' exceeded. Limit: {limit} in {where}.",
            "apiService": service,
            "quotaMetric": f"{service}/{metric}",
            "quotaId": metric,
            "quotaDimensions": {"zone": zone} if zone else {"region": region},
            "quotaValue": str(limit),
        }],
    }])


def stockout(zone: str) -> ApiError:
    """Cloud TPU's stockout, code 8, as it has read since 2021 (tests/corpus): the text after the
    zone has changed over the years, the prefix has not."""
    return ApiError(8, f'There is no more capacity in the zone "{zone}"; you can try in another zone '
                       "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)" + eid())


CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
# The OAuth scopes each API accepts, from its reference's "Authorization scopes": every TPU API v2
# method takes cloud-platform only; Compute Engine takes compute or cloud-platform (and
# compute.readonly for reads). Any other service is left unchecked here.
_SCOPES_OF = {"tpu.googleapis.com": ({CLOUD_PLATFORM}, {CLOUD_PLATFORM}),
              "compute.googleapis.com": ({CLOUD_PLATFORM, "https://www.googleapis.com/auth/compute"},
                                         {CLOUD_PLATFORM, "https://www.googleapis.com/auth/compute",
                                          "https://www.googleapis.com/auth/compute.readonly"}),
              # monitoring.v3.json: timeSeries.create's scopes, and timeSeries.list's
              "monitoring.googleapis.com": ({CLOUD_PLATFORM, "https://www.googleapis.com/auth/monitoring",
                                             "https://www.googleapis.com/auth/monitoring.write"},
                                            {CLOUD_PLATFORM, "https://www.googleapis.com/auth/monitoring",
                                             "https://www.googleapis.com/auth/monitoring.read"})}


def scope_allows(service: str, method: str, scopes: frozenset[str] | set[str]) -> bool:
    """Whether a token granted ``scopes`` may call ``service`` (``*``: every service the fake serves)."""
    services = list(_SCOPES_OF) if service == "*" else [service]
    for name in services:
        write, read = _SCOPES_OF.get(name, (None, None))
        accepted = read if method.upper() == "GET" else write
        if accepted is not None and not set(scopes) & accepted:
            return False
    return True


def scope_insufficient(service: str, call: str) -> ApiError:
    """403 for a token without the API's scope, as Google answers it (tests/corpus:
    scope-insufficient-403-analog-296, a verbatim body: message, errors[] insufficientPermissions,
    ErrorInfo ACCESS_TOKEN_SCOPE_INSUFFICIENT with the service and method)."""
    message = "Request had insufficient authentication scopes."
    err = ApiError(7, message, compute_reason="insufficientPermissions", details=[
        {"@type": ERROR_INFO, "reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "domain": "googleapis.com",
         "metadata": {"service": service, "method": call}}])
    err.raw_body = {"error": {"code": 403, "message": message,
                              "errors": [{"message": "Insufficient Permission", "domain": "global",
                                          "reason": "insufficientPermissions"}],
                              "status": "PERMISSION_DENIED", "details": err.details}}
    return err


def cidr_conflict(cidr: str, network: str) -> ApiError:
    return ApiError(3, f"The 'CIDR Range' value \"{cidr}\" on network \"{network}\" conflicts with "
                       "another subnet or object in the (peered) customer network.")


def echo_credentials(status: int, authorization: str, path: str, base_url: str) -> ApiError:
    """An error that quotes the request's credentials back, as a misconfigured proxy or service
    might: its Authorization header, and a signed URL (V4 signature and credential)."""
    signed = (f"{base_url or 'https://storage.googleapis.com'}/tpuctl-runs/spec.yaml?X-Goog-Algorithm=GOOG4-RSA-SHA256"
              "&X-Goog-Credential=tpuctl-sa%40proj.iam.gserviceaccount.com%2F20260101%2Fauto%2Fstorage%2Fgoog4_request"
              "&X-Goog-Date=20260101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host"
              "&X-Goog-Signature=5d0c0ffee5ec12e7519aa7ea0d5eadbeef5d0c0ffee5ec12e7519aa7ea0d5eadbeef")
    code = HTTP_TO_CODE.get(status, 3)
    raw = authorization.split(" ", 1)[-1] if authorization else "(none)"
    message = (f"Request to {path} rejected by the gateway: it was sent with Authorization: "
               f"{authorization or '(none)'}; token {raw} is not accepted here; retry with the signed URL {signed}")
    return ApiError(code, message, http=status, details=[
        {"@type": ERROR_INFO, "reason": "GATEWAY_REJECTED", "domain": "gateway.example.com",
         "metadata": {"authorization": authorization or "", "signedUrl": signed}},
        {"@type": LOCALIZED, "locale": "en-US", "message": message},
    ])
