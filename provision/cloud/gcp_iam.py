"""The IAM API's service accounts, and the network reads ``up --least-privilege`` decides from.

Translation only (the decisions are :mod:`provision.cluster.identity`'s). IAM v1 over REST, as
gcloud calls it: ``POST /v1/projects/P/serviceAccounts`` (``accountId`` and a ``serviceAccount``
with ``displayName`` and ``description``, the only fields a caller may set), ``GET`` and
``DELETE /v1/projects/P/serviceAccounts/EMAIL``. Every call goes through the GCP provider's
``_call``, so it is retried and classified as every other call; ``TPUCTL_IAM_API_ENDPOINT``
replaces ``https://iam.googleapis.com`` (:func:`provision.cloud.gcp_rest.iam_base`).

The network reads are Compute's: a subnetwork (its ``privateIpGoogleAccess``) and the region's
Cloud Routers (their ``nats``), both in ``roles/compute.networkViewer``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..basics.errors import NotFound
from .gcp_rest import iam_base

Json = dict[str, Any]


class HostIdentity:
    """Service accounts of one project, and the subnetworks and routers of its regions."""

    def __init__(self, provider: Any) -> None:
        self.project = provider.project
        self._call = provider._call
        self._pages = provider._pages
        self._gce = provider._gce
        self._iam = f"{iam_base()}/v1/projects/{provider.project}/serviceAccounts"

    # ---- service accounts -----------------------------------------------------------------------
    def get_account(self, email: str) -> Json | None:
        try:
            return self._call("iam.projects.serviceAccounts.get", "GET", f"{self._iam}/{quote(email, safe='@')}")
        except NotFound:
            return None

    def create_account(self, account_id: str, display_name: str, description: str) -> Json:
        body = {"accountId": account_id,
                "serviceAccount": {"displayName": display_name, "description": description}}
        return self._call("iam.projects.serviceAccounts.create", "POST", self._iam, body=body)

    def delete_account(self, email: str) -> bool:
        try:
            self._call("iam.projects.serviceAccounts.delete", "DELETE", f"{self._iam}/{quote(email, safe='@')}")
        except NotFound:
            return False
        return True

    # ---- the network the hosts sit on -----------------------------------------------------------
    def subnetworks(self, region: str, network: str, name: str | None) -> list[Json]:
        """``name`` (``--subnetwork``), else every subnetwork of ``network`` in ``region``."""
        if name:
            try:
                return [self._call("compute.subnetworks.get", "GET",
                                   f"{self._gce}/regions/{region}/subnetworks/{name}")]
            except NotFound:
                return []
        subs = self._pages("compute.subnetworks.list", f"{self._gce}/regions/{region}/subnetworks", "items")
        return [s for s in subs if str(s.get("network") or "").rstrip("/").rsplit("/", 1)[-1] == network]

    def routers(self, region: str) -> list[Json]:
        return list(self._pages("compute.routers.list", f"{self._gce}/regions/{region}/routers", "items"))


def for_provider(provider: Any) -> HostIdentity | None:
    """The GCP provider's IAM and network reads; None for a provider without them (local)."""
    if getattr(provider, "name", None) != "gcp" or not hasattr(provider, "_call"):
        return None
    return HostIdentity(provider)
