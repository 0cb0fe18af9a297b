"""``tpuctl job run SPEC``: run a job spec directly on this machine (what the host runs).

The spec is checked here first (``jobs.spec`` needs only PyYAML), so a bad key or a missing
file is a one-line usage error with exit code 2. Then this process *becomes* the job with
``os.execv(sys.executable, [..., "-m", "jobs", "run", ...])``: same pid, same signals, same exit
code for the supervisor, and TensorFlow is only ever imported by the job, never by ``provision``.
"""

from __future__ import annotations

import click

from .common import parse_sets


@click.group("job", short_help="Run training jobs on this machine")
def command() -> None:
    """Run training jobs on this machine.

    The example fine-tunes the tiny BERT that python -m jobs.bert.tiny .demo/tiny makes (the README tour).

    \b
    Example:
      tpuctl job run templates/bert-finetune-tiny.yaml --set bert_dir=.demo/tiny --set train_file=.demo/tiny/train.tsv --set dev_file=.demo/tiny/dev.tsv --set model_dir=.demo/runs/finetune
    """


class _SpecPath(click.Path):
    """A file path (completed as one by shells); a NUL byte is a usage error, not a crash in os.stat."""

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, str) and "\x00" in value:
            self.fail("a path cannot contain a NUL byte", param, ctx)
        return super().convert(value, param, ctx)


@command.command("run", short_help="Run the job in SPEC on this machine's TPU, GPUs or CPU")
@click.argument("spec", type=_SpecPath(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a job spec value (repeatable).")
@click.option("--dry-run", is_flag=True, help="Check the spec and print the command that would run; run nothing.")
def run(spec: str, sets: tuple[str, ...], dry_run: bool) -> None:
    """Run the job in SPEC here, on this machine's TPU, GPUs or CPU.

    Exit code: 0 finished, 42 preempted (retry from the last checkpoint), 2 bad spec,
    anything else a job error. See docs/jobs.md for the spec keys. The example fine-tunes
    the tiny BERT that python -m jobs.bert.tiny .demo/tiny makes (the README tour).

    \b
    Example:
      tpuctl job run templates/bert-finetune-tiny.yaml --set bert_dir=.demo/tiny --set train_file=.demo/tiny/train.tsv --set dev_file=.demo/tiny/dev.tsv --set model_dir=.demo/runs/finetune
    """
    import os
    import sys

    from ..basics.errors import UsageError
    from ..basics.templates import spec_path

    pairs = parse_sets(sets)
    spec = spec_path(spec)
    try:
        from jobs.spec import SpecError, load
    except ImportError as exc:  # pragma: no cover - jobs ships in the same distribution
        raise UsageError(f"the job side is not installed ({exc})",
                         hint="install tpuctl with its train extra: pip install 'tpuctl[train]'") from None
    from jobs.usercode import search_path

    backend = None
    try:  # and a job: keras module, read as the job will find it (beside the spec, here, PYTHONPATH)
        loaded = load(spec, pairs)
        loaded.check_code(search_path(spec))
        if getattr(loaded, "job", None) != "command":     # the Keras backend it gets here (jobs.spec.backends)
            from jobs.spec.backends import for_job

            backend = for_job(loaded.backend, os.environ)
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    argv = [sys.executable, "-m", "jobs", "run", spec]
    for key, value in pairs:
        argv += ["--set", f"{key}={value}"]
    if dry_run:
        import shlex

        click.echo(f"spec {spec} is valid; would run: {shlex.join(argv)}", err=True)
        if backend is not None:
            click.echo(backend.line(), err=True)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
