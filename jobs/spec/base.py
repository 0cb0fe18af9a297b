"""The run keys every job has (:class:`RunSpec`), the spec's error and the helpers each job
kind's spec module builds its keys and checks with.

Standard library only: the control plane reads specs on machines without TensorFlow. A job kind's
keys live with it (:mod:`jobs.bert.spec`, :mod:`jobs.keras.spec`, :mod:`jobs.command.spec`);
:mod:`jobs.spec.loading` reads YAML and ``--set`` into them.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ConfigError

PRECISIONS = ("auto", "float32", "bfloat16")
BACKENDS = ("auto", "jax", "tensorflow")     # Keras 3's backend for the job (jobs.spec.backends)
LOSS_NORMALIZATIONS = ("global", "replica")
MAX_INT = 1 << 53   # integers beyond this are typos (and floats cannot hold them exactly)


class SpecError(ConfigError):
    """A job spec that cannot run; ``str(exc)`` is one line that names the fix."""


def required(doc: str, **kw: Any) -> Any:
    return field(default=None, metadata={"doc": doc, "required": True, **kw})


def opt(default: Any, doc: str, **kw: Any) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc, **kw})
    return field(default=default, metadata={"doc": doc, **kw})


@dataclass
class RunSpec:
    """The run keys every job has (batches, steps, schedule, checkpoints, precision): what the
    runner and the control plane read, without TensorFlow and without a model of any kind."""

    job: str = required("bert-pretrain, bert-finetune, bert-squad, keras or command")
    model_dir: str = required("where checkpoints, progress.json and TensorBoard summaries go "
                               "(gs://bucket/path or a local directory)")
    train_batch_size: int = opt(32, "global batch size: must divide by the replica count "
                                     "(8 on a v2-8 or v3-8)")
    num_train_steps: int = opt(100000, "total optimizer steps; the run ends here")
    learning_rate: float = opt(1e-4, "peak learning rate of AdamW")
    warmup_proportion: float = opt(0.1, "fraction of num_train_steps with linear warm-up")
    num_warmup_steps: int | None = opt(None, "warm-up steps; overrides warmup_proportion")
    weight_decay_rate: float = opt(0.01, "AdamW decoupled weight decay (not on LayerNorm, bias)")
    save_checkpoints_steps: int = opt(1000, "checkpoint every this many steps")
    keep_checkpoint_max: int = opt(5, "checkpoints kept in model_dir (at least 2)")
    steps_per_execution: int = opt(1000, "steps per host call (TPUEstimator's iterations_per_loop)")
    precision: str = opt("auto", "auto (bfloat16 on TPUs and bf16-capable GPUs), float32 or bfloat16")
    backend: str = opt("auto", "Keras 3's backend for the job: auto (jax on a TPU whose images have no "
                               "TensorFlow TPU runtime, TPU7x; tensorflow elsewhere), jax or tensorflow")
    seed: int = opt(12345, "seed for initialisation, shuffling and dropout")
    loss_normalization: str = opt(
        "global", "global: every loss and metric is a mean over the global batch, so a spec "
                  "trains the same model on any number of replicas or hosts; replica: each "
                  "replica's own mean, averaged (the original per-TPU-core normalisation)")
    eval_every_steps: int = opt(0, "evaluate every this many steps during training, into "
                                    "progress.json's evals (for sweeps' pruners); 0: only at the end")
    hparams: list[str] | None = opt(  # noqa: RUF009 - opt returns a dataclasses.field
        None, "spec keys recorded as TensorBoard HParams of this run (comma-separated), e.g. "
              "learning_rate,train_batch_size")
    budget_usd: float | None = opt(None, "hard cap in US dollars at list price: the run stops on a "
                                          "checkpoint and its TPU is deleted before it would pass it "
                                          "(tpuctl train --budget-usd)")
    deadline: str | None = opt(None, "hard deadline, ISO 8601 such as 2026-12-01T08:00 (local time "
                                      "unless it names an offset): the run stops on a checkpoint once "
                                      "it cannot finish by then (tpuctl train --deadline)")

    # What each evaluation reports (progress.json's evals, eval/ scalars): what a sweep's
    # ``metric`` may name, checked by the control plane before anything is created.
    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ()

    # -- derived values the control plane may want too ---------------------------------------
    @property
    def warmup_steps(self) -> int:
        if self.num_warmup_steps is not None:
            return self.num_warmup_steps
        return int(self.num_train_steps * self.warmup_proportion)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reported_metrics(self) -> tuple[str, ...]:
        """The metrics every evaluation of this spec reports; () when it has nothing to
        evaluate (a fine-tuning spec without dev_file)."""
        return self.REPORTED_METRICS

    def hparam_names(self) -> list[str]:
        """What ``hparams`` may name: the spec's keys (but ``hparams`` itself)."""
        return sorted(f.name for f in dataclasses.fields(self) if f.name != "hparams")

    def hparam_value(self, key: str) -> Any:
        return getattr(self, key)

    def hparam_values(self) -> dict[str, Any]:
        """The ``hparams`` keys and their values, as TensorBoard HParams take them (bool,
        number or string; lists comma-joined, null as the string "null")."""
        out: dict[str, Any] = {}
        for key in self.hparams or ():
            value = self.hparam_value(key)
            if isinstance(value, list):
                value = ",".join(map(str, value))
            out[key] = "null" if value is None else value
        return out

    def check_code(self, search: Sequence[str]) -> None:
        """Check the user's code the spec names, without running it (a job of the user's;
        the built-in jobs have none). ``search``: the directories it may be in."""

    def _check(self) -> None:
        positive(self, "save_checkpoints_steps", "train_batch_size", "steps_per_execution")
        if getattr(self, "do_train", True):
            positive(self, "num_train_steps")
        if self.eval_every_steps < 0:
            raise SpecError(f"eval_every_steps is {self.eval_every_steps}; use 0 (evaluate at the "
                            "end only) or a positive number of steps, e.g. --set eval_every_steps=1000")
        known = self.hparam_names()
        for key in self.hparams or ():
            if key not in known:
                close = suggest(key, dict.fromkeys(known))
                hint = f"{close} " if close.startswith("did you") else ""
                raise SpecError(f"hparams names {show(key)}, not a key of {self.job}; {hint}valid "
                                f"keys: {', '.join(known)}")
        if self.budget_usd is not None and not self.budget_usd > 0:
            raise SpecError(f"budget_usd is {self.budget_usd:g}; give a positive amount in US dollars, "
                            "e.g. --set budget_usd=50 (or leave it null: no cap)")
        if self.deadline is not None:
            parse_deadline(self.deadline)
        if self.keep_checkpoint_max < 2:
            raise SpecError(f"keep_checkpoint_max is {self.keep_checkpoint_max}; keep at least 2 so "
                            "a checkpoint cut by a preemption can fall back to the one before "
                            "(--set keep_checkpoint_max=2)")
        if not self.learning_rate > 0:
            raise SpecError(f"learning_rate is {self.learning_rate}; use a positive value such "
                            "as --set learning_rate=5e-5")
        if not 0.0 <= self.warmup_proportion <= 1.0:
            raise SpecError(f"warmup_proportion is {self.warmup_proportion}; use a fraction "
                            "between 0 and 1 (--set warmup_proportion=0.1)")
        if self.num_warmup_steps is not None and self.num_warmup_steps < 0:
            raise SpecError("num_warmup_steps must be >= 0")
        if self.weight_decay_rate < 0:
            raise SpecError("weight_decay_rate must be >= 0 (--set weight_decay_rate=0.01)")
        if self.loss_normalization not in LOSS_NORMALIZATIONS:
            raise SpecError(f"loss_normalization {show(self.loss_normalization)} is not one of "
                            f"{', '.join(LOSS_NORMALIZATIONS)}; use --set loss_normalization=global")
        if self.backend not in BACKENDS:
            raise SpecError(f"backend {show(self.backend)} is not one of {', '.join(BACKENDS)}; "
                            "use --set backend=auto (or jax, tensorflow)")
        if self.precision not in PRECISIONS:
            raise SpecError(f"precision {show(self.precision)} is not one of {', '.join(PRECISIONS)}; "
                            "use --set precision=auto")


def parse_deadline(text: Any) -> float:
    """A deadline as people write it (ISO 8601: ``2026-12-01T08:00``, ``2026-12-01 08:00:00+00:00``,
    ``...Z``; local time without an offset) as unix seconds. Raises :class:`SpecError`."""
    from datetime import datetime

    raw = str(text).strip()
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise SpecError(f"deadline {show(raw)} is not a date and time; write it as ISO 8601, e.g. "
                        "2026-12-01T08:00 (local time) or 2026-12-01T08:00+00:00") from None
    return when.timestamp() if when.tzinfo else when.astimezone().timestamp()



# Keys that name the user's code: relative to the workdir the run stages, not to the current
# directory, so the control plane leaves them as written (and the entries of a mapping such as
# params.NAME, which are the user's values, not the runner's paths). A framework release
# (tensorflow: 2.18.0) is no path either.
CODE_KEYS = ("module", "requirements", "tensorflow", "jax")


def show(value: Any, *, quote: bool = True, limit: int = 60) -> str:
    """A user's value for a message: bounded (a hostile structure cannot blow up), one line."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxdict, r.maxtuple, r.maxset = 2, 4, 4, 4, 4
    r.maxstring, r.maxother, r.maxlong = limit, limit, 40
    text = r.repr(value) if quote or not isinstance(value, str) else value
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit + 2 else text[:limit] + "..."


def suggest(key: str, fields: dict[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key)[:100], list(fields), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known keys: " + ", ".join(sorted(fields))


def example(base: Any) -> str:
    if typing.get_origin(base) is list:
        return "a,b"
    return {bool: "true", int: "1000", float: "5e-5", str: "VALUE"}.get(base, "VALUE")


def positive(spec: RunSpec, *keys: str) -> None:
    for key in keys:
        value = getattr(spec, key)
        if value is None or value <= 0:
            raise SpecError(f"{key} must be a positive integer, got {value!r}; "
                            f"e.g. --set {key}={example(int)}")


def is_remote(path: str | None) -> bool:
    return bool(path) and "://" in str(path)
