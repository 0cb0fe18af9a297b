"""``tpuctl status``: every cluster, its VM and TPU, its run, and what it costs per hour."""

from __future__ import annotations

from collections.abc import Callable

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
from .up import complete_cluster


@click.command("status", short_help="Show clusters, their runs and their hourly price")
@click.argument("name", required=False, shell_complete=complete_cluster)
@click.option("--zone", "-z", metavar="ZONE", help="Only this zone (default: every zone).")
@click.option("--export-monitoring", is_flag=True,
              help="With NAME: also write its run's goodput and badput by cause to Cloud Monitoring, as "
                   "Google's ML Goodput library does (compute.googleapis.com/workload/ metrics), for "
                   "Google's goodput dashboards (gcp provider; role roles/monitoring.metricWriter).")
@provider_options
@json_option
def command(name: str | None, zone: str | None, export_monitoring: bool, provider: str | None, project: str | None,
            as_json: bool) -> None:
    """Show clusters: VM state, TPU type/state/health/CIDR, run, uptime and hourly price.

    A queued resource that has no TPU yet (waiting, FAILED, SUSPENDED) shows as the cluster's TPU
    "(queued)" with its state, and a line on the quota it holds. With NAME, its run's goodput and
    badput by cause; --export-monitoring writes them to Cloud Monitoring as well (each call one
    point per metric: run it as often as the dashboards should move, at most every 5 s).

    \b
    Example:
      tpuctl status bert-lab --json
    """
    from .. import cluster
    from ..basics import validate
    from ..basics.errors import UsageError

    if name:
        validate.cluster_name(name)
    if zone:
        validate.zone(zone)
    if export_monitoring and not name:
        raise UsageError("--export-monitoring exports one cluster's run", hint="name it: tpuctl status NAME "
                                                                             "--export-monitoring")
    target = resolve_target(provider, project, zone)
    if export_monitoring and target.provider != "gcp":
        raise UsageError(f"--export-monitoring writes to Google Cloud Monitoring; the {target.provider} provider "
                         "has none", hint="export a run on Google Cloud (--provider gcp); this run's breakdown is "
                                          "in tpuctl status NAME --json")
    acting_on(target, "status", zone=zone or "all")
    prov = open_provider(target)
    from ..runs import store as runs

    latest = runs.latest_by_cluster()
    hosts: dict[str, list[dict]] = {}          # the host bootstrap statuses each run's summary read
    views = cluster.status(prov, name=name, zone=zone,
                           run_lookup=lambda c: run_summary(latest.get(c), target, hosts_read=hosts))
    if name:
        # one cluster asked about: its run's wall time by cause and its startup (a fleet's status
        # reads no more per run)
        for v in views:
            if v.run:
                v.run["goodput"] = run_goodput(prov, target, v.run, hosts=hosts.get(v.run["run_id"]))
                v.run["startup"] = (v.run["goodput"] or {}).get("startup")
    if name and not views:
        from ..basics.errors import UnknownName

        raise UnknownName(f"no cluster named {name} ({target.describe()})", hint="run tpuctl status to list clusters")
    if export_monitoring:
        with_run = [v for v in views if v.run]
        if not with_run:
            raise UsageError(f"cluster {name} has no run known on this machine: nothing to export",
                             hint=f"tpuctl train {name} --job SPEC starts one")
        for v in with_run:
            v.run["monitoring_export"] = export_run_goodput(
                prov, run_id=v.run["run_id"], goodput=v.run.get("goodput"), zone=v.zone,
                accelerator_type=v.tpu.accelerator_type if v.tpu else None, preemptions=v.run.get("preemptions"),
                step=v.run.get("step"))
    from .sweep import live_sweeps

    sweeps = [] if name else live_sweeps(target)
    if as_json:
        emit_json({"ok": True, "provider": target.provider, "project": target.project,
                   "price_source": prov.price_book().describe(), "clusters": [v.to_dict() for v in views],
                   "sweeps": sweeps})
        return
    # text others wrote (a host's bootstrap message and log line, a run's reason, a sweep's state)
    # is scrubbed of credentials here as --json scrubs it (emit_json)
    from ..basics.redact import redactor

    scrub = redactor()

    def echo(text: str) -> None:
        click.echo(scrub(text))

    _print_sweeps(sweeps, echo)
    if not views:
        echo("no clusters")
        return
    rows = [v.row() for v in views]
    echo(table(rows, cluster.ClusterView.HEADERS))
    for line in (v.queued_line() for v in views):
        if line:
            echo(line)
    for line in (v.startup_line() for v in views):
        if line:
            echo(line)
    runs = [v.run for v in views if v.run]
    if runs:
        echo("")
        echo(table([_run_row(r) for r in runs], RUN_HEADERS))
        for r in runs:
            for b in r.get("bootstrap_failed") or []:
                echo(f"{r['cluster']}: host bootstrap failed: {b['role']}-{b['worker']} at {b['step']}: "
                     f"{b['message']} (its log: tpuctl-bootstrap.log on that host; last line: "
                     f"{(b['log_tail'] or ['-'])[-1]})")
            if r.get("outputs"):
                echo(f"{r['run_id']} outputs in {r['model_dir']}: {', '.join(r['outputs'])}")
            if r["status"] in ("gave_up", "stopped") and r.get("reason"):
                echo(f"{r['run_id']} stopped: {r['reason']}")
            for line in pace_lines(r["run_id"], r.get("pace") or {}):
                echo(line)
            for line in goodput_lines(r["run_id"], r.get("goodput")):
                echo(line)
            if r.get("monitoring_export"):
                echo(export_line(r["run_id"], r["monitoring_export"]))
    echo("")
    for v in views:
        for line in v.price_lines():
            echo(line)
    echo(f"prices: {prov.price_book().brief()}")


def _print_sweeps(sweeps: list[dict], echo: Callable[[str], None]) -> None:
    """Live sweeps first: their pool clusters are in the table below."""
    for s in sweeps:
        best = s["best"]
        echo(f"sweep {s['sweep']} {s['state']}: {s['trials']} trial(s), {s['running']} running"
             + (f", best {s['metric']} {best['metric']:.4f} (trial {best['trial']})" if best else "")
             + ("" if s["controller_alive"] else f"; its controller is gone: tpuctl sweep resume {s['sweep']}"))
    if sweeps:
        echo("")


RUN_HEADERS = ("RUN", "CLUSTER", "STATUS", "STEP", "LOSS", "EXAMPLES/S", "PREEMPTIONS", "FAILURES", "LOST")


def _run_row(r: dict) -> list:
    from ..basics.validate import format_duration

    loss = r.get("loss")
    eps = r.get("examples_per_sec")
    status = r["status"]
    em, f1 = r.get("exact_match"), r.get("f1")
    if isinstance(em, (int, float)) and isinstance(f1, (int, float)):  # SQuAD: the official metrics
        status = f"{status} (EM {em:.1f}, F1 {f1:.1f})"
    reported = r.get("progress_reported", True)
    step = f"{r.get('step') or 0}/{r.get('num_train_steps')}" if reported else "no progress reported"
    lost = f"{r['steps_lost']} steps" if reported else "steps unknown"
    return [r["run_id"], r["cluster"], status, step,
            f"{loss:.4f}" if loss is not None else None, f"{eps:.1f}" if eps else None, r["preemptions"],
            r["failures"], f"{lost}, {format_duration(r['seconds_lost'])}"]


def run_summary(entry: dict | None, target, hosts_read: dict | None = None) -> dict | None:
    """The latest run of a cluster this machine started (``entry``: its index entry, None when
    there is none), as its record in the bucket says. A cluster with no run known here costs no
    import of the run modules (a tenth of ``status NAME``'s time) and no read of the bucket.
    ``hosts_read``: gets the hosts' bootstrap statuses read for it, by run id (its startup's)."""
    if entry is None or entry.get("provider") != target.provider:
        return None
    from ..basics.errors import TpuctlError
    from ..basics.records import BadRecord
    from ..cluster import bootstrap
    from ..runs import training
    from ..runs.pace import summary
    from .common import say

    try:
        store = training.open_store(entry, target)
        rec = store.load()
    except BadRecord as exc:
        # the rest of the table still shows: this record is named, and what is wrong with it
        say(f"{entry.get('cluster')}: its run {entry.get('run_id')} is not shown: {exc.one_line()}")
        return None
    except TpuctlError:
        return None
    p = rec.last_progress or {}
    metrics = p.get("metrics") if isinstance(p.get("metrics"), dict) else {}
    since = (rec.attempt or {}).get("tpu_created_at")
    try:
        statuses = bootstrap.read(store.bucket, rec.cluster)
    except TpuctlError:
        statuses = []
    down = bootstrap.failed(statuses, workers_since=since)
    if hosts_read is not None:
        hosts_read[rec.run_id] = [s.to_dict() for s in statuses]
    # a program of the user's that has reported no step yet (provision.runs.reports): its step is unknown
    reported = p.get("progress_reported") is not False
    return {"run_id": rec.run_id, "cluster": rec.cluster, "status": rec.status,
            "step": p.get("step") if reported else None, "progress_reported": reported,
            "num_train_steps": rec.num_train_steps, "loss": p.get("loss"),
            "examples_per_sec": p.get("examples_per_sec"), "preemptions": rec.preemptions,
            "failures": rec.failures, "steps_lost": rec.steps_lost, "seconds_lost": round(rec.seconds_lost, 1),
            "attempts": rec.attempts, "model_dir": rec.model_dir, "reason": rec.reason,
            "bootstrap_failed": [b.to_dict() for b in down],
            "outputs": [o for o in p.get("outputs") or [] if isinstance(o, str)], "pace": summary(rec),
            **{k: metrics[k] for k in ("exact_match", "f1") if k in metrics}}


def run_goodput(prov, target, run: dict, hosts: list[dict] | None = None) -> dict | None:
    """A run's goodput and badput by cause and its startup (provision.runs.goodput), priced as
    ``tpuctl cost RUN`` prices it; None when its records cannot be read. ``hosts``: the cluster's
    host bootstrap statuses, read already."""
    import time

    from ..billing import costs

    try:
        report = costs.cluster_cost(prov, target, run["cluster"], None, now=time.time(), run_ids={run["run_id"]},
                                    hosts=hosts)
    except Exception:  # noqa: BLE001 - the status table stands without it
        return None
    return next((r.goodput for r in report.runs if r.run_id == run["run_id"]), None)


def export_run_goodput(prov, *, run_id: str, goodput: dict | None, zone: str | None, accelerator_type: str | None,
                       preemptions: int | None = None, step: int | None = None) -> dict:
    """Write a run's goodput breakdown (provision.runs.goodput) to Cloud Monitoring as the workload
    metrics of Google's ML Goodput library (provision.runs.workload_metrics), one point each, now.
    Returns what was written; raises (exit 1) when nothing could be computed or Monitoring refused."""
    import time

    from ..basics.errors import CloudError, TpuctlError
    from ..runs import workload_metrics as wm

    if not goodput or goodput.get("wall_s") is None:
        raise TpuctlError(f"run {run_id}: its goodput could not be computed from its records, so nothing was "
                          "exported", hint=f"tpuctl cost {run_id} says what of its records cannot be read")
    if not zone:
        raise TpuctlError(f"run {run_id}: no zone known for it, which the workload's location label needs")
    series = wm.time_series(goodput, workload_id=run_id, location=zone, accelerator_type=accelerator_type,
                            end_time=time.time(), disruptions=preemptions, max_productive_step=step)
    try:
        written = prov.write_time_series(series)
    except CloudError as exc:
        raise CloudError(f"Cloud Monitoring did not take run {run_id}'s goodput: {_first_refusal(exc.message)}",
                         kind=exc.kind, hint=exc.hint or _refusal_hint(exc.message)) from None
    return {"project": getattr(prov, "project", None), "time_series": written, "workload_id": run_id,
            "location": zone, "resource_type": wm.RESOURCE_TYPE,
            "accelerator_type": wm.accelerator_label(accelerator_type), "values": wm.values(series)}


def _first_refusal(message: str) -> str:
    """Monitoring names every series it refused, each with the same reason: the first, and how many."""
    text = message.split(" failed: ", 1)[-1]
    head = "One or more TimeSeries could not be written: "
    if not text.startswith(head):
        return text
    parts = text[len(head):].split("; ")
    first = parts[0].split(": compute.googleapis.com/Workload{", 1)[0]
    return first + (f" (and {len(parts) - 1} more series)" if len(parts) > 1 else "")


def _refusal_hint(message: str) -> str | None:
    if "more frequently than the maximum sampling period" in message or "must be written in order" in message:
        return "a series takes a new point at most every 5 s: export again in a few seconds"
    return None


def export_line(run_id: str, e: dict) -> str:
    """The line that says what --export-monitoring wrote."""
    return (f"{run_id}: goodput written to Cloud Monitoring (project {e['project']}): {e['time_series']} time "
            f"series of compute.googleapis.com/workload/ on {e['resource_type']} workload_id={e['workload_id']} "
            f"location={e['location']}, accelerator_type={e['accelerator_type']}")


def goodput_lines(run_id: str, g: dict | None) -> list[str]:
    """The compact goodput block of ``status NAME`` and ``cost RUN``: goodput, the top badput causes
    with seconds and dollars, and each preemption by phase."""
    from ..basics.validate import format_duration
    from ..runs.goodput import lines

    def usd(v: float) -> str:
        return f"${v:,.2f}" if v >= 1 else f"${v:.4f}"

    return [f"{run_id}: {line}" if not line.startswith(" ") else line
            for line in lines(g or {}, duration=format_duration, usd=usd)]


def pace_lines(run_id: str, pace: dict) -> list[str]:
    """A run's pace in words (``pace`` as :func:`provision.runs.pace.summary` gives it): steps/s,
    ETA, spend by state, projected total and how it moved, caps; at the end, estimate against actual."""
    import time

    from ..basics.validate import format_duration
    from ..runs.caps import show_deadline

    def when(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    def usd(v: float) -> str:
        return f"${v:,.2f}" if v >= 1 else f"${v:.4f}"

    out = []
    parts = []
    if pace.get("steps_per_sec"):
        parts.append(f"{pace['steps_per_sec']:.3g} steps/s")
    if pace.get("eta"):
        parts.append(f"ETA {when(pace['eta'])} (in {format_duration(max(0.0, pace['eta'] - time.time()))})")
    by_state = {k: v for k, v in (pace.get("spent_usd_by_state") or {}).items() if v}
    if by_state or pace.get("spent_usd"):
        parts.append(f"{usd(pace.get('spent_usd') or 0)} spent" + (
            " (" + ", ".join(f"{k} {usd(v)}" for k, v in sorted(by_state.items())) + ")" if by_state else ""))
    if pace.get("projected_usd") is not None:
        moved = pace.get("moved") or {}
        parts.append(f"projected {usd(pace['projected_usd'])}" + (
            f" ({usd(moved['usd_first'])}, done {when(moved['eta_first'])}, at first)" if moved.get("usd_first") else ""))
    caps = []
    if pace.get("budget_usd") is not None:
        caps.append(f"budget ${pace['budget_usd']:g} ({(pace.get('spent_usd') or 0) / pace['budget_usd']:.0%} spent)")
    if pace.get("deadline") is not None:
        caps.append(f"deadline {show_deadline(pace['deadline'])}")
    if caps:
        parts.append(", ".join(caps))
    if parts:
        out.append(f"{run_id}: " + "; ".join(parts))
    vs = pace.get("vs_estimate")
    if vs:
        def err(e: float | None) -> str:
            return f" (estimate {e:+.0%})" if e is not None else ""

        out.append(f"{run_id}: estimate vs actual for {vs['steps']} steps: {format_duration(vs['estimate_s'])} vs "
                   f"{format_duration(vs['actual_s'])}{err(vs['time_error'])}, {usd(vs['estimate_usd'])} vs "
                   f"{usd(vs['actual_usd'])}{err(vs['usd_error'])}; starting took "
                   f"{format_duration(vs['starting_s'])} ({usd(vs['starting_usd'])}) besides")
    elif (pace.get("estimate") or {}).get("none"):
        out.append(f"{run_id}: no estimate: {pace['estimate']['none']}")
    return out
