"""Making a sweep: read and check the sweep spec and its job spec, then write the sweep's directory.

Everything that can be wrong with the input is found before anything is created or asked of a
cloud (exit 2, every problem at once, the most fundamental first): the sweep spec
(:mod:`provision.sweeps.spec`), the job spec with the sweep's ``set``, and every swept value,
checked by the job spec loader as the trial will see it (``jobs.spec`` needs no TensorFlow).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..basics.errors import UsageError
from ..basics.templates import spec_path as shipped_spec
from ..cloud.base import Arch, ClusterSpec
from . import spec as sweepspec
from .pool import cluster_name
from .spec_file import read_spec
from .store import SWEEP_LABEL, SweepRecord, SweepStore, local_dir, new_sweep_id

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
    workdir: Any = None            # the packed workdir (provision.staging.workdir.Packed), staged by write()


@dataclass
class Checked:
    """A sweep spec and its job spec with nothing wrong in them (:func:`check`)."""

    spec: sweepspec.SweepSpec
    spec_text: bytes
    job: dict[str, Any]            # the job spec with the sweep's set (and hparams) applied
    keys: set[str]                 # the job spec's keys
    num_train_steps: int
    eval_every: int                # evaluate every this many steps (0: only at the end)
    workdir: Any = None            # the files of the workdir every trial runs in (a Selection), or None


def _job_path(job: str, spec_path: str) -> str:
    """The job spec as written (relative to here), else relative to the sweep spec's directory."""
    if os.path.isfile(job):
        return job
    beside = os.path.join(os.path.dirname(os.path.abspath(spec_path)), job)
    if os.path.isfile(beside):
        return beside
    if os.path.isfile(shipped := shipped_spec(job)):
        return shipped
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


def check(spec_path: str, *, provider: str, max_trials: int | None,
          read: tuple[Any, bytes] | None = None, workdir: str | None = None) -> Checked:
    """Every problem of the sweep spec at ``spec_path`` and of its job spec as the trials will
    see it, in one :class:`SpecProblems` (most fundamental first), before anything is created
    or asked of a cloud. ``read``: what :func:`read_spec` already returned; ``workdir``: the
    trials' code (``--workdir``; a ``job: command`` spec's directory by default)."""
    from jobs import spec as jobspec

    from ..runs.training import default_workdir, localize_spec

    spec_path = shipped_spec(spec_path)
    raw, text = read or read_spec(spec_path)
    source = f"sweep spec {spec_path[:200]}"
    problems = sweepspec.Problems()
    job_raw, keys, known = _read_job(raw, spec_path, problems)
    found = sweepspec.review(raw, job_keys=keys, source=source, max_trials=max_trials, problems=problems,
                             reported=known)
    if keys is None:                 # no job spec to check the rest against
        problems.raise_if_any()
    assert keys is not None
    try:
        base = localize_spec({**job_raw, **found.sets}, provider)
    except UsageError as exc:        # a path the pool's TPUs cannot read
        problems.add_error(sweepspec.VALUE, exc)
        problems.raise_if_any()
    extras: dict[str, Any] = {}
    if "hparams" in keys:
        extras["hparams"] = [p.name for p in found.parameters]
    # a model_dir for the check alone, never written: under this user's TPUCTL_HOME, not a
    # guessable path in a shared temp directory
    from ..basics.config import home

    probe = {**base, **extras, "model_dir": base.get("model_dir") or str(home() / "sweep-check" / "model")}
    where = f"the job of {spec_path[:200]}"
    checked_spec = _check(jobspec, probe, {}, where, problems)
    selection = None
    job_path = _job_path(raw["job"], spec_path) if checked_spec is not None else None
    if job_path is not None:
        workdir = default_workdir(job_path, workdir)
    if workdir is not None:
        from ..staging.selection import select
        from ..staging.workdir import check_size

        try:
            selection = select(workdir)
            check_size(selection)
        except UsageError as exc:
            problems.add_error(sweepspec.VALUE, exc)
            problems.raise_if_any()
    if checked_spec is not None and job_path is not None and (getattr(checked_spec, "module", None)
                                                              or checked_spec.job == "command"):
        from ..runs.training import check_user_code

        try:  # the user's code: found and read now (job: keras: what its metrics() reports known)
            check_user_code(checked_spec, job_path, provider, workdir)
        except jobspec.SpecError as exc:
            problems.add(sweepspec.VALUE, str(exc))
        if checked_spec.job == "command" and isinstance(checked_spec.requirements, str) and workdir:
            from ..runs.training import requirement_lines

            # the trials get the file's lines: they are staged from the archive, not from this directory
            base["requirements"] = probe["requirements"] = requirement_lines(checked_spec.requirements, workdir)
        if getattr(checked_spec, "module", None) and checked_spec.module != base.get("module"):
            base["module"] = probe["module"] = checked_spec.module   # absolute: every trial's job reads it here
    if checked_spec is not None and found.metric is not None:
        try:
            sweepspec.check_metric(found.metric, reported_metrics(checked_spec))
        except UsageError as exc:
            problems.add_error(sweepspec.VALUE, exc)
    sweep = found.spec
    if sweep is not None and sweep.pruner != "none" and "eval_every_steps" not in keys:
        problems.add(sweepspec.VALUE, f"pruner {sweep.pruner} needs {base.get('job')} to report its metric while "
                     f"it trains (eval_every_steps), which this version of the jobs package lacks",
                     hint="use pruner: none, or upgrade tpuctl")
    num_steps = int(checked_spec.to_dict()["num_train_steps"]) if checked_spec is not None else 0
    eval_every = sweep.eval_every_steps if sweep is not None else None
    if eval_every is None:
        eval_every = int(base.get("eval_every_steps") or 0) or \
            (max(1, num_steps // 10) if sweep is not None and sweep.pruner != "none" else 0)
    if eval_every and "eval_every_steps" in keys:
        probe["eval_every_steps"] = eval_every
    if checked_spec is not None:     # each swept value as the trial's job spec loader will see it
        for p in found.parameters:
            for value in (p.values if p.values is not None else (p.low, p.high)):
                _check(jobspec, probe, {p.name: value}, where, problems)
    problems.raise_if_any()
    assert sweep is not None
    return Checked(spec=sweep, spec_text=text, job={**base, **extras}, keys=keys, num_train_steps=num_steps,
                   eval_every=eval_every, workdir=selection)


def _read_job(raw: Any, spec_path: str, problems: sweepspec.Problems
              ) -> tuple[dict[str, Any], set[str] | None, tuple[str, ...] | None]:
    """The job spec the sweep names: its mapping, its keys and the metrics its job can report
    (None, None when it cannot be read: a problem of rank FILE)."""
    from jobs import spec as jobspec

    job = raw.get("job") if isinstance(raw, dict) else None
    if not isinstance(job, str) or not job:
        return {}, None, None         # the sweep spec's own problem (no job), reported by review
    try:
        job_path = _job_path(job, spec_path)
        job_raw = jobspec.read_yaml(job_path)
    except UsageError as exc:
        problems.add_error(sweepspec.FILE, exc)
        return {}, None, None
    except jobspec.SpecError as exc:
        problems.add(sweepspec.FILE, str(exc))
        return {}, None, None
    name = job_raw.get("job")
    if not isinstance(name, str) or name not in jobspec.JOBS:
        problems.add(sweepspec.FILE, f"job spec {job_path[:200]} has no known job", hint=f"use one of {', '.join(jobspec.JOBS)}")
        return {}, None, None
    keys = job_fields(name, job_raw)
    # a job of the user's reports what its module's metrics() returns (job: keras) or what its
    # spec declares (job: command): known only once the spec is checked, not from the job's name
    known = None if "module" in keys or name == "command" else tuple(jobspec.reported_metrics(name))
    return job_raw, keys, known


def plan(spec_path: str, *, provider: str, project: str | None, bucket: str, zones: Sequence[str],
         accelerator_type: str, preemptible: bool, spot: bool, max_concurrent: int | None,
         max_trials: int | None, budget_usd: float | None, poll_s: float, max_failures: int,
         book: Any = None, service_account: str | None = None, checked: Checked | None = None) -> Plan:
    """The sweep's record, from its checked specs (``checked``, else :func:`check` now) and the
    pool's options."""
    from ..basics import validate
    from ..catalog import accelerators, prices

    c = checked or check(spec_path, provider=provider, max_trials=max_trials)
    sweep, keys = c.spec, c.keys
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
                key=lambda p: float("inf") if p.usd_per_hour is None else p.usd_per_hour)
    if price.usd_per_hour is None and budget_usd is not None:
        raise UsageError(f"no {tier} price is known for {', '.join(a.name for a in accs)}: a budget cannot be "
                         f"counted against it", hint="drop --budget-usd, or sweep on a type tpuctl prices "
                                                     "(tpuctl cost lists the prices)")
    rec = SweepRecord(sweep_id=sweep_id, provider=provider, project=project or "", bucket=bucket, zones=list(zones),
                      accelerator_type=",".join(a.name for a in accs), preemptible=preemptible, spot=spot,
                      max_concurrent=max_conc,
                      max_trials=sweep.max_trials, spec=sweep.to_dict(), budget_usd=budget_usd,
                      # unpriced: its trials are counted at nothing (no budget to keep); price says unknown
                      hourly_usd=price.usd_per_hour or 0.0, price=price.to_dict(),
                      eval_every_steps=c.eval_every if "eval_every_steps" in keys else None,
                      num_train_steps=c.num_train_steps,
                      max_failures=max_failures, poll_s=poll_s, service_account=service_account)
    packed = None
    if c.workdir is not None:
        from ..staging.workdir import pack

        packed = pack(c.workdir)
        rec.workdir = packed.digest
    return Plan(record=rec, spec=sweep, spec_text=c.spec_text, job=c.job, workdir=packed)


def _check(jobspec: Any, probe: dict[str, Any], value: dict[str, Any], where: str,
           problems: sweepspec.Problems) -> Any:
    """The job spec ``probe`` with ``value`` (one swept value) applied, checked as the trial's job
    will load it; None, and a problem, when the loader refuses it."""
    try:
        return jobspec.from_dict({**probe, **value}, (), source=where)
    except jobspec.SpecError as exc:
        if value:
            (name, v), = value.items()
            problems.add(sweepspec.VALUE, f"parameter {name} value {v!r:.40}: {exc}")
        else:
            problems.add(sweepspec.VALUE, str(exc))
        return None


def write(store: SweepStore, p: Plan) -> None:
    """The sweep's directory in the bucket, and this machine's index entry and job spec copy."""
    import yaml

    from .store import remember

    if p.workdir is not None:
        from ..runs.training import stage_workdir

        stage_workdir(store.bucket, p.workdir)
    store.bucket.write_bytes(store.name("spec.yaml"), p.spec_text)
    store.bucket.write_bytes(store.name("job.yaml"), yaml.safe_dump(p.job, sort_keys=True).encode())
    store.save(p.record)
    remember(p.record)
    local_job_file(store)


def local_job_file(store: SweepStore) -> str:
    """The sweep's job spec as a file here (what ``training.prepare`` reads for every trial)."""
    from ..basics import private

    path = local_dir(store.sweep_id) / "job.yaml"
    with open(path, "wb", opener=private.opener) as fh:
        fh.write(store.bucket.read_bytes(store.name("job.yaml")))
    return str(path)
