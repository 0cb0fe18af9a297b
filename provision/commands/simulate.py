"""``tpuctl simulate``: rehearse failures (preemption) before they happen on a bill."""

from __future__ import annotations

import click

from .common import (
    acting_on,
    emit_json,
    json_option,
    open_provider,
    provider_options,
    resolve_target,
)
from .up import complete_cluster


@click.group("simulate", short_help="Rehearse failures as the cloud would")
def command() -> None:
    """Rehearse failures on the local provider or the fake cloud.

    \b
    Example:
      tpuctl simulate preempt bert-lab
    """


@command.command("preempt", short_help="Preempt CLUSTER's TPU now, killing its job")
@click.argument("cluster", shell_complete=complete_cluster)
@provider_options
@json_option
def preempt(cluster: str, provider: str | None, project: str | None, as_json: bool) -> None:
    """Preempt CLUSTER's TPU now: it goes PREEMPTED and its job is killed without warning.

    \b
    Example:
      tpuctl simulate preempt bert-lab
    """
    from .. import cluster as clusters
    from ..basics import validate

    validate.cluster_name(cluster)
    target = resolve_target(provider, project)
    acting_on(target, "simulate preempt", zone="all")
    prov = open_provider(target)
    node = clusters.preempt(prov, cluster)
    if as_json:
        emit_json({"ok": True, "cluster": cluster, "tpu": node.to_dict()})
    else:
        click.echo(f"TPU {node.name} in {node.zone} is now {node.state.value}")
