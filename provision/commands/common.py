"""What every command shares: provider options, --json/--dry-run, output and error reporting.

Human-readable progress goes to stderr, so stdout carries only the command's result: a table, or
with ``--json`` exactly one JSON document (errors included), which scripts can parse. Both pass
:func:`output_edge`, the one place a command's text reaches a terminal.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from ..basics.errors import TpuctlError

if TYPE_CHECKING:
    from ..basics.config import Target
    from ..cloud.base import Provider

_state: dict[str, Any] = {"json": False, "quiet": False, "emitted": False}


def begin_output(*, as_json: bool) -> None:
    """A new command starts: errors raised before its --json wrapper ran still honour --json."""
    _state.update(json=as_json, emitted=False, quiet=False)


def json_mode() -> bool:
    """Whether the command in progress prints its result as one JSON document."""
    return bool(_state["json"])


def provider_options(fn: Callable) -> Callable:
    """``--provider`` and ``--project``, accepted on every command that touches a cloud."""
    fn = click.option("--project", metavar="ID", default=None,
                      help="GCP project (default: TPUCTL_PROJECT, the config file, gcloud's config).")(fn)
    fn = click.option("--provider", type=click.Choice(["local", "gcp"]), default=None,
                      help="Where to act (default: TPUCTL_PROVIDER, the config file, gcp if a project "
                           "is configured, else local).")(fn)
    return fn


def json_option(fn: Callable) -> Callable:
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
    @functools.wraps(fn)
    def wrapper(*args: Any, as_json: bool, **kwargs: Any) -> Any:
        _state["json"] = as_json
        _state["emitted"] = False
        return fn(*args, as_json=as_json, **kwargs)

    return wrapper


@contextlib.contextmanager
def output_edge() -> Iterator[None]:
    """While a command runs (``provision.cli.main`` wraps every one in this), all it writes to
    stdout and stderr passes :func:`provision.basics.text.printable` (lines and tabs kept): run
    records, events, a job's log, sweep records and host statuses come from a bucket anyone with
    write access may fill, and a terminal escape stored there (clear the screen, an OSC 8 link
    whose text hides its target, an OSC 52 clipboard write, a C1 control, a right-to-left
    override) shows as ``?`` and does nothing, on a terminal or through a pipe. Here, not where
    each command prints, so that no command, and no line added to one, can forget it. JSON is
    ASCII with escaped controls: unchanged. The CLI also turns click's own stripping of colour
    codes off a terminal off (tpuctl prints no colour), so every escape shows the same way
    wherever the output goes."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, _PrintableStream):
        sys.stdout = _PrintableStream(sys.stdout)
    if not isinstance(sys.stderr, _PrintableStream):
        sys.stderr = _PrintableStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def raw_stdout() -> Any:
    """stdout's bytes, past :func:`output_edge`: for ``tpuctl logs --raw``, which prints a log's
    bytes as they are because the user asked for exactly that (a file, a pager)."""
    stream = _unfiltered(sys.stdout)
    stream.flush()
    return getattr(stream, "buffer", stream)


def _unfiltered(stream: Any) -> Any:
    return stream._stream if isinstance(stream, _PrintableStream) else stream


class _PrintableStream:
    """A text stream that writes only printable characters, newlines and tabs to ``stream``."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str | bytes) -> int:
        from ..basics.text import printable_lines

        # bytes come from click, which finds no binary stream under this one (shell completion)
        shown = text.decode(errors="replace") if isinstance(text, bytes) else text
        # a carriage return shows as ?, wherever it is: one that starts a write would bring the
        # cursor back over the line a person reads, and a bucket's string would overwrite it
        self._stream.write(printable_lines(shown))
        return len(text)

    def redraw(self, line: str) -> None:
        """``line`` drawn over the current one (a carriage return before it): only tpuctl's own
        progress bar (:class:`provision.staging.progress.Progress`) asks for this, by name, so no
        text that merely starts with a carriage return gets it."""
        from ..basics.text import printable

        self._stream.write("\r" + printable(line.removesuffix("\n")) + ("\n" if line.endswith("\n") else ""))

    def __getattr__(self, name: str) -> Any:        # flush, isatty, encoding, fileno, ...
        if name == "buffer":                         # no way around the filter (click looks for one)
            raise AttributeError(name)
        return getattr(self._stream, name)


def dry_run_option(fn: Callable) -> Callable:
    return click.option("--dry-run", is_flag=True,
                        help="Say what would be created or deleted, and change nothing.")(fn)


def resolve_target(provider: str | None, project: str | None, zone: str | None = None) -> Target:
    from ..basics.config import resolve

    return resolve(provider=provider, project=project, zone=zone)


def open_provider(target: Target) -> Provider:
    """Build the provider for a resolved target; cloud libraries load only here."""
    from ..cloud import get_provider

    return get_provider(target)


def say(message: str) -> None:
    """Progress for a person: stderr, so stdout stays the command's result."""
    if not _state["quiet"]:
        from ..basics.redact import redact

        click.echo(redact(message), err=True)


DEFAULT_ACCOUNT_NOTE = ("note: {what} will run as the Compute Engine default service account, which is often a "
                        "project Editor; pass --service-account with an account that has only the roles in "
                        "docs/reliability.md")


def acting_on(target: Target, verb: str, zone: str | None = None) -> None:
    """Every command says which provider, project and zone it acts on (DESIGN.md)."""
    if zone:
        import dataclasses

        target = dataclasses.replace(target, zone=zone)
    say(f"tpuctl {verb}: {target.describe()}")


def emit_json(data: Any) -> None:
    """Print the command's one JSON document; an error after it adds only a stderr line."""
    from ..basics.jsontext import dumps_indented
    from ..basics.redact import redactor

    # as json.dumps(redact_data(json.loads(json.dumps(data, default=_json_default))), indent=2,
    # sort_keys=True) would write it, in one pass
    click.echo(dumps_indented(data, default=_json_default, strings=redactor()))
    _state["emitted"] = True


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "value"):
        return obj.value
    return str(obj)


def report_error(exc: TpuctlError) -> int:
    """Print a one-line error (and, with --json, a JSON error document); return the exit code.
    An error that names several problems of one input prints each further one on a line of its
    own (``  also: ...``) after it, and lists them all under ``problems`` in the JSON."""
    line = exc.one_line()
    from ..basics.redact import redact

    line = redact(line)
    more = [redact(m) for m in exc.more]
    if _state["json"] and not _state["emitted"]:
        doc: dict[str, Any] = {"ok": False, "error": line, "exit_code": exc.exit_code}
        remaining = getattr(exc, "remaining", None)
        if remaining:
            doc["remaining"] = [redact(r) for r in remaining]
        if more:
            doc["problems"] = [line, *more]
        emit_json(doc)
    click.echo(f"tpuctl: error: {line}", err=True)
    for extra in more:
        click.echo(f"  also: {extra}", err=True)
    return exc.exit_code


def not_yet(capability: str) -> None:
    """Raise the plain 'not there yet' error for a capability a later release fills in."""
    from ..basics.errors import NotAvailable

    raise NotAvailable(f"{capability} is not available in this version of tpuctl yet",
                       hint="nothing was created or changed")


def parse_sets(items: Sequence[str]) -> list[tuple[str, str]]:
    """``--set key=value`` pairs, checked for shape here and for meaning by the job spec loader."""
    from ..basics.errors import UsageError

    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not all(part.isidentifier() for part in key.split(".")):
            raise UsageError(f"invalid --set {item!r}", hint="use --set key=value, such as --set num_train_steps=1000")
        out.append((key, value))
    return out


def is_tty() -> bool:
    return sys.stderr.isatty()
