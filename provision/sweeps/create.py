"""Making a sweep: read and check the sweep spec and its job spec, then write the sweep's directory.

Everything that can be wrong with the input is found before anything is created (exit 2, one
line): the sweep spec (:mod:`provision.sweeps.spec`), the job spec with the sweep's ``set``, and
every swept value, checked by the job spec loader as the trial will see it (``jobs.spec`` needs
no TensorFlow).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..basics.errors import UsageError
from ..cloud.base import Arch, ClusterSpec
from . import spec as sweepspec
from .pool import cluster_name
from .store import SWEEP_LABEL, SweepRecord, SweepStore, local_dir, new_sweep_id

MAX_SPEC_BYTES = 1 << 16
# Metrics each job reports, for a jobs package without jobs.spec.reported_metrics.
FALLBACK_METRICS = {"bert-finetune": ("eval_accuracy", "eval_loss"), "bert-squad": ("exact_match", "f1"),
                    "bert-pretrain": ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                                      "next_sentence_loss")}


@dataclass
class Plan:
    record: SweepRecord
    spec: sweepspec.SweepSpec
    spec_text: bytes
    job: dict[str, Any]            # the job spec with the sweep's set applied, paths as the job sees them


def read_spec(path: str) -> tuple[dict[str, Any], bytes]:
    import yaml

    if not os.path.isfile(path):
        raise UsageError(f"sweep spec {path[:200]} not found", hint="pass the path of a sweep spec YAML (docs/sweeps.md)")
    if os.path.getsize(path) > MAX_SPEC_BYTES:
        raise UsageError(f"sweep spec {path[:200]} is too large for a sweep spec", hint="check that this is the right file")
    with open(path, "rb") as fh:
        text = fh.read()
    try:
        raw = yaml.safe_load(text.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"sweep spec {path[:200]}{where} is not valid YAML", hint="fix the file (docs/sweeps.md)") from None
    return raw, text


def _job_path(job: str, spec_path: str) -> str:
    """The job spec as written (relative to here), else relative to the sweep spec's directory."""
    if os.path.isfile(job):
        return job
    beside = os.path.join(os.path.dirname(os.path.abspath(spec_path)), job)
    if os.path.isfile(beside):
        return beside
    raise UsageError(f"job spec {job[:200]} not found", hint="set job: to a job spec file such as "
                                                               "templates/bert-finetune.yaml")


def job_fields(job: str, raw: dict[str, Any] | None = None) -> set[str]:
    """The keys a sweep may set or sweep: the job spec's, and ``params.NAME`` for each entry
    of a ``job: keras`` spec's params mapping (``raw``: the job spec as written)."""
    import dataclasses

    from jobs import spec as jobspec

    keys = {f.name for f in dataclasses.fields(jobspec.JOBS[job])}
    params = (raw or {}).get("params")
    if "params" in keys and isinstance(params, dict):
        keys |= {f"params.{name}" for name in params if isinstance(name, str)}
    return keys


def reported_metrics(job: Any) -> tuple[str, ...]:
    """What the checked job spec ``job`` reports at each evaluation (``jobs.spec``'s answer)."""
    from jobs import spec as jobspec

    method = getattr(job, "reported_metrics", None)
    if callable(method):
        return tuple(method())
    fn = getattr(jobspec, "reported_metrics", None)
    if fn is not None:
        return tuple(fn(job))
    return FALLBACK_METRICS.get(job.job, ())


def plan(spec_path: str, *, provider: str, project: str | None, bucket: str, zones: Sequence[str],
         accelerator_type: str, preemptible: bool, spot: bool, max_concurrent: int | None,
         max_trials: int | None, budget_usd: float | None, poll_s: float, max_failures: int,
         book: Any = None, service_account: str | None = None) -> Plan:
    from jobs import spec as jobspec

    from ..basics import validate
    from ..catalog import accelerators, prices
    from ..runs.training import localize_spec

    raw, text = read_spec(spec_path)
    job_path = _job_path(raw["job"], spec_path) if isinstance(raw, dict) and isinstance(raw.get("job"), str) \
        and raw.get("job") else None
    job_raw: dict[str, Any] = {}
    keys: set[str] = set()
    if job_path:
        try:
            job_raw = jobspec.read_yaml(job_path)
        except jobspec.SpecError as exc:
            raise UsageError(str(exc)) from None
        name = job_raw.get("job")
        if name not in jobspec.JOBS:
            raise UsageError(f"job spec {job_path} has no known job", hint=f"use one of {', '.join(jobspec.JOBS)}")
        keys = job_fields(name, job_raw)
    sweep = sweepspec.parse(raw, job_keys=keys, reported=None, source=f"sweep spec {spec_path[:200]}",
                            max_trials=max_trials)
    base = localize_spec({**job_raw, **sweep.set}, provider)
    placeholder = "/tmp/tpuctl-sweep-check/model"     # never written: from_dict only checks
    job_name = base["job"]
    extras: dict[str, Any] = {}
    if "hparams" in keys:
        extras["hparams"] = sweep.names
    probe = {**base, **extras, "model_dir": base.get("model_dir") or placeholder}
    checked_spec = _check(jobspec, probe, {}, spec_path)
    from ..runs.training import check_user_code

    try:  # a job: keras module: found and read now, and what its metrics() reports known
        check_user_code(checked_spec, job_path or spec_path, provider, None)
    except jobspec.SpecError as exc:
        raise UsageError(str(exc)) from None
    if getattr(checked_spec, "module", None) != base.get("module"):
        base["module"] = checked_spec.module       # absolute: every trial's job reads it here
    sweepspec.check_metric(sweep.metric, reported_metrics(checked_spec))
    checked = checked_spec.to_dict()
    num_steps = int(checked["num_train_steps"])
    eval_every = sweep.eval_every_steps
    if eval_every is None:
        eval_every = int(base.get("eval_every_steps") or 0) or (max(1, num_steps // 10) if sweep.pruner != "none" else 0)
    if sweep.pruner != "none" and "eval_every_steps" not in keys:
        raise UsageError(f"pruner {sweep.pruner} needs {job_name} to report its metric while it trains "
                         f"(eval_every_steps), which this version of the jobs package lacks",
                         hint="use pruner: none, or upgrade tpuctl")
    if eval_every and "eval_every_steps" in keys:
        probe["eval_every_steps"] = eval_every
    for p in sweep.parameters:
        for value in (p.values if p.values is not None else (p.low, p.high)):
            _check(jobspec, probe, {p.name: value}, spec_path)
    accs = [accelerators.parse(t) for t in validate.accelerator_types(accelerator_type)]
    max_conc = max_concurrent or sweep.max_concurrent or 1
    sweep_id = new_sweep_id()
    # the pool's names must be valid cluster names: checked now, before anything is created
    ClusterSpec(name=cluster_name(sweep_id, max_conc), accelerator_type=accs[0].name,
                accelerator_types=tuple(a.name for a in accs), zones=tuple(zones),
                provider=provider, project=project, arch=Arch.VM, preemptible=preemptible, spot=spot,
                machine_type=None, labels={SWEEP_LABEL: sweep_id}, service_account=service_account)
    # the budget counts every trial at the dearest of the sweep's types and zones: it is never overspent
    tier = prices.tier_of(preemptible or spot)
    price = max(((book or prices.BUNDLED).tpu_price(acc, z, tier) for acc in accs for z in zones or [None]),
                key=lambda p: p.usd_per_hour)
    rec = SweepRecord(sweep_id=sweep_id, provider=provider, project=project or "", bucket=bucket, zones=list(zones),
                      accelerator_type=",".join(a.name for a in accs), preemptible=preemptible, spot=spot,
                      max_concurrent=max_conc,
                      max_trials=sweep.max_trials, spec=sweep.to_dict(), budget_usd=budget_usd,
                      hourly_usd=price.usd_per_hour, price=price.to_dict(),
                      eval_every_steps=eval_every if "eval_every_steps" in keys else None, num_train_steps=num_steps,
                      max_failures=max_failures, poll_s=poll_s, service_account=service_account)
    return Plan(record=rec, spec=sweep, spec_text=text, job={**base, **extras})


def _check(jobspec: Any, probe: dict[str, Any], value: dict[str, Any], spec_path: str) -> Any:
    try:
        return jobspec.from_dict({**probe, **value}, (), source=f"the job of {spec_path[:200]}")
    except jobspec.SpecError as exc:
        if value:
            (name, v), = value.items()
            raise UsageError(f"parameter {name} value {v!r:.40}: {exc}") from None
        raise UsageError(str(exc)) from None


def write(store: SweepStore, p: Plan) -> None:
    """The sweep's directory in the bucket, and this machine's index entry and job spec copy."""
    import yaml

    from .store import remember

    store.bucket.write_bytes(store.name("spec.yaml"), p.spec_text)
    store.bucket.write_bytes(store.name("job.yaml"), yaml.safe_dump(p.job, sort_keys=True).encode())
    store.save(p.record)
    remember(p.record)
    local_job_file(store)


def local_job_file(store: SweepStore) -> str:
    """The sweep's job spec as a file here (what ``training.prepare`` reads for every trial)."""
    path = local_dir(store.sweep_id) / "job.yaml"
    path.write_bytes(store.bucket.read_bytes(store.name("job.yaml")))
    return str(path)
