"""``tpuctl job run SPEC``: run a job spec directly on this machine (what the host runs)."""

from __future__ import annotations

import click

from ._common import not_yet, parse_sets


@click.group("job")
def command() -> None:
    """Run training jobs on this machine."""


@command.command("run")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a job spec value (repeatable).")
def run(spec: str, sets: tuple[str, ...]) -> None:
    """Run the job in SPEC here, on this machine's TPU, GPUs or CPU."""
    from pathlib import Path

    from ..errors import UsageError

    parse_sets(sets)
    if not Path(spec).is_file():
        raise UsageError(f"job spec {spec} not found", hint="pass the path of a job spec YAML file")
    not_yet("tpuctl job run")
