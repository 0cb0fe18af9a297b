"""Pretraining data at corpus scale: parts made in parallel, streamed to shards, in bounded memory.

The original (and ``--exact``, :func:`jobs.pretraining.create.create`) holds every instance of
every duplicate in memory and shuffles them at the end: about 6 KB per instance, 115 GB for a
500 MB corpus masked ten times. Here:

- the corpus is cut into ``parts`` by bytes (:mod:`jobs.pretraining.corpus_parts`), each a whole number
  of documents; part ``p`` writes ``part-{p:05d}-of-{parts:05d}.tfrecord`` with its own random
  stream, seeded from ``(seed, p, pool)``, so the output is a function of (corpus, vocab, options,
  seed, parts) -- not of the number of worker processes or of timing;
- a part is read in *pools* of about ``pool_bytes`` of text; each pool gets the original's
  procedure (documents shuffled, ``dupe_factor`` passes, random next sentences drawn from the
  pool's other documents) and its instances go out as they are made, through a bounded shuffle
  buffer of ``shuffle_records`` serialized records. Memory per worker: one pool's tokens plus
  the buffer, whatever the corpus size;
- random next sentences: the original draws the other document uniformly from the whole corpus;
  here uniformly from the other documents of the same pool (thousands of documents at the
  default 16 MB). Each instance is still [A from its document, B from a uniformly drawn other
  document], every document is in exactly one pool, so the marginal laws (lengths, the 50 %
  random-next rate, masking) are the original's; only the draw is local to a region of the
  corpus rather than global;
- the original's final global shuffle is replaced by the buffer plus the input pipeline
  (:mod:`jobs.data`), which permutes the shard order every epoch and permutes windows of 4096
  records over groups of 4 interleaved shards -- a local, not a global, permutation, hence the
  buffer here.

A ``manifest.json`` beside the shards names the inputs (sha256), options and counts: a re-run
with the same inputs is a no-op, an interrupted run resumes the parts that have no finished
shard, and an output directory holding shards made otherwise is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import BinaryIO

from ..bert.tokenization import FullTokenizer
from ..errors import ConfigError
from . import corpus_parts, records
from .corpus_inputs import InputFile, check_not_empty, inspect_input  # noqa: F401 - part of this API
from .fast_tokenization import line_tokenizer
from .sampling import DataOptions, Instance, instances_from_document, to_features

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
POOL_BYTES = 16 << 20       # text per pool of documents (random next sentences come from it)
SHUFFLE_RECORDS = 8192      # serialized records in each worker's shuffle buffer
PART_BYTES = 64 << 20       # default parts: max(MIN_PARTS, corpus bytes / PART_BYTES)
MIN_PARTS = 8


def default_parts(total_bytes: int) -> int:
    return max(MIN_PARTS, -(-total_bytes // PART_BYTES))


def shard_name(part: int, parts: int) -> str:
    return f"part-{part:05d}-of-{parts:05d}.tfrecord"


def derive_seed(seed: int, *keys) -> int:
    digest = hashlib.sha256("/".join(map(str, (seed, *keys))).encode()).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass
class Plan:
    """What the shards are a function of; the manifest's identity."""
    inputs: list[InputFile]
    vocab_sha256: str
    do_lower_case: bool
    options: DataOptions
    parts: int
    mode: str = "parallel"  # or "exact"
    pool_bytes: int = POOL_BYTES
    shuffle_records: int = SHUFFLE_RECORDS
    counts: dict[str, int] = field(default_factory=dict)
    complete: bool = False

    def identity(self) -> dict:
        d = self.to_json_dict()
        for key in ("counts", "complete", "total"):
            d.pop(key, None)
        d["inputs"] = [{"bytes": i["bytes"], "sha256": i["sha256"]} for i in d["inputs"]]
        return d

    def to_json_dict(self) -> dict:
        d = asdict(self)
        d["version"] = MANIFEST_VERSION
        d["total"] = sum(self.counts.values())
        return d

    @classmethod
    def from_json_dict(cls, d: dict) -> Plan:
        d = dict(d)
        d.pop("version", None)
        d.pop("total", None)
        d["inputs"] = [InputFile(**i) for i in d["inputs"]]
        d["options"] = DataOptions(**d["options"])
        return cls(**d)

    def shards(self) -> list[str]:
        if self.mode == "exact":
            return [f"pretraining-{i:05d}-of-{self.parts:05d}.tfrecord" for i in range(self.parts)]
        return [shard_name(p, self.parts) for p in range(self.parts)]


def file_sha256(path: str) -> str:
    from ..bert.tokenization import read_bytes

    return hashlib.sha256(read_bytes(path)).hexdigest()


# -- one part ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartJob:
    part: int
    plan_json: str
    vocab_file: str
    out_dir: str
    fast_tokenizer: bool = True


def make_part(job: PartJob) -> tuple[int, int]:
    """Write part ``job.part``'s shard (through a ``.partial`` file); returns (part, count)."""
    plan = Plan.from_json_dict(json.loads(job.plan_json))
    final = os.path.join(job.out_dir, shard_name(job.part, plan.parts))
    partial = final + ".partial"
    with open(partial, "wb") as out:
        count = write_part(plan, job.part, job.vocab_file, out, job.fast_tokenizer)
    os.replace(partial, final)
    return job.part, count


def write_part(plan: Plan, part: int, vocab_file: str, out: BinaryIO, fast_tokenizer: bool = True,
               open_file: Callable[[str], BinaryIO] | None = None) -> int:
    """Part ``part``'s TFRecords into ``out``; returns how many. The bytes are a function of
    (corpus, vocab, plan, part) only: the multiprocessing path and the Beam pipeline
    (:mod:`jobs.pretraining.beam`) both call this, so their shards are the same."""
    tokenizer = FullTokenizer(vocab_file, plan.do_lower_case)
    tokenize = line_tokenizer(tokenizer, fast_tokenizer)
    opts = plan.options
    vocab_words = list(tokenizer.vocab)
    canonical = {w: w for w in vocab_words}  # one str object per vocabulary token
    spans = corpus_parts.part_spans([i.path for i in plan.inputs], [i.bytes for i in plan.inputs],
                                    part, plan.parts)
    shuffle_rng = random.Random(derive_seed(opts.random_seed, part, "shuffle"))
    buffer: list[bytes] = []
    count = 0

    def emit(instance: Instance) -> None:
        nonlocal count
        buffer.append(records.frame(records.encode_example(to_features(instance, tokenizer, opts))))
        count += 1
        if len(buffer) >= plan.shuffle_records:
            k = shuffle_rng.randrange(len(buffer))
            buffer[k], buffer[-1] = buffer[-1], buffer[k]
            out.write(buffer.pop())

    pool: list[list[list[str]]] = []
    pool_bytes, pool_index = 0, 0
    for span in spans:
        for lines, nbytes in corpus_parts.documents(span, open_file):
            doc = []
            for line in lines:
                tokens = [canonical.get(t, t) for t in tokenize(line)]
                if tokens:
                    doc.append(tokens)
            if doc:
                pool.append(doc)
                pool_bytes += nbytes
            if pool_bytes >= plan.pool_bytes:
                _pool_instances(pool, vocab_words, opts, part, pool_index, emit)
                pool, pool_bytes, pool_index = [], 0, pool_index + 1
    if pool:
        _pool_instances(pool, vocab_words, opts, part, pool_index, emit)
    shuffle_rng.shuffle(buffer)
    out.writelines(buffer)
    return count


def _pool_instances(documents, vocab_words, opts: DataOptions, part: int, pool: int, emit) -> None:
    """The original's create_training_instances on one pool, emitting as it goes."""
    rng = random.Random(derive_seed(opts.random_seed, part, pool))
    rng.shuffle(documents)
    for _ in range(opts.dupe_factor):
        for index in range(len(documents)):
            for instance in instances_from_document(documents, index, vocab_words, opts, rng):
                emit(instance)


# -- the whole run -----------------------------------------------------------------------------

def read_manifest(out_dir: str) -> Plan | None:
    path = os.path.join(out_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return Plan.from_json_dict(json.load(f))


def write_manifest(out_dir: str, plan: Plan) -> None:
    path = os.path.join(out_dir, MANIFEST)
    with open(path + ".tmp", "w") as f:
        json.dump(plan.to_json_dict(), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def reconcile(out_dir: str, plan: Plan) -> Plan | None:
    """The manifest to continue from: None to start afresh; the existing one if it describes
    the same shards; ConfigError if the directory holds shards made otherwise."""
    existing = read_manifest(out_dir)
    names = os.listdir(out_dir) if existing is None and os.path.isdir(out_dir) else []
    return judge(out_dir, plan, existing, names)


def judge(out_dir: str, plan: Plan, existing: Plan | None, names: Sequence[str]) -> Plan | None:
    """:func:`reconcile`'s decision from what the directory holds (its manifest, its names)."""
    if existing is None:
        foreign = sorted(n for n in names if n.endswith(".tfrecord"))
        if foreign:
            raise ConfigError(f"{out_dir} already holds {foreign[0]} and no {MANIFEST}: give an "
                              "empty output directory")
        return None
    if existing.identity() != plan.identity():
        mine, theirs = plan.identity(), existing.identity()
        diff = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise ConfigError(f"{out_dir} holds shards made from other inputs or options (differs in "
                          f"{', '.join(diff)}); give another output directory or delete it")
    return existing


def run(plan: Plan, vocab_file: str, out_dir: str, workers: int, log=print,
        fast_tokenizer: bool = True) -> tuple[Plan, int]:
    """Make the missing parts with ``workers`` processes; the manifest is rewritten as each part
    finishes and marked complete at the end. Returns the manifest and the parts made now."""
    os.makedirs(out_dir, exist_ok=True)
    existing = reconcile(out_dir, plan)
    if existing is not None:
        if existing.complete:
            log(f"{out_dir} is complete ({sum(existing.counts.values())} instances): nothing to do")
            return existing, 0
        plan.counts = {k: v for k, v in existing.counts.items()
                       if os.path.exists(os.path.join(out_dir, shard_name(int(k), plan.parts)))}
        log(f"resuming: {len(plan.counts)} of {plan.parts} parts are done")
    write_manifest(out_dir, plan)
    todo = [p for p in range(plan.parts) if str(p) not in plan.counts]
    plan_json = json.dumps(plan.to_json_dict())
    jobs = [PartJob(p, plan_json, vocab_file, out_dir, fast_tokenizer) for p in todo]
    workers = max(1, min(workers, len(jobs) or 1))

    def done(part: int, count: int) -> None:
        plan.counts[str(part)] = count
        write_manifest(out_dir, plan)

    if workers == 1:
        for job in jobs:
            done(*make_part(job))
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for part, count in pool.imap_unordered(make_part, jobs):
                done(part, count)
    plan.complete = True
    write_manifest(out_dir, plan)
    return plan, len(jobs)
