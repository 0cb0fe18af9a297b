"""The sweep spec: parse and check a sweep YAML mapping, purely (no file, no bucket, no Optuna).

Every mistake is caught here, before anything is created, as a :class:`UsageError` line that
names the fix (exit code 2): an unknown key, a parameter that is not a key of the job spec, an
empty range, a metric the job never reports, a grid larger than ``--max-trials``. All of them at
once (:class:`Problems`), the most fundamental first: a spec is fixed in one round, not one
problem per try. What the job
spec allows (its keys, the metrics it reports) is passed in by the caller, who reads it from
``jobs.spec`` (TensorFlow-free).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..basics.errors import SpecProblems, UsageError

METHODS = ("grid", "random", "tpe")
PRUNERS = ("none", "asha", "hyperband")
GOALS = ("maximize", "minimize")
KEYS = ("job", "set", "metric", "goal", "method", "pruner", "max_trials", "max_concurrent", "eval_every_steps",
        "seed", "parameters")
# keys a trial's run sets itself: sweeping them would break the sweep's own bookkeeping
RESERVED = ("job", "model_dir", "hparams", "eval_every_steps")
MAX_GRID = 10_000
# How fundamental a problem is, most first: the error names every problem in this order, since a
# file that cannot be read hides everything in it, and a misspelt key hides the value it meant.
FILE, UNKNOWN_KEY, MISSING_KEY, VALUE = range(4)
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


class Problems:
    """What is wrong with a sweep spec (and its job spec), collected so that one error names every
    problem at once, the most fundamental first (``FILE`` ... ``VALUE``): fixing one never uncovers
    another that was there all along."""

    def __init__(self) -> None:
        self.found: list[tuple[int, UsageError]] = []

    def add(self, rank: int, message: str, hint: str | None = None) -> None:
        self.found.append((rank, UsageError(message, hint=hint)))

    def add_error(self, rank: int, exc: UsageError) -> None:
        self.found.append((rank, exc))

    def __len__(self) -> int:
        return len(self.found)

    def raise_if_any(self) -> None:
        """One :class:`SpecProblems` (exit code 2): the most fundamental problem is its line,
        the others follow in order of rank, then of discovery."""
        if self.found:
            raise SpecProblems([exc for _, exc in sorted(self.found, key=lambda item: item[0])])


@dataclass(frozen=True)
class Review:
    """What :func:`review` read: the spec when nothing in it is wrong, and the parts the caller
    checks against the job spec (``set``, ``metric``, the parameters that parsed) even when
    something else is, so those problems are reported in the same error."""

    spec: SweepSpec | None
    sets: dict[str, Any]
    metric: str | None
    parameters: tuple[Parameter, ...]


def parse(raw: Any, *, job_keys: Collection[str] | None, reported: Collection[str] | None,
          source: str = "sweep spec", max_trials: int | None = None) -> SweepSpec:
    """Check ``raw`` (the YAML mapping) against the job's keys and the metrics it reports;
    raises :class:`SpecProblems` naming every problem.

    ``max_trials`` is ``--max-trials`` (it overrides the spec's). The ``job`` path itself is
    checked by the caller, which must read the job spec to know ``job_keys`` (None: unknown, the
    job spec could not be read) and ``reported`` (None: the caller checks the metric later, with
    :func:`check_metric`, once it knows the job spec with the sweep's ``set`` applied: a
    fine-tune without dev_file reports nothing).
    """
    problems = Problems()
    found = review(raw, job_keys=job_keys, source=source, max_trials=max_trials, problems=problems,
                   reported=reported)
    if reported is not None and found.metric is not None:
        try:
            check_metric(found.metric, reported)
        except UsageError as exc:
            problems.add_error(VALUE, exc)
    problems.raise_if_any()
    assert found.spec is not None
    return found.spec


def review(raw: Any, *, job_keys: Collection[str] | None, source: str, max_trials: int | None,
           problems: Problems, reported: Collection[str] | None = None) -> Review:
    """Every problem of the sweep spec ``raw`` into ``problems``; the spec itself when it has none.
    A parameter or ``set`` key is checked against ``job_keys`` only when they are known;
    ``reported`` (the metrics the job can report, when known) only names one to add."""
    before = len(problems)
    if not isinstance(raw, Mapping):
        problems.add(FILE, f"{source} must be a mapping (job:, metric:, parameters: ...)",
                     hint="see docs/sweeps.md for an example")
        return Review(spec=None, sets={}, metric=None, parameters=())
    for key in raw:
        if key not in KEYS:
            problems.add(UNKNOWN_KEY, f"unknown key {key!r:.40} in {source}", hint=_suggest(str(key), KEYS, "use one of"))
    job = raw.get("job")
    if not isinstance(job, str) or not job:
        problems.add(MISSING_KEY, f"{source} has no job", hint="add 'job: templates/bert-finetune.yaml' (a job spec)")
    sets = _sets(raw.get("set"), job_keys, source, problems)
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric:
        problems.add(MISSING_KEY, f"{source} has no metric",
                     hint=f"add 'metric: {next(iter(reported or ()), 'eval_accuracy')}'"
                          + (f" ({', '.join(reported)} are reported)" if reported else ""))
        metric = None
    goal = None
    if metric is not None or "goal" in raw:     # without a metric, its default goal is unknown too
        goal = _choice(raw, "goal", GOALS, "maximize" if metric and ("accuracy" in metric
                                                                       or metric in ("f1", "exact_match")) else None,
                       source, problems)
    params, params_ok = _parameters(raw.get("parameters"), job_keys, source, problems)
    all_values = all(not p.is_range for p in params)
    method = _choice(raw, "method", METHODS, "grid" if all_values else "tpe", source, problems)
    pruner = _choice(raw, "pruner", PRUNERS, "none", source, problems)
    if method == "grid" and not all_values:
        ranged = next(p.name for p in params if p.is_range)
        problems.add(VALUE, f"method grid needs a list of values for every parameter, and {ranged} is a range",
                     hint=f"write {ranged}: {{values: [...]}}, or use method: random or tpe")
    seed = _int(raw, "seed", 0, low=0, source=source, problems=problems)
    max_concurrent = _int(raw, "max_concurrent", None, low=1, source=source, problems=problems)
    eval_every = _int(raw, "eval_every_steps", None, low=0, source=source, problems=problems)
    spec_trials = _int(raw, "max_trials", None, low=1, source=source, problems=problems)
    trials = max_trials if max_trials is not None else spec_trials
    if method == "grid" and all_values and params_ok:
        grid = math.prod(len(p.values or ()) for p in params)
        if grid > MAX_GRID:
            problems.add(VALUE, f"the grid has {grid} points", hint=f"sweep at most {MAX_GRID}; use method: random or tpe")
        elif trials is not None and grid > trials:
            flag = "--max-trials" if max_trials is not None else "max_trials"
            problems.add(VALUE, f"the grid has {grid} points, more than {flag} {trials}",
                         hint=f"raise {flag} to {grid}, or drop values from the parameters")
        trials = grid
    elif method in ("random", "tpe") and trials is None:
        problems.add(MISSING_KEY, f"method {method} needs max_trials", hint="add 'max_trials: 16' or pass --max-trials 16")
    spec = None
    if len(problems) == before:
        assert isinstance(job, str) and metric and goal and method and pruner and trials is not None
        spec = SweepSpec(job=job, metric=metric, goal=goal, method=method, pruner=pruner, max_trials=trials,
                         parameters=tuple(params), set=dict(sets), max_concurrent=max_concurrent,
                         eval_every_steps=eval_every, seed=seed or 0)
    return Review(spec=spec, sets=sets, metric=metric, parameters=tuple(params))


def check_metric(metric: str, reported: Collection[str]) -> None:
    if metric not in reported:
        raise UsageError(f"metric {metric!r:.40} is never reported by this job",
                         hint=f"use one of {', '.join(reported)}" if reported else
                         "this job reports no metric as configured (a fine-tune needs dev_file)")


def _sets(raw: Any, job_keys: Collection[str] | None, source: str, problems: Problems) -> dict[str, Any]:
    """The sweep's fixed overrides whose keys the job has."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.add(VALUE, f"set in {source} must be a mapping", hint="write set: {bert_dir: gs://b/bert/base}")
        return {}
    out = {}
    for key, value in raw.items():
        if job_keys is not None and key not in job_keys:
            problems.add(UNKNOWN_KEY, f"set: {key!r:.40} is not a key of the job spec",
                         hint=_suggest(str(key), job_keys, "the job's keys include"))
        else:
            out[key] = value
    return out


def _parameters(raw: Any, job_keys: Collection[str] | None, source: str,
                problems: Problems) -> tuple[list[Parameter], bool]:
    """The parameters that parse, and whether every one did."""
    if not isinstance(raw, Mapping) or not raw:
        problems.add(MISSING_KEY, f"{source} has no parameters", hint=f"add {EXAMPLE}")
        return [], False
    out = []
    ok = True
    for name, body in raw.items():
        name = str(name)
        if name in RESERVED:
            problems.add(VALUE, f"parameter {name} cannot be swept", hint="tpuctl sets it for every trial")
        elif job_keys is not None and name not in job_keys:
            problems.add(UNKNOWN_KEY, f"parameter {name!r:.40} is not a key of the job spec",
                         hint=_suggest(name, job_keys, "the job's keys include"))
        else:
            try:
                out.append(_parameter(name, body))
                continue
            except UsageError as exc:
                problems.add_error(VALUE, exc)
        ok = False
    return out, ok


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


def _choice(raw: Mapping, key: str, allowed: tuple[str, ...], default: str | None, source: str,
            problems: Problems) -> str | None:
    value = raw.get(key, default)
    if value is None:
        problems.add(MISSING_KEY, f"{source} has no {key}", hint=f"add '{key}: {allowed[0]}' ({' or '.join(allowed)})")
        return None
    if value not in allowed:
        problems.add(VALUE, f"{key} {value!r:.40} is not one of {', '.join(allowed)}", hint=f"write {key}: {allowed[0]}")
        return None
    return value


def _int(raw: Mapping, key: str, default: int | None, *, low: int, source: str, problems: Problems) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        problems.add(VALUE, f"{key} in {source} must be an integer >= {low}", hint=f"write {key}: {max(low, 1)}")
        return None
    return value


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
