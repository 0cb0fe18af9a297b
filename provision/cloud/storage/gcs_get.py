"""Small Cloud Storage objects read by one plain GET each (run records, pointers, leases).

Why not google-cloud-storage's ``download_as_bytes``: a fleet's ``down --idle`` reads a few records
of every training cluster, and the library spends about 1.5-2 ms of Python on each small download
(a download object, a retry wrapper, trace spans, a background bucket look-up that feeds them, and
requests' per-call proxy lookup in the environment), several times what the bytes cost. Here one
urllib3 pool, authorised by google-auth's own urllib3 transport (tokens refreshed as the session
does), sends the JSON API's media GET (``/download/storage/v1/b/B/o/NAME?alt=media``) and checks the
bytes against the CRC32C Cloud Storage sends in ``x-goog-hash``, at about a third of the cost.

It behaves as the library's read did: the same endpoint (``STORAGE_EMULATOR_HOST``), the stored bytes
as they are (``Accept-Encoding: gzip``, nothing decoded), the library's retry policy for transient
answers (408, 429, 5xx) and dropped connections, the proxy and CA bundle the environment names for
requests, and the same errors (a missing object, a refusal, an unreachable endpoint).
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ...basics.errors import CloudError, UsageError
from .base import ObjectNotFound

RETRIABLE = frozenset({408, 429, 500, 502, 503, 504})
TIMEOUT_S = 60.0        # connect and read, as the library's default


class _Transient(Exception):
    """A transient answer, retried by the library's policy."""


@dataclass(frozen=True)
class Fetched:
    """What one GET brought: the bytes, and the CRC32C and generation Cloud Storage said they have."""

    data: bytes
    crc32c: str | None
    generation: int | None


class ObjectReader:
    """GETs of whole small objects over one connection pool (thread-safe; ``pool_size`` connections)."""

    def __init__(self, credentials: Any, endpoint: str, pool_size: int = 16):
        import urllib3
        from google.auth.transport.urllib3 import AuthorizedHttp

        self.endpoint = endpoint.rstrip("/")
        parts = urlsplit(self.endpoint)
        proxy = urllib.request.getproxies().get(parts.scheme)
        kwargs: dict[str, Any] = {"maxsize": max(pool_size, 4), "block": False,
                                  "timeout": urllib3.Timeout(connect=TIMEOUT_S, read=TIMEOUT_S), "retries": False}
        if parts.scheme == "https":
            kwargs["ca_certs"] = _ca_bundle()
        if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
            pool: Any = urllib3.ProxyManager(proxy, **kwargs)
        else:
            pool = urllib3.PoolManager(**kwargs)
        self.http = AuthorizedHttp(credentials, http=pool)

    def get(self, bucket: str, name: str, what: str) -> Fetched:
        """The object's bytes; :class:`ObjectNotFound` when it does not exist."""
        from google.api_core import retry as api_retry

        url = f"{self.endpoint}/download/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}?alt=media"
        policy = api_retry.Retry(predicate=_retriable, initial=1.0, maximum=60.0, multiplier=2.0, timeout=120.0)
        try:
            resp = policy(self._once)(url)
        except api_retry.RetryError as exc:
            from .gcs import unreachable

            raise unreachable(what, exc) from None
        except _Transient as exc:
            raise CloudError(f"{what}: {exc}", kind="transient") from None
        except Exception as exc:
            if _dropped(exc):
                from .gcs import unreachable

                raise unreachable(what, exc) from None
            raise
        status = resp.status
        if status == 200:
            return Fetched(resp.data, _crc32c(resp.headers.get("x-goog-hash")),
                           _int(resp.headers.get("x-goog-generation")))
        message = _message(resp.data)
        if status == 404:
            raise ObjectNotFound(f"{what}: not found ({message})")
        if status in (401, 403):
            raise CloudError(f"{what}: permission denied ({message})", kind="permission",
                             hint="check the credentials, and that they hold roles/storage.objectUser "
                                  "(or admin for bucket changes) on the bucket")
        raise CloudError(f"{what}: {status} {message}", kind="invalid" if 400 <= status < 500 else "transient")

    def _once(self, url: str) -> Any:
        import google.auth.exceptions as auth_exc

        try:
            resp = self.http.request("GET", url, headers={"Accept-Encoding": "gzip"}, decode_content=False,
                                     preload_content=True)
        except auth_exc.GoogleAuthError as exc:
            from .gcs import _short

            raise UsageError(f"Google Cloud credentials failed ({_short(exc)})",
                             hint="run gcloud auth application-default login") from None
        if resp.status in RETRIABLE:
            raise _Transient(f"{resp.status} {_message(resp.data)}")
        return resp


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, _Transient) or _dropped(exc)


def _dropped(exc: BaseException) -> bool:
    """A connection refused, reset or cut short, or a timeout: worth another try."""
    import urllib3.exceptions as u3

    return isinstance(exc, u3.ProtocolError | u3.NewConnectionError | u3.TimeoutError | u3.ProxyError
                      | ConnectionError)


def _crc32c(header: str | None) -> str | None:
    """The base64 CRC32C in ``x-goog-hash: crc32c=...,md5=...``."""
    for part in (header or "").split(","):
        key, _, value = part.strip().partition("=")
        if key == "crc32c" and value:
            return value
    return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _message(body: bytes) -> str:
    """Google's error message from a JSON error body, else the body's start (scrubbed)."""
    import json

    from ...basics.redact import redact

    try:
        text = str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode(errors="replace")
    return redact(" ".join(text.split()))[:300]


def _ca_bundle() -> str:
    """The CA bundle requests would use: REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, else certifi's."""
    import certifi

    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()
