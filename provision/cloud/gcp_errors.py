"""Turn Google client-library exceptions and operation errors into :class:`Failure`.

The classification itself lives in :mod:`provision.cloud.failures`; this module only reads what the
libraries carry (gRPC status, HTTP status, ErrorInfo reason, QuotaFailure details, Compute
operation error codes) so that every caller sees the same kinds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..basics.redact import redact
from .failures import (
    QUEUED_NO_REASON,
    STATUS_CODES,
    Failure,
    Kind,
    Scope,
    classify,
    classify_body,
    classify_report,
    read_details,
)
from .failures import ErrorReport as _Report

# The google.rpc code an operation error of each kind is reported with (``OperationError.code``);
# the message keeps the words and codes that classify it again the same way.
_KIND_CODE = {Kind.STOCKOUT: 8, Kind.QUOTA: 8, Kind.ZONE_QUOTA: 8, Kind.GLOBAL_QUOTA: 8, Kind.RATE_LIMIT: 8,
              Kind.ZONE_UNAVAILABLE: 9, Kind.EXISTS: 6, Kind.NOT_FOUND: 5, Kind.PERMISSION: 7,
              Kind.API_DISABLED: 7, Kind.TRANSIENT: 14, Kind.INVALID: 3, Kind.CIDR_CONFLICT: 3}


def _scrubbed(f: Failure) -> Failure:
    return replace(f, message=redact(f.message), hint=redact(f.hint) if f.hint else f.hint)


def failure_of(exc: BaseException) -> Failure:
    """Classify any exception a client call can raise (REST or gRPC, client library or not)."""
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover - the libraries are base dependencies
        gexc = None
    if gexc is not None and isinstance(exc, gexc.GoogleAPICallError):
        return _scrubbed(_api_call_failure(exc))
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
            return _scrubbed(classify(code=exc.code().value[0], message=str(exc.details())))
    except ImportError:  # pragma: no cover
        pass
    return Failure(Kind.UNKNOWN, Scope.CLOUD, redact(f"{name}: {exc}"))


def retriable(exc: BaseException) -> bool:
    """Whether the call that raised ``exc`` should be retried with backoff (transient, rate limit)."""
    return failure_of(exc).retriable


def _api_call_failure(exc: Any) -> Failure:
    """A google-api-core exception: over REST its response's JSON body says everything (the class
    follows the HTTP status: a 409 is Conflict whatever the API meant); over gRPC the status code,
    message and unpacked details do."""
    http = exc.code if isinstance(exc.code, int) and exc.code >= 100 else None
    body = _response_json(exc)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return classify_body(body, http_status=http, where="call")
    code = None
    status = getattr(exc, "grpc_status_code", None)
    if status is not None:
        code = status.value[0]
    acc = read_details(_detail_dicts(getattr(exc, "details", None) or ()))
    reason = getattr(exc, "reason", None)
    reasons = tuple(acc["reasons"]) + ((reason,) if reason and reason not in acc["reasons"] else ())
    errors = [e for e in (getattr(exc, "errors", None) or ()) if isinstance(e, dict)]
    return classify_report(_Report(
        message=_strip_url(str(exc.message or exc)), code=code, http_status=http, reasons=reasons,
        metadata=dict(acc["metadata"]), legacy_reasons=tuple(str(e["reason"]) for e in errors if e.get("reason")),
        violations=tuple(acc["violations"]), retry_after=acc["retry_after"],
        zones_available=tuple(acc["zones_available"]), texts=tuple(acc["texts"]), where="call"))


def _response_json(exc: Any) -> Any:
    response = getattr(exc, "response", None)
    if response is None or not hasattr(response, "json"):
        return None
    try:
        return response.json()
    except Exception:  # noqa: BLE001 - not JSON: fall back to the exception's fields
        return None


def _detail_dicts(details: Any) -> list[dict[str, Any]]:
    """Details as JSON dicts with "@type": REST gives dicts already, gRPC protobuf messages."""
    out = []
    for d in details:
        if isinstance(d, dict):
            out.append(d)
            continue
        descriptor = getattr(d, "DESCRIPTOR", None)
        if descriptor is None:
            continue
        as_dict = _message_dict(d)
        if as_dict is not None:
            as_dict["@type"] = f"type.googleapis.com/{descriptor.full_name}"
            out.append(as_dict)
    return out


def _message_dict(message: Any) -> dict[str, Any] | None:
    try:
        from google.protobuf import json_format

        return json_format.MessageToDict(message)
    except Exception:  # noqa: BLE001 - an unknown detail says nothing we use
        return None


def _strip_url(message: str) -> str:
    """REST errors start with "POST http://...: "; the URL says nothing the user needs."""
    if message.startswith(("GET ", "POST ", "PUT ", "PATCH ", "DELETE ")) and ": " in message:
        return message.split(": ", 1)[1]
    return message


def is_stale_fingerprint(exc: BaseException) -> bool:
    return "fingerprint" in str(getattr(exc, "message", exc)).lower()


def compute_operation_failure(operation: Any) -> tuple[int, str]:
    """(google.rpc code, message) for a failed Compute Engine operation.

    Takes the operation as JSON (``{"error": {"errors": [...]}, "httpErrorStatusCode": ...}``), its
    ``error`` alone (``{"errors": [...]}``), or the client library's objects. The message keeps the
    error codes, the texts and the zones ``errorDetails`` says have capacity, so that
    ``classify(code=..., message=...)`` reads it as :func:`classify_body` reads the whole operation.
    """
    op = _as_dict(operation)
    if "errors" in op and "error" not in op:
        op = {"error": op}
    errors = [e for e in ((op.get("error") or {}).get("errors") or []) if isinstance(e, dict)]
    http = op.get("httpErrorStatusCode")
    if not errors:
        if http:
            f = classify_body({"error": {"code": http, "message": str(op.get("httpErrorMessage") or "")}})
            return _KIND_CODE.get(f.kind, 2), redact(
                f"operation failed: HTTP {http} {op.get('httpErrorMessage') or ''}".strip())
        return 2, "operation failed without details"
    f = classify_body(op, where="operation")
    parts = []
    for e in errors:
        code_name = str(e.get("code") or "")
        text = str(e.get("message") or code_name)
        parts.append(f"{code_name}: {text}" if code_name and not text.startswith(code_name) else text)
        for d in e.get("errorDetails") or ():
            loc = (d.get("localizedMessage") or {}).get("message") if isinstance(d, dict) else None
            if loc and loc not in text:
                parts.append(str(loc))
    message = " ".join(parts)
    if f.zones_available:
        message += f" (zones available: {', '.join(f.zones_available)})"
    code = _KIND_CODE.get(f.kind)
    if code is None:
        code = STATUS_CODES.get(str(op.get("httpErrorMessage") or ""), 0) or _HTTP_CODES.get(http, 2)
    return code, redact(message)


def queued_failure(name: str, state: Any) -> tuple[int, str]:
    """(google.rpc code, message) for a queued resource that ended FAILED or SUSPENDED.

    ``state`` is its ``state`` (QueuedResourceState as JSON). A FAILED request "could not be
    completed ... a late-discovered problem with the request itself, or ... unavailability of
    resources within the constraints of the request" (QueuedResourceState.State, TPU API v2): its
    ``failedData.error`` message decides by its words (stockout, quota, zone), with code 9 for the
    rest (asking again as it stands does not help: its valid-until may have passed). Without an
    error Google said not why; the message says so in the words :data:`failures.QUEUED_NO_REASON`
    reads back, never a rate limit (nothing was throttled).
    """
    state = state if isinstance(state, dict) else {}
    label = str(state.get("state") or "FAILED")
    data = state.get("failedData") if isinstance(state.get("failedData"), dict) else {}
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    message = str(error.get("message") or "").strip()
    if label == "SUSPENDED":
        return 10, redact(message or f"queued resource {name} was SUSPENDED (its TPUs were deleted)")
    if not message:
        code = error.get("code")
        said = f" (code {code})" if isinstance(code, int) and code else ""
        return 2, f"queued resource {name} {QUEUED_NO_REASON}{said}"
    return 9, redact(message)


def _as_dict(obj: Any) -> dict[str, Any]:
    """A Compute operation or error as JSON, from a dict, a proto-plus message or a protobuf."""
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(type(obj), "to_dict", None)
    if callable(to_dict):
        try:
            return to_dict(obj, preserving_proto_field_name=False)
        except TypeError:
            return to_dict(obj)
    if getattr(obj, "DESCRIPTOR", None) is not None:
        from google.protobuf import json_format

        return json_format.MessageToDict(obj)
    errors = [{"code": getattr(e, "code", ""), "message": getattr(e, "message", "")}
              for e in (getattr(obj, "errors", None) or [])]
    return {"error": {"errors": errors}}


# HTTP status of a failed Compute operation -> google.rpc code, for errors no kind explains
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
