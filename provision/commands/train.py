"""``tpuctl train CLUSTER --job SPEC``: a supervised run that survives preemption."""

from __future__ import annotations

import click

from ..basics.validate import LONGEST_POLL_S
from .common import (
    acting_on,
    dry_run_option,
    emit_json,
    json_option,
    open_provider,
    parse_sets,
    provider_options,
    resolve_target,
    say,
)
from .up import complete_cluster


@click.command("train", short_help="Run a job spec on a cluster through preemptions")
@click.argument("cluster", shell_complete=complete_cluster)
@click.option("--job", "job_spec", metavar="SPEC", help="Job spec YAML (see templates/).")
@click.option("--attach", is_flag=True,
              help="Supervise the cluster's live run again (after this machine or its supervisor died).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a job spec value (repeatable).")
@click.option("--bucket", metavar="gs://BUCKET", help="Bucket for the run's records and checkpoints "
                                                      "(default: the cluster's; local: a local bucket).")
@click.option("--workdir", metavar="DIR",
              help="Your code: staged with the run; job: command runs in it, job: keras finds its module there "
                   "(default for job: command: the spec's directory).")
@click.option("--code", metavar="DIR", hidden=True, help="Deprecated: --workdir.")
@click.option("--allow-local-paths", is_flag=True,
              help="Paths in the spec are on a filesystem the hosts mount at the same place (NFS, Filestore).")
@click.option("--detach", is_flag=True, help="Supervise from the always-on host; the laptop may disconnect.")
@click.option("--max-preemptions", type=click.IntRange(min=0), default=None,
              help="Give up after this many preemptions (default: unbounded, preemption is expected).")
@click.option("--max-failures", type=click.IntRange(min=0), default=3, show_default=True,
              help="Job errors (exit codes other than 0 and 42) to restart after; the next one stops the run.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.5, max=LONGEST_POLL_S), default=LONGEST_POLL_S,
              show_default=True,
              help="Seconds between checks of the TPU and the job (at most 10, with jitter).")
@click.option("--notify", "notify", multiple=True, metavar="CHANNEL[,CHANNEL]",
              help="Channels told of preemptions, stalls, failures and the end (tpuctl notify add; "
                   "default: the config file's; none: no message).")
@click.option("--on-interrupt", type=click.Choice(["ask", "leave", "stop"]), default="ask", show_default=True,
              help="What Ctrl-C does: ask, leave the run supervised on the host, or stop it.")
@click.option("--budget-usd", "budget_usd", type=float, default=None, metavar="USD",
              help="Stop on a checkpoint and delete the TPU before the run's list-price spend passes this.")
@click.option("--deadline", metavar="TIME",
              help="Stop on a checkpoint and delete the TPU once the run cannot finish by then "
                   "(ISO 8601, e.g. 2026-12-01T08:00, local time unless it names an offset).")
@provider_options
@dry_run_option
@json_option
def command(cluster: str, job_spec: str | None, attach: bool, sets: tuple[str, ...], bucket: str | None,
            workdir: str | None, code: str | None,
            allow_local_paths: bool, detach: bool, max_preemptions: int | None, max_failures: int, poll_s: float,
            notify: tuple[str, ...], on_interrupt: str,
            budget_usd: float | None, deadline: str | None,
            provider: str | None, project: str | None, dry_run: bool, as_json: bool) -> None:
    """Run a job spec on CLUSTER and recover it from preemptions.

    The run gets a stable id; its spec, your code and this exact tpuctl (as a wheel) go to the
    run's directory in the bucket, with its event log. A preempted or unhealthy TPU is recreated
    with the same name, type and IP range, and the job resumes from its newest checkpoint.

    The example checks a pretraining run of the tiny BERT that python -m jobs.bert.tiny .demo/tiny makes (the README tour),
    once tpuctl stage has put it in gs://my-bucket/bert/tiny.

    \b
    Example:
      tpuctl train bert-lab --job templates/bert-pretrain-tiny.yaml --bucket gs://my-bucket --dry-run --set bert_dir=gs://my-bucket/bert/tiny --set corpus_files=gs://my-bucket/bert/tiny/corpus.txt
    """
    from pathlib import Path

    from .. import cluster as clusters
    from ..basics import validate
    from ..basics.errors import JobFailed, NotFound, UnknownName, UsageError
    from ..basics.templates import spec_path
    from ..runs import store as runs
    from ..runs import training

    validate.cluster_name(cluster)
    pairs = parse_sets(sets)
    from ..notify import settings as notify_settings

    notify_names = notify_settings.parse_names(notify)
    if code is not None:
        if workdir is not None:
            raise UsageError("--code is the old name of --workdir", hint="pass only --workdir DIR")
        click.echo("tpuctl: warning: --code is deprecated: pass --workdir DIR (the same directory)", err=True)
        workdir = code
    if attach:
        if job_spec or sets or budget_usd is not None or deadline is not None or notify:
            raise UsageError("--attach resumes supervising an existing run, with the caps and channels it started with",
                             hint="drop --job, --set, --budget-usd, --deadline and --notify")
        return _attach(cluster, provider, project, poll_s=poll_s, on_interrupt=on_interrupt, as_json=as_json)
    if not job_spec:
        raise UsageError("missing --job", hint="pass --job templates/bert-finetune.yaml (or --attach to re-attach)")
    job_spec = spec_path(job_spec)
    if not Path(job_spec).is_file():
        raise UsageError(f"job spec {job_spec} not found",
                         hint="pass --job templates/bert-finetune.yaml or another YAML file")
    if bucket:
        validate.bucket_url(bucket)
    target = resolve_target(provider, project)
    from ..notify.runtime import chosen, encode

    channels = chosen(notify_names, cluster, provider=target.provider, detached=detach)
    prov = open_provider(target)
    found = clusters.find(prov, cluster)
    tpu = found.tpu
    if found.empty:
        raise UnknownName(f"no cluster named {cluster} ({target.describe()})", hint="run tpuctl status to list clusters")
    if tpu is None:
        raise NotFound(f"cluster {cluster} has no TPU ({target.describe()})", hint=f"run tpuctl up {cluster} first")
    acting_on(target, "train", zone=tpu.zone)
    spec = training.cluster_spec_for(prov, cluster, tpu)
    bucket_url = runs.check_bucket_for(target.provider, bucket or spec.bucket)
    spec = training.cluster_spec_for(prov, cluster, tpu, bucket=bucket_url)
    if detach and target.provider != "local" and not spec.machine_type:
        raise UsageError("--detach needs the cluster's host VM to supervise the run",
                         hint="recreate the cluster with a host VM (no --no-vm), or train without --detach")
    prep = training.prepare(prov, target, spec, tpu, job_spec=job_spec, sets=pairs, bucket=bucket_url, code=workdir,
                            max_preemptions=max_preemptions, max_failures=max_failures,
                            allow_local=allow_local_paths, budget_usd=budget_usd, deadline=deadline)
    rec = prep.record
    rec.poll_s = poll_s
    if prep.backend is not None:
        say(prep.backend.line())      # which Keras backend the job runs on, and why
    for line in prep.needs.said if prep.needs else ():
        say(line)        # a framework installed on the hosts is never a surprise
    prep.notify = encode(channels) if channels.channels else None
    if dry_run:
        sel = prep.code
        doc = {"ok": True, "dry_run": True, "run_id": rec.run_id, "cluster": cluster, "bucket": bucket_url,
               "model_dir": rec.model_dir, "job": rec.job, "num_train_steps": rec.num_train_steps,
               "would_stage": ["spec.yaml", "tpuctl wheel"] + [f"workdir/{f}" for f in (sel.files if sel else ())],
               "notify": [c.name for c in channels.channels]}
        if prep.backend is not None:
            doc["backend"] = {"name": prep.backend.name, "reason": prep.backend.reason}
        if prep.needs is not None:
            doc["requirements"] = list(prep.needs.lines)
            doc["frameworks"] = list(prep.needs.said)
        if sel is not None:
            doc["workdir"] = str(sel.root)
            doc["workdir_left_out"] = [{"path": s.path, "why": s.why} for s in sel.skipped]
        doc.update(budget_usd=rec.budget_usd, deadline=rec.deadline, estimate=rec.estimate)
        if as_json:
            emit_json(doc)
        else:
            click.echo(f"dry run: would start run {rec.run_id} ({rec.job}, {rec.num_train_steps} steps) on {cluster}; "
                       f"model_dir {training.as_typed(rec.model_dir)}; nothing was staged or started")
            click.echo(_plan_line(rec))
            if sel is not None:
                click.echo(f"would stage {len(sel.files)} file(s) of the workdir {sel.root}:")
                for f in sel.files:
                    click.echo(f"  workdir/{f}")
                for s in sel.skipped:
                    click.echo(f"  left out {s.path} ({s.why})")
        return

    store = training.open_store(rec, target)
    if not store.bucket.exists():
        if target.provider == "local" and bucket_url == runs.LOCAL_DEFAULT_BUCKET:
            store.bucket.create("local")
        else:
            raise UsageError(f"bucket {bucket_url} does not exist",
                             hint=f"create it with gcloud storage buckets create {bucket_url} --location REGION, "
                                  f"or stage data into it with tpuctl stage SRC {bucket_url} --create-bucket")
    pin = training.stage_run(store, prep, say, prov)
    if hasattr(prov, "point_hosts_at"):
        # hosts created without --bucket learn it now, through their metadata
        prov.point_hosts_at(spec, bucket_url)
    say(f"run {rec.run_id}: {rec.job}, {rec.num_train_steps} steps, model_dir {training.as_typed(rec.model_dir)}")
    say(_plan_line(rec))
    if detach:
        where = training.hand_over(prov, target, store, rec, spec)
        say(f"run {rec.run_id} is supervised by {where}; follow it with tpuctl logs {rec.run_id} -f")
        if as_json:
            emit_json({"ok": True, "run_id": rec.run_id, "detached": True, "bucket": bucket_url,
                       "model_dir": rec.model_dir})
        else:
            click.echo(rec.run_id)
        return

    rec = _supervise_foreground(prov, target, spec, store, rec, poll_s=poll_s, on_interrupt=on_interrupt, pin=pin)
    if as_json:
        emit_json({"ok": rec.status == "finished", "run": rec.to_dict()})
    else:
        click.echo(_summary(rec))
    if rec.status == "gave_up" or rec.stopped_by:
        raise JobFailed(f"run {rec.run_id} stopped: {rec.reason}", hint=_ended_hint(rec))


def _attach(cluster: str, provider: str | None, project: str | None, *, poll_s: float, on_interrupt: str,
            as_json: bool) -> None:
    from ..basics.errors import JobFailed, UnknownName
    from ..cluster import find
    from ..runs import store as runs
    from ..runs import training

    entry = runs.latest_for(cluster)
    if entry is None:
        raise UnknownName(f"no run of cluster {cluster} is known on this machine",
                       hint=f"start one with tpuctl train {cluster} --job SPEC")
    target = resolve_target(provider or entry.get("provider"), project or (
        entry.get("project") if entry.get("provider") == "gcp" else None))
    prov = open_provider(target)
    store = training.open_store(entry, target)
    rec = store.load()
    acting_on(target, "train --attach", zone=rec.zone)
    if rec.live:
        spec = training.cluster_spec_for(prov, cluster, find(prov, cluster).tpu, bucket=rec.bucket)
        say(f"re-attaching to run {rec.run_id} ({rec.status}, step {rec.step}/{rec.num_train_steps})")
        from ..runs.supervisor import LEASE_STALE_S

        rec = _supervise_foreground(prov, target, spec, store, rec, poll_s=poll_s, on_interrupt=on_interrupt,
                                    take_over=False, wait_for_lease=LEASE_STALE_S + 5)
    if as_json:
        emit_json({"ok": rec.status == "finished", "run": rec.to_dict()})
    else:
        click.echo(_summary(rec))
    if rec.status == "gave_up" or rec.stopped_by:
        raise JobFailed(f"run {rec.run_id} stopped: {rec.reason}", hint=_ended_hint(rec))


def _ended_hint(rec) -> str:
    """What to do after a run that did not finish: its log, and where its checkpoint is, named only
    when its progress reported one (a run stopped before its first save has none to go on from)."""
    from ..runs import training

    where = training.as_typed(rec.model_dir)
    ckpt = (rec.last_progress or {}).get("checkpoint_step")
    if rec.stopped_by and ckpt is not None:
        return (f"its checkpoint of step {ckpt} is in {where} and its TPU was deleted: to go on, tpuctl up "
                f"{rec.cluster}, then tpuctl train {rec.cluster} with --set model_dir={where} and a larger cap")
    if rec.stopped_by:
        return (f"it reported no checkpoint before it stopped, and its TPU was deleted: to start again, tpuctl up "
                f"{rec.cluster}, then tpuctl train {rec.cluster} with a larger cap")
    if ckpt is not None:
        return f"see tpuctl logs {rec.run_id}; its checkpoint of step {ckpt} is kept in {where}"
    return f"see tpuctl logs {rec.run_id}; it reported no checkpoint"


def _plan_line(rec) -> str:
    """The run's estimate and caps in one line, as it starts."""
    from ..basics.validate import format_duration
    from ..runs.caps import show_deadline

    est = rec.estimate or {}
    if est.get("total_s") is not None:
        text = (f"estimate: {format_duration(est['total_s'])} and ${est['total_usd']:.2f} on {est['accelerator_type']} "
                f"{est['tier']} ({est['speed_source']} speed; tpuctl estimate shows the basis)")
    else:
        text = f"no estimate: {est.get('none') or 'none made'}"
    caps = [f"budget ${rec.budget_usd:g}"] if rec.budget_usd is not None else []
    if rec.deadline is not None:
        caps.append(f"deadline {show_deadline(rec.deadline)}")
    return text + (f"; caps: {', '.join(caps)}" if caps else "")


def _summary(rec) -> str:
    from ..basics.validate import format_duration

    line = (f"run {rec.run_id} {rec.status} at step {rec.step}/{rec.num_train_steps}: "
            f"{rec.attempts} attempt(s), {rec.preemptions} preemption(s), {rec.failures} job error(s), "
            f"{rec.steps_lost} step(s) and {format_duration(rec.seconds_lost)} lost to them")
    evals = {k: v for k, v in ((rec.last_progress or {}).get("metrics") or {}).items() if k.startswith("eval_")}
    if evals:
        line += "; " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(evals.items()))
    return line


def _supervise_foreground(prov, target, spec, store, rec, *, poll_s: float, on_interrupt: str,
                          take_over: bool = True, wait_for_lease: float = 0.0, pin=None):
    import sys

    from ..notify.runtime import for_run, run_pin
    from ..runs import pinning, training
    from ..runs.supervisor import Supervisor

    executor = training.make_executor(prov, store, spec.arch)
    notifier = for_run(store, rec, pin or run_pin(store), say)
    sup = Supervisor(prov, spec, store, executor, training.attempt_command, where="foreground", poll_s=poll_s,
                     log=say, pin=pin, notifier=notifier)
    # run.json as read from the bucket: where its attempts run and listen must be what was pinned
    # (re-attaching: the pin kept on this machine, else on the cluster's hosts)
    if sup.pin is None:
        sup.pin = pinning.trusted_run_entry(prov, sup.rec.cluster, sup.rec.run_id)
    pinning.check_placement(sup.pin, sup.rec)
    while True:
        try:
            return sup.run(take_over=take_over, wait_for_lease=wait_for_lease)
        except KeyboardInterrupt:
            choice = on_interrupt
            if choice == "ask":
                if sys.stdin.isatty():
                    choice = click.prompt("\nstop the run, or leave it supervised on the host?",
                                          type=click.Choice(["stop", "leave"]), default="leave")
                else:
                    choice = "leave"
            sup.stop_loop()
            if choice == "leave":
                sup.lease.release("handed over after Ctrl-C")
                where = training.hand_over(prov, target, store, sup.rec, spec)
                say(f"run {sup.rec.run_id} continues, supervised by {where}; "
                    f"tpuctl logs {sup.rec.run_id} -f follows it")
                store.save(sup.rec)
                return sup.rec
            rec = sup.rec
            if rec.attempt:
                say(f"stopping attempt {rec.attempt['n']}: the job writes a checkpoint first")
                executor.stop(rec, rec.attempt["n"])
            rec.status, rec.reason = "stopped", "stopped by the user (Ctrl-C)"
            import time

            rec.ended_at = time.time()
            store.event("stopped", step=rec.step, reason=rec.reason)
            store.save(rec)
            sup.lease.release("stopped")
            return rec


@click.command("supervise", hidden=True)
@click.argument("run")
@click.option("--where", default="host", help="Where this supervisor runs (shown in status).")
@click.option("--bucket", default=None, help="The run's bucket, when this machine has no record of it.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.5, max=LONGEST_POLL_S), default=None,
              help="Seconds between looks [default: the run's, from train --poll].")
@provider_options
def supervise(run: str, where: str, bucket: str | None, poll_s: float | None, provider: str | None,
              project: str | None) -> None:
    """Supervise RUN here (what --detach and a Ctrl-C handover start on the host)."""
    from ..basics import validate
    from ..runs import pinning, training
    from ..runs import store as runs

    target = resolve_target(provider, project)
    entry = {"run_id": validate.run_id(run), "bucket": str(validate.bucket_url(bucket))} if bucket \
        else runs.resolve_run(run)
    prov = open_provider(target)
    store = training.open_store(entry, target)
    rec = store.load()
    from ..cluster import find

    pin = None
    if where == "host":
        # started by the host's agent for a run named in the bucket: supervise only a run pinned
        # on this host, on the cluster and with the cluster spec pinned with it
        from ..basics.errors import UsageError
        from ..runs.pinning import read_host_pin

        pinned = read_host_pin(target.provider, rec.cluster)
        refusal = pinned.refusal("run", rec.run_id, {"cluster": rec.cluster})
        if refusal:
            raise UsageError(refusal, hint=f"start it with tpuctl train {rec.cluster} --detach")
        pin = pinned.entry("run", rec.run_id)
        # and where its attempts run and listen (provider, project, bucket...) as pinned, not as
        # a writer of run.json would have it: refused before anything is read or started from it
        pinning.check_placement(pin, rec)
    tpu = find(prov, rec.cluster).tpu
    spec = training.cluster_spec_for(prov, rec.cluster, tpu, bucket=rec.bucket,
                                     spec_digest=(pin or {}).get("cluster_spec"))
    executor = training.make_executor(prov, store, spec.arch)
    from ..notify.runtime import for_run, run_pin
    from ..runs.supervisor import Supervisor

    notifier = for_run(store, rec, pin if where == "host" else run_pin(store), say)
    sup = Supervisor(prov, spec, store, executor, training.attempt_command, where=where,
                     poll_s=poll_s or rec.poll_s, log=say, pin=pin, notifier=notifier)
    if where == "host":
        # the record the supervisor acts on (read again), its zone one of the pinned spec's
        pinning.check_placement(pin, sup.rec, spec.zones)
    rec = sup.run(take_over=False)
    click.echo(_summary(rec))


@click.command("agent", hidden=True)
@click.option("--cluster", required=True)
@click.option("--bucket", required=True)
@click.option("--project", required=True)
@click.option("--worker", default=None)
@click.option("--role", type=click.Choice(["host", "worker"]), default="host")
def agent(cluster: str, bucket: str, project: str, worker: str | None, role: str) -> None:
    """The host agent started by a GCP host's startup script."""
    import socket

    from ..host.agent import agent_loop

    agent_loop(cluster, bucket, project, worker or socket.gethostname(), role)
