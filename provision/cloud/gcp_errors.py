"""Turn Google client-library exceptions and operation errors into :class:`Failure`.

The classification itself lives in :mod:`provision.cloud.failures`; this module only reads what the
libraries carry (gRPC status, HTTP status, ErrorInfo reason, QuotaFailure details, Compute
operation error codes) so that every caller sees the same kinds.
"""

from __future__ import annotations

from typing import Any

from ..basics.redact import redact
from .failures import Failure, Kind, Scope, classify

# Compute Engine operation error codes (error.errors[].code) and what they mean to tpuctl.
_COMPUTE_CODES = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": (Kind.STOCKOUT, Scope.ZONE),
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": (Kind.STOCKOUT, Scope.ZONE),
    "RESOURCE_POOL_EXHAUSTED": (Kind.STOCKOUT, Scope.ZONE),
    "QUOTA_EXCEEDED": (Kind.QUOTA, Scope.REGION),
    "RESOURCE_ALREADY_EXISTS": (Kind.EXISTS, Scope.CALL),
    "RESOURCE_NOT_FOUND": (Kind.NOT_FOUND, Scope.CALL),
    "PERMISSIONS_ERROR": (Kind.PERMISSION, Scope.CLOUD),
}


def failure_of(exc: BaseException) -> Failure:
    """Classify any exception a client call can raise."""
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover - the libraries are base dependencies
        gexc = None
    if gexc is not None and isinstance(exc, gexc.GoogleAPICallError):
        code = None
        status = getattr(exc, "grpc_status_code", None)
        if status is not None:
            code = status.value[0]
        http = exc.code if isinstance(exc.code, int) and exc.code >= 100 else None
        # Over REST the exception class follows the HTTP status (409 is Conflict whatever the API
        # meant); the API's own status name is in the body.
        body_status = _rest_status(exc)
        if body_status in _STATUS_CODES:
            code = _STATUS_CODES[body_status]
        reason = getattr(exc, "reason", None)
        message = redact(_strip_url(str(exc.message or exc)))
        quota_scope = None
        for detail in getattr(exc, "details", None) or []:
            text = str(detail)
            if "QuotaFailure" in type(detail).__name__ or "quota" in text.lower():
                quota_scope = "region"
                message = f"{message} ({redact(text.strip())[:200]})"
        return classify(code=code, http_status=http, message=message, reason=reason, quota_scope=quota_scope)
    if gexc is not None and isinstance(exc, gexc.RetryError):
        return Failure(Kind.TRANSIENT, Scope.CALL, redact(str(exc)))
    name = type(exc).__name__
    if name == "RefreshError":
        # The credentials could not get an access token. The OAuth endpoint's answer may quote
        # the form it was sent (refresh token, client secret): redacted, and cut short.
        text = redact(" ".join(str(exc).split()))[:240]
        if getattr(exc, "retryable", False):
            return Failure(Kind.TRANSIENT, Scope.CALL, f"getting an access token failed: {text}")
        return Failure(Kind.PERMISSION, Scope.CLOUD, f"getting an access token failed: {text}",
                       "run gcloud auth application-default login, or check GOOGLE_APPLICATION_CREDENTIALS")
    if name in ("ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout", "ChunkedEncodingError",
                "ProtocolError", "RemoteDisconnected", "TransportError"):
        return Failure(Kind.TRANSIENT, Scope.CALL, redact(str(exc)))
    try:
        import grpc

        if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
            return classify(code=exc.code().value[0], message=redact(str(exc.details())))
    except ImportError:  # pragma: no cover
        pass
    return Failure(Kind.UNKNOWN, Scope.CLOUD, redact(f"{name}: {exc}"))


_STATUS_CODES = {"CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
                 "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
                 "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
                 "DATA_LOSS": 15, "UNAUTHENTICATED": 16}


def _rest_status(exc: Any) -> str | None:
    response = getattr(exc, "response", None)
    if response is None or not hasattr(response, "json"):
        return None
    try:
        return (response.json().get("error") or {}).get("status")
    except Exception:  # noqa: BLE001 - not JSON: fall back to the HTTP status
        return None


def _strip_url(message: str) -> str:
    """REST errors start with "POST http://...: "; the URL says nothing the user needs."""
    if message.startswith(("GET ", "POST ", "PUT ", "PATCH ", "DELETE ")) and ": " in message:
        return message.split(": ", 1)[1]
    return message


def is_stale_fingerprint(exc: BaseException) -> bool:
    return "fingerprint" in str(getattr(exc, "message", exc)).lower()


def compute_operation_failure(operation: dict[str, Any]) -> tuple[int, str]:
    """(google.rpc code, message) for a finished Compute Engine operation, read from its JSON.

    A failed operation says why in ``error.errors[{code, message}]`` and, for the HTTP status
    the request would have had, ``httpErrorStatusCode`` / ``httpErrorMessage``.
    """
    errors = list((operation.get("error") or {}).get("errors") or [])
    http = operation.get("httpErrorStatusCode")
    http_code = _HTTP_CODES.get(http, 2) if isinstance(http, int) else 2
    if not errors:
        if http:
            return http_code, redact(f"operation failed: HTTP {http} {operation.get('httpErrorMessage') or ''}".strip())
        return 2, "operation failed without details"
    first = errors[0] if isinstance(errors[0], dict) else {}
    code_name = str(first.get("code") or "")
    message = redact(str(first.get("message") or code_name))
    kind, _scope = _COMPUTE_CODES.get(code_name, (None, None))
    if kind == Kind.STOCKOUT:
        return 8, f"{code_name}: {message}"
    if kind == Kind.QUOTA:
        return 8, f"Quota exceeded: {message}"
    if kind == Kind.EXISTS:
        return 6, message
    if kind == Kind.NOT_FOUND:
        return 5, message
    if kind == Kind.PERMISSION:
        return 7, message
    return http_code, f"{code_name}: {message}" if code_name else message


# HTTP status of a failed Compute operation -> google.rpc code, for error codes not listed above
_HTTP_CODES = {400: 3, 403: 7, 404: 5, 409: 6, 412: 9, 429: 8}


def credentials_error(exc: BaseException, *, emulator_hint: bool = False) -> Any:
    """A one-line UsageError for Application Default Credentials that cannot be loaded.

    A malformed key file is named with the reason (scrubbed: the key itself never appears);
    no credentials at all gets the command that creates them.
    """
    import os

    from ..basics.errors import UsageError

    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    args = getattr(exc, "args", ()) or ()
    first = args[0] if args and isinstance(args[0], str) else str(exc)
    cause = args[1] if len(args) > 1 and isinstance(args[1], BaseException) else None
    reason = " ".join(first.split())
    if cause is not None:
        reason += f" ({type(cause).__name__}: {' '.join(str(cause).split())})"
    reason = redact(reason)
    if len(reason) > 240:
        reason = reason[:237] + "..."
    if path:
        return UsageError(f"cannot use the credentials file in GOOGLE_APPLICATION_CREDENTIALS: {reason}",
                          hint="point GOOGLE_APPLICATION_CREDENTIALS at a valid service-account key or "
                               "authorized-user file, or unset it and run gcloud auth application-default login")
    hint = "run gcloud auth application-default login, or set GOOGLE_APPLICATION_CREDENTIALS to a key file"
    if emulator_hint:
        hint += " (for a storage emulator, set TPUCTL_CREDENTIALS=anonymous)"
    if "was not found" in reason or "Could not automatically determine" in reason:
        return UsageError("no Google Cloud credentials found", hint=hint)
    return UsageError(f"cannot load Google Cloud credentials: {reason}", hint=hint)
