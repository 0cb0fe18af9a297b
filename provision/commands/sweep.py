"""``tpuctl sweep SPEC``: a hyperparameter search over a pool of TPUs; ``sweep status|stop|resume``."""

from __future__ import annotations

import click

from .common import (
    DEFAULT_ACCOUNT_NOTE,
    acting_on,
    dry_run_option,
    emit_json,
    json_option,
    open_provider,
    provider_options,
    resolve_target,
    say,
)

SUBCOMMANDS = ("start", "status", "stop", "resume")


class _SweepGroup(click.Group):
    """``tpuctl sweep SPEC`` means ``tpuctl sweep start SPEC``: the search is the default."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["start", *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``tpuctl sweep --help`` shows what ``tpuctl sweep SPEC`` takes (the options of ``sweep
        start``), not only ``--help`` and the subcommands: SPEC is what people type."""
        click.Command.format_options(self, ctx, formatter)
        start = self.commands["start"]
        sub = click.Context(start, info_name="start", parent=ctx)
        rows = [rec for param in start.get_params(sub) if isinstance(param, click.Option)
                and "--help" not in param.opts and (rec := param.get_help_record(sub)) is not None]
        with formatter.section("Options of tpuctl sweep SPEC (tpuctl sweep start SPEC)"):
            formatter.write_dl(rows)
        self.format_commands(ctx, formatter)


@click.group("sweep", cls=_SweepGroup, short_help="Search hyperparameters, one supervised run per trial")
def command() -> None:
    """Search hyperparameters: one supervised run per trial on a pool of TPUs (docs/sweeps.md).

    \b
      tpuctl sweep templates/sweep-tiny.yaml --max-concurrent 2 --preemptible
      tpuctl sweep status SWEEP
      tpuctl sweep stop SWEEP
      tpuctl sweep resume SWEEP      (after its controller died)
      tpuctl sweep SPEC --bucket gs://B --detach --host CLUSTER   (GCP: CLUSTER's host VM drives it)

    \b
    Example:
      tpuctl sweep templates/sweep-tiny.yaml --max-concurrent 2 --dry-run
    """


@command.command("start", short_help="Run the sweep in SPEC (what tpuctl sweep SPEC does)")
@click.argument("spec", metavar="SPEC")
@click.option("--zone", "-z", "zone", metavar="ZONE[,ZONE...]", help="Zone, or zones in failover order, of the pool.")
@click.option("--accelerator-type", "-a", default="v2-8", show_default=True, metavar="TYPE[,TYPE...]",
              help="TPU type of the pool; several that would all do are tried cheapest first, as tpuctl up does.")
@click.option("--preemptible", is_flag=True, help="Preemptible pool TPUs.")
@click.option("--spot", is_flag=True, help="Spot pool TPUs.")
@click.option("--service-account", metavar="EMAIL", help="Service account of the pool's TPU VMs.")
@click.option("--bucket", metavar="gs://BUCKET", help="Where the sweep and its trials live (local: a local bucket).")
@click.option("--workdir", metavar="DIR", help="Your code, staged once for every trial (default for job: command: "
                                              "the job spec's directory).")
@click.option("--max-concurrent", type=click.IntRange(min=1, max=64), default=None,
              help="At most this many TPUs (trials at once); default: the spec's, else 1.")
@click.option("--max-trials", type=click.IntRange(min=1, max=10000), default=None,
              help="At most this many trials (overrides the spec's max_trials).")
@click.option("--budget-usd", type=click.FloatRange(min=0.0), default=None,
              help="Start no trial whose estimated cost would pass this (list price).")
@click.option("--max-failures", type=click.IntRange(min=0), default=1, show_default=True,
              help="Job errors a trial's run restarts after.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.5, max=10.0), default=10.0, show_default=True,
              help="Seconds between checks of each trial.")
@click.option("--notify", "notify", multiple=True, metavar="CHANNEL[,CHANNEL]",
              help="Channels told of a new best trial and the sweep's end (tpuctl notify add; default: the "
                   "config file's; none: no message).")
@click.option("--detach", is_flag=True, help="Run the controller detached (local: a process here; GCP: on the "
                                              "--host VM); the laptop may disconnect.")
@click.option("--host", "host_name", metavar="CLUSTER",
              help="GCP, with --detach: the tpuctl cluster whose host VM runs the controller.")
@provider_options
@dry_run_option
@json_option
def start(spec: str, zone: str | None, accelerator_type: str, preemptible: bool, spot: bool,
          service_account: str | None, bucket: str | None, workdir: str | None,
          max_concurrent: int | None, max_trials: int | None, budget_usd: float | None, max_failures: int,
          poll_s: float, notify: tuple[str, ...], detach: bool, host_name: str | None, provider: str | None,
          project: str | None, dry_run: bool, as_json: bool) -> None:
    """Run the sweep in SPEC (job, metric, goal, method, pruner, parameters).

    \b
    Example:
      tpuctl sweep start templates/sweep-tiny.yaml --max-trials 3 --preemptible --dry-run
    """
    from ..basics.templates import spec_path as shipped_spec
    from ..sweeps.spec_file import read_spec

    # the spec first, the cheapest check: a missing or unreadable file imports nothing more
    spec = shipped_spec(spec)
    read = read_spec(spec)
    from ..basics import validate
    from ..basics.errors import UsageError
    from ..sweeps import create

    if preemptible and spot:
        raise UsageError("--preemptible and --spot both given", hint="choose one of them")
    if service_account:
        validate.service_account(service_account)
    if bucket:
        bucket = str(validate.bucket_url(bucket))
    target = resolve_target(provider, project, zone.split(",")[0] if zone else None)
    from ..notify.runtime import chosen
    from ..notify.settings import parse_names

    channels = chosen(parse_names(notify), None, provider=target.provider, detached=detach)
    # every problem of the sweep and job specs, before any cloud is asked anything
    checked = create.check(spec, provider=target.provider, max_trials=max_trials, read=read, workdir=workdir)
    from .. import cluster
    from ..catalog.prices import usd_text
    from ..runs import store as runs
    from ..sweeps.store import SweepStore

    zones = validate.zones(zone) if zone else validate.zones(target.zone or cluster.default_zone(target))
    host = _check_host(target, detach, host_name)
    if host and not service_account and host.service_account:
        # the host attaches the pool's account to every TPU VM it creates: its own needs no more roles
        service_account = host.service_account
        say(f"the pool's TPU VMs run as host {host.cluster}'s service account {service_account} "
            f"(--service-account chooses another)")
    bucket_url = runs.check_bucket_for(target.provider, bucket or (host.bucket if host else None))
    plan = create.plan(spec, provider=target.provider, project=target.project, bucket=bucket_url, zones=zones,
                       accelerator_type=accelerator_type, preemptible=preemptible, spot=spot,
                       max_concurrent=max_concurrent, max_trials=max_trials, budget_usd=budget_usd,
                       poll_s=poll_s, max_failures=max_failures, book=open_provider(target).price_book(),
                       service_account=service_account, checked=checked)
    rec = plan.record
    rec.notify = channels.to_dict() if channels.channels else None
    acting_on(target, "sweep", zone=",".join(zones))
    if target.provider == "gcp" and not service_account and not dry_run:
        say(DEFAULT_ACCOUNT_NOTE.format(what="the sweep's pool TPU VMs"))
    if dry_run:
        from ..sweeps.budget import Outlook

        # the total against --budget-usd, as far as it can be known before a trial has run
        outlook = Outlook(trials=rec.max_trials, pool=rec.max_concurrent, hourly_usd=rec.hourly_usd or 0.0,
                          budget_usd=rec.budget_usd)
        doc = {"ok": True, "dry_run": True, "sweep": rec.sweep_id, "bucket": bucket_url, "spec": plan.spec.to_dict(),
               "max_trials": rec.max_trials, "max_concurrent": rec.max_concurrent,
               "grid_size": plan.spec.grid_size, "hourly_usd_per_tpu": rec.hourly_usd, "price": rec.price,
               "host": host.cluster if host else None, "budget": outlook.to_dict()}
        if as_json:
            emit_json(doc)
        else:
            click.echo(f"dry run: sweep {rec.sweep_id} would run up to {rec.max_trials} trial(s) of "
                       f"{plan.spec.method} search on up to {rec.max_concurrent} {rec.accelerator_type} TPU(s) "
                       f"({usd_text((rec.price or {}).get('usd_per_hour', rec.hourly_usd))}/hour each: "
                       f"{(rec.price or {}).get('region')} "
                       f"{(rec.price or {}).get('tier')}, {(rec.price or {}).get('source')}, "
                       f"{(rec.price or {}).get('date')}); nothing was created")
            click.echo(f"cost: {outlook.line()}")
        return
    prov = open_provider(target)
    _check_images(prov, rec, zones)
    store = SweepStore(_open_bucket(bucket_url, target), rec.sweep_id)
    if not store.bucket.exists():
        if target.provider == "local" and bucket_url == runs.LOCAL_DEFAULT_BUCKET:
            store.bucket.create("local")
        else:
            raise UsageError(f"bucket {bucket_url} does not exist",
                             hint=f"create it with gcloud storage buckets create {bucket_url} --location REGION")
    if host:
        from ..sweeps.handover import check_bucket

        check_bucket(host, bucket_url)
    rec.detached = detach
    rec.host = host.cluster if host else None
    create.write(store, plan)
    say(f"sweep {rec.sweep_id}: {plan.spec.method} over {', '.join(plan.spec.names)}, up to {rec.max_trials} "
        f"trial(s), {rec.max_concurrent} at once; lives in {bucket_url}/{store.prefix}")
    if detach:
        where = _hand_over(prov, target, store, host)
        say(f"sweep {rec.sweep_id} is driven by {where}; follow it with tpuctl sweep status {rec.sweep_id}")
        if as_json:
            emit_json({"ok": True, "sweep": rec.sweep_id, "detached": True, "bucket": bucket_url,
                       "where": f"{bucket_url}/{store.prefix}"})
        else:
            click.echo(rec.sweep_id)
        return
    _drive(prov, target, store, where="foreground", as_json=as_json)


def _open_bucket(url: str, target):
    from ..cloud.storage import open_bucket

    return open_bucket(url, target)


def _check_images(prov, rec, zones) -> None:
    """The pool's TPUs get an image in some zone (the controller creates them later, far from
    this terminal): a sweep whose zones offer none stops here, in one line, before anything exists."""
    from ..basics.errors import UsageError
    from ..catalog.accelerators import parse
    from ..catalog.zones import suggested_zone
    from ..cloud.base import ClusterSpec
    from ..cluster.offers import Offers, plan_zones

    refused = []
    for name in rec.accelerator_type.split(","):
        offered = [z for z in zones if prov.offered(z, name)]
        try:
            if not offered:
                raise UsageError(f"{name} is not offered in {', '.join(zones)}",
                                 hint="pick a zone that offers it (gcloud compute tpus accelerator-types list "
                                      f"--zone ZONE), e.g. --zone {suggested_zone(parse(name).generation.name)}")
            probe = ClusterSpec(name="sweep-check", accelerator_type=name, zones=tuple(offered),
                                provider=rec.provider, project=rec.project or None, machine_type=None)
            plan_zones(Offers(prov), probe, offered, tpu=True, vm=False)
            return                      # one type that can be had is enough: the pool's up picks per trial
        except UsageError as exc:
            refused.append(exc)
    raise refused[0]


def _check_host(target, detach: bool, host_name: str | None):
    """The host VM a detached GCP sweep's controller runs on, checked before anything is created."""
    from ..basics.errors import UsageError

    if host_name and not detach:
        raise UsageError("--host names where a detached sweep's controller runs", hint="add --detach, or drop --host")
    if not detach or target.provider == "local":
        if host_name:
            raise UsageError("--host is for GCP sweeps",
                             hint="drop --host: on the local provider the detached controller runs on this machine")
        return None
    if not host_name:
        raise UsageError("--detach on GCP needs --host CLUSTER, a tpuctl cluster whose host VM runs the controller",
                         hint="create one with tpuctl up NAME --zone ZONE (add --autodown 30m), then pass --host NAME; "
                              "or drop --detach and keep this machine up")
    from ..sweeps.handover import check_host

    return check_host(open_provider(target), host_name)


def _hand_over(prov, target, store, host) -> str:
    """Local: a detached controller process on this machine. GCP: the --host VM's agent runs it."""
    import os
    import subprocess
    import sys

    from ..basics import private
    from ..sweeps.store import local_dir

    if prov.name != "local":
        from ..sweeps.handover import hand_over

        return hand_over(prov, store, host, log=say)
    log_path = local_dir(store.sweep_id) / "controller.log"
    with open(log_path, "ab", opener=private.opener) as out:
        subprocess.Popen([sys.executable, "-m", "provision", "sweep", "resume", store.sweep_id, "--where", "host",
                          "--provider", "local", "--bucket", store.bucket.url],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=dict(os.environ))
    return f"a detached controller on this machine (log: {log_path})"


def _drive(prov, target, store, *, where: str, as_json: bool, pinned_on: str | None = None) -> None:
    from ..basics.errors import JobFailed
    from ..sweeps.controller import Controller

    ctl = Controller(prov, target, store, where=where, log=say, pinned_on=pinned_on)
    rec = ctl.run()
    doc = _document(store)
    if as_json:
        emit_json(doc)
    else:
        _print(doc)
    if rec.state == "failed":
        raise JobFailed(f"sweep {rec.sweep_id} failed: {rec.reason}", hint=f"see tpuctl sweep status {rec.sweep_id}")


def _locate(sweep: str, bucket: str | None, provider: str | None, project: str | None):
    """The sweep's store: --bucket, else this machine's index of sweeps."""
    from ..basics import validate
    from ..basics.errors import UnknownName
    from ..runs import store as runs
    from ..sweeps.store import SweepStore, check_id, lookup

    check_id(sweep)
    entry = lookup(sweep)
    if bucket:
        bucket = str(validate.bucket_url(bucket))
    elif entry:
        bucket = entry["bucket"]
    target = resolve_target(provider or (entry or {}).get("provider"),
                            project or ((entry or {}).get("project") or None))
    if not bucket:
        if target.provider == "local":
            bucket = runs.LOCAL_DEFAULT_BUCKET
        else:
            raise UnknownName(f"no sweep {sweep} is known on this machine", hint="pass --bucket gs://B where it lives")
    return target, SweepStore(_open_bucket(bucket, target), sweep)


def _document(store) -> dict:
    from ..sweeps import view
    from ..sweeps.store import controller_alive

    rec = store.load()
    lease = store.controller()
    return view.document(rec, store.trials(), controller=lease, alive=controller_alive(lease))


def _print(doc: dict) -> None:
    from ..basics.text import table
    from ..sweeps import view

    click.echo(view.headline(doc))
    if doc["trials"]:
        click.echo(table(view.rows(doc), view.HEADERS))
    line = view.best_line(doc)
    if line:
        click.echo(line)


@command.command("status", short_help="Show SWEEP's trials, the best marked *")
@click.argument("sweep")
@click.option("--bucket", metavar="gs://BUCKET", help="Where the sweep lives (default: this machine's record of it).")
@provider_options
@json_option
def status(sweep: str, bucket: str | None, provider: str | None, project: str | None, as_json: bool) -> None:
    """Show SWEEP's trials (parameters, state, metric, steps, preemptions, cost), the best marked *.

    \b
    Example:
      tpuctl sweep status sweep-20261124-172012-a8de --json
    """
    _target, store = _locate(sweep, bucket, provider, project)
    doc = _document(store)
    if doc["state"] == "running" and not doc["controller"]["alive"]:
        doc["reason"] = _no_controller(doc, sweep)
    if as_json:
        emit_json(doc)
    else:
        _print(doc)


def _no_controller(doc: dict, sweep: str) -> str:
    """Why a running sweep has no live controller, and what to do about it."""
    beat, host = doc["controller"]["heartbeat_at"], doc.get("host")
    if host and not beat:
        return (f"waiting for host VM {host}'s agent to start its controller (a host that never ran tpuctl installs "
                f"it first: minutes)")
    if host:
        return (f"its controller is gone (last heartbeat at {beat}); host VM {host}'s agent restarts it, or "
                f"tpuctl sweep resume {sweep} continues it here")
    return f"its controller is gone (last heartbeat at {beat}); tpuctl sweep resume {sweep} continues it"


@command.command("stop", short_help="Stop SWEEP's trials and delete its pool TPUs")
@click.argument("sweep")
@click.option("--bucket", metavar="gs://BUCKET", help="Where the sweep lives (default: this machine's record of it).")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until the controller has stopped.")
@provider_options
@json_option
def stop(sweep: str, bucket: str | None, wait: bool, provider: str | None, project: str | None, as_json: bool) -> None:
    """Stop SWEEP: its running trials stop (checkpoints kept), its pool TPUs are deleted.

    \b
    Example:
      tpuctl sweep stop sweep-20261124-172012-a8de
    """
    import time

    from ..runs.lease import LeaseBusy
    from ..sweeps.controller import Controller
    from ..sweeps.store import controller_alive

    target, store = _locate(sweep, bucket, provider, project)
    rec = store.load()
    acting_on(target, "sweep stop", zone=",".join(rec.zones))
    if rec.live:
        store.write_json("stop.json", {"time": time.time()})

        def wait_for_controller() -> None:
            say(f"asked sweep {sweep}'s controller to stop")
            deadline = time.time() + 300
            while wait and time.time() < deadline and store.load().live and controller_alive(store.controller()):
                time.sleep(1.0)

        if controller_alive(store.controller()):
            wait_for_controller()
        if store.load().live and not controller_alive(store.controller()):
            say(f"sweep {sweep} has no live controller: stopping its trials and deleting its pool here")
            try:
                Controller(open_provider(target), target, store, where="stop", log=say).stop_here(
                    "stopped by tpuctl sweep stop")
            except LeaseBusy:
                # a controller (a `sweep resume` just started) took the sweep first: it reads
                # stop.json before it adopts or starts anything
                wait_for_controller()
    doc = _document(store)
    if as_json:
        emit_json(doc)
    else:
        _print(doc)


@command.command("resume", short_help="Continue SWEEP after its controller died")
@click.argument("sweep")
@click.option("--bucket", metavar="gs://BUCKET", help="Where the sweep lives (default: this machine's record of it).")
@click.option("--where", default="foreground", hidden=True)
@click.option("--pinned-on", "pinned_on", default=None, hidden=True,
              help="The host VM's agent starts it: drive the sweep only as that cluster's host pinned it.")
@click.option("--detach", is_flag=True, help="Run the controller detached (GCP: on the --host VM).")
@click.option("--host", "host_name", metavar="CLUSTER",
              help="GCP, with --detach: the tpuctl cluster whose host VM runs the controller.")
@provider_options
@json_option
def resume(sweep: str, bucket: str | None, where: str, pinned_on: str | None, detach: bool, host_name: str | None,
           provider: str | None, project: str | None, as_json: bool) -> None:
    """Continue SWEEP after its controller died: running trials' runs are adopted, finished ones kept.

    \b
    Example:
      tpuctl sweep resume sweep-20261124-172012-a8de
    """
    from ..basics import validate
    from ..basics.errors import UsageError
    from ..sweeps.store import controller_alive, remember

    if pinned_on:
        validate.cluster_name(pinned_on)
    target, store = _locate(sweep, bucket, provider, project)
    rec = store.load()
    if not rec.live:
        raise UsageError(f"sweep {sweep} is {rec.state}", hint=f"see tpuctl sweep status {sweep}")
    if controller_alive(store.controller()) and where != "host":
        raise UsageError(f"sweep {sweep} still has a live controller", hint=f"follow it with tpuctl sweep status {sweep}")
    host = _check_host(target, detach, host_name)
    if host:
        from ..sweeps.handover import check_bucket

        check_bucket(host, store.bucket.url)
        rec.host = host.cluster
        store.save(rec)
    remember(rec)
    prov = open_provider(target)
    acting_on(target, "sweep resume", zone=",".join(rec.zones))
    if detach:
        where_text = _hand_over(prov, target, store, host)
        if as_json:
            emit_json({"ok": True, "sweep": sweep, "detached": True, "where": where_text})
        else:
            click.echo(sweep)
        return
    _drive(prov, target, store, where=where, as_json=as_json, pinned_on=pinned_on)


def live_sweeps(target) -> list[dict]:
    """Sweeps this machine knows whose controller is alive (for ``tpuctl status``)."""
    from ..basics.errors import TpuctlError
    from ..sweeps.store import SweepStore, controller_alive, known

    out = []
    for entry in known():
        if entry.get("provider") != target.provider:
            continue
        try:
            store = SweepStore(_open_bucket(entry["bucket"], target), entry["sweep_id"])
            rec = store.load()
        except TpuctlError:
            continue
        if not rec.live:
            continue
        doc = _document(store)
        out.append({"sweep": rec.sweep_id, "state": doc["state"], "metric": doc["metric"],
                    "controller_alive": controller_alive(store.controller()),
                    "trials": len(doc["trials"]), "running": sum(t["state"] == "running" for t in doc["trials"]),
                    "best": doc["best"]})
    return out
