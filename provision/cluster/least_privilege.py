"""``up --least-privilege``: the hosts run as an account tpuctl makes for the cluster, with only
``roles/storage.objectUser`` on the cluster's bucket, and without external IPs where a Cloud NAT
serves their subnetwork; ``down`` deletes that account (only one carrying tpuctl's marker).

The decisions are :mod:`provision.cluster.identity`'s; this module reads and writes through the
GCP provider's IAM and network reads (:mod:`provision.cloud.gcp_iam`) and the bucket's IAM
policy (:meth:`Bucket.grant_object_access`).

What the hosts do, and what that needs (docs/reliability.md, the roles table): read the run's
spec and wheel and write heartbeats, logs, exit records and checkpoints in the bucket
(``roles/storage.objectUser`` there); read their own metadata (the metadata server: no role).
Nothing else, unless the cluster asks the host VM to act on the TPU: ``--autodown`` (and a
detached supervisor) lists and deletes TPUs through the Cloud TPU API, which has no per-node IAM
(tpu.v2 ``nodes`` has no ``setIamPolicy``), so that needs a project-level role that tpuctl does
not grant (it would take ``resourcemanager.projects.setIamPolicy``): ``up`` prints the command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import CloudError, PartialFailure, TpuctlError, UsageError
from ..basics.validate import region_of
from ..cloud.base import ClusterSpec, Provider
from . import identity

Log = Callable[[str], None]
BUCKET_ROLE = "roles/storage.objectUser"


@dataclass
class Hosts:
    """What ``prepare`` decided and did: the spec the hosts are made with, and the lines it says."""

    spec: ClusterSpec
    email: str
    created: bool = False                   # this call created the account (rollback deletes it)
    would_create: bool = False              # a dry run: the account does not exist yet
    lines: list[str] = field(default_factory=list)


def _api(provider: Provider) -> Any:
    from ..cloud import gcp_iam

    api = gcp_iam.for_provider(provider)
    if api is None:
        raise UsageError(f"--least-privilege makes a Google Cloud service account; the {provider.name} provider "
                         "has none", hint="drop --least-privilege, or use --provider gcp")
    return api


def check(*, least_privilege: bool, service_account: str | None, bucket: str | None, provider: str) -> None:
    """Bad combinations, before anything is read or created."""
    if not least_privilege:
        return
    if service_account:
        raise UsageError("--least-privilege and --service-account both given",
                         hint="--least-privilege makes the hosts' account; drop one of them")
    if provider != "gcp":
        raise UsageError(f"--least-privilege makes a Google Cloud service account; the {provider} provider has none",
                         hint="drop --least-privilege, or use --provider gcp")
    if not bucket:
        raise UsageError("--least-privilege grants the hosts' account the cluster's bucket only, and names none",
                         hint="add --bucket gs://BUCKET (it must exist: tpuctl stage SRC gs://BUCKET --create-bucket)")


def prepare(provider: Provider, spec: ClusterSpec, *, target: Any, dry_run: bool, autodown: bool,
            log: Log, secrets: Sequence[tuple[str, str]] = ()) -> Hosts:
    """Make (or adopt) the cluster's account, grant it the bucket, decide the external IPs.
    ``secrets``: (channel, Secret Manager secret) of the cluster's notification channels, which the
    caller reads from the notify settings (a layer above this one)."""
    api = _api(provider)
    cluster = spec.name
    email = identity.email(cluster, provider.project)
    hosts = Hosts(spec=spec, email=email)
    account = api.get_account(email)
    if account is not None and not identity.ours(account, cluster):
        raise UsageError(f"service account {email} exists and tpuctl did not make it for cluster {cluster}",
                         hint=f"pass --service-account {email} to use it as it is, or pick another cluster name")
    bucket = spec.bucket
    if dry_run:
        hosts.would_create = account is None
        hosts.lines.append(f"hosts: would run as service account {email} "
                           + ("(exists, made by tpuctl)" if account else "(would be created)")
                           + f" with only {BUCKET_ROLE} on {bucket}")
    else:
        if account is None:
            account = _create(api, cluster, email)
            hosts.created = True
        email = str(account.get("email") or email)
        hosts.email = email
        try:
            changed = _grant(bucket, email, target)
        except TpuctlError:
            if hosts.created:
                rollback(provider, hosts, log=log)
            raise
        hosts.lines.append(f"hosts: run as service account {email} ("
                           + ("created" if hosts.created else "made by tpuctl earlier, adopted")
                           + f"), with only {BUCKET_ROLE} on {bucket}" + ("" if changed else " (already had it)"))
    hosts.lines += lacking(spec, email, provider.project, autodown=autodown, secrets=secrets)
    if spec.external_ips:
        decided = egress(api, spec)
        hosts.lines.append(decided.line)
        spec = dataclasses.replace(spec, external_ips=decided.external_ips)
    else:
        hosts.lines.append("hosts: no external IPs (--no-external-ips)")
    hosts.spec = dataclasses.replace(spec, service_account=email)
    return hosts


def _grant_hint(project: str, email: str, role: str) -> str:
    return f"gcloud projects add-iam-policy-binding {project} --member=serviceAccount:{email} --role={role}"


def lacking(spec: ClusterSpec, email: str, project: str, *, autodown: bool,
            secrets: Sequence[tuple[str, str]] = ()) -> list[str]:
    """One line for each thing the cluster's options will ask of the hosts that ``email`` (only
    the bucket's role) may not do, and the grant that lets it: said at ``up``, where the choice is
    made, not when a host first fails at it. tpuctl grants none of these itself: each is a
    project-level role (the Cloud TPU API has no per-TPU grant) or a grant on someone else's
    secret or bucket."""
    lines = []
    if autodown:
        lines.append(f"autodown: the host VM lists and deletes the cluster's TPU as {email}, which has no role "
                     f"for that: grant it roles/tpu.admin and roles/compute.viewer on project {project} "
                     f"(the Cloud TPU API has no per-TPU grant), e.g. {_grant_hint(project, email, 'roles/tpu.admin')}")
    if spec.arch.value == "node" and spec.machine_type is not None:
        lines.append(f"--arch node: the host VM reads the TPU node (its address, state, health) as {email}, which "
                     f"has no role for that: grant it roles/tpu.viewer on project {project}, e.g. "
                     f"{_grant_hint(project, email, 'roles/tpu.viewer')}")
    if spec.machine_type is not None:        # a detached supervisor runs on the host VM
        lines.append(f"train --detach: the supervisor on the host VM recreates a preempted TPU as {email}, which has "
                     f"no role for that: grant it roles/tpu.admin on project {project} before a detached run, e.g. "
                     f"{_grant_hint(project, email, 'roles/tpu.admin')}")
        lines += _notify_lines(secrets, email)
    lines.append(f"other buckets: the hosts read only {spec.bucket} as {email}; a job spec that reads another bucket "
                 f"(bert_dir, init_checkpoint, data elsewhere) needs roles/storage.objectViewer there, e.g. gcloud "
                 f"storage buckets add-iam-policy-binding gs://OTHER --member=serviceAccount:{email} "
                 f"--role=roles/storage.objectViewer")
    return lines


def _notify_lines(secrets: Sequence[tuple[str, str]], email: str) -> list[str]:
    """A line for each (channel, Secret Manager secret) of the cluster's notification channels:
    a supervisor on the host reads the secret as ``email``."""
    return [f"notify: channel {channel}'s secret {secret} is read by the supervisor on the host as {email}, which "
            f"has no role for that: grant it roles/secretmanager.secretAccessor on that secret, e.g. gcloud secrets "
            f"add-iam-policy-binding {secret} --member=serviceAccount:{email} "
            f"--role=roles/secretmanager.secretAccessor" for channel, secret in secrets]


def _create(api: Any, cluster: str, email: str) -> dict[str, Any]:
    try:
        return api.create_account(identity.account_id(cluster), identity.display_name(cluster),
                                  identity.marker(cluster))
    except CloudError as exc:
        if exc.kind != "exists":
            raise
    # made between our read and our create (another up of this cluster): adopt it if it is ours
    account = api.get_account(email)
    if account is None or not identity.ours(account, cluster):
        raise UsageError(f"service account {email} exists and tpuctl did not make it for cluster {cluster}",
                         hint=f"pass --service-account {email} to use it as it is, or pick another cluster name")
    return account


def _grant(bucket: str, email: str, target: Any) -> bool:
    from ..cloud.storage import open_bucket

    member = f"serviceAccount:{email}"
    try:
        return open_bucket(bucket, target).grant_object_access(member)
    except TpuctlError as exc:
        raise CloudError(f"granting {member} {BUCKET_ROLE} on {bucket} failed: {exc.one_line()}",
                         kind=getattr(exc, "kind", "unknown") or "unknown",
                         hint=f"grant it yourself (roles/storage.admin on the bucket sets its policy): gcloud storage "
                              f"buckets add-iam-policy-binding {bucket} --member={member} --role={BUCKET_ROLE}, "
                              f"then rerun") from None


def egress(api: Any, spec: ClusterSpec) -> identity.Egress:
    """Read the subnetworks and routers of every region the hosts may land in, and decide."""
    regions = list(dict.fromkeys(region_of(z) for z in spec.zones))
    subnets, nats = [], []
    for region in regions:
        subnets += [identity.subnet_of(s) for s in api.subnetworks(region, spec.network, spec.subnetwork)]
        for router in api.routers(region):
            nats += identity.nats_of(router)
    return identity.egress(spec.network, regions, subnets, nats)


def rollback(provider: Provider, hosts: Hosts, *, log: Log) -> None:
    """``up`` failed: the account this call created goes too."""
    if not hosts.created:
        return
    try:
        _api(provider).delete_account(hosts.email)
        log(f"deleted service account {hosts.email} (made by this up)")
    except TpuctlError as exc:
        log(f"could not delete service account {hosts.email}: {exc.one_line()}")


def made_account(provider: Provider, spec: ClusterSpec | None) -> str | None:
    """The account ``up --least-privilege`` made for this cluster, as its spec names it, or None."""
    if spec is None or not spec.service_account or getattr(provider, "name", None) != "gcp":
        return None
    mine = identity.email(spec.name, provider.project)
    return mine if spec.service_account == mine else None


def owned(provider: Provider, spec: ClusterSpec | None) -> list[str]:
    """What ``down`` would delete: the cluster's account, if tpuctl made it (its marker)."""
    email = made_account(provider, spec)
    if email is None:
        return []
    account = _api(provider).get_account(email)
    return [f"service account {email}"] if account is not None and identity.ours(account, spec.name) else []


def remove(provider: Provider, spec: ClusterSpec | None, *, log: Log) -> list[str]:
    """Delete the cluster's account if tpuctl made it for this cluster; never another one."""
    email = made_account(provider, spec)
    if email is None:
        return []
    assert spec is not None
    api = _api(provider)
    try:
        account = api.get_account(email)
        if account is None:
            return []
        if not identity.ours(account, spec.name):
            log(f"kept service account {email}: tpuctl did not make it for cluster {spec.name}")
            return []
        log(f"deleting service account {email}")
        return [f"service account {email}"] if api.delete_account(email) else []
    except TpuctlError as exc:
        raise PartialFailure(f"cluster {spec.name} is down, but deleting its service account {email} failed: "
                             f"{exc.one_line()}", remaining=[f"service account {email}"],
                             hint=f"rerun tpuctl down {spec.name}, or gcloud iam service-accounts delete {email}"
                             ) from None
