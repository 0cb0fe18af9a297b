"""``tpuctl ui``: the read-only web page of clusters, runs, slices, sweeps and spend, on localhost."""

from __future__ import annotations

import click

from .common import provider_options, resolve_target, say


@click.command("ui", short_help="A read-only web page of clusters, runs, sweeps and spend (localhost)")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to serve on (0: any free one).")
@click.option("--host", "host", default="127.0.0.1", show_default=True,
              help="Loopback address to bind (127.0.0.1 or ::1); reach it from elsewhere with ssh -L.")
@provider_options
def command(port: int, host: str, provider: str | None, project: str | None) -> None:
    """Serve a read-only page of what tpuctl knows: clusters (state, type, zone, $/hour, uptime,
    slice hosts), runs (step, loss and metric curves, the events timeline with the time lost to
    preemptions shaded, spend by state, estimates where recorded), and sweeps (trials, the best
    marked, each hyperparameter against the metric). It reads the run and sweep records in the
    buckets this machine knows and the provider's clusters, refreshes itself every 5 s, needs no
    network beyond them (no CDN) and no write permission. Ctrl-C stops it.

    Only a browser that opens the URL it prints (with its token, random at each start, or
    TPUCTL_UI_TOKEN's) gets in; it keeps a cookie from then on. Everything else is refused (403).

    \b
    Example:
      tpuctl ui --port 8765
    """
    import ipaddress

    from ..basics.errors import UsageError

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UsageError(f"--host {host} is not a loopback address: the page would be open to the network",
                         hint="serve on 127.0.0.1 and reach it from another machine with ssh -L 8765:127.0.0.1:8765")
    import os

    from ..basics.redact import remember_secret
    from ..ui.server import TOKEN_ENV, UiServer, token_problem

    token = os.environ.get(TOKEN_ENV)
    if token is not None and (problem := token_problem(token)):
        raise UsageError(problem, hint=f"unset {TOKEN_ENV} for a random token at each start, or set one made by "
                                       "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    target = resolve_target(provider, project)
    from ..cloud import get_provider
    from ..ui.records import Records

    try:
        prov = get_provider(target)
    except Exception as exc:  # noqa: BLE001 - the page still shows runs and sweeps without clusters
        from ..basics.errors import TpuctlError

        say(f"tpuctl ui: clusters not shown: {exc.one_line() if isinstance(exc, TpuctlError) else type(exc).__name__}")
        prov = None
    try:
        server = UiServer((host, port), Records(target, prov), token)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}",
                         hint="pick another port with --port, or --port 0 for any free one") from None
    remember_secret(server.token)     # scrubbed from every other line tpuctl prints
    say(f"tpuctl ui: {target.describe()}; read-only, for the browser that opens the URL below; Ctrl-C stops it")
    # the one place the token is shown, unscrubbed: the URL is the key to the page (docs/ui.md)
    click.echo(f"tpuctl ui: serving {server.signin_url}", err=False)
    import sys

    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        say("tpuctl ui: stopped")
    finally:
        server.server_close()
