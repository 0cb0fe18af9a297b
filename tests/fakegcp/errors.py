"""Google API errors, in the shapes the real services return them.

One ``ApiError`` renders three ways: the REST JSON body of the TPU API (``code``, ``message``,
``status``, ``details``), the Compute Engine body (the same plus ``errors[]`` with a legacy
``reason``), and a gRPC status with packed details for the v1 TPU service. The client libraries
turn each into a ``google.api_core.exceptions`` subclass, so tpuctl sees what it would see from
Google: a ``reason`` from ``ErrorInfo``, a ``QuotaFailure`` violation, the gRPC code.
"""

from __future__ import annotations

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

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def http_status(self) -> int:
        return self.http or CODES.get(self.code, ("UNKNOWN", 500))[1]

    @property
    def status(self) -> str:
        return CODES.get(self.code, ("UNKNOWN", 500))[0]

    def rest_body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.http_status, "message": self.message, "status": self.status}
        if self.details:
            err["details"] = self.details
        return {"error": err}

    def compute_body(self) -> dict[str, Any]:
        body = self.rest_body()
        reason = self.compute_reason or _COMPUTE_REASON.get(self.http_status, "backendError")
        body["error"]["errors"] = [{"message": self.message, "domain": "global", "reason": reason}]
        return body

    def status_json(self) -> dict[str, Any]:
        """As a google.rpc.Status inside a TPU operation's ``error``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


def from_http(status: int, message: str | None = None) -> ApiError:
    code = HTTP_TO_CODE.get(status, 2)
    default = {429: "Resource has been exhausted (e.g. check quota).",
               500: "Internal error encountered.",
               503: "The service is currently unavailable.",
               504: "The request timed out."}.get(status, CODES.get(code, ("UNKNOWN", 500))[0])
    return ApiError(code, message or default, http=status)


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
    full = f"//{service}/{resource}"
    return ApiError(7, f"Permission '{permission}' denied on resource '{full}' (or it may not exist).",
                    details=[{"@type": ERROR_INFO, "reason": "IAM_PERMISSION_DENIED",
                              "domain": "iam.googleapis.com",
                              "metadata": {"permission": permission, "resource": resource}}])


def quota_exceeded(metric: str, limit: int, region: str, *, at: str = "call",
                   service: str = "tpu.googleapis.com") -> ApiError:
    """The create call's 429 and a failed operation word it differently; both name the region."""
    if at == "call":
        message = f"Quota limit '{metric}' has been exceeded. Limit: {limit} in region {region}."
    else:
        message = f"Quota '{metric}' exhausted. Limit {limit} in region {region}"
    return ApiError(8, message, details=[{
        "@type": QUOTA_FAILURE,
        "violations": [{
            "subject": f"quota/{metric}",
            "description": f"Quota '{metric}' exceeded. Limit: {limit} in region {region}.",
            "apiService": service,
            "quotaMetric": f"{service}/{metric}",
            "quotaId": metric,
            "quotaDimensions": {"region": region},
            "quotaValue": str(limit),
        }],
    }])


def stockout(zone: str) -> ApiError:
    return ApiError(8, f'There is no more capacity in the zone "{zone}"; you can try in another zone '
                       "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)")


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
