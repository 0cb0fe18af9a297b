"""``tpuctl logs RUN``: the job's log and the run's events.

Both come from the run's bucket, which anyone with write access to it (and the job itself) may
fill, and the job may have printed a credential of the account it runs as: both pass the
scrubber (:func:`provision.basics.redact.redact`), whole lines at a time, and then, like all a
command prints, the output edge (:func:`provision.commands.common.output_edge`), so a terminal
escape in them (clear the screen, an OSC 52 clipboard write) shows as ``?``. ``--raw`` prints the
log's bytes as they are, for a file or a pager that wants them.
"""

from __future__ import annotations

import click

from .common import acting_on, provider_options, raw_stdout, resolve_target


@click.command("logs", short_help="Print a run's log, or its events")
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows, until the run ends.")
@click.option("--events", is_flag=True, help="Print the run's event log instead of the job's output.")
@click.option("--attempt", type=click.IntRange(min=1), default=None, help="One attempt (default: all).")
@click.option("--worker", default=None, help="Only this host of a multi-host slice (default: every host).")
@click.option("--raw", is_flag=True, help="The log's bytes as the job wrote them, terminal escapes included "
                                          "(default: control characters shown as ?).")
@provider_options
def command(run: str, follow: bool, events: bool, attempt: int | None, worker: str | None, raw: bool,
            provider: str | None, project: str | None) -> None:
    """Print the log of RUN (a run id, or a cluster name for its latest run).

    \b
    Example:
      tpuctl logs bert-lab --events --follow
    """
    import json
    import time

    from ..basics.errors import UsageError
    from ..basics.redact import redact
    from ..runs import store as runs
    from ..runs import training

    if not run or len(run) > 120 or not all(c.isalnum() or c == "-" for c in run):
        raise UsageError(f"invalid run id {run!r}", hint="use a run id printed by tpuctl train, or a cluster name")
    if raw and events:
        raise UsageError("--raw prints the job's log", hint="drop --raw to print the events, or drop --events")
    entry = runs.resolve_run(run)
    prov_name = provider or entry.get("provider")
    target = resolve_target(prov_name, project or (entry.get("project") if prov_name == "gcp" else None))
    store = training.open_store(entry, target)
    acting_on(target, f"logs {entry['run_id']}", zone="-")
    printed: dict[tuple[int, str], int] = {}
    seen_events = 0
    while True:
        rec = store.load()
        if events:
            evs = store.events()
            for ev in evs[seen_events:]:
                stamp = time.strftime("%H:%M:%S", time.localtime(ev.pop("time", 0)))
                kind = ev.pop("event", "?")
                click.echo(redact(f"{stamp} {kind} " + " ".join(
                    f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}" for k, v in sorted(ev.items()))))
            seen_events = len(evs)
        else:
            numbers = [attempt] if attempt else range(1, rec.attempts + 1)
            for n in numbers:
                workers = [worker] if worker else store.log_workers(n)
                for w in workers:
                    data = store.log(n, w)
                    done = printed.get((n, w), 0)
                    # while the run lives, whole lines only: a token cut in two by the upload is
                    # scrubbed whole at the next look
                    end = data.rfind(b"\n") + 1 if follow and rec.live and not raw else len(data)
                    if end > done:
                        chunk = data[done:end]
                        if len(workers) > 1:
                            chunk = b"".join(f"[{w}] ".encode() + line for line in chunk.splitlines(keepends=True))
                        if raw:
                            out = raw_stdout()
                            out.write(chunk)
                            out.flush()
                        else:
                            click.echo(redact(chunk.decode(errors="replace")), nl=False)
                        printed[(n, w)] = end
        if not follow or not rec.live:
            if follow and not events:
                click.echo(f"[tpuctl] run {rec.run_id} {rec.status}", err=True)
            return
        time.sleep(2.0)
