"""Gathering what an estimate needs: the job's work per step, past runs' records, prices.

The arithmetic is pure (:mod:`.estimate`, :mod:`.history`, :mod:`.flops`); this module does the
reading: a BERT job's ``bert_config.json`` (a local directory or a bucket), the records of this
machine's past runs (each in its bucket), and the provider's price book. ``tpuctl estimate`` asks
for a table of candidates; ``tpuctl train`` asks for the one its TPU is, and stores it with the
run (:func:`for_run`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..basics.errors import TpuctlError, UsageError
from ..catalog.accelerators import AcceleratorType
from ..catalog.prices import PriceBook, tier_of
from . import flops, history
from .estimate import Baseless, Candidate, Estimate, Unknowable, estimate, rank

# the newest runs of this machine read for an estimate (one bucket read each)
PAST_RUNS_READ = 200


@dataclass(frozen=True)
class Work:
    """What one run of a job computes: its FLOPs per step, its key, batch, steps and checkpoint interval."""

    job: str
    step: flops.StepFlops
    key: str
    batch: int
    steps: int
    checkpoint_steps: int

    def to_dict(self, hosts: int = 1) -> dict[str, Any]:
        return {"key": self.key, "job": self.job, "train_batch_size": self.batch, "hosts": hosts,
                "flops_per_step": self.step.flops, "flops_basis": self.step.basis}


def read_bert_config(bert_dir: str, target: Any) -> dict[str, Any]:
    """``bert_config.json`` of a BERT directory here or in a bucket; UsageError when it cannot be read."""
    hint = "check bert_dir (stage the model there with tpuctl stage), or pass --flops-per-step N"
    try:
        if bert_dir.startswith("gs://"):
            from ..basics.validate import bucket_url
            from ..cloud.storage import open_bucket

            url = bucket_url(bert_dir)
            bucket = open_bucket(url, target)
            raw = bucket.read_bytes(f"{url.prefix}/bert_config.json" if url.prefix else "bert_config.json")
        else:
            from pathlib import Path

            raw = (Path(bert_dir) / "bert_config.json").read_bytes()
        data = json.loads(raw)
    except (TpuctlError, OSError, ValueError) as exc:
        raise UsageError(f"cannot count the FLOPs of the job: {bert_dir}/bert_config.json is unreadable "
                         f"({type(exc).__name__})", hint=hint) from None
    if not isinstance(data, dict):
        raise UsageError(f"cannot count the FLOPs of the job: {bert_dir}/bert_config.json is not a BERT config",
                         hint=hint)
    return data


def work_of(spec: Mapping[str, Any], target: Any, *, flops_per_step: float | None = None,
            steps: int | None = None) -> Work:
    """The work of a resolved job spec (``jobs.spec`` as a mapping). A BERT job's FLOPs come from its
    config unless given; a job of the user's has FLOPs only when given."""
    job = str(spec["job"])
    batch = int(spec.get("train_batch_size") or 0)   # 0: a program's own (job: command), unknown here
    config = None
    if job in flops.BERT_JOBS:
        if flops_per_step is None:
            config = read_bert_config(str(spec["bert_dir"]), target)
        else:
            try:
                config = read_bert_config(str(spec["bert_dir"]), target)
            except UsageError:
                config = None
    if flops_per_step is not None:
        step = flops.given(flops_per_step)
    elif config is not None:
        try:
            step = flops.bert_step(config, seq_length=int(spec["max_seq_length"]), batch=batch)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"cannot count the FLOPs of the job: its bert_config.json is not a BERT config "
                             f"({exc})", hint="restore bert_config.json, or pass --flops-per-step N") from None
    else:
        step = flops.unknown(job)
    return Work(job=job, step=step, key=flops.workload_key(spec, config), batch=batch,
                steps=int(steps if steps is not None else spec["num_train_steps"]),
                checkpoint_steps=int(spec["save_checkpoints_steps"]))


def past_runs(target: Any) -> list[history.RunFacts]:
    """The facts of every run this machine knows on the target's provider (unreadable ones skipped)."""
    from ..cloud.storage import open_bucket
    from . import store as runs

    out: list[history.RunFacts] = []
    buckets: dict[str, Any] = {}
    for entry in runs.known_runs()[-PAST_RUNS_READ:]:
        if entry.get("provider") != target.provider or not entry.get("bucket"):
            continue
        try:
            bucket = buckets.get(entry["bucket"]) or buckets.setdefault(entry["bucket"],
                                                                        open_bucket(entry["bucket"], target))
            record = runs.RunStore(bucket, entry["run_id"]).load().to_dict()
        except Exception:  # noqa: BLE001, S112 - one unreadable run must not stop an estimate
            continue
        found = history.facts(record)
        if found is not None:
            out.append(found)
    return out


def candidate(acc: AcceleratorType, zone: str, *, interruptible: bool, spot: bool, book: PriceBook,
              runs: Iterable[history.RunFacts], work: Work, provider: str) -> Candidate:
    """One candidate for ``provider`` (the target's): its price, and what ``provider``'s own past
    runs measured (another provider's preemptions never count)."""
    runs = list(runs)
    return Candidate(accelerator=acc, zone=zone, interruptible=interruptible, spot=spot,
                     price=book.tpu_price(acc, zone, tier_of(interruptible)),
                     interruptions=history.interruptions(runs, provider=provider, zone=zone,
                                                          accelerator_type=acc.name,
                                                          interruptible=interruptible, spot=spot),
                     measured=history.measured(runs, work.key, acc.name),
                     input_per_host=history.input_per_host(runs, work.key))


def table(work: Work, cands: Iterable[Candidate]) -> tuple[list[Estimate], list[tuple[Candidate, str]]]:
    """Each candidate's estimate, cheapest and fastest marked; and those without one, with why."""
    done: list[Estimate] = []
    skipped: list[tuple[Candidate, str]] = []
    for c in cands:
        if not c.price.usd_per_hour:
            skipped.append((c, c.price.note or f"no price known for {c.accelerator.name}"))
            continue
        try:
            done.append(estimate(c, work.step, steps=work.steps, batch=work.batch,
                                 checkpoint_steps=work.checkpoint_steps))
        except Baseless as exc:
            skipped.append((c, str(exc)))
        except Unknowable:
            skipped.append((c, f"no measured rate of this job on {c.accelerator.name} and {work.step.basis}"))
    return rank(done), skipped


def attach(rec: Any, spec: Mapping[str, Any], target: Any, tpu: Any, book: PriceBook, *,
           budget_usd: float | None, deadline: str | None, now: float) -> None:
    """What ``train`` stores with a run (a :class:`provision.runs.store.RunRecord`) before anything
    is staged: its caps (checked: UsageError), its TPU's price and expected interruptions (what the
    caps and the live projection count with), its work per step and the estimate, or why there is
    none. A run needs no estimate to start: only the caps can refuse it."""
    from ..catalog.accelerators import parse
    from . import caps as caps_lib

    acc = parse(tpu.accelerator_type)
    interruptible, spot = bool(tpu.preemptible or tpu.spot), bool(tpu.spot)
    price = book.tpu_price(acc, tpu.zone, tier_of(interruptible))
    caps = caps_lib.check(budget_usd if budget_usd is not None else spec.get("budget_usd"),
                          deadline if deadline is not None else spec.get("deadline"), now=now,
                          usd_per_hour=price.usd_per_hour, accelerator_type=acc.name)
    rec.budget_usd, rec.deadline = caps.budget_usd, caps.deadline
    why = None
    try:
        work = work_of(spec, target)
    except UsageError as exc:
        work, why = None, exc.one_line()
    except Exception as exc:  # noqa: BLE001 - a bucket that cannot be read now: the run starts without an estimate
        work, why = None, f"its bert_config.json could not be read ({type(exc).__name__})"
    bare = Work(job=str(spec["job"]), step=flops.unknown(str(spec["job"])), key="",
                batch=int(spec.get("train_batch_size") or 0), steps=int(spec["num_train_steps"]),
                checkpoint_steps=int(spec["save_checkpoints_steps"]))
    cand = candidate(acc, tpu.zone, interruptible=interruptible, spot=spot, book=book, runs=past_runs(target),
                     work=work or bare, provider=target.provider)
    rec.pricing = {"accelerator_type": acc.name, "zone": tpu.zone, "tier": cand.tier,
                   "usd_per_hour": price.usd_per_hour, "price": price.to_dict(),
                   "interruptions_per_hour": cand.interruptions.per_hour, "recovery_s": cand.interruptions.recovery_s}
    rec.workload = (work or bare).to_dict(acc.hosts)
    if work is not None:
        estimates, skipped = table(work, [cand])
        if estimates:
            rec.estimate = {**estimates[0].to_dict(), "at": now}
            return
        why = skipped[0][1] if skipped else "no estimate"
    rec.estimate = {"none": why, "at": now}
