"""Which job a spec runs: the one module that knows both the runner and the jobs.

``python -m jobs run`` calls :func:`run_spec`. The runner does not know the jobs and the jobs do
not know the runner module (they implement :class:`jobs.job.Job`), so there is no import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..bert.classifier import ClassifierJob
from ..bert.pretrain import PretrainJob
from ..bert.squad_job import SquadJob
from ..errors import ConfigError
from ..job import Job
from ..keras.job import KerasJob
from ..keras.spec import KerasSpec
from ..spec.base import RunSpec

JOBS: dict[str, type[Job]] = {"bert-pretrain": PretrainJob, "bert-finetune": ClassifierJob,
                              "bert-squad": SquadJob, "keras": KerasJob}


def make_job(spec: RunSpec, search: Sequence[str] | None = None) -> Job:
    """The job of ``spec``; ``search``: where a ``job: keras`` module is looked up (default:
    :func:`jobs.keras.job.search_path`)."""
    if isinstance(spec, KerasSpec):
        return KerasJob(spec, list(search) if search is not None else None)
    try:
        return JOBS[spec.job](spec)
    except KeyError:
        raise ConfigError(f"unknown job {spec.job!r}; use one of {', '.join(JOBS)}") from None


def run_spec(spec: RunSpec, verbose: bool = False, search: Sequence[str] | None = None,
             backend: str = "tensorflow") -> int:
    """Run a checked spec in this process on Keras 3's ``backend`` (``KERAS_BACKEND``, set before
    Keras was imported: ``python -m jobs run`` decides it); returns the exit code."""
    if backend == "jax":
        from .jax.runner import JaxRunner

        return JaxRunner(spec, make_job(spec, search), verbose=verbose).run()
    from .runner import Runner

    return Runner(spec, make_job(spec, search), verbose=verbose).run()
