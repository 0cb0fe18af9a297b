"""``tpuctl status``: every cluster, its VM and TPU, its run, and what it costs per hour."""

from __future__ import annotations

import click

from ._common import acting_on, emit_json, json_option, open_provider, provider_options, resolve_target, table
from .up import complete_cluster


@click.command("status")
@click.argument("name", required=False, shell_complete=complete_cluster)
@click.option("--zone", "-z", metavar="ZONE", help="Only this zone (default: every zone).")
@provider_options
@json_option
def command(name: str | None, zone: str | None, provider: str | None, project: str | None, as_json: bool) -> None:
    """Show clusters: VM state, TPU type/state/health/CIDR, run, uptime and hourly price."""
    from .. import cluster, prices, validate

    if name:
        validate.cluster_name(name)
    if zone:
        validate.zone(zone)
    target = resolve_target(provider, project, zone)
    acting_on(target, "status", zone=zone or "all")
    prov = open_provider(target)
    views = cluster.status(prov, name=name, zone=zone)
    if name and not views:
        from ..errors import NotFound

        raise NotFound(f"no cluster named {name} ({target.describe()})", hint="run tpuctl status to list clusters")
    if as_json:
        emit_json({"ok": True, "provider": target.provider, "project": target.project,
                   "price_source": prices.describe_source(), "clusters": [v.to_dict() for v in views]})
        return
    if not views:
        click.echo("no clusters")
        return
    rows = [v.row() for v in views]
    click.echo(table(rows, cluster.ClusterView.HEADERS))
    click.echo(f"\nprices: {prices.describe_source()}")
