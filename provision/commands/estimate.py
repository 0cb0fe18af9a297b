"""``tpuctl estimate --job SPEC --accelerator-type A,B``: time and dollars to the last step, before renting."""

from __future__ import annotations

import click

from .common import (
    acting_on,
    emit_json,
    json_option,
    open_provider,
    parse_sets,
    provider_options,
    resolve_target,
)

HEADERS = ("TPU", "ZONE", "TIER", "$/HOUR", "STEPS/S", "SPEED", "TIME", "$ TOTAL", "")


@click.command("estimate", short_help="Time and cost of a job on candidate TPUs, before renting one")
@click.option("--job", "job_spec", metavar="SPEC", required=True, help="Job spec YAML (see templates/).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a job spec value (repeatable).")
@click.option("--accelerator-type", "accelerator_type", metavar="A,B,...", required=True,
              help="Candidate TPU types, comma-separated (e.g. v2-8,v3-8,v5litepod-8).")
@click.option("--zone", "zones", multiple=True, metavar="ZONE",
              help="Price in these zones (repeatable or comma-separated; default: each type's first zone).")
@click.option("--spot", is_flag=True, help="Estimate spot TPU VMs.")
@click.option("--preemptible", is_flag=True, help="Estimate preemptible TPUs (stopped after 24 hours at the latest).")
@click.option("--on-demand", "on_demand", is_flag=True, help="Estimate on-demand TPUs.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Steps to estimate (default: num_train_steps).")
@click.option("--flops-per-step", "flops_per_step", type=float, default=None, metavar="FLOPS",
              help="FLOPs of one step over the global batch, for a job tpuctl cannot count (job: keras).")
@provider_options
@json_option
def command(job_spec: str, sets: tuple[str, ...], accelerator_type: str, zones: tuple[str, ...], spot: bool,
            preemptible: bool, on_demand: bool, steps: int | None, flops_per_step: float | None,
            provider: str | None, project: str | None, as_json: bool) -> None:
    """Estimate the time and cost to the last step of a job on each candidate TPU type, zone and
    tier (default: spot and on-demand), with the basis of every number.

    \b
    Speed: steps/s measured by this machine's past runs of the same work on the type; otherwise the
    job's FLOPs per step (BERT: 6 x parameters x tokens plus attention, from bert_config.json) over
    the type's peak bf16 FLOP/s x a published utilisation. Spot and preemptible add the expected
    interruptions (the ledger's rate for the zone and type, else a cited default) x (recovery +
    the steps redone since the last checkpoint). The cheapest and the fastest are marked, with the
    tpuctl up line that rents them. Nothing is created.

    \b
    Example:
      tpuctl estimate --job templates/bert-finetune-tiny.yaml --set bert_dir=.demo/tiny --set train_file=.demo/tiny/train.tsv --set num_train_steps=10000 --flops-per-step 2.2e13 --accelerator-type v2-8,v5litepod-8 --preemptible --on-demand
    """
    from pathlib import Path

    from ..basics import validate
    from ..basics.errors import UsageError
    from ..basics.templates import spec_path
    from ..catalog import accelerators
    from ..catalog import zones as zone_table
    from ..runs import forecast

    accs = [accelerators.parse(t) for t in validate.accelerator_types(accelerator_type)]
    given = validate.zones([z for item in zones for z in item.split(",") if z.strip()]) if zones else ()
    if flops_per_step is not None and not flops_per_step > 0:
        raise UsageError(f"--flops-per-step {flops_per_step:g} is not a positive number",
                         hint="give the FLOPs of one step over the global batch, e.g. --flops-per-step 2.2e13")
    tiers = [(True, True)] * spot + [(True, False)] * preemptible + [(False, False)] * on_demand or \
        [(True, True), (False, False)]
    job_spec = spec_path(job_spec)
    if not Path(job_spec).is_file():
        raise UsageError(f"job spec {job_spec} not found", hint="pass --job templates/bert-pretrain.yaml or another YAML file")
    spec = _load_spec(job_spec, parse_sets(sets))
    target = resolve_target(provider, project)
    acting_on(target, "estimate", zone=",".join(given) or "each type's first zone")
    work = forecast.work_of(spec, target, flops_per_step=flops_per_step, steps=steps)
    book = open_provider(target).price_book()
    runs = forecast.past_runs(target)
    cands = [forecast.candidate(acc, zone, interruptible=i, spot=s, book=book, runs=runs, work=work,
                                provider=target.provider)
             for acc in accs for zone in (given or (zone_table.suggested_zone(acc.generation.name),))
             for i, s in tiers]
    estimates, skipped = forecast.table(work, cands)
    if not estimates:
        why = skipped[0][1] if skipped else "no candidate"
        # FLOPs known but too few to model (forecast's Baseless): ``why`` already says to measure
        raise UsageError(f"cannot estimate job: {work.job}: {why}",
                         hint=None if work.step.known else "pass --flops-per-step N (the FLOPs of one step over "
                         "the global batch), or train it once on the type: its measured rate is used next time")
    if as_json:
        emit_json({"ok": True, "job": work.job, "steps": work.steps, "workload": work.to_dict(),
                   "estimates": [e.to_dict() for e in estimates],
                   "skipped": [{"accelerator_type": c.accelerator.name, "zone": c.zone, "tier": c.tier, "why": why}
                               for c, why in skipped],
                   "up": {k: _up_line(e) for k, e in _marked(estimates).items()},
                   "price_source": book.describe()})
        return
    _print(work, estimates, skipped, book)


def _load_spec(job_spec: str, sets: list[tuple[str, str]]) -> dict:
    """The job spec as ``train`` would run it, without a model_dir of its own (none is made)."""
    from ..basics.errors import UsageError

    try:
        from jobs import spec as jobspec
    except ImportError as exc:  # pragma: no cover - jobs ships in the same distribution
        raise UsageError(f"the job side is not installed ({exc})", hint="pip install 'tpuctl[train]'") from None
    try:
        raw = jobspec.read_yaml(job_spec)
        if not raw.get("model_dir") and not any(k == "model_dir" for k, _ in sets):
            sets = [*sets, ("model_dir", "gs://tpuctl-estimate/model")]
        return jobspec.from_dict(raw, sets, source=job_spec).to_dict()
    except jobspec.SpecError as exc:
        raise UsageError(str(exc)) from None


def _marked(estimates: list) -> dict:
    out = {}
    for e in estimates:
        if e.cheapest:
            out["cheapest"] = e
        if e.fastest:
            out["fastest"] = e
    return out


def _up_line(e) -> str:
    tier = {"spot": " --spot", "preemptible": " --preemptible", "on-demand": ""}[e.tier]
    return f"tpuctl up NAME --accelerator-type {e.accelerator_type} --zone {e.zone}{tier}"


def _usd(value: float) -> str:
    return f"{value:,.2f}" if value >= 1 else f"{value:.4f}"


def _print(work, estimates: list, skipped: list, book) -> None:
    from ..basics.text import table
    from ..basics.validate import format_duration

    click.echo(f"job: {work.job}, {work.steps} steps of batch {work.batch}, checkpoint every {work.checkpoint_steps}")
    rows = []
    for e in estimates:
        marks = " ".join(m for m, on in (("cheapest", e.cheapest), ("fastest", e.fastest)) if on)
        rows.append([e.accelerator_type, e.zone, e.tier, f"{e.usd_per_hour:.2f}", f"{e.steps_per_sec:.3g}",
                     e.speed_source, format_duration(e.total_s) if e.finishes else "never",
                     _usd(e.total_usd) if e.finishes else "-", marks])
    click.echo(table(rows, HEADERS))
    click.echo("")
    said: set[tuple[str, str]] = set()        # a type's speed lines are the same in every zone and tier
    for e in estimates:
        click.echo(f"{e.accelerator_type} in {e.zone}, {e.tier}:")
        for line in e.basis:
            if (e.accelerator_type, line) not in said:
                click.echo(f"  {line}")
                said.add((e.accelerator_type, line))
        if e.input_note:
            click.echo(f"  {e.input_note}")
    for c, why in skipped:
        click.echo(f"{c.accelerator.name} in {c.zone}, {c.tier}: no estimate: {why}")
    for kind, e in _marked(estimates).items():
        click.echo(f"{kind}: {_up_line(e)}")
    click.echo(f"prices: {book.brief()}")
