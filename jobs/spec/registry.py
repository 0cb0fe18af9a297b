"""Which spec class a job's name picks: the one table of the job kinds (``job:`` in a spec).

Each kind's keys live with the kind (:mod:`jobs.bert.spec`, :mod:`jobs.keras.spec`,
:mod:`jobs.command.spec`); this module only pairs them with the names users write.
"""

from __future__ import annotations

from typing import Any

from ..bert.spec import FinetuneSpec, PretrainSpec, SquadSpec
from ..command.spec import CommandSpec
from ..keras.spec import KerasSpec
from .base import RunSpec, SpecError, show

JOBS: dict[str, type[Any]] = {"bert-pretrain": PretrainSpec, "bert-finetune": FinetuneSpec,
                              "bert-squad": SquadSpec, "keras": KerasSpec, "command": CommandSpec}


def reported_metrics(job: str | RunSpec | CommandSpec | type[Any]) -> tuple[str, ...]:
    """The metric names each evaluation of ``job`` reports (progress.json's ``evals``, the
    ``eval/`` scalars, the final ``metrics``): by job name or spec class, every metric the job
    can report; for a loaded spec, those it will report (none without an evaluation set)."""
    if isinstance(job, (RunSpec, CommandSpec)):
        return job.reported_metrics()
    if isinstance(job, type) and issubclass(job, (RunSpec, CommandSpec)):
        return job.REPORTED_METRICS
    if isinstance(job, str) and job in JOBS:
        return JOBS[job].REPORTED_METRICS
    raise SpecError(f"unknown job {show(job)}; use one of {', '.join(JOBS)}")


