"""``tpuctl train CLUSTER --job SPEC``: a supervised run that survives preemption."""

from __future__ import annotations

import click

from ._common import dry_run_option, json_option, not_yet, parse_sets, provider_options


@click.command("train")
@click.argument("cluster")
@click.option("--job", "job_spec", required=True, metavar="SPEC", help="Job spec YAML (see templates/).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a job spec value (repeatable).")
@click.option("--detach", is_flag=True, help="Supervise from the always-on host VM; the laptop may disconnect.")
@click.option("--max-preemptions", type=click.IntRange(min=0), default=None,
              help="Give up after this many preemptions (default: unbounded).")
@click.option("--max-failures", type=click.IntRange(min=0), default=3, show_default=True,
              help="Give up after this many job errors (exit codes other than 0 and 42).")
@provider_options
@dry_run_option
@json_option
def command(cluster: str, job_spec: str, sets: tuple[str, ...], detach: bool, max_preemptions: int | None,
            max_failures: int, provider: str | None, project: str | None, dry_run: bool, as_json: bool) -> None:
    """Run a job spec on CLUSTER and recover it from preemptions."""
    from pathlib import Path

    from .. import validate
    from ..errors import UsageError

    validate.cluster_name(cluster)
    parse_sets(sets)
    if not Path(job_spec).is_file():
        raise UsageError(f"job spec {job_spec} not found", hint="pass --job templates/bert-finetune.yaml or another YAML file")
    not_yet("tpuctl train")
