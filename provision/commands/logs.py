"""``tpuctl logs RUN``: the job's log and the run's events."""

from __future__ import annotations

import click

from .common import acting_on, provider_options, resolve_target


@click.command("logs", short_help="Print a run's log, or its events")
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows, until the run ends.")
@click.option("--events", is_flag=True, help="Print the run's event log instead of the job's output.")
@click.option("--attempt", type=click.IntRange(min=1), default=None, help="One attempt (default: all).")
@click.option("--worker", default=None, help="Only this host of a multi-host slice (default: every host).")
@provider_options
def command(run: str, follow: bool, events: bool, attempt: int | None, worker: str | None, provider: str | None,
            project: str | None) -> None:
    """Print the log of RUN (a run id, or a cluster name for its latest run).

    \b
    Example:
      tpuctl logs bert-lab --events --follow
    """
    import json
    import time

    from ..basics.errors import UsageError
    from ..runs import store as runs
    from ..runs import training

    if not run or len(run) > 120 or not all(c.isalnum() or c == "-" for c in run):
        raise UsageError(f"invalid run id {run!r}", hint="use a run id printed by tpuctl train, or a cluster name")
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
                click.echo(f"{stamp} {kind} " + " ".join(f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}"
                                                        for k, v in sorted(ev.items())))
            seen_events = len(evs)
        else:
            numbers = [attempt] if attempt else range(1, rec.attempts + 1)
            for n in numbers:
                workers = [worker] if worker else store.log_workers(n)
                for w in workers:
                    data = store.log(n, w)
                    done = printed.get((n, w), 0)
                    if len(data) > done:
                        text = data[done:].decode(errors="replace")
                        if len(workers) > 1:
                            text = "".join(f"[{w}] {line}" for line in text.splitlines(keepends=True))
                        click.echo(text, nl=False)
                        printed[(n, w)] = len(data)
        if not follow or not rec.live:
            if follow and not events:
                click.echo(f"[tpuctl] run {rec.run_id} {rec.status}", err=True)
            return
        time.sleep(2.0)
