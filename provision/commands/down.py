"""``tpuctl down``: delete a cluster's TPU and VM, or every idle TPU with --idle."""

from __future__ import annotations

import click

from ._common import (
    acting_on,
    dry_run_option,
    emit_json,
    json_option,
    not_yet,
    open_provider,
    provider_options,
    resolve_target,
    say,
)
from .up import complete_cluster


@click.command("down")
@click.argument("name", required=False, shell_complete=complete_cluster)
@click.option("--keep-vm", is_flag=True, help="Delete the TPU only; keep the host VM.")
@click.option("--idle", is_flag=True, help="Delete every tpuctl TPU that is not training.")
@click.option("--idle-for", default="30m", show_default=True, metavar="DURATION",
              help="With --idle: a run silent this long counts as idle.")
@click.option("--zone", "-z", metavar="ZONE", help="Only this zone.")
@click.option("--all-zones", is_flag=True, help="With --idle: every zone of the project.")
@click.option("--timeout", default="15m", show_default=True, metavar="DURATION", help="How long to wait for deletions.")
@provider_options
@dry_run_option
@json_option
def command(name: str | None, keep_vm: bool, idle: bool, idle_for: str, zone: str | None, all_zones: bool,
            timeout: str, provider: str | None, project: str | None, dry_run: bool, as_json: bool) -> None:
    """Delete the cluster NAME (the bucket stays), or with --idle every idle TPU."""
    from .. import cluster, validate
    from ..errors import UsageError

    if name and idle:
        raise UsageError("give a cluster name or --idle, not both", hint="tpuctl down NAME, or tpuctl down --idle")
    if not name and not idle:
        raise UsageError("nothing to delete", hint="tpuctl down NAME, or tpuctl down --idle")
    if zone:
        validate.zone(zone)
    if zone and all_zones:
        raise UsageError("--zone and --all-zones both given", hint="choose one of them")
    idle_s = validate.duration(idle_for)
    wait_s = validate.duration(timeout)
    if idle:
        del idle_s
        not_yet("tpuctl down --idle")
    validate.cluster_name(name)
    target = resolve_target(provider, project, zone)
    acting_on(target, "down", zone=zone or "all")
    prov = open_provider(target)
    result = cluster.down(prov, name, zone=zone, keep_vm=keep_vm, dry_run=dry_run, timeout=wait_s, log=say)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.summary())
