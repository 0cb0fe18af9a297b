"""``tpuctl notify``: the channels that hear about runs, sweeps and reaped TPUs, and a test message."""

from __future__ import annotations

import sys

import click

from .common import dry_run_option, emit_json, json_option, say


class _InOrder(click.Group):
    """Subcommands in the order of use (add, list, test, remove), not alphabetical."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group("notify", cls=_InOrder, short_help="Notification channels: webhook, Slack, e-mail")
def command() -> None:
    """Channels that hear about preemptions, recreations, stalls, failures, finished runs, budget
    stops, reaped TPUs and sweeps, from the host agent with the laptop closed (docs/notify.md).

    \b
    Example:
      tpuctl notify list
    """


@command.command("add", short_help="Add a channel (its secret from stdin, or a Secret Manager reference)")
@click.argument("name")
@click.option("--slack", "kind", flag_value="slack", help="A Slack incoming webhook.")
@click.option("--webhook", "kind", flag_value="webhook", help="A JSON POST to your URL, signed with HMAC-SHA256.")
@click.option("--email", "kind", flag_value="email", help="E-mail over SMTP with STARTTLS.")
@click.option("--secret", "ref", metavar="sm://projects/P/secrets/S",
              help="Keep the secret in Secret Manager (what a host VM reads); default: read it from stdin "
                   "into a private file on this machine.")
@click.option("--smtp", metavar="HOST:PORT", help="E-mail: the SMTP server (587: STARTTLS; 465: TLS).")
@click.option("--from", "sender", metavar="ADDRESS", help="E-mail: the sender.")
@click.option("--to", "recipients", multiple=True, metavar="ADDRESS", help="E-mail: a recipient (repeatable).")
@click.option("--user", metavar="LOGIN", help="E-mail: the SMTP login (its password is the secret).")
@json_option
def add(name: str, kind: str | None, ref: str | None, smtp: str | None, sender: str | None,
        recipients: tuple[str, ...], user: str | None, as_json: bool) -> None:
    """Add channel NAME. Its secret (a Slack or webhook URL; for --webhook a second line with the
    signing key; for --email the SMTP password) is read from stdin, or a hidden prompt, into a
    mode-0600 file under TPUCTL_HOME; or give --secret sm://... for a host VM to read from
    Secret Manager. tpuctl never prints a secret.

    \b
    Example:
      tpuctl notify add team --slack --secret sm://projects/my-project/secrets/tpuctl-slack
    """
    from ..basics import statefile
    from ..basics.errors import UsageError
    from ..notify import secrets
    from ..notify.settings import channel_from, check_name

    check_name(name)
    if kind is None:
        raise UsageError("say what kind of channel", hint=f"add --slack, --webhook or --email: tpuctl notify add {name} --slack")
    raw: dict[str, object] = {"kind": kind, "secret": ref or f"local:{name}"}
    if kind == "email":
        raw.update(smtp=smtp, sender=sender, to=list(recipients))
        if user:
            raw["user"] = user
    elif smtp or sender or recipients or user:
        raise UsageError("--smtp, --from, --to and --user are for --email channels", hint="drop them")
    channel = channel_from(name, raw)          # every problem before anything is written
    value = None
    if ref is None:
        value = _read_secret(kind, name)
        secrets.remember(value)
        try:
            secrets.parse(channel, value)
        except secrets.SecretUnavailable as exc:
            raise UsageError(exc.message, hint=exc.hint) from None
    if value is not None:
        secrets.store_local(name, value)
    statefile.update_json(secrets.channels_file(), lambda cur: {**(cur or {}), name: {
        k: v for k, v in channel.to_dict().items() if k != "name"}}, default={})
    if as_json:
        emit_json({"ok": True, "channel": channel.to_dict()})
    else:
        click.echo(f"added channel {name} ({kind}; secret {channel.secret}); "
                   f"use it with tpuctl train CLUSTER --notify {name}, and try it with tpuctl notify test {name}")


def _read_secret(kind: str, name: str) -> str:
    """The secret from stdin (a pipe: its lines) or a hidden prompt (a terminal)."""
    from ..basics.errors import UsageError

    what = {"slack": "Slack incoming webhook URL", "webhook": "webhook URL", "email": "SMTP password"}[kind]
    if sys.stdin is not None and sys.stdin.isatty():
        first = click.prompt(what, hide_input=True, default="" if kind == "email" else None, show_default=False)
        key = click.prompt("signing key (empty: unsigned)", hide_input=True, default="",
                           show_default=False) if kind == "webhook" else ""
    else:
        try:
            lines = (sys.stdin.read(1 << 16) if sys.stdin is not None else "").splitlines()
        except (OSError, UnicodeDecodeError):         # no stdin to read (closed, or not text)
            lines = []
        first = lines[0].strip() if lines else ""
        key = lines[1].strip() if kind == "webhook" and len(lines) > 1 else ""
    if not first and kind != "email":
        raise UsageError(f"no {what} on stdin", hint=f"pipe it in: tpuctl notify add {name} --{kind} < url.txt, "
                                                     "or run it in a terminal to be asked")
    if kind == "webhook" and key:
        import json

        return json.dumps({"url": first, "signing_key": key})
    return first


@command.command("list", short_help="The channels, where each secret is kept, and which are used by default")
@json_option
def list_channels(as_json: bool) -> None:
    """The channels tpuctl notify add saved and those of the config file ([notify.channels.NAME]),
    with where each secret is kept (never the secret), and the default ones ([notify] default).

    \b
    Example:
      tpuctl notify list
    """
    from ..notify.runtime import config_table, saved_channels
    from ..notify.settings import channel_from

    table = config_table()
    rows = []
    defined = {**saved_channels(), **(table.get("channels") or {})}
    default = table.get("default") or []
    for name, raw in sorted(defined.items()):
        c = channel_from(name, raw)
        rows.append({**c.to_dict(), "default": name in default})
    if as_json:
        emit_json({"ok": True, "channels": rows})
        return
    if not rows:
        click.echo("no channels; add one with tpuctl notify add NAME --slack (docs/notify.md)")
        return
    from ..basics.text import table as render

    click.echo(render([[r["name"], r["kind"], r["secret"], "yes" if r["default"] else ""] for r in rows],
                      ["NAME", "KIND", "SECRET", "DEFAULT"]))


@command.command("test", short_help="Send one test message to each channel now")
@click.argument("names", nargs=-1)
@click.option("--cluster", metavar="CLUSTER", help="The channels this cluster's runs use (the config file).")
@dry_run_option
@json_option
def test(names: tuple[str, ...], cluster: str | None, dry_run: bool, as_json: bool) -> None:
    """Send one test message to each channel NAMES (default: what a run would use), with the
    retries a run's notices get; exit 1 if one could not be delivered.

    \b
    Example:
      tpuctl notify test team --dry-run
    """
    import time

    from ..basics.errors import TpuctlError
    from ..notify.messages import Notice
    from ..notify.notifier import Notifier
    from ..notify.runtime import config_table, saved_channels
    from ..notify.settings import select

    settings = select(list(names) or None, cluster, config_table(), saved_channels())
    if not settings.channels:
        from ..basics.errors import UsageError

        raise UsageError("no channel to test", hint="name one (tpuctl notify test NAME) or add one with "
                                                    "tpuctl notify add NAME --slack")
    notice = Notice(kind="test", subject="test", final=True, title="tpuctl test notification",
                    text="tpuctl test notification: this channel works", time=time.time(),
                    cluster=cluster, fields={"test": True})
    if dry_run:
        doc = {"ok": True, "dry_run": True, "channels": [c.name for c in settings.channels],
               "notice": notice.to_dict()}
        if as_json:
            emit_json(doc)
        else:
            click.echo(f"dry run: would send {notice.title!r} to {', '.join(doc['channels'])}")
        return
    outcomes: list[dict] = []
    notifier = Notifier(settings, record=lambda kind, **data: outcomes.append({"sent": kind == "notify_sent", **data}),
                        log=say)
    notifier.notice(notice)
    notifier.close(timeout=max(30.0, settings.retry.cap * settings.retry.attempts))
    failed = [o for o in outcomes if not o["sent"]]
    if as_json:
        emit_json({"ok": not failed, "deliveries": outcomes})
    else:
        for o in outcomes:
            click.echo(f"{o['channel']}: {'sent' if o['sent'] else 'failed: ' + o.get('error', '?')}"
                       + (f" ({o['tries']} tries)" if o["tries"] > 1 else ""))
    if failed:
        raise TpuctlError(f"{len(failed)} of {len(outcomes)} channel(s) could not be reached",
                          hint="see each channel's reason above; tpuctl notify list shows where its secret is")


@command.command("remove", short_help="Remove a channel and its secret kept on this machine")
@click.argument("name")
@json_option
def remove(name: str, as_json: bool) -> None:
    """Remove channel NAME (and its secret file, if kept here; a Secret Manager secret stays).

    \b
    Example:
      tpuctl notify remove team
    """
    from ..basics import statefile
    from ..basics.errors import UnknownName
    from ..notify import secrets
    from ..notify.settings import check_name

    check_name(name)
    if name not in (statefile.read_json(secrets.channels_file(), {}) or {}):     # nothing written for a typo
        raise UnknownName(f"no channel {name} was added here", hint="tpuctl notify list shows the channels")
    statefile.update_json(secrets.channels_file(), lambda cur: {k: v for k, v in (cur or {}).items() if k != name},
                          default={})
    secrets.remove_local(name)
    if as_json:
        emit_json({"ok": True, "removed": name})
    else:
        click.echo(f"removed channel {name}")
