"""The sweep spec: parse and check a sweep YAML mapping, purely (no file, no bucket, no Optuna).

Every mistake is caught here, before anything is created, as one :class:`UsageError` line that
names the fix (exit code 2): an unknown key, a parameter that is not a key of the job spec, an
empty range, a metric the job never reports, a grid larger than ``--max-trials``. What the job
spec allows (its keys, the metrics it reports) is passed in by the caller, who reads it from
``jobs.spec`` (TensorFlow-free).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..basics.errors import UsageError

METHODS = ("grid", "random", "tpe")
PRUNERS = ("none", "asha", "hyperband")
GOALS = ("maximize", "minimize")
KEYS = ("job", "set", "metric", "goal", "method", "pruner", "max_trials", "max_concurrent", "eval_every_steps",
        "seed", "parameters")
# keys a trial's run sets itself: sweeping them would break the sweep's own bookkeeping
RESERVED = ("job", "model_dir", "hparams", "eval_every_steps")
MAX_GRID = 10_000
EXAMPLE = "parameters: {learning_rate: {values: [2.0e-5, 3.0e-5]}}"


@dataclass(frozen=True)
class Parameter:
    """One swept job-spec key: a list of values, or a range (``log``: sampled on a log scale)."""

    name: str
    values: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False

    @property
    def is_range(self) -> bool:
        return self.values is None

    def to_dict(self) -> dict[str, Any]:
        if self.values is not None:
            return {"values": list(self.values)}
        out: dict[str, Any] = {"min": self.low, "max": self.high}
        if self.log:
            out["log"] = True
        if self.integer:
            out["type"] = "int"
        return out


@dataclass(frozen=True)
class SweepSpec:
    job: str
    metric: str
    goal: str
    method: str
    pruner: str
    max_trials: int
    parameters: tuple[Parameter, ...]
    set: dict[str, Any] = field(default_factory=dict)
    max_concurrent: int | None = None
    eval_every_steps: int | None = None
    seed: int = 0

    @property
    def grid_size(self) -> int | None:
        """How many points a grid has (None: a range makes it no grid)."""
        if any(p.is_range for p in self.parameters):
            return None
        return math.prod(len(p.values or ()) for p in self.parameters)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parameters"] = {p.name: p.to_dict() for p in self.parameters}
        return d


def parse(raw: Any, *, job_keys: Collection[str], reported: Collection[str] | None, source: str = "sweep spec",
          max_trials: int | None = None) -> SweepSpec:
    """Check ``raw`` (the YAML mapping) against the job's keys and the metrics it reports.

    ``max_trials`` is ``--max-trials`` (it overrides the spec's). The ``job`` path itself is
    checked by the caller, which must read the job spec to know ``job_keys`` and ``reported``
    (None: the caller checks the metric later, with :func:`check_metric`, once it knows the job
    spec with the sweep's ``set`` applied: a fine-tune without dev_file reports nothing).
    """
    if not isinstance(raw, Mapping):
        raise UsageError(f"{source} must be a mapping (job:, metric:, parameters: ...)",
                         hint="see docs/sweeps.md for an example")
    for key in raw:
        if key not in KEYS:
            raise UsageError(f"unknown key {key!r:.40} in {source}", hint=_suggest(str(key), KEYS, "use one of"))
    job = raw.get("job")
    if not isinstance(job, str) or not job:
        raise UsageError(f"{source} has no job", hint="add 'job: templates/bert-finetune.yaml' (a job spec)")
    sets = raw.get("set") or {}
    if not isinstance(sets, Mapping):
        raise UsageError(f"set in {source} must be a mapping", hint="write set: {bert_dir: gs://b/bert/base}")
    for key in sets:
        if key not in job_keys:
            raise UsageError(f"set: {key!r:.40} is not a key of the job spec",
                             hint=_suggest(str(key), job_keys, "the job's keys include"))
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric:
        raise UsageError(f"{source} has no metric", hint=f"add 'metric: {_first(reported or ())}'")
    if reported is not None:
        check_metric(metric, reported)
    goal = _choice(raw, "goal", GOALS, "maximize" if "accuracy" in metric or metric in ("f1", "exact_match")
                   else None, source)
    params = _parameters(raw.get("parameters"), job_keys, source)
    all_values = all(not p.is_range for p in params)
    method = _choice(raw, "method", METHODS, "grid" if all_values else "tpe", source)
    pruner = _choice(raw, "pruner", PRUNERS, "none", source)
    if method == "grid" and not all_values:
        ranged = next(p.name for p in params if p.is_range)
        raise UsageError(f"method grid needs a list of values for every parameter, and {ranged} is a range",
                         hint=f"write {ranged}: {{values: [...]}}, or use method: random or tpe")
    seed = _int(raw, "seed", 0, low=0, source=source)
    max_concurrent = _int(raw, "max_concurrent", None, low=1, source=source)
    eval_every = _int(raw, "eval_every_steps", None, low=0, source=source)
    spec_trials = _int(raw, "max_trials", None, low=1, source=source)
    trials = max_trials if max_trials is not None else spec_trials
    grid = math.prod(len(p.values or ()) for p in params) if all_values else None
    if method == "grid":
        assert grid is not None
        if grid > MAX_GRID:
            raise UsageError(f"the grid has {grid} points", hint=f"sweep at most {MAX_GRID}; use method: random or tpe")
        if trials is not None and grid > trials:
            flag = "--max-trials" if max_trials is not None else "max_trials"
            raise UsageError(f"the grid has {grid} points, more than {flag} {trials}",
                             hint=f"raise {flag} to {grid}, or drop values from the parameters")
        trials = grid
    if trials is None:
        raise UsageError(f"method {method} needs max_trials", hint="add 'max_trials: 16' or pass --max-trials 16")
    return SweepSpec(job=job, metric=metric, goal=goal, method=method, pruner=pruner, max_trials=trials,
                     parameters=tuple(params), set=dict(sets), max_concurrent=max_concurrent,
                     eval_every_steps=eval_every, seed=seed)


def check_metric(metric: str, reported: Collection[str]) -> None:
    if metric not in reported:
        raise UsageError(f"metric {metric!r:.40} is never reported by this job",
                         hint=f"use one of {', '.join(reported)}" if reported else
                         "this job reports no metric as configured (a fine-tune needs dev_file)")


def _parameters(raw: Any, job_keys: Collection[str], source: str) -> list[Parameter]:
    if not isinstance(raw, Mapping) or not raw:
        raise UsageError(f"{source} has no parameters", hint=f"add {EXAMPLE}")
    out = []
    for name, body in raw.items():
        name = str(name)
        if name in RESERVED:
            raise UsageError(f"parameter {name} cannot be swept", hint="tpuctl sets it for every trial")
        if name not in job_keys:
            raise UsageError(f"parameter {name!r:.40} is not a key of the job spec",
                             hint=_suggest(name, job_keys, "the job's keys include"))
        out.append(_parameter(name, body))
    return out


def _parameter(name: str, body: Any) -> Parameter:
    if not isinstance(body, Mapping):
        raise UsageError(f"parameter {name} must be {{values: [...]}} or {{min: A, max: B}}",
                         hint=f"write {name}: {{values: [1, 2]}} or {name}: {{min: 0.0, max: 0.2}}")
    keys = set(body)
    if "values" in keys:
        if keys - {"values"}:
            raise UsageError(f"parameter {name} has values and {', '.join(sorted(keys - {'values'}))}",
                             hint="give either values: [...] or min:/max:")
        values = body["values"]
        if not isinstance(values, list):
            raise UsageError(f"values of parameter {name} must be a list", hint=f"write {name}: {{values: [1, 2]}}")
        if not values:
            raise UsageError(f"parameter {name} has an empty list of values", hint="give at least one value")
        for v in values:
            if not isinstance(v, (str, int, float, bool)) or v is None:
                raise UsageError(f"value {v!r:.40} of parameter {name} is not a number, string or boolean",
                                 hint="give plain values, such as 2.0e-5 or 32")
        if len(set(map(repr, values))) != len(values):
            raise UsageError(f"parameter {name} lists a value twice", hint="list each value once")
        return Parameter(name=name, values=tuple(values))
    unknown = keys - {"min", "max", "log", "type"}
    if unknown or not {"min", "max"} <= keys:
        raise UsageError(f"parameter {name} must be {{values: [...]}} or {{min: A, max: B[, log: true][, type: int]}}",
                         hint=f"got keys {', '.join(sorted(map(str, keys))) or 'none'}")
    low, high = body["min"], body["max"]
    for v in (low, high):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise UsageError(f"min and max of parameter {name} must be numbers", hint=f"write {name}: {{min: 0.0, max: 0.2}}")
    kind = body.get("type", "float")
    if kind not in ("int", "float"):
        raise UsageError(f"type of parameter {name} is {kind!r:.20}", hint="use type: int or type: float")
    log = body.get("log", False)
    if not isinstance(log, bool):
        raise UsageError(f"log of parameter {name} must be true or false", hint="write log: true")
    if not low < high:
        raise UsageError(f"parameter {name} has an empty range (min {low} is not below max {high})",
                         hint="make min smaller than max, or use values: [X] for a single value")
    if log and low <= 0:
        raise UsageError(f"parameter {name} is on a log scale but its min is {low}", hint="make min positive, or drop log")
    integer = kind == "int"
    if integer and (int(low) != low or int(high) != high):
        raise UsageError(f"parameter {name} is an int but its bounds are not integers", hint="use whole numbers")
    return Parameter(name=name, low=int(low) if integer else float(low), high=int(high) if integer else float(high),
                     log=log, integer=integer)


def _choice(raw: Mapping, key: str, allowed: tuple[str, ...], default: str | None, source: str) -> str:
    value = raw.get(key, default)
    if value is None:
        raise UsageError(f"{source} has no {key}", hint=f"add '{key}: {allowed[0]}' ({' or '.join(allowed)})")
    if value not in allowed:
        raise UsageError(f"{key} {value!r:.40} is not one of {', '.join(allowed)}", hint=f"write {key}: {allowed[0]}")
    return value


def _int(raw: Mapping, key: str, default: int | None, *, low: int, source: str) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"{key} in {source} must be an integer >= {low}", hint=f"write {key}: {max(low, 1)}")
    return value


def _first(items: Collection[str]) -> str:
    return next(iter(items), "eval_accuracy")


def _suggest(word: str, choices: Collection[str], lead: str) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return f"did you mean {close[0]}?"
    return f"{lead} {', '.join(sorted(choices)[:12])}"


def outside(spec: SweepSpec, params: Mapping[str, Any]) -> str | None:
    """Why a trial's parameters (read back from the bucket) are not a point of the sweep's space,
    or None: they become the trial's ``--set`` values, so only the swept keys, within their
    values or range, may reach a run."""
    by_name = {p.name: p for p in spec.parameters}
    for name, value in params.items():
        p = by_name.get(name)
        if p is None:
            return f"{name!r:.40} is not a parameter of the sweep"
        if p.values is not None:
            if not any(type(value) is type(v) and value == v for v in p.values):
                return f"{name} = {value!r:.40} is not one of its values"
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not (p.low <= value <= p.high) or (p.integer and value != int(value)):
            return f"{name} = {value!r:.40} is outside its range [{p.low}, {p.high}]"
    return None


def grid_points(spec: SweepSpec) -> dict[str, list[Any]]:
    """The search space as Optuna's GridSampler takes it."""
    return {p.name: list(p.values or ()) for p in spec.parameters}


def from_dict(d: Mapping[str, Any]) -> SweepSpec:
    """A :class:`SweepSpec` saved with :meth:`SweepSpec.to_dict` (already checked when it was made)."""
    params = []
    for name, body in d["parameters"].items():
        if "values" in body:
            params.append(Parameter(name=name, values=tuple(body["values"])))
        else:
            params.append(Parameter(name=name, low=body["min"], high=body["max"], log=bool(body.get("log")),
                                    integer=body.get("type") == "int"))
    return SweepSpec(job=d["job"], metric=d["metric"], goal=d["goal"], method=d["method"], pruner=d["pruner"],
                     max_trials=int(d["max_trials"]), parameters=tuple(params), set=dict(d.get("set") or {}),
                     max_concurrent=d.get("max_concurrent"), eval_every_steps=d.get("eval_every_steps"),
                     seed=int(d.get("seed") or 0))
