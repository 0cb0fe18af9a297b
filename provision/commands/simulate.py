"""``tpuctl simulate``: rehearse failures (preemption) before they happen on a bill.

A preemption is rehearsed the way the cloud does it, because that path is the one that must work:
the notice first (on Compute Engine, and so on a TPU VM's workers, the guest's metadata
``instance/preempted`` turns TRUE, which the host agent turns into SIGTERM for the job), then the
power-off at the end of the grace period (30 s for a Spot VM), after which the TPU is PREEMPTED,
or deleted where its termination action says so. ``--no-notice`` (or ``--grace 0``) is the hard
kill, for the path where the notice never arrived.
"""

from __future__ import annotations

import math
import time

import click

from .common import (
    acting_on,
    emit_json,
    json_option,
    open_provider,
    provider_options,
    resolve_target,
)
from .up import complete_cluster

# How long past the grace period the power-off may take to show (the fake cloud's clock, a slow poll)
SHOW_SLACK_S = 30.0
POLL_S = 0.5


@click.group("simulate", short_help="Rehearse failures as the cloud would")
def command() -> None:
    """Rehearse failures on the local provider or the fake cloud.

    \b
    Example:
      tpuctl simulate preempt bert-lab --grace 5
    """


@command.command("preempt", short_help="Preempt CLUSTER's TPU: notice, grace, power-off")
@click.argument("cluster", shell_complete=complete_cluster)
@click.option("--grace", type=float, default=None, metavar="SECONDS",
              help="Seconds between the notice and the power-off (default: the provider's, 30 s for a Spot VM); "
                   "0 kills at once, without a notice.")
@click.option("--no-notice", is_flag=True, help="Kill at once, without a notice (as if it never arrived).")
@click.option("--at-step", type=int, default=None, metavar="N",
              help="First wait until the cluster's run has reported step N, then preempt (a rehearsal after a "
                   "checkpoint rather than before the first step).")
@provider_options
@json_option
def preempt(cluster: str, grace: float | None, no_notice: bool, at_step: int | None, provider: str | None,
            project: str | None, as_json: bool) -> None:
    """Preempt CLUSTER's TPU as the cloud does: the notice now, the power-off after the grace.

    The job gets SIGTERM now (on Google Cloud through the metadata server's instance/preempted,
    which the host agent watches) and has the grace period to save; then the TPU is PREEMPTED (or
    deleted, for a Spot VM whose termination action is DELETE) and whatever still runs dies with
    it. On the local provider the power-off comes as soon as every job process has exited, as a
    guest that finished shutting down powers off. The command waits for the power-off.
    With --no-notice (or --grace 0) the TPU is PREEMPTED at once and its job killed without warning.
    With --at-step N it first waits for the cluster's run to report step N.

    \b
    Example:
      tpuctl simulate preempt bert-lab --grace 5
    """
    from .. import cluster as clusters
    from ..basics import validate
    from ..basics.errors import CloudError, UsageError

    validate.cluster_name(cluster)
    if grace is not None and (not math.isfinite(grace) or grace < 0):
        raise UsageError(f"--grace {grace:g} is not a number of seconds", hint="give --grace 0 or more, e.g. --grace 30")
    if no_notice and grace:
        raise UsageError("--no-notice kills at once, so a --grace cannot apply",
                         hint="drop --grace (or --no-notice, to give the notice)")
    if at_step is not None and at_step < 1:
        raise UsageError(f"--at-step {at_step} is not a step of a run", hint="give the step to wait for, e.g. --at-step 40")
    notice = 0.0 if no_notice else clusters.PREEMPTION_GRACE_S if grace is None else grace
    target = resolve_target(provider, project)
    acting_on(target, "simulate preempt", zone="all")
    prov = open_provider(target)
    if at_step is not None:
        _wait_for_step(cluster, at_step, target, quiet=as_json)
    before, node = clusters.preempt(prov, cluster, notice_s=notice)
    where = f"TPU {before.name} in {before.zone}"
    noticed = notice > 0 and node is not None and not node.dead
    elapsed, outcome = 0.0, _outcome(before, node)
    if noticed:
        if not as_json:
            click.echo(f"{where}: preemption notice given; its job gets SIGTERM and has {notice:g} s to save "
                       f"before the power-off")
        started = time.monotonic()
        deadline = started + notice + SHOW_SLACK_S
        while outcome is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            node = prov.get_tpu(before.zone, before.name)
            outcome = _outcome(before, node)
        elapsed = time.monotonic() - started
        if outcome is None:
            raise CloudError(f"{where} is still READY {elapsed:.0f} s after the preemption notice",
                             hint="see tpuctl status; its provider never powered it off")
    if as_json:
        emit_json({"ok": True, "cluster": cluster, "notice_s": notice if noticed else 0, "outcome": outcome,
                   "after_s": round(elapsed, 1), "tpu": node.to_dict() if node is not None else None})
    else:
        click.echo(_gone_line(where, node, outcome, noticed, elapsed, notice))


def _wait_for_step(cluster: str, step: int, target, *, quiet: bool) -> None:
    """Until the cluster's latest run (started on this machine) has reported ``step``: its
    progress record, as status reads it. A run that ends first, or reports no progress, is one
    line, exit 2: there is nothing to preempt at that step."""
    from ..basics.errors import UsageError
    from ..runs import store as runs
    from ..runs import training
    from ..runs.supervisor import read_progress

    entry = runs.latest_for(cluster)
    if entry is None:
        raise UsageError(f"--at-step {step}: no run of cluster {cluster} is known on this machine",
                         hint=f"start one first (tpuctl train {cluster} --job SPEC --detach), or drop --at-step")
    store = training.open_store(entry, target)
    said = False
    while True:
        rec = store.load()
        p = read_progress(rec.model_dir, target.provider, target.project) or rec.last_progress or {}
        now = p.get("step") if p.get("run_id") in (None, rec.run_id) else None
        if isinstance(now, int) and now >= step:
            return
        if not rec.live:
            raise UsageError(f"--at-step {step}: run {rec.run_id} is {rec.status} at step {now or 0}, before step {step}",
                             hint=f"preempt a live run: tpuctl train {cluster} --job SPEC --detach, then simulate preempt")
        if p.get("progress_reported") is False and (p.get("time") or 0) - (p.get("started_at") or 0) > 60:
            raise UsageError(f"--at-step {step}: run {rec.run_id} reports no progress, so no step can be waited for",
                             hint="report progress (docs/own-code.md#progress), or preempt without --at-step")
        if not said and not quiet:
            click.echo(f"waiting for run {rec.run_id} to reach step {step} (now at {now or 0})")
            said = True
        time.sleep(POLL_S)


def _outcome(before, node) -> str | None:
    """What became of the TPU that got the notice: ``preempted`` (or its dead state, lowercased);
    ``deleted`` (gone: its termination action is DELETE); ``recovering`` (its supervisor, seeing
    the job exit after the notice, is deleting it or has made it again, before or after the
    power-off); None while it is still the READY TPU that got the notice."""
    if node is None:
        # a Compute Engine spot TPU whose termination action is DELETE goes with its VM; a Cloud TPU
        # API node (or the local provider's) is never deleted by a preemption: gone, it is its
        # supervisor's recreate (the job exited after the notice, and it deletes the doomed node)
        return "deleted" if getattr(before, "api", "tpu") == "compute" else "recovering"
    from ..cloud.base import TpuState

    if node.state == TpuState.DELETING or node.created_at != before.created_at:
        return "recovering"
    if node.dead:
        return node.state.value.lower()
    return None


def _gone_line(where: str, node, outcome: str, noticed: bool, elapsed: float, notice: float) -> str:
    after = f"{elapsed:.0f} s after the notice" if noticed else "no notice: its job was killed at once"
    if outcome == "deleted":
        return f"{where} is gone: powered off and deleted ({after})"
    if outcome == "recovering":
        return f"{where} is already being recreated by its supervisor: the job exited after the notice ({after})"
    if not noticed and notice > 0:
        # asked for a notice, and the TPU went at once: a TPU Node has no guest of the user's to tell
        return f"{where} is now {node.state.value} (a TPU Node gets no notice: the cloud tells no guest of it)"
    return f"{where} is now {node.state.value} ({after})"
