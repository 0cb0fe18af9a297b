"""What a mistyped command line gets: one cause and one fix, in the words a newcomer needs.

Click raises a handful of parse errors (unknown command, unknown option, missing argument or
value, extra argument, bad value); each becomes ``(cause, fix)`` here, with the closest command
or option when the word looks like a typo, the way git and gcloud suggest ``status`` for
``statsu``. Pure: it reads the command tree and argv, never the cloud.
"""

from __future__ import annotations

import re

import click

# Unit words people type after a number with a space: ``--idle-for 5 minutes``.
UNIT_WORDS = {
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
}
_NUMBER = re.compile(r"\d+(\.\d+)?")


def check_detached_units(root: click.Group, args: list[str]) -> None:
    """``--idle-for 5 minutes``: the unit would become a stray argument (a cluster name, for
    ``down``) and the error would speak of that instead; say how durations are written."""
    from .basics.errors import UsageError

    options = duration_options(root)
    for i, word in enumerate(args[:-2]):
        if word == "--":
            return
        if word in options and _NUMBER.fullmatch(args[i + 1]) and args[i + 2].lower() in UNIT_WORDS:
            unit = UNIT_WORDS[args[i + 2].lower()]
            raise UsageError(f"{word} {args[i + 1]} {args[i + 2]}: a duration is one word, its unit attached",
                             hint=f"write {word} {args[i + 1]}{unit} (units s, m, h, d, e.g. 1h30m)")


def duration_options(root: click.Group) -> set[str]:
    """Every option of every command whose value is a duration (metavar DURATION)."""
    out: set[str] = set()
    for cmd in _walk(root):
        for param in cmd.params:
            if isinstance(param, click.Option) and param.metavar == "DURATION":
                out.update(param.opts)
    return out


def explain(root: click.Group, exc: click.ClickException, args: list[str]) -> tuple[str, str | None]:
    """``(cause, fix)`` for a click error, one line each, never click's usage block."""
    import difflib  # here, not at the top: `tpuctl --help` never needs it

    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else command_path(root, args)
    see = f"see {path} --help"
    if isinstance(exc, click.NoSuchOption):
        known = _options_of(ctx.command) if ctx is not None else []
        close = difflib.get_close_matches(exc.option_name, known, n=1, cutoff=0.6)
        if close:
            return f"{path} has no option {exc.option_name}", f"did you mean {close[0]}? ({see})"
        return f"{path} has no option {exc.option_name}", see
    if isinstance(exc, click.BadOptionUsage) and "requires" in exc.format_message():
        return f"option {exc.option_name} needs a value", f"write {exc.option_name} VALUE ({see})"
    if isinstance(exc, click.MissingParameter):
        param = exc.param
        if isinstance(param, click.Argument):
            name = (param.metavar or param.name or "ARGUMENT").upper()
            return f"missing {name}", f"usage: {usage_line(ctx)}" if ctx else see
        if param is not None:
            return f"missing option {param.opts[0]}", f"usage: {usage_line(ctx)}" if ctx else see
    message = exc.format_message()
    unknown = re.match(r"No such command '(.*?)'\.", message)
    if unknown:
        group = ctx.command if ctx is not None and isinstance(ctx.command, click.Group) else root
        names = [n for n, c in group.commands.items() if not c.hidden]
        close = difflib.get_close_matches(unknown.group(1), names, n=1, cutoff=0.7)
        cause = f"{path} has no command {unknown.group(1)!r}"
        if close:
            return cause, f"did you mean {path} {close[0]}? ({path} --help lists the commands)"
        return cause, f"choose one of: {', '.join(names)} ({path} --help)"
    extra = re.match(r"Got unexpected extra arguments? \((.*)\)$", message)
    if extra:
        hint = f"usage: {usage_line(ctx)}; quote a value that holds spaces" if ctx is not None else see
        return f"unexpected argument {extra.group(1)}", hint
    if isinstance(exc, click.UsageError):
        return message, see
    return message, None


def usage_line(ctx: click.Context) -> str:
    return f"{ctx.command_path} {' '.join(ctx.command.collect_usage_pieces(ctx))}".strip()


def command_path(root: click.Group, args: list[str]) -> str:
    """``tpuctl logs`` for ``["logs", "--worker"]``: the commands named at the start of argv."""
    parts, cmd = ["tpuctl"], root
    for word in args:
        if not isinstance(cmd, click.Group) or word not in cmd.commands:
            break
        parts.append(word)
        cmd = cmd.commands[word]
    return " ".join(parts)


def _options_of(cmd: click.Command) -> list[str]:
    return [o for p in cmd.params if isinstance(p, click.Option) and not p.hidden
            for o in (*p.opts, *p.secondary_opts)] + ["--help"]


def _walk(group: click.Group):
    for cmd in group.commands.values():
        yield cmd
        if isinstance(cmd, click.Group):
            yield from _walk(cmd)
