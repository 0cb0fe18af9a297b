"""Which job a spec runs: the one module that knows both the runner and the BERT jobs.

``python -m jobs run`` calls :func:`run_spec`. The runner does not know the jobs and the jobs do
not know the runner module (they subclass :class:`jobs.job.Job`), so there is no import cycle.
"""

from __future__ import annotations

from .bert.classifier import ClassifierJob
from .bert.pretrain import PretrainJob
from .bert.squad_job import SquadJob
from .errors import ConfigError
from .job import Job
from .runner import Runner
from .spec import JobSpec

JOBS: dict[str, type[Job]] = {"bert-pretrain": PretrainJob, "bert-finetune": ClassifierJob,
                              "bert-squad": SquadJob}


def make_job(spec: JobSpec) -> Job:
    try:
        return JOBS[spec.job](spec)
    except KeyError:
        raise ConfigError(f"unknown job {spec.job!r}; use one of {', '.join(JOBS)}") from None


def run_spec(spec: JobSpec) -> int:
    """Run a checked spec in this process; returns the exit code."""
    return Runner(spec, make_job(spec)).run()
