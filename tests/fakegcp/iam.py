"""The IAM API's service accounts (v1 REST): create, get, list, delete.

Paths as Google serves them under ``https://iam.googleapis.com``: ``/v1/projects/{p}/serviceAccounts``
(POST creates, GET lists) and ``/v1/projects/{p}/serviceAccounts/{email or unique id}`` (GET,
DELETE). A create's body is checked against iam v1's discovery document
(``CreateServiceAccountRequest``: ``accountId`` and a ``serviceAccount`` of which only
``displayName`` and ``description`` may be set), an ``accountId`` against the rule that document
states (6-30 characters, ``[a-z]([-a-z0-9]*[a-z0-9])``). Answers as Google's:

- an id taken: 409 ALREADY_EXISTS, "Service account ID already exists within project
  projects/P." with a ``ResourceInfo`` detail naming the account (the body pasted in
  GoogleCloudPlatform/java-docs-samples#3605 and GoogleCloudPlatform/magic-modules#1463);
- an unknown account: 404 NOT_FOUND "Service account projects/P/serviceAccounts/KEY does not
  exist." (python-docs-samples#10243; a ``-`` project, which Google answers with 403, is not served);
- a bad id: 400 INVALID_ARGUMENT (the wording is unverified: the rule is the discovery document's).

An account's ``uniqueId`` is 21 digits and ``oauth2ClientId`` the same, as IAM shows them; the
``etag`` is a constant (deprecated, "Do not use"). Deleting an account frees its id at once (IAM
lets an id be reused after deletion; the new account has a new ``uniqueId``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from . import discovery
from .errors import ApiError
from .routing import Request, Router
from .store import Store

SERVICE = "iam.googleapis.com"
P = "/v1/projects/{project}/serviceAccounts"
DOC = "iam.v1"
ACCOUNT_ID = re.compile(r"^[a-z](?:[-a-z0-9]*[a-z0-9])$")


@dataclass
class ServiceAccount:
    project: str
    account_id: str
    unique_id: str
    display_name: str = ""
    description: str = ""

    @property
    def email(self) -> str:
        domain, _, name = self.project.rpartition(":")
        host = f"{name}.{domain}" if domain else self.project
        return f"{self.account_id}@{host}.iam.gserviceaccount.com"

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f"projects/{self.project}/serviceAccounts/{self.email}",
                               "projectId": self.project, "uniqueId": self.unique_id, "email": self.email,
                               "etag": "MDEwMjE5MjA=", "oauth2ClientId": self.unique_id}
        if self.display_name:
            out["displayName"] = self.display_name
        if self.description:
            out["description"] = self.description
        return out


def accounts(store: Store) -> dict[tuple[str, str], ServiceAccount]:
    return store.service_accounts


def find(store: Store, project: str, key: str) -> ServiceAccount:
    key = unquote(key)
    for (p, _), acc in accounts(store).items():
        if p == project and key in (acc.email, acc.unique_id):
            return acc
    raise ApiError(5, f"Service account projects/{project}/serviceAccounts/{key} does not exist.")


def create(store: Store, project: str, body: Any) -> ServiceAccount:
    discovery.check("iam.projects.serviceAccounts.create", body, doc=DOC)
    account_id = str(body.get("accountId") or "")
    if not (6 <= len(account_id) <= 30 and ACCOUNT_ID.match(account_id)):
        raise ApiError(3, f"Invalid account ID '{account_id}': it must be 6-30 characters long and match "
                          "the regular expression [a-z]([-a-z0-9]*[a-z0-9]).")
    if (project, account_id) in accounts(store):
        taken = accounts(store)[(project, account_id)]
        raise ApiError(6, f"Service account {account_id} already exists within project projects/{project}.",
                       details=[{"@type": "type.googleapis.com/google.rpc.ResourceInfo",
                                 "resourceName": f"projects/{project}/serviceAccounts/{taken.email}"}])
    given = body.get("serviceAccount") or {}
    acc = ServiceAccount(project, account_id, str(100_000_000_000_000_000_000 + int(store.new_id()) % 10**20),
                         display_name=str(given.get("displayName") or ""),
                         description=str(given.get("description") or ""))
    accounts(store)[(project, account_id)] = acc
    return acc


def register(router: Router, store_of: Any) -> None:
    def route(method: str, path: str, call: str, permission: str):
        return router.add(method, P + path, call, permission=permission, service=SERVICE, style="tpu")

    @route("POST", "", "iam.projects.serviceAccounts.create", "iam.serviceAccounts.create")
    def create_account(req: Request) -> Any:
        return create(store_of(), req.params["project"], req.json()).json()

    @route("GET", "", "iam.projects.serviceAccounts.list", "iam.serviceAccounts.list")
    def list_accounts(req: Request) -> Any:
        s = store_of()
        items = [a.json() for (p, _), a in sorted(accounts(s).items()) if p == req.params["project"]]
        return {"accounts": items} if items else {}

    @route("GET", "/{account}", "iam.projects.serviceAccounts.get", "iam.serviceAccounts.get")
    def get_account(req: Request) -> Any:
        return find(store_of(), req.params["project"], req.params["account"]).json()

    @route("DELETE", "/{account}", "iam.projects.serviceAccounts.delete", "iam.serviceAccounts.delete")
    def delete_account(req: Request) -> Any:
        s = store_of()
        acc = find(s, req.params["project"], req.params["account"])
        del accounts(s)[(acc.project, acc.account_id)]
        return {}


def register_admin(router: Router, cloud: Any) -> None:
    """``GET /_admin/service-accounts`` (every account) and ``POST`` (one made as ``create`` makes it)."""
    def route(method: str, path: str):
        return router.add(method, "/_admin" + path, "admin", service="admin", style="tpu")

    @route("GET", "/service-accounts")
    def all_accounts(req: Request) -> Any:
        return {"accounts": [a.json() for _, a in sorted(accounts(cloud.store).items())]}

    @route("POST", "/service-accounts")
    def add_account(req: Request) -> Any:
        b = dict(req.json())
        project = b.pop("project", None) or cloud.default_project
        return create(cloud.store, project, b).json()
