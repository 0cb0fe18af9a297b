"""The input pipeline: the global batch at step N is a function of (data, seed, N) alone.

Training reads one *epoch stream*: epoch after epoch, every record of the TFRecord shards once
per epoch, in an order fixed by the seed and the epoch number. Global batch N is the records
at stream positions ``[N * B, (N + 1) * B)``; a host takes its slice of every global batch by
its ``input_context``. The position is an integer kept in the checkpoint (examples consumed), so
a resumed run reads exactly what the uninterrupted run would have read next, whether it was
killed, stopped or moved to another number of hosts or replicas. No iterator state, shuffle
buffer or RNG state has to be saved.

The order of epoch ``e`` (all stateless functions of ``(seed, e)``):

1. the shards are permuted (``tf.random.experimental.index_shuffle``);
2. consecutive permuted shards form *groups* of ``GROUP_SHARDS``, read one after the other; the
   shards of a group are interleaved record by record (and read in parallel);
3. each group's records are cut into *windows* of ``WINDOW_RECORDS`` records and each window is
   permuted by its own key ``(seed, e, group, window)``.

To start at position p the pipeline skips whole epochs and groups arithmetically (the index
knows every shard's record count) and reads through at most one group. TFRecord files cannot
be seeked into by record number, so that one group is the price of a resume: seconds for the
shards of create_pretraining_data.py. The record counts are counted once and kept in
``<model_dir>/input_index.json`` (rebuilt if a file's size changes).

Why not ``tf.train.Checkpoint(iterator=...)``: an iterator checkpoint replays exactly only on
the same number of input pipelines (it stores each host's shuffle buffer and file offsets), it
grows with the shuffle buffer, and a TPU Node keeps the iterator on the remote worker. The
index-based stream has none of these limits, and it is what the multi-host runner needs: the
same global batch at step N on 1 host or on N.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from .errors import ConfigError

GROUP_SHARDS = 4         # shards read together, interleaved record by record
WINDOW_RECORDS = 4096    # records permuted together (about 6 MB at seq 128)
SHARD_RECORDS = 4096     # records per training shard written by write_stream (round-robin)
INDEX_NAME = "input_index.json"
INDEX_VERSION = 1
_FOREVER = 1 << 62
_READ_BUFFER = 1 << 20

# Salts that keep the stateless keys of different uses apart.
_SHARD_ORDER, _WINDOW_ORDER = 1, 2


@dataclass(frozen=True)
class RecordIndex:
    """The shards of a data set, in a fixed order, with their record counts and sizes."""

    files: tuple[str, ...]
    counts: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)

    def to_json(self) -> str:
        return json.dumps({"version": INDEX_VERSION, "files": [
            {"path": f, "records": n, "bytes": b} for f, n, b in zip(self.files, self.counts, self.sizes)
        ]}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RecordIndex:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != INDEX_VERSION:
            raise ValueError("not an input index of this version")
        rows = data["files"]
        return cls(tuple(str(r["path"]) for r in rows), tuple(int(r["records"]) for r in rows),
                   tuple(int(r["bytes"]) for r in rows))


def count_records(path: str) -> int:
    """Records in one TFRecord file (reads it once)."""
    dataset = tf.data.TFRecordDataset(path, buffer_size=8 * _READ_BUFFER)
    return int(dataset.reduce(np.int64(0), lambda n, _: n + 1).numpy())


def build_index(files: Sequence[str], cache: str | None = None,
                log: Callable[[str], None] = print) -> RecordIndex:
    """The index of ``files`` (order kept), reusing ``cache`` when it describes the same files
    with the same sizes, else counting every file and writing ``cache``."""
    if not files:
        raise ConfigError("no input files; check the data paths in the spec")
    sizes = tuple(int(tf.io.gfile.stat(f).length) for f in files)
    if cache and tf.io.gfile.exists(cache):
        try:
            with tf.io.gfile.GFile(cache) as f:
                cached = RecordIndex.from_json(f.read())
        except (ValueError, KeyError, TypeError) as exc:
            log(f"ignoring unreadable {cache} ({exc}); counting records again")
            cached = None
        if cached is not None and cached.files == tuple(files) and cached.sizes == sizes:
            return cached
        if cached is not None:
            log(f"input files differ from {cache} (files or sizes changed): counting again; the "
                "example order of this run changes from here on")
    index = RecordIndex(tuple(files), tuple(count_records(f) for f in files), sizes)
    if index.total == 0:
        raise ConfigError(f"the input files ({files[0]}{' ...' if len(files) > 1 else ''}) hold no "
                          "records; recreate the data")
    if cache:
        tmp = cache + ".tmp"
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(index.to_json())
        tf.io.gfile.rename(tmp, cache, overwrite=True)
    return index


def _key(seed: int, *parts) -> tf.Tensor:
    """A stateless RNG key (shape [2], int64) for ``seed`` and the integers ``parts``."""
    key = tf.constant([seed, 0], tf.int64)
    for part in parts:
        key = tf.random.experimental.stateless_fold_in(key, tf.cast(part, tf.int64))
    return key


def permutation(n, key: tf.Tensor) -> tf.Tensor:
    """A pseudo-random permutation of ``range(n)`` (int64), a pure function of ``key``."""
    n = tf.cast(n, tf.int64)
    return tf.random.experimental.index_shuffle(tf.range(n), key, tf.maximum(n - 1, 0))


class EpochStream:
    """Serialized records in epoch-stream order (see the module docstring)."""

    def __init__(self, index: RecordIndex, seed: int, group_shards: int = GROUP_SHARDS,
                 window_records: int = WINDOW_RECORDS):
        if index.total == 0:
            raise ConfigError("the input data holds no records")
        self.index, self.seed = index, int(seed)
        self.group_shards = max(1, min(group_shards, len(index.files)))
        self.window_records = window_records
        self.num_groups = -(-len(index.files) // self.group_shards)

    def shard_order(self, epoch) -> tf.Tensor:
        return permutation(len(self.index.files), _key(self.seed, _SHARD_ORDER, epoch))

    def locate(self, position: int) -> tuple[int, int, int]:
        """(epoch, group, records into that group) of a stream position."""
        epoch, offset = divmod(int(position), self.index.total)
        order = self.shard_order(epoch).numpy()
        counts = np.asarray(self.index.counts, np.int64)[order]
        k = self.group_shards
        sizes = np.array([counts[g * k:(g + 1) * k].sum() for g in range(self.num_groups)])
        ends = np.cumsum(sizes)
        group = int(np.searchsorted(ends, offset, side="right"))
        return epoch, group, int(offset - (ends[group - 1] if group else 0))

    def records(self, position: int = 0) -> tf.data.Dataset:
        """The stream from ``position`` on, forever."""
        epoch, group, skip = self.locate(position)
        num_groups = self.num_groups
        pairs = tf.data.Dataset.range(epoch, _FOREVER).flat_map(
            lambda e: tf.data.Dataset.range(num_groups).map(lambda g: (e, g)))
        return pairs.skip(group).flat_map(self._group).skip(skip)

    def _group(self, epoch, group) -> tf.data.Dataset:
        k = self.group_shards
        ids = self.shard_order(epoch)[group * k:(group + 1) * k]
        names = tf.gather(tf.constant(self.index.files), ids)
        records = tf.data.Dataset.from_tensor_slices(names).interleave(
            lambda name: tf.data.TFRecordDataset(name, buffer_size=_READ_BUFFER),
            cycle_length=k, block_length=1, num_parallel_calls=k, deterministic=True)
        seed = self.seed

        def shuffle(window, batch):
            order = permutation(tf.shape(batch, out_type=tf.int64)[0],
                                _key(seed, _WINDOW_ORDER, epoch, group, window))
            return tf.gather(batch, order)

        return records.batch(self.window_records).enumerate().map(shuffle).unbatch()


def host_batches(records: tf.data.Dataset, ctx: tf.distribute.InputContext, global_batch: int,
                 parse: Callable[[tf.Tensor], dict], drop_remainder: bool = True) -> tf.data.Dataset:
    """This input pipeline's per-replica batches of a record stream.

    Global batch N is records ``[N * B, (N + 1) * B)``; host h of H takes the h-th ``B / H`` of
    it, split into its replicas' batches in replica order (the order in which the strategy
    hands a pipeline's elements to its replicas). ``parse`` maps a batch of serialized records
    to features.
    """
    hosts, host = ctx.num_input_pipelines, ctx.input_pipeline_id
    if global_batch % hosts:
        raise ConfigError(f"batch size {global_batch} does not divide over {hosts} hosts; use a "
                          f"multiple of {hosts}")
    per_host = global_batch // hosts
    per_replica = ctx.get_per_replica_batch_size(global_batch)
    batches = records.batch(per_host, drop_remainder=drop_remainder)
    if hosts > 1:
        batches = batches.shard(hosts, host)
    if per_replica != per_host:
        batches = batches.unbatch().batch(per_replica, drop_remainder=drop_remainder)
    return (batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE))


def in_order(files: Sequence[str]) -> tf.data.Dataset:
    """The records of ``files`` once, in file order (evaluation)."""
    return tf.data.TFRecordDataset(list(files), buffer_size=_READ_BUFFER)


def write_records(path: str, arrays: dict[str, np.ndarray], rows) -> int:
    """Write ``rows`` (indices into ``arrays``) to a TFRecord file (any TensorFlow filesystem),
    as temp file + rename; returns the number of records."""
    def feature(values) -> tf.train.Feature:
        values = np.atleast_1d(values)
        if values.dtype.kind == "f":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values.tolist()))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values.tolist()))

    tmp = path + ".tmp"
    count = 0
    with tf.io.TFRecordWriter(tmp) as writer:
        for i in rows:
            example = tf.train.Example(features=tf.train.Features(
                feature={k: feature(v[i]) for k, v in sorted(arrays.items())}))
            writer.write(example.SerializeToString())
            count += 1
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return count


def write_stream(out_dir: str, arrays: dict[str, np.ndarray], n: int, seed: int,
                 log: Callable[[str], None]) -> EpochStream:
    """Write ``n`` training records into round-robin shards under ``out_dir`` (every shard samples
    the whole set, so shards mix well), drop shards of an earlier, larger set, and return the
    epoch stream over them. Rewriting on every start gives the same bytes, so resumption is exact."""
    tf.io.gfile.makedirs(out_dir)
    shards = -(-n // SHARD_RECORDS)
    files = [f"{out_dir}/train-{i:05d}-of-{shards:05d}.tfrecord" for i in range(shards)]
    for i, path in enumerate(files):
        write_records(path, arrays, range(i, n, shards))
    for stale in tf.io.gfile.glob(f"{out_dir}/train-*.tfrecord"):
        if stale not in files:
            tf.io.gfile.remove(stale)
    return EpochStream(build_index(files, f"{out_dir}/{INDEX_NAME}", log), seed)
