"""The Optuna study of a sweep, kept where the sweep lives: a journal in the sweep's bucket directory.

Why a journal in the bucket (Optuna's :class:`~optuna.storages.JournalStorage` over a backend that
writes through tpuctl's storage layer) rather than rebuilding the study from the trial records
on every start: the journal *is* Optuna's own record of every ask, report and tell, so a
controller started again (after ``kill -9``, on another machine, on the host VM) replays exactly
the study the dead one had: finished trials stay finished and are never asked again, a trial
asked but not finished comes back RUNNING with its parameters (the controller re-runs or adopts
it), the grid sampler's visited points and TPE's history are what they were. Rebuilding from
trial records would need ``add_trial`` with hand-made distributions and loses intermediate values
and sampler state the records never held.

Each append is one new object ``study/journal/<n>.json`` (a batch of log entries), never a
rewrite: an append is atomic on GCS and on a local directory, and create-only
(``ifGenerationMatch=0``); a killed controller leaves at worst a batch it never wrote. Only the controller holding the sweep's lease writes, so the
in-memory copy of the log is authoritative while it runs.

This is the only module that imports Optuna (and through it numpy): ``tpuctl sweep`` imports it
lazily, and the import-linter contract ``optuna-only-in-sweeps`` keeps it that way.
"""

from __future__ import annotations

import json
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend
from optuna.trial import TrialState

from ..basics.errors import UsageError
from .spec import SweepSpec, grid_points
from .store import SweepStore

JOURNAL = "study/journal/"

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


class BucketJournal(BaseJournalBackend):
    """Optuna's journal log as numbered objects in the sweep's directory.

    Anyone who can write the bucket can write a batch: each must be a JSON list of Optuna journal
    entries (objects with an integer ``op_code``) that Optuna can replay, or the sweep is refused
    with the object named (:meth:`refuse`) instead of failing inside Optuna."""

    def __init__(self, store: SweepStore):
        self.store = store
        self._lock = threading.Lock()
        self._logs: list[dict[str, Any]] = []
        self._sources: list[str] = []      # the batch object each log entry came from
        names = sorted(i.name for i in store.bucket.list(store.name(JOURNAL)) if i.name.endswith(".json"))
        for name in names:
            try:
                batch = json.loads(store.bucket.read_bytes(name))
            except ValueError:             # JSONDecodeError, UnicodeDecodeError
                raise self.refuse(name, "is not JSON") from None
            except RecursionError:
                raise self.refuse(name, "nests too deeply for a list of journal entries") from None
            if not isinstance(batch, list) or not all(
                    isinstance(e, dict) and type(e.get("op_code")) is int for e in batch):
                raise self.refuse(name, "is not a list of Optuna journal entries")
            self._logs.extend(batch)
            self._sources.extend([name] * len(batch))
        self._batches = len(names)

    def refuse(self, name: str, why: str) -> UsageError:
        """The error for batch ``name`` of this journal, which tpuctl did not write."""
        return UsageError(f"the study journal of sweep {self.store.sweep_id} cannot be read: "
                          f"{self.store.bucket.url}/{name} {why}",
                          hint="tpuctl did not write it: restore the object, or start the sweep again "
                               "(tpuctl sweep start SPEC)")

    def unreplayable(self) -> str:
        """The first batch whose entries Optuna cannot replay after those before it, else the
        journal's folder (a journal that replays but is not this sweep's study). Only called
        once a replay failed: it replays again, one batch more each time."""
        ends = [i + 1 for i in range(len(self._sources)) if i + 1 == len(self._sources)
                or self._sources[i + 1] != self._sources[i]]
        for end in ends:
            try:
                JournalStorage(_Replay(self._logs[:end]))
            except Exception:  # noqa: BLE001 - the entries are the bucket's, any failure is theirs
                return self._sources[end - 1]
        return self.store.name(JOURNAL)

    def read_logs(self, log_number_from: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._logs[log_number_from:])

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        with self._lock:
            # create-only: a controller that lost the sweep's lease cannot overwrite a batch the
            # new holder wrote (PreconditionFailed stops it instead)
            self.store.bucket.write_if_generation(self.store.name(f"{JOURNAL}{self._batches:08d}.json"),
                                                  json.dumps(logs).encode(), 0)
            self._batches += 1
            self._logs.extend(logs)


class _Replay(BaseJournalBackend):
    """Entries held in memory, to replay them apart from the sweep's journal."""

    def __init__(self, logs: list[dict[str, Any]]):
        self.logs = logs

    def read_logs(self, log_number_from: int) -> list[dict[str, Any]]:
        return list(self.logs[log_number_from:])

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self.logs.extend(logs)


@dataclass(frozen=True)
class Asked:
    number: int
    params: dict[str, Any]


def _distributions(spec: SweepSpec) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for p in spec.parameters:
        if p.values is not None:
            out[p.name] = CategoricalDistribution(list(p.values))
        elif p.integer:
            out[p.name] = IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            out[p.name] = FloatDistribution(float(p.low), float(p.high), log=p.log)
    return out


def _sampler(spec: SweepSpec) -> Any:
    if spec.method == "grid":
        return optuna.samplers.GridSampler(grid_points(spec), seed=spec.seed)
    if spec.method == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed)


def _pruner(spec: SweepSpec, eval_every: int, num_train_steps: int) -> Any:
    """Steps are the resource: a trial's first rung is its first evaluation."""
    first = max(1, eval_every)
    if spec.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=first, reduction_factor=3)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=first, max_resource=max(first, num_train_steps),
                                              reduction_factor=3)
    return optuna.pruners.NopPruner()


class Study:
    """The sweep's study: ask, report, tell, by trial number (the number is the sweep's trial id)."""

    def __init__(self, store: SweepStore, spec: SweepSpec, *, eval_every: int, num_train_steps: int):
        self.spec = spec
        self.distributions = _distributions(spec)
        journal = BucketJournal(store)
        try:
            storage = JournalStorage(journal)     # replays every entry of the journal
            self.study = optuna.create_study(storage=storage, study_name=store.sweep_id, load_if_exists=True,
                                             direction=spec.goal, sampler=_sampler(spec),
                                             pruner=_pruner(spec, eval_every, num_train_steps))
        except Exception as exc:  # noqa: BLE001 - whatever the bucket's entries make Optuna raise
            raise journal.refuse(journal.unreplayable(),
                                 f"holds entries Optuna cannot replay ({type(exc).__name__})") from None

    def ask(self) -> Asked:
        trial = self.study.ask(self.distributions)
        return Asked(trial.number, dict(trial.params))

    def _trial(self, number: int) -> Any:
        frozen = self.study.trials[number]
        return optuna.trial.Trial(self.study, frozen._trial_id)

    def report(self, number: int, value: float, step: int) -> bool:
        """Report an evaluation; True when the pruner says this trial should stop."""
        trial = self._trial(number)
        trial.report(float(value), int(step))
        return bool(trial.should_prune())

    def _tell(self, number: int, value: float | None = None, state: Any = None) -> None:
        """``study.tell``; the grid sampler calls ``study.stop()`` after the last grid point, which
        raises outside ``optimize`` once the trial's state is stored: that is not an error here."""
        try:
            self.study.tell(number, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise

    def finish(self, number: int, value: float | None) -> None:
        if value is None:
            self._tell(number, state=TrialState.FAIL)
        else:
            self._tell(number, float(value))

    def prune(self, number: int) -> None:
        self._tell(number, state=TrialState.PRUNED)

    def fail(self, number: int) -> None:
        self._tell(number, state=TrialState.FAIL)

    def states(self) -> dict[int, str]:
        """Every trial's state as the journal says: running, finished, pruned, failed."""
        names = {TrialState.RUNNING: "running", TrialState.WAITING: "running", TrialState.COMPLETE: "finished",
                 TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}
        return {t.number: names[t.state] for t in self.study.get_trials(deepcopy=False)}

    def params(self, number: int) -> dict[str, Any]:
        return dict(self.study.trials[number].params)

    def value(self, number: int) -> float | None:
        return self.study.trials[number].value

    @property
    def count(self) -> int:
        return len(self.study.get_trials(deepcopy=False))
