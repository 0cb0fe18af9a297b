"""The wire to Google Cloud: JSON over HTTPS through google-auth's ``AuthorizedSession``.

tpuctl calls the Cloud TPU API (v2, and v1 for TPU Nodes) and the Compute Engine API on their
public REST surfaces, the way gcloud does (``https://tpu.googleapis.com/v2/...``,
``https://compute.googleapis.com/compute/v1/...``), with google-auth's requests transport
carrying the credentials and refreshing them. One way of calling each API, and no generated
client: google-cloud-compute's message module alone is ~2,300 proto-plus classes and took more
than a second to import on every command that touched Compute; the TPU clients and gRPC cost
another half second.

A failed call raises exactly what google-api-core raises for that HTTP response
(:func:`google.api_core.exceptions.from_http_response`): the class follows the HTTP status, and
the exception carries the body's ``message``, ``details`` (``ErrorInfo`` -> ``reason``,
``QuotaFailure``), Compute's ``errors[]`` and the ``response`` itself, so
:mod:`provision.cloud.gcp_errors` classifies it as it would an error from Google's clients.
google-api-core is imported only then: a command whose calls all succeed never pays for it.

Endpoints (DESIGN.md): ``TPUCTL_TPU_API_ENDPOINT`` and ``TPUCTL_COMPUTE_API_ENDPOINT`` replace
the base URLs (a private endpoint, or the fake cloud in tests); a Compute base without the
``/compute/v1`` path gets it appended, so both ``http://127.0.0.1:P`` and gcloud's override form
``http://127.0.0.1:P/compute/v1/`` work. ``TPUCTL_IAM_API_ENDPOINT`` replaces
``https://iam.googleapis.com`` (service accounts, for ``up --least-privilege``; paths ``/v1/...``),
``TPUCTL_MONITORING_API_ENDPOINT`` ``https://monitoring.googleapis.com`` (paths ``/v3/...``).
"""

from __future__ import annotations

import os
from typing import Any

TPU_ENDPOINT_ENV = "TPUCTL_TPU_API_ENDPOINT"
COMPUTE_ENDPOINT_ENV = "TPUCTL_COMPUTE_API_ENDPOINT"
IAM_ENDPOINT_ENV = "TPUCTL_IAM_API_ENDPOINT"
MONITORING_ENDPOINT_ENV = "TPUCTL_MONITORING_API_ENDPOINT"
TPU_ENDPOINT = "https://tpu.googleapis.com"
COMPUTE_ENDPOINT = "https://compute.googleapis.com"
IAM_ENDPOINT = "https://iam.googleapis.com"
MONITORING_ENDPOINT = "https://monitoring.googleapis.com"
COMPUTE_PATH = "/compute/v1"
CONNECT_TIMEOUT = 10.0


# Every Google API tpuctl calls (TPU, Compute, Monitoring) with one token: cloud-platform covers them
# all. A narrower scope (monitoring.read) yields a token the TPU API refuses with 403
# ACCESS_TOKEN_SCOPE_INSUFFICIENT; on a GCE VM the metadata server's token has the VM's scopes anyway.
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


def _base(value: str | None, default: str) -> str:
    url = (value or "").strip() or default
    if "://" not in url:
        url = f"https://{url}"     # an api_endpoint given as a bare host, as the client libraries take it
    return url.rstrip("/")


def tpu_base() -> str:
    """``https://tpu.googleapis.com`` or its override; API paths start with ``/v2/`` or ``/v1/``."""
    return _base(os.environ.get(TPU_ENDPOINT_ENV), TPU_ENDPOINT)


def compute_base() -> str:
    """``https://compute.googleapis.com/compute/v1`` or its override."""
    url = _base(os.environ.get(COMPUTE_ENDPOINT_ENV), COMPUTE_ENDPOINT)
    return url if url.endswith(COMPUTE_PATH) else url + COMPUTE_PATH


def iam_base() -> str:
    """``https://iam.googleapis.com`` or its override; API paths start with ``/v1/``."""
    return _base(os.environ.get(IAM_ENDPOINT_ENV), IAM_ENDPOINT)


def monitoring_base() -> str:
    """``https://monitoring.googleapis.com`` or its override; API paths start with ``/v3/``."""
    return _base(os.environ.get(MONITORING_ENDPOINT_ENV), MONITORING_ENDPOINT)


class BadResponse(Exception):
    """A 2xx answer that is not a JSON object (a proxy's page, a truncated body)."""


class Rest:
    """One authorized HTTP session shared by every call of a provider (thread-safe for requests)."""

    def __init__(self, credentials: Any) -> None:
        """``credentials`` None: anonymous (``TPUCTL_CREDENTIALS=anonymous``), a plain requests
        session. google-auth's transport imports requests, cryptography and its mTLS helpers
        (about a third of ``status NAME``'s time on a busy 2-core machine), all to attach a token
        that anonymous calls do not carry."""
        # requests keeps up to 10 connections per host, more than tpuctl's concurrent reads use
        if credentials is None:
            import requests

            self.session = requests.Session()
        else:
            from google.auth.transport.requests import AuthorizedSession

            self.session = AuthorizedSession(credentials)
        self.session.headers["User-Agent"] = "tpuctl"

    def call(self, method: str, url: str, *, params: dict[str, Any] | None = None,
             body: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """One request; the JSON answer, ``{}`` for an empty one; raises google-api-core's exception."""
        response = self.session.request(method, url, params=params, json=body,
                                        timeout=(CONNECT_TIMEOUT, timeout))
        if response.status_code >= 400:
            from google.api_core import exceptions

            raise exceptions.from_http_response(response)
        if not response.content:
            return {}
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BadResponse(f"{method} {url} answered HTTP {response.status_code} without a JSON object")
        return data
