"""``tpuctl logs RUN``: the job's log."""

from __future__ import annotations

import click

from ._common import not_yet, provider_options


@click.command("logs")
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows.")
@provider_options
def command(run: str, follow: bool, provider: str | None, project: str | None) -> None:
    """Print the log of RUN (a run id, or a cluster name for its latest run)."""
    from .. import validate

    validate.run_id(run)
    not_yet("tpuctl logs")
