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


@click.command("cost", short_help="Hours and cost of a cluster or run, by state; a fleet's goodput")
@click.argument("target", required=False)
@click.option("--since", metavar="DURATION", default=None,
              help="Only the hours since then (7d, 24h, 90m), and the goodput of every run live since then: "
                   "per run, per TPU type and per capacity kind, and the dollars lost to preemption.")
@provider_options
@json_option
def command(target: str | None, since: str | None, provider: str | None, project: str | None,
            as_json: bool) -> None:
    """Hours and cost of a cluster or run: training, idle, and waiting after preemption.

    \b
    TARGET is a cluster name, a run id, or nothing for every cluster this machine knows. Hours
    come from the cost ledger of TPU lifetimes (written by up, down, the reaper and autodown) and
    the runs' event logs; costs are list prices (on-demand and preemptible, source and date shown).
    Savings of idle reaping: a reaped TPU would otherwise have billed until the next up/train or
    down of its cluster, or until now.

    \b
    --since DURATION (the fleet, or a cluster) counts only the hours since then and adds the
    goodput of every run live since then, from the goodput summary each run's supervisor keeps
    in its record (one listing of each bucket's run records, whatever the number of runs): per
    run, per TPU type, per capacity kind (spot, flex-start, on-demand, reservation), and the
    dollars lost to preemption (steps redone, downtime and the recreate's wait, at each run's price):
    tpuctl cost --since 7d.

    \b
    Example:
      tpuctl cost bert-lab
    """
    import time

    from ..basics import validate
    from ..basics.errors import NotFound, UnknownName, UsageError
    from ..billing import costs
    from ..runs import store as runs

    since_s = _since(since)
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
    start = now - since_s if since_s is not None else None
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
        if since_s is not None:
            raise UsageError(f"--since is for the fleet or a cluster, not one run ({target})",
                             hint=f"tpuctl cost {target} shows the whole run; tpuctl cost --since "
                                  f"{since} every run since then")
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
        local = costs.LocalRecords.read(prov) if fleet or start is not None else None
        reports = [costs.cluster_cost(prov, tgt, name, None if live is None else live_of.get(name, []), now=now,
                                      local=local if fleet else None, ledgers=ledgers, since=start)
                   for name in names]
    view = None
    if start is not None and run_entry is None:
        buckets = costs.fleet_buckets(prov, local, cluster=target)
        view, fleet_notes = costs.fleet_goodput(prov, tgt, buckets, local, since=start, now=now, cluster=target)
    else:
        fleet_notes = []
    from ..catalog.prices import usd_text

    book = prov.price_book()
    types = {(lt.accelerator_type, lt.zone) for r in reports for lt in r.lives} or {("v2-8", None)}
    price_rows = costs.price_rows(types, book)
    notes = ([live_note] if live_note else []) + fleet_notes
    if as_json:
        emit_json({"ok": True, "provider": tgt.provider, "project": tgt.project, "now": now,
                   "run": target if run_entry else None, "clusters": [r.to_dict(now) for r in reports],
                   **({"since": start, "fleet": view} if view is not None else {}),
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
    if view is not None:
        click.echo("")
        click.echo("\n".join(fleet_lines(view, since_s or 0.0, cluster=target)))
    for n in notes:
        click.echo(n)


def _since(value: str | None) -> float | None:
    """``--since``: a duration back from now (7d, 24h, 90m); a bad one is one line, exit 2."""
    from ..basics import validate
    from ..basics.errors import UsageError

    if value is None:
        return None
    if value.strip().isdigit() and int(value) != 0:   # 7 of what? a week of runs is --since 7d, not 7 seconds
        raise UsageError(f"--since {validate.show(value)} has no unit",
                         hint=f"write --since {value.strip()}d for days or --since {value.strip()}h for hours "
                              "(units s, m, h, d)")
    try:
        seconds = validate.duration(value)
    except UsageError:
        raise UsageError(f"invalid --since {validate.show(value)}",
                         hint="give how far back to look, with a unit: --since 7d, --since 24h or --since 90m "
                              "(at most a year)") from None
    if seconds <= 0:
        raise UsageError(f"--since {validate.show(value)} is an empty window",
                         hint="give how far back to look, such as --since 7d") from None
    return seconds


def fleet_lines(view: dict, since_s: float, *, cluster: str | None = None) -> list[str]:
    """The fleet's goodput (provision.runs.goodput.fleet) in words and tables: in all, per TPU
    type, per capacity kind, per run, and the runs without a goodput summary."""
    import time

    from ..basics.text import table
    from ..basics.validate import format_duration as dur

    def pct(v) -> str:
        return f"{v:.1f}%" if v is not None else "-"

    def usd(v) -> str:
        return "unknown" if v is None else f"{v:,.2f}" if v >= 1 else f"{v:.4f}"

    def money(v) -> str:
        return "unknown" if v is None else f"${usd(v)}"

    t = view["total"]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(view["since"]))
    head = f"goodput of {'cluster ' + cluster + ' ' if cluster else ''}runs live since {when} ({dur(since_s)}): "
    if not t["runs"]:
        out = [head + "no run with a goodput summary"]
    else:
        out = [head + f"{t['runs']} run(s), goodput {pct(t['goodput_pct'])} ({dur(t['goodput_s'])} of "
               f"{dur(t['wall_s'])}); badput {dur(t['badput_s'])}, {money(t['badput_usd'])}; lost to preemption "
               f"{money(t['preemption_usd'])} ({dur(t['preemption_s'])}) over {t['preemptions']} preemption(s)"
               + (f", median recovery {dur(t['recovery_median_s'])}" if t["recovery_median_s"] is not None else "")
               + (f" (dollars of the {t['priced_runs']} run(s) whose price is known)"
                  if 0 < t["priced_runs"] < t["runs"] else "")]

        def group_rows(groups: dict) -> list[list]:
            return [[k, g["runs"], pct(g["goodput_pct"]), dur(g["wall_s"]), usd(g["badput_usd"]), g["preemptions"],
                     usd(g["preemption_usd"]),
                     dur(g["recovery_median_s"]) if g["recovery_median_s"] is not None else "-"]
                    for k, g in groups.items()]

        cols = ("RUNS", "GOODPUT", "WALL", "BADPUT $", "PREEMPTIONS", "LOST TO PREEMPTION $", "MEDIAN RECOVERY")
        out += ["", table(group_rows(view["by_accelerator_type"]), ("TPU", *cols)),
                "", table(group_rows(view["by_capacity"]), ("CAPACITY", *cols)), ""]
        out.append(table([[r["run_id"], r["cluster"], r["accelerator_type"], r["capacity"],
                           (r["status"] or "-") + ("" if r["final"] else " (to its last recovery)"),
                           pct(r["goodput_pct"]), dur(r["wall_s"]), usd(r["badput_usd"]), r["preemptions"],
                           usd(r["preemption_usd"])] for r in view["runs"]],
                         ("RUN", "CLUSTER", "TPU", "CAPACITY", "STATUS", "GOODPUT", "WALL", "BADPUT $",
                          "PREEMPTIONS", "LOST TO PREEMPTION $")))
    missing = view["without_summary"]
    if missing:
        names = ", ".join(r["run_id"] for r in missing[:10]) + (" ..." if len(missing) > 10 else "")
        out.append(f"{len(missing)} run(s) without a goodput summary (live and not yet recovered from a preemption, "
                   f"or ended before tpuctl kept one; tpuctl cost RUN shows one): {names}")
    return out


def _training_label(runs) -> str:
    """"training", or what it is when a program reported no step: its time is training of unknown
    progress (never waiting), as the goodput breakdown's training_no_progress says too."""
    from ..runs.goodput import LABELS, NO_PROGRESS

    silent = [run for run in runs if run.progress_reported is False]
    if not silent:
        return STATE_LABELS["training"]
    if len(silent) == len(runs):
        return LABELS[NO_PROGRESS]
    return f"training ({len(silent)} of {len(runs)} runs reported no progress)"


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
    labels = {**STATE_LABELS, "training": _training_label(r.runs)}
    for state in ("training", "making_data", "starting", "waiting", "idle"):
        rows.append([labels[state], *spent(a.hours[state]), f"{a.cost[state]:.2f}",
                     f"{a.cost_on_demand[state]:.2f}", f"{a.cost_preemptible[state]:.2f}"])
    rows.append(["total billed", *spent(a.billed_hours), f"{a.total_usd:.2f}",
                 f"{sum(a.cost_on_demand.values()):.2f}", f"{sum(a.cost_preemptible.values()):.2f}"])
    rows.append(["waiting, no TPU billed", *spent(a.waiting_unbilled_hours), "0.00", "0.00", "0.00"])
    lines = [head, table(rows, ("STATE", "HOURS", "TIME", "$ AS RUN", "$ ON-DEMAND", "$ PREEMPTIBLE"))]
    from .status import goodput_lines, pace_lines

    for run in r.runs:
        sbs = run.seconds_by_state or {}
        if sbs:
            said = _training_label([run])
            lines.append(f"run {run.run_id} ({run.status}), as its supervisor measured: "
                         + ", ".join(f"{said if k == 'training' else k} {format_duration(v)}"
                                     for k, v in sorted(sbs.items())))
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
