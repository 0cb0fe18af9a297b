"""The ``tpuctl`` command line.

Only click and the standard library are imported here and in ``provision.commands``: the cloud
client libraries load inside the commands that talk to a cloud, and TensorFlow never loads in
this process, so ``tpuctl --help`` stays instant.
"""

from __future__ import annotations

import os
import sys

import click

from . import __version__, usage
from .basics.errors import EXIT_FAILURE, EXIT_INTERRUPTED, TpuctlError
from .commands import (
    cost,
    data,
    down,
    estimate,
    job,
    logs,
    notify,
    simulate,
    stage,
    status,
    sweep,
    train,
    ui,
    up,
)
from .commands.common import begin_output, output_edge, report_error


class _OrderedGroup(click.Group):
    """Commands in the order of the workflow (up, status, stage, train, ...), not alphabetical."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_OrderedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tpuctl")
def cli() -> None:
    """Rent Cloud TPUs for any training program and keep the bill honest.

    TPUs bought three ways (spot or preemptible, flex-start, reserved or on demand) run your own
    program (job: command: JAX, PyTorch, any script), a Keras model (job: keras) or the built-in
    BERT jobs under a supervisor that resumes a preempted run from its last checkpoint; every TPU
    that is not training is deleted.

    \b
      tpuctl up lab --accelerator-type v5litepod-8 --zone us-west4-a --spot
      tpuctl train lab --job spec.yaml --workdir .     # spec.yaml: job: command, command: python train.py
      tpuctl train lab --job examples/mlp/spec.yaml --workdir examples/mlp   # job: keras
      tpuctl down --idle --idle-for 30m

    Without a GCP project the embedded local provider runs the same flow on this machine's CPU
    or GPU. Shell completion: eval "$(_TPUCTL_COMPLETE=bash_source tpuctl)".

    \b
    Example:
      tpuctl status --provider local
    """


for _module in (up, status, estimate, stage, data, train, sweep, logs, down, cost, notify, ui, simulate, job):
    cli.add_command(_module.command)
cli.add_command(train.supervise)
cli.add_command(train.agent)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: click for parsing, one-line errors and DESIGN.md's exit codes.

    The installed ``tpuctl`` script calls this with no argument, so ``argv`` falls back to
    ``sys.argv``; every path below must work both ways. Everything any command prints, its errors
    included, passes the output edge (:func:`provision.commands.common.output_edge`)."""
    with output_edge():
        return _main(sys.argv[1:] if argv is None else list(argv))


def _main(args: list[str]) -> int:
    try:
        if not args and not os.environ.get("_TPUCTL_COMPLETE"):
            # bare ``tpuctl``: the usage, as git and gcloud print it, and nothing is wrong
            click.echo(cli.get_help(click.Context(cli, info_name="tpuctl")))
            return 0
        words = args[:args.index("--")] if "--" in args else args
        begin_output(as_json="--json" in words)
        usage.check_detached_units(cli, args)
        # color=True: click strips no escape itself, the edge shows every one (output_edge)
        cli.main(args=args, prog_name="tpuctl", standalone_mode=False, color=True)
        return 0
    except click.exceptions.Abort:
        click.echo("tpuctl: aborted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:
        # a bare group (``tpuctl job``): its help on stdout, like bare ``tpuctl``
        click.echo(exc.ctx.get_help())
        return 0
    except click.ClickException as exc:
        message, hint = usage.explain(cli, exc, args)
        return _click_error(args, message, hint, exit_code=exc.exit_code)
    except TpuctlError as exc:
        return report_error(exc)
    except KeyboardInterrupt:
        click.echo("tpuctl: interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - the last resort: one scrubbed line (and traceback if asked)
        from .basics.redact import redact

        if os.environ.get("TPUCTL_DEBUG"):
            # the traceback quotes values (a URL with its password, a token in a message): scrubbed
            # like every other line tpuctl prints
            import traceback

            click.echo(redact("".join(traceback.format_exception(exc))).rstrip("\n"), err=True)
        click.echo(f"tpuctl: internal error: {redact(f'{type(exc).__name__}: {exc}')}; "
                   f"rerun with TPUCTL_DEBUG=1 for the traceback and report it", err=True)
        return EXIT_FAILURE


def _click_error(args: list[str], message: str, hint: str | None, exit_code: int = 2) -> int:
    """Click's parse errors in tpuctl's one form: ``tpuctl: error: <cause>; <fix>`` (and, with
    --json, the JSON error document), instead of click's multi-line usage block."""
    from .basics.errors import TpuctlError, UsageError

    message = " ".join(message.split()).rstrip(".")
    err: TpuctlError = UsageError(message, hint=hint) if exit_code == 2 else TpuctlError(message, hint=hint)
    err.exit_code = exit_code
    return report_error(err)
