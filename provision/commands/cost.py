"""``tpuctl cost``: hours by state and what they cost at list price, and what idle reaping saved."""

from __future__ import annotations

import click

from ..basics.text import table
from .common import (
    acting_on,
    emit_json,
    json_option,
    open_provider,
    provider_options,
    resolve_target,
)

STATE_LABELS = {"training": "training", "making_data": "making data (corpus_files)",
                "starting": "starting (no attempt yet)",
                "waiting": "waiting after preemption", "idle": "idle (no live run)"}


@click.command("cost", short_help="Hours and cost of a cluster or run, by state")
@click.argument("target", required=False)
@provider_options
@json_option
def command(target: str | None, provider: str | None, project: str | None, as_json: bool) -> None:
    """Hours and cost of a cluster or run: training, idle, and waiting after preemption.

    \b
    TARGET is a cluster name, a run id, or nothing for every cluster this machine knows. Hours
    come from the cost ledger of TPU lifetimes (written by up, down, the reaper and autodown) and
    the runs' event logs; costs are list prices (on-demand and preemptible, source and date shown).
    Savings of idle reaping: a reaped TPU would otherwise have billed until the next up/train or
    down of its cluster, or until now.

    \b
    Example:
      tpuctl cost bert-lab
    """
    import time

    from ..basics import validate
    from ..basics.errors import NotFound, UnknownName, UsageError
    from ..billing import costs
    from ..runs import store as runs

    if target:
        try:
            validate.run_id(target)
        except UsageError:
            raise UsageError(f"invalid cluster name or run id {target!r}",
                             hint="use a cluster name (tpuctl status lists them) or a run id printed by "
                                  "tpuctl train: lowercase letters, digits and '-'") from None
    tgt = resolve_target(provider, project)
    acting_on(tgt, "cost", zone="all")
    prov = open_provider(tgt)
    now = time.time()
    live, live_note = costs.live_nodes(prov)
    clusters = costs.known_clusters(prov, live)
    run_entry = None
    if target and target not in clusters:
        try:
            run_entry = runs.lookup(target)
        except NotFound:
            raise UnknownName(f"no cluster or run named {target} ({tgt.describe()})",
                           hint="tpuctl status lists clusters; run ids are printed by tpuctl train") from None
        if run_entry.get("provider") != prov.name:
            raise UsageError(f"run {target} belongs to provider {run_entry.get('provider')}",
                           hint=f"pass --provider {run_entry.get('provider')}")
    if run_entry is not None:
        # the run asked about must be readable: a malformed record or event log is this command's
        # error, one line naming it (exit 2), not a note under a report with no run in it
        from ..cloud.storage import open_bucket

        asked = runs.RunStore(open_bucket(run_entry["bucket"], tgt), target)
        asked.load()
        asked.events()
        reports = [costs.cluster_cost(prov, tgt, run_entry["cluster"], live, now=now, run_ids={target})]
    else:
        names = [target] if target else clusters
        live_of = costs.group_by_cluster(live or [])
        from ..cloud.storage import open_bucket
        from ..cluster.ledger import BucketLedgers

        fleet = len(names) > 1
        ledgers = BucketLedgers(lambda url: open_bucket(url, tgt)) if fleet else None
        local = costs.LocalRecords.read(prov) if fleet else None
        reports = [costs.cluster_cost(prov, tgt, name, None if live is None else live_of.get(name, []), now=now,
                                      local=local, ledgers=ledgers) for name in names]
    from ..catalog.prices import usd_text

    book = prov.price_book()
    types = {(lt.accelerator_type, lt.zone) for r in reports for lt in r.lives} or {("v2-8", None)}
    price_rows = costs.price_rows(types, book)
    notes = [live_note] if live_note else []
    if as_json:
        emit_json({"ok": True, "provider": tgt.provider, "project": tgt.project, "now": now,
                   "run": target if run_entry else None, "clusters": [r.to_dict(now) for r in reports],
                   "total_usd": round(sum(r.account.total_usd for r in reports), 4),
                   "saved_usd": round(sum(r.saved_usd for r in reports), 4),
                   "saving_usd_per_hour": round(sum(r.saving_per_hour for r in reports), 4),
                   "prices": price_rows, "price_source": book.describe(),
                   "counterfactual": costs.COUNTERFACTUAL, "notes": notes})
        return
    if not reports:
        click.echo("no clusters: nothing has been billed")
    for r in reports:
        click.echo(_cluster_text(r, run_id=target if run_entry else None))
        click.echo("")
    click.echo(table([[p["accelerator_type"], p["region"], usd_text(p["on_demand_usd_per_hour"], dollar=False),
                       usd_text(p["preemptible_usd_per_hour"], dollar=False), p["source"], p["recorded"]]
                      for p in price_rows],
                     ("TPU", "REGION", "ON-DEMAND $/H", "SPOT/PREEMPTIBLE $/H", "SOURCE", "DATE")))
    for p in price_rows:
        for tier in ("on_demand", "spot"):
            if p[tier]["note"]:
                click.echo(f"{p['accelerator_type']} {p[tier]['tier']}: {p[tier]['note']}")
    click.echo(f"prices: {book.describe()}")
    for n in notes:
        click.echo(n)


def _cluster_text(r, *, run_id: str | None) -> str:
    from ..basics.validate import format_duration

    a = r.account
    kinds = sorted({"preemptible" if lt.interruptible else "on-demand" for lt in r.lives})
    types = sorted({lt.accelerator_type for lt in r.lives})
    head = (f"run {run_id} on cluster {r.cluster}" if run_id else f"cluster {r.cluster}") + \
        (f": {', '.join(types)} ({', '.join(kinds)}), {len(r.lives)} TPU lifetime(s), {len(r.runs)} run(s)"
         if r.lives else ": no TPU recorded")
    def spent(hours: float) -> list[str]:
        # hours to two places, and the time itself: minutes of a short run are not "0.00"
        return [f"{hours:.2f}", format_duration(hours * 3600)]

    rows = []
    for state in ("training", "making_data", "starting", "waiting", "idle"):
        rows.append([STATE_LABELS[state], *spent(a.hours[state]), f"{a.cost[state]:.2f}",
                     f"{a.cost_on_demand[state]:.2f}", f"{a.cost_preemptible[state]:.2f}"])
    rows.append(["total billed", *spent(a.billed_hours), f"{a.total_usd:.2f}",
                 f"{sum(a.cost_on_demand.values()):.2f}", f"{sum(a.cost_preemptible.values()):.2f}"])
    rows.append(["waiting, no TPU billed", *spent(a.waiting_unbilled_hours), "0.00", "0.00", "0.00"])
    lines = [head, table(rows, ("STATE", "HOURS", "TIME", "$ AS RUN", "$ ON-DEMAND", "$ PREEMPTIBLE"))]
    from .status import goodput_lines, pace_lines

    for run in r.runs:
        sbs = run.seconds_by_state or {}
        if sbs:
            lines.append(f"run {run.run_id} ({run.status}), as its supervisor measured: "
                         + ", ".join(f"{k} {format_duration(v)}" for k, v in sorted(sbs.items())))
        lines.extend(f"  {line.split(': ', 1)[1]}" for line in pace_lines(run.run_id, run.pace)
                     if "estimate" in line)
        lines.extend(goodput_lines(run.run_id, run.goodput))
    if r.savings:
        reaped = len(r.savings)
        lines.append(f"idle reaping saved ${r.saved_usd:.2f} so far ({reaped} TPU(s) deleted idle"
                     + (f"; still saving ${r.saving_per_hour:.2f}/hour" if r.saving_per_hour else "")
                     + "): counted until the cluster's next up/train or down, or now")
        for s in r.savings:
            if s.idle_since:
                lines.append(f"  TPU {s.node}: idle {format_duration(s.deleted_at - s.idle_since)} before "
                             f"{s.by} deleted it")
    lines.extend(r.notes)
    return "\n".join(lines)
