"""The parallel parts as an Apache Beam pipeline: every core here, or Dataflow for many GB.

The parallel path is a pure function of (corpus, vocab, plan, part) per part
(:func:`jobs.pretraining.parallel.write_part`), so the pipeline is only

    Create(parts not yet made) -> Reshuffle -> ParDo(make one part) -> ToList -> Map(manifest)

Each part reads its byte ranges and writes its shard through Beam's FileSystems (a local path
here, gs:// on Dataflow: nothing goes through the launching machine), through a ``.partial``
name renamed when whole. A part whose shard already exists (an interrupted run) is counted, not
made again. The shards are the multiprocessing path's, byte for byte, for the same parts and
seed. The manifest (:class:`~jobs.pretraining.parallel.Plan`) is written first without
counts and last, by the pipeline's final step, complete.

Needs the ``beam`` extra (apache-beam); imported only for ``--runner beam|dataflow``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from . import parallel as par
from . import records

RAW = CompressionTypes.UNCOMPRESSED


def open_file(path: str):
    """A seekable, readable file through Beam's FileSystems (local or gs://)."""
    return FileSystems.open(path, compression_type=RAW)


def read_bytes(path: str) -> bytes:
    with open_file(path) as f:
        return f.read()


def _write_bytes(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with FileSystems.create(tmp, mime_type="application/octet-stream", compression_type=RAW) as f:
        f.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def expand(patterns: str) -> list[str]:
    """Comma-separated globs, each sorted, through FileSystems."""
    files: list[str] = []
    for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
        matched = FileSystems.match([pattern])[0].metadata_list
        files.extend(sorted(m.path for m in matched))
    return files


def read_manifest(out_dir: str) -> par.Plan | None:
    path = FileSystems.join(out_dir, par.MANIFEST)
    if not FileSystems.exists(path):
        return None
    return par.Plan.from_json_dict(json.loads(read_bytes(path)))


def write_manifest(out_dir: str, plan: par.Plan) -> None:
    _write_bytes(FileSystems.join(out_dir, par.MANIFEST),
                 (json.dumps(plan.to_json_dict(), indent=1, sort_keys=True) + "\n").encode())


class MakePart(beam.DoFn):
    """One part's shard, written in place; yields (part, instances)."""

    def __init__(self, plan_json: str, vocab: bytes, out_dir: str, fast_tokenizer: bool):
        self.plan_json, self.vocab, self.out_dir, self.fast = plan_json, vocab, out_dir, fast_tokenizer

    def setup(self) -> None:
        self.plan = par.Plan.from_json_dict(json.loads(self.plan_json))
        fd, self.vocab_file = tempfile.mkstemp(suffix="-vocab.txt")
        with os.fdopen(fd, "wb") as f:
            f.write(self.vocab)

    def teardown(self) -> None:
        if getattr(self, "vocab_file", None):
            os.unlink(self.vocab_file)

    def process(self, part: int):
        final = FileSystems.join(self.out_dir, par.shard_name(part, self.plan.parts))
        if FileSystems.exists(final):  # made by an interrupted run of the same plan
            with open_file(final) as f:
                yield part, records.count_records(f)
            return
        partial = final + ".partial"
        with FileSystems.create(partial, mime_type="application/octet-stream", compression_type=RAW) as out:
            count = par.write_part(self.plan, part, self.vocab_file, out, self.fast, open_file=open_file)
        FileSystems.rename([partial], [final])
        yield part, count


def _finish(made: Sequence[tuple[int, int]], plan_json: str, out_dir: str) -> int:
    plan = par.Plan.from_json_dict(json.loads(plan_json))
    plan.counts.update({str(part): count for part, count in made})
    plan.complete = len(plan.counts) == plan.parts
    write_manifest(out_dir, plan)
    return len(made)


def run(plan: par.Plan, vocab_file: str, out_dir: str, args: list[str], runner: str,
        log: Callable[[str], None] = print, fast_tokenizer: bool = True) -> tuple[par.Plan, int]:
    """Make the parts the manifest lacks with Beam; returns the manifest and the parts made."""
    existing = read_manifest(out_dir)
    names = [] if existing is not None else [
        os.path.basename(m.path) for m in FileSystems.match([FileSystems.join(out_dir, "*.tfrecord")])[0].metadata_list]
    existing = par.judge(out_dir, plan, existing, names)
    if existing is not None:
        if existing.complete:
            log(f"{out_dir} is complete ({sum(existing.counts.values())} instances): nothing to do")
            return existing, 0
        plan.counts = dict(existing.counts)
        log(f"resuming: {len(plan.counts)} of {plan.parts} parts are done")
    write_manifest(out_dir, plan)
    todo = [p for p in range(plan.parts) if str(p) not in plan.counts]
    log(f"creating {len(todo)} part(s) with Beam ({runner})")
    plan_json = json.dumps(plan.to_json_dict())
    options = PipelineOptions(args)
    if runner == "beam":
        # forced: DirectRunner may pick the Prism runner, which downloads a binary at run time
        import logging

        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        logging.getLogger("apache_beam").setLevel(logging.ERROR)  # each SDK worker's start-up notes

        pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
    else:
        pipeline = beam.Pipeline(options=options)
    with pipeline as p:
        (p | "parts" >> beam.Create(todo)
           | "spread" >> beam.Reshuffle()
           | "make" >> beam.ParDo(MakePart(plan_json, read_bytes(vocab_file), out_dir, fast_tokenizer))
           | "gather" >> beam.combiners.ToList()
           | "manifest" >> beam.Map(_finish, plan_json, out_dir))
    done = read_manifest(out_dir)
    if done is None or not done.complete:
        raise RuntimeError(f"the Beam pipeline ended without a complete manifest in {out_dir}")
    return done, len(todo)
