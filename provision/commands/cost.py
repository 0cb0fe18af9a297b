"""``tpuctl cost``: hours by state and what they cost at list price."""

from __future__ import annotations

import click

from ._common import json_option, not_yet, provider_options


@click.command("cost")
@click.argument("target", required=False)
@provider_options
@json_option
def command(target: str | None, provider: str | None, project: str | None, as_json: bool) -> None:
    """Hours and cost of a cluster or run: training, idle, and waiting after preemption."""
    from .. import validate

    if target:
        validate.run_id(target)
    not_yet("tpuctl cost")
