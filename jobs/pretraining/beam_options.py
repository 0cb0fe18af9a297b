"""The Beam pipeline options of ``--runner beam|dataflow`` (pure: no Beam import, no I/O).

One place decides what the pipeline is run with, so ``tpuctl data --dry-run`` shows exactly the
options :mod:`jobs.pretraining.beam` hands to Beam, and a test without Beam checks them.

- ``beam``: Beam's in-process FnApiRunner (forced by the pipeline, never ``DirectRunner``,
  which may switch to the Prism runner and download its Go binary at run time), one SDK worker
  process per core (``multi_processing``), no service;
- ``dataflow``: the Dataflow runner. Its workers read the corpus and write the shards in place,
  so both are gs://; they get this code as a package (``--extra_package``, the tpuctl wheel
  ``tpuctl data`` builds) and the fast tokenizer through ``--requirements_file``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

RUNNERS = ("local", "beam", "dataflow")
# Dataflow job names: lower-case letters, digits and hyphens, starting with a letter
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")


@dataclass(frozen=True)
class Dataflow:
    project: str
    region: str
    temp_location: str
    extra_packages: tuple[str, ...] = ()
    requirements_file: str | None = None
    job_name: str | None = None
    max_workers: int | None = None


def check_dataflow(d: Dataflow, corpus: list[str], out: str) -> None:
    """Bad Dataflow options, one line naming the fix (before anything is submitted)."""
    if not d.project:
        raise ConfigError("--runner dataflow needs --project PROJECT (the Google Cloud project it runs in)")
    if not d.region or not _REGION.match(d.region):
        raise ConfigError(f"--runner dataflow needs --region REGION (e.g. us-central1), not {d.region!r}")
    if not d.temp_location.startswith("gs://"):
        raise ConfigError("--runner dataflow needs --temp-location gs://BUCKET/PATH (Dataflow stages "
                          f"its files there), not {d.temp_location!r}")
    local = [c for c in corpus if not c.startswith("gs://")]
    if local:
        raise ConfigError(f"--runner dataflow reads the corpus on Dataflow's workers: {local[0]} is not "
                          "gs://; copy it to a bucket (gcloud storage cp) and give gs:// paths")
    if not out.startswith("gs://"):
        raise ConfigError(f"--runner dataflow writes the shards from Dataflow's workers: give a gs:// "
                          f"output, not {out}")
    if d.job_name is not None and not _JOB_NAME.match(d.job_name):
        raise ConfigError(f"--job-name {d.job_name}: use lower-case letters, digits and hyphens, "
                          "starting with a letter")


def pipeline_args(runner: str, workers: int, dataflow: Dataflow | None = None) -> list[str]:
    """The argv Beam's PipelineOptions is built from."""
    if runner == "beam":
        return ["--direct_running_mode=multi_processing", f"--direct_num_workers={max(1, workers)}"]
    if runner != "dataflow" or dataflow is None:
        raise ValueError(f"no Beam pipeline options for runner {runner!r}")
    d = dataflow
    args = ["--runner=DataflowRunner", f"--project={d.project}", f"--region={d.region}",
            f"--temp_location={d.temp_location}"]
    args += [f"--extra_package={p}" for p in d.extra_packages]
    if d.requirements_file:
        args.append(f"--requirements_file={d.requirements_file}")
    if d.job_name:
        args.append(f"--job_name={d.job_name}")
    if d.max_workers:
        args.append(f"--max_num_workers={d.max_workers}")
    return args
