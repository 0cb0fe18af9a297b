"""``tpuctl up NAME``: a host VM and a (preemptible) TPU, created concurrently, idempotently."""

from __future__ import annotations

import click

from .common import (
    DEFAULT_ACCOUNT_NOTE,
    acting_on,
    dry_run_option,
    emit_json,
    json_option,
    open_provider,
    provider_options,
    resolve_target,
    say,
)

# what may go with NAME alone for up to make the cluster again as it was (none of them shapes it)
_NOT_SHAPING = frozenset({"name", "timeout", "keep_on_failure", "provider", "project", "dry_run", "as_json"})


def _saved_spec(name: str, target):
    """The cluster's spec as its last ``up`` on this machine saved it, when ``up NAME`` was given
    nothing that shapes a cluster: so ``up NAME`` brings a preempted (or deleted) TPU back with
    the same type, zone, capacity, API and host. None otherwise (the options decide, as always)."""
    from click.core import ParameterSource

    from ..cluster.cache import saved_spec

    ctx = click.get_current_context()
    given = {p for p in ctx.params if ctx.get_parameter_source(p) not in (ParameterSource.DEFAULT, None)}
    if given - _NOT_SHAPING:
        return None
    return saved_spec(target.provider, target.project, name)


def complete_cluster(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    from ..cluster import cached_names

    return [click.shell_completion.CompletionItem(n) for n in cached_names() if n.startswith(incomplete)]


@click.command("up", short_help="Create a cluster (host VM + TPU), or adopt what exists")
@click.argument("name", shell_complete=complete_cluster)
@click.option("--zone", "-z", "zone", metavar="ZONE[,ZONE...]",
              help="Zone, or zones in failover order (default: TPUCTL_ZONE, config, gcloud; local: us-central1-b).")
@click.option("--accelerator-type", "-a", default="v2-8", show_default=True, metavar="TYPE[,TYPE...]",
              help="TPU type: v2-8, v3-8, v4-8, v5litepod-8, v5p-8, v6e-8, tpu7x-8, or a pod slice; several types that "
                   "would all do are tried cheapest first per peak bf16 FLOP/s in each zone.")
@click.option("--in-order", is_flag=True,
              help="With several --accelerator-type: try them in the order given, not cheapest first.")
@click.option("--arch", type=click.Choice(["vm", "node"]), default="vm", show_default=True,
              help="TPU VM (v2 API) or TPU Node (v1 API, v2/v3 only, with a host VM; Google refuses new "
                   "Nodes to projects without Node access).")
@click.option("--api", "api", type=click.Choice(["auto", "tpu", "compute"]), default="auto", show_default=True,
              help="Which Google API makes the TPU: compute (Compute Engine: an instance, or a MIG with a workload "
                   "policy for a slice), tpu (the Cloud TPU API), or auto: Compute Engine where the zone lists the "
                   "generation's machine type (v5p, v6e, TPU7x), else the Cloud TPU API.")
@click.option("--preemptible", is_flag=True, help="Preemptible TPU (about 30% of the on-demand price).")
@click.option("--spot", is_flag=True, help="Spot TPU VM.")
@click.option("--flex-start", "flex_start", metavar="DURATION",
              help="Compute Engine flex-start: a request that waits for capacity, then runs DURATION (10m to 7d).")
@click.option("--reservation", metavar="NAME", help="Use this Compute Engine reservation (RESERVATION_BOUND).")
@click.option("--capacity", "capacity", metavar="KIND[,KIND...]",
              help="Capacities to try in order, like zones: spot, flex-start, reservation, on-demand "
                   "(e.g. spot,flex-start,on-demand).")
@click.option("--machine-type", default="auto", show_default=True,
              help="Host VM machine type; auto: the first of e2-standard-2, n2-standard-2, n1-standard-2 (then "
                   "the 4- and 8-vCPU shapes) that the zone offers.")
@click.option("--no-vm", is_flag=True, help="No host VM (TPU VM architecture only).")
@click.option("--runtime-version", metavar="IMAGE",
              help="TPU VM runtime image, e.g. tpu-vm-tf-2.18.0-pjrt-v5e-and-v6 (default: the newest TensorFlow "
                   "image for the generation that the zone offers and the job side supports).")
@click.option("--tf-version", metavar="VERSION",
              help="TensorFlow version: of a TPU Node (e.g. 2.12.0), or of the TPU VM image tpuctl picks "
                   "(e.g. 2.17).")
@click.option("--cidr", metavar="BLOCK", help="TPU Node IP range (default: the first free block).")
@click.option("--network", default="default", show_default=True, help="VPC network.")
@click.option("--subnetwork", default=None, help="Subnetwork (TPU VM and host VM).")
@click.option("--bucket", metavar="gs://BUCKET", help="Bucket for checkpoints and runs.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Label every resource of the cluster (repeatable); tpuctl-keep=true protects from reaping.")
@click.option("--queued", is_flag=True,
              help="Ask through a queued resource (TPU VM): it waits for capacity instead of failing on a "
                   "stockout; --preemptible then asks for the spot tier, as gcloud does.")
@click.option("--valid-until", metavar="DURATION", help="With --queued: give up if not granted within DURATION.")
@click.option("--no-external-ips", is_flag=True,
              help="No external IPs on the TPU VM and the host VM (private networks: needs Private Google "
                   "Access, and Cloud NAT for pip).")
@click.option("--service-account", metavar="EMAIL", help="Service account of the host VM and TPU VM.")
@click.option("--least-privilege", is_flag=True,
              help="Run the hosts as an account tpuctl makes for this cluster (tpuctl-NAME) with only "
                   "roles/storage.objectUser on --bucket, and without external IPs where a Cloud NAT serves "
                   "their subnetwork; down deletes the account.")
@click.option("--create-firewall-rule", is_flag=True,
              help="Multi-host TPU VM slice: if the network's firewall keeps the workers from reaching "
                   "each other, create the rule that lets them (down deletes it).")
@click.option("--autodown", metavar="DURATION", help="The host VM deletes the TPU once idle this long (keeps itself).")
@click.option("--keep-on-failure", is_flag=True, help="Keep what was created if up fails halfway.")
@click.option("--timeout", default="30m", show_default=True, metavar="DURATION", help="How long to wait for READY.")
@provider_options
@dry_run_option
@json_option
def command(name: str, zone: str | None, accelerator_type: str, in_order: bool, arch: str, api: str,
            preemptible: bool, spot: bool, flex_start: str | None, reservation: str | None, capacity: str | None,
            machine_type: str, no_vm: bool, runtime_version: str | None, tf_version: str | None,
            cidr: str | None, network: str, subnetwork: str | None, bucket: str | None,
            labels: tuple[str, ...], queued: bool, valid_until: str | None, no_external_ips: bool,
            service_account: str | None, least_privilege: bool, create_firewall_rule: bool, autodown: str | None,
            keep_on_failure: bool, timeout: str,
            provider: str | None, project: str | None, dry_run: bool, as_json: bool) -> None:
    """Create the cluster NAME: a host VM and a TPU, or adopt what already exists.

    \b
    Example:
      tpuctl up bert-lab --zone us-central1-b --accelerator-type v2-8 --preemptible
    """
    from .. import cluster
    from ..basics import validate
    from ..basics.errors import UsageError
    from ..cloud.base import ClusterSpec

    validate.cluster_name(name)
    user_labels = validate.labels(labels)
    wait_s = validate.duration(timeout)
    valid_s = validate.duration(valid_until) if valid_until else None
    autodown_s = validate.duration_with_unit(autodown, "--autodown") if autodown else None
    if bucket:
        bucket = str(validate.bucket_url(bucket))
    if runtime_version and arch == "node":
        raise UsageError("--runtime-version is for TPU VMs", hint="use --tf-version with --arch node")
    if tf_version and runtime_version:
        raise UsageError("--tf-version and --runtime-version both given",
                         hint="name the image with --runtime-version, or its TensorFlow with --tf-version")
    if autodown_s is not None and no_vm:
        raise UsageError("--autodown needs the host VM that enforces it",
                         hint="drop --no-vm, or run tpuctl down --idle from cron instead (see docs/idle.md)")
    if no_external_ips and arch == "node" and no_vm:
        raise UsageError("--no-external-ips with --arch node applies to the host VM",
                         hint="TPU Nodes have no external IPs of their own; drop --no-vm or the flag")
    target = resolve_target(provider, project, zone.split(",")[0] if zone else None)
    from ..cluster import least_privilege as lp

    lp.check(least_privilege=least_privilege, service_account=service_account, bucket=bucket,
             provider=target.provider)
    saved = _saved_spec(name, target)     # NAME alone: the cluster again, as its up made it
    if saved is not None:
        zones = saved.zones
    else:
        zones = validate.zones(zone) if zone else validate.zones(target.zone or cluster.default_zone(target))
    types = validate.accelerator_types(accelerator_type)
    order, flex_s = _capacity(capacity, spot=spot or preemptible, flex_start=flex_start, reservation=reservation)
    if in_order and len(types) < 2:
        raise UsageError("--in-order orders several accelerator types",
                         hint="list them, e.g. --accelerator-type v5litepod-8,v6e-8 --in-order, or drop --in-order")
    spec = ClusterSpec(
        name=name, accelerator_type=types[0], accelerator_types=types, in_order=in_order, zones=zones,
        provider=target.provider,
        project=target.project, arch=arch, preemptible=preemptible, spot=spot,
        machine_type=None if no_vm else machine_type, runtime_version=runtime_version,
        tensorflow_version=tf_version, cidr=cidr, network=network, subnetwork=subnetwork,
        bucket=bucket, labels=user_labels, queued=queued, valid_until_seconds=valid_s,
        external_ips=not no_external_ips, service_account=service_account, autodown_seconds=autodown_s,
        api=api, capacity=order, flex_seconds=flex_s, reservation=reservation,
    )
    if saved is not None:
        spec = saved
        say(f"up {name}: as its up made it (this machine's cluster cache): {saved.accelerator_type} in "
            f"{saved.zone}, {saved.capacities[0].value}"
            + (", Compute Engine" if saved.api == "compute" else ""))
    acting_on(target, "up", zone=",".join(zones))
    if target.provider == "local":
        from ..runs.executors import private_slice_network

        for t in types:           # an emulated slice: a network of its own, or the user's explicit opt-in
            private_slice_network(t)
    runs_as = _runs_as(no_vm=spec.machine_type is None, arch=spec.arch.value)   # the spec: NAME alone is the saved one
    if target.provider == "gcp" and not spec.service_account and not least_privilege and not dry_run and runs_as:
        say(DEFAULT_ACCOUNT_NOTE.format(what=runs_as))
    prov = open_provider(target)
    grant = target.provider == "gcp" and arch == "node" and bool(bucket)
    if grant or (target.provider == "gcp" and bucket and not dry_run):
        _check_bucket(bucket, target)      # before anything is created
    if bucket and not dry_run and hasattr(prov, "stage_startup"):
        prov.stage_startup(bucket)         # what the hosts' bootstrap fetches, before their metadata names the bucket
    firewall_note = _firewall(prov, spec, create=create_firewall_rule, dry_run=dry_run)
    hosts = None
    try:
        if least_privilege:     # the hosts' account and external IPs, once every check has passed
            from ..notify.runtime import secret_manager_secrets

            hosts = lp.prepare(prov, spec, target=target, dry_run=dry_run, autodown=autodown_s is not None, log=say,
                               secrets=secret_manager_secrets(spec.name))
            spec = hosts.spec
            if not dry_run:
                for line in hosts.lines:
                    say(line)
        result = cluster.up(prov, spec, dry_run=dry_run, keep_on_failure=keep_on_failure, timeout=wait_s, log=say)
    except BaseException:
        if hosts is not None and hosts.created and not dry_run:
            if keep_on_failure:
                say(f"kept: service account {hosts.email}")
            else:
                lp.rollback(prov, hosts, log=say)
        if firewall_note and not dry_run:
            from ..cluster import pod_network

            if keep_on_failure:
                say(f"kept: {firewall_note}")
            else:
                pod_network.remove(prov, spec)     # up rolled back what it made: the rule goes too
        raise
    if firewall_note:
        result.notes.append(firewall_note)
    if hosts is not None:
        if hosts.created:
            result.created.append(f"service account {hosts.email}")
        elif hosts.would_create:
            result.planned.append(f"service account {hosts.email}")
        result.notes.extend(hosts.lines)
    if spec.autodown_seconds and not dry_run:
        from ..host.autodown import start_autodown

        result.notes.append(start_autodown(prov, spec, result.vm,
                                           created_vm=any(c.startswith("VM ") for c in result.created)))
    if grant and not dry_run:
        _grant_tpu_access(prov, result, bucket, target)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.summary())


def _runs_as(*, no_vm: bool, arch: str) -> str:
    """What --service-account applies to in this cluster: its host VM (none with --no-vm) and a TPU
    VM (a TPU Node runs as Google's Cloud TPU service agent)."""
    parts = ([] if no_vm else ["the host VM"]) + (["the TPU VM"] if arch == "vm" else [])
    return " and ".join(parts)


def _capacity(listed: str | None, *, spot: bool, flex_start: str | None, reservation: str | None
              ) -> tuple[tuple[str, ...], float | None]:
    """The capacity order (``--capacity``, or the one flag given) and the flex-start duration."""
    from ..basics import validate
    from ..basics.errors import UsageError
    from ..cloud import capacity as capacities

    flex_s = validate.duration(flex_start) if flex_start else None
    if listed:
        order = tuple(c.value for c in capacities.parse(listed))
        if flex_start and "flex-start" not in order:
            raise UsageError("--flex-start without flex-start in --capacity", hint="list flex-start in --capacity")
        if reservation and "reservation" not in order:
            raise UsageError("--reservation without reservation in --capacity", hint="list reservation in --capacity")
        return order, flex_s
    flags = [f for f, on in (("--spot/--preemptible", spot), ("--flex-start", flex_start),
                             ("--reservation", reservation)) if on]
    if len(flags) > 1:
        raise UsageError(f"{' and '.join(flags)} both given",
                         hint="choose one, or try them in order with --capacity, e.g. --capacity spot,flex-start")
    return (("flex-start",) if flex_start else ("reservation",) if reservation else ()), flex_s


def _firewall(prov, spec, *, create: bool, dry_run: bool) -> str | None:
    """The workers of a pod slice must reach each other (provision/cluster/pod_network.py):
    checked before anything is created."""
    from ..cluster import pod_network

    return pod_network.ensure(prov, spec, create=create, dry_run=dry_run, log=say)


def _check_bucket(url: str, target) -> None:
    from ..basics.errors import UsageError
    from ..cloud.storage import open_bucket

    if not open_bucket(url, target).exists():
        raise UsageError(f"bucket {url} does not exist",
                         hint=f"create it first (tpuctl stage SRC {url} --create-bucket), or drop --bucket")


def _grant_tpu_access(prov, result, url: str, target) -> None:
    """A TPU Node reads and writes checkpoints as the Cloud TPU service agent: give it this bucket only."""
    from ..basics.errors import PartialFailure, TpuctlError
    from ..cloud.storage import OBJECT_ROLE, open_bucket

    member = "serviceAccount:?"
    try:
        member = f"serviceAccount:{prov.tpu_service_agent(result.zone)}"
        changed = open_bucket(url, target).grant_object_access(member)
    except TpuctlError as exc:
        raise PartialFailure(
            f"cluster {result.spec.name} is up, but granting the TPU service agent access to {url} failed: "
            f"{exc.one_line()}",
            hint=f"grant it yourself: gcloud storage buckets add-iam-policy-binding {url} --member={member} "
                 f"--role={OBJECT_ROLE}") from None
    result.notes.append(f"{member} has {OBJECT_ROLE} on {url}" + ("" if changed else " (already had)"))
