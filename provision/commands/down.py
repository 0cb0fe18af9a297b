"""``tpuctl down``: delete a cluster's TPU and VM, or every idle TPU with --idle."""

from __future__ import annotations

import click

from .common import (
    acting_on,
    dry_run_option,
    emit_json,
    json_option,
    open_provider,
    provider_options,
    resolve_target,
    say,
)
from .up import complete_cluster

DEFAULT_IDLE_FOR = "30m"


@click.command("down", short_help="Delete a cluster, or every idle TPU (--idle)")
@click.argument("name", required=False, shell_complete=complete_cluster)
@click.option("--keep-vm", is_flag=True, help="Delete the TPU only; keep the host VM.")
@click.option("--idle", is_flag=True,
              help="Delete every tpuctl TPU that is not training (keeps host VMs); see docs/idle.md.")
@click.option("--idle-for", default=None, metavar="DURATION",
              help=f"With --idle: how long without a live run heartbeat counts as idle [default: {DEFAULT_IDLE_FOR}].")
@click.option("--min-duty-cycle", default=None, metavar="PCT",
              help="With --idle: also use the TPU's duty cycle from Cloud Monitoring (busy at or above PCT%).")
@click.option("--bucket", metavar="gs://BUCKET",
              help="With --idle: where to look for the runs of clusters this machine has no record of.")
@click.option("--zone", "-z", metavar="ZONE", help="Only this zone.")
@click.option("--all-zones", is_flag=True, help="With --idle: every zone of the project (the default).")
@click.option("--timeout", default="15m", show_default=True, metavar="DURATION", help="How long to wait for deletions.")
@provider_options
@dry_run_option
@json_option
def command(name: str | None, keep_vm: bool, idle: bool, idle_for: str | None, min_duty_cycle: str | None,
            bucket: str | None, zone: str | None, all_zones: bool, timeout: str, provider: str | None,
            project: str | None, dry_run: bool, as_json: bool) -> None:
    """Delete the cluster NAME (the bucket stays), or with --idle every idle TPU.

    \b
    NAME's TPU, host VM and queued resource go (a request still waiting holds quota and would
    become a billed TPU).

    \b
    --idle deletes every TPU labelled tpuctl-cluster that has no live run: no run, a finished or
    failed run, or a run whose progress record is older than --idle-for. PREEMPTED and TERMINATED
    TPUs go too (they hold quota) unless a live supervisor is recreating them, and so do FAILED and
    SUSPENDED queued resources (they hold quota and never provision). TPUs labelled
    tpuctl-keep=true are never touched; host VMs are kept. Cron:
      */10 * * * *  tpuctl down --idle --idle-for 30m --json >> ~/tpuctl-reaper.log 2>&1

    \b
    Example:
      tpuctl down --idle --idle-for 30m --dry-run
    """
    from .. import cluster
    from ..basics import validate
    from ..basics.errors import UsageError

    if name and idle:
        raise UsageError("give a cluster name or --idle, not both", hint="tpuctl down NAME, or tpuctl down --idle")
    if not name and not idle:
        raise UsageError("nothing to delete", hint="tpuctl down NAME, or tpuctl down --idle")
    if zone:
        validate.zone(zone)
    if zone and all_zones:
        raise UsageError("--zone and --all-zones both given", hint="choose one of them")
    wait_s = validate.duration_with_unit(timeout, "--timeout")
    if not idle:
        for flag, value in (("--idle-for", idle_for), ("--min-duty-cycle", min_duty_cycle), ("--bucket", bucket),
                            ("--all-zones", all_zones or None)):
            if value is not None:
                raise UsageError(f"{flag} only applies with --idle", hint=f"tpuctl down --idle {flag} ...")
        validate.cluster_name(name)
        target = resolve_target(provider, project, zone)
        acting_on(target, "down", zone=zone or "all")
        prov = open_provider(target)
        result = cluster.down(prov, name, zone=zone, keep_vm=keep_vm, dry_run=dry_run, timeout=wait_s, log=say)
        if as_json:
            emit_json(result.to_dict())
        else:
            click.echo(result.summary())
        return

    if keep_vm:
        raise UsageError("--keep-vm is implied by --idle (host VMs are always kept)", hint="drop --keep-vm")
    idle_s = validate.duration_with_unit(idle_for or DEFAULT_IDLE_FOR, "--idle-for")
    duty = parse_percent(min_duty_cycle) if min_duty_cycle is not None else None
    if bucket:
        validate.bucket_url(bucket)
    run_idle(provider, project, zone=zone, idle_s=idle_s, duty=duty, bucket=bucket, dry_run=dry_run,
             wait_s=wait_s, as_json=as_json)


def parse_percent(value: str) -> float:
    from ..basics.errors import UsageError

    text = str(value).strip().rstrip("%")
    try:
        pct = float(text)
    except ValueError:
        pct = -1.0
    if not 0 < pct <= 100:
        raise UsageError(f"invalid --min-duty-cycle {value!r}", hint="give a percentage above 0 and at most 100, "
                                                                     "such as --min-duty-cycle 5")
    return pct


def run_idle(provider: str | None, project: str | None, *, zone: str | None, idle_s: float, duty: float | None,
             bucket: str | None, dry_run: bool, wait_s: float, as_json: bool) -> None:
    from ..basics.errors import PartialFailure
    from ..basics.validate import format_duration
    from ..billing.reaper import reap

    target = resolve_target(provider, project, zone)
    acting_on(target, "down --idle", zone=zone or "all")
    say(f"idle means no live run heartbeat for {format_duration(idle_s)}"
        + (f", or a duty cycle under {duty:g}% for as long" if duty is not None else "")
        + ("; dry run: nothing is deleted" if dry_run else "; host VMs are kept"))
    prov = open_provider(target)
    result = reap(prov, target, idle_for=idle_s, zone=zone, bucket=bucket, dry_run=dry_run, min_duty_cycle=duty,
                  who="reaper", timeout=wait_s, log=say)
    if not dry_run and result.deleted:
        from ..notify.runtime import announce_reaped

        announce_reaped(result.deleted, target, say)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.summary())
    if result.failed or result.failed_requests:
        what = [f"{len(result.failed)} TPU(s)"] if result.failed else []
        what += [f"{len(result.failed_requests)} queued resource(s)"] if result.failed_requests else []
        raise PartialFailure(f"down --idle could not delete {' and '.join(what)}",
                             remaining=[f"TPU {r.node.name} in {r.node.zone} ({r.error})" for r in result.failed]
                             + [f"queued resource {r.request.name} in {r.request.zone} (holds quota: "
                                f"{r.request.quota()}; {r.error})" for r in result.failed_requests],
                             hint="rerun tpuctl down --idle")
