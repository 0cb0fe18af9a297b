"""The input pipeline: the global batch at step N is a function of (data, seed, N) alone.

Training reads one *epoch stream*: epoch after epoch, every record of the TFRecord shards once
per epoch, in an order fixed by the seed and the epoch number. Global batch N is the records
at stream positions ``[N * B, (N + 1) * B)``; host h of H reads only its slice of every global
batch (:meth:`EpochStream.host_records`: each record at its byte offset, which the index keeps),
so per-host input I/O falls as 1/H. The position is an integer kept in the checkpoint (examples consumed), so
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
knows every shard's record count). The record counts are counted once and kept in
``<model_dir>/input_index.json`` (rebuilt if a file's size changes), the records' byte offsets
beside it (``input_index.json.offsets/``); reading by offset starts at p's window. Without
offsets (an index built without a cache) a host reads the whole stream, through at most one
group on a resume, and keeps its slice (:meth:`EpochStream.records`, :func:`host_batches`).

Why not ``tf.train.Checkpoint(iterator=...)``: an iterator checkpoint replays exactly only on
the same number of input pipelines (it stores each host's shuffle buffer and file offsets), it
grows with the shuffle buffer, and a TPU Node keeps the iterator on the remote worker. The
index-based stream has none of these limits, and it is what the multi-host runner needs: the
same global batch at step N on 1 host or on N.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.ops import gen_dataset_ops

from .errors import ConfigError

GROUP_SHARDS = 4         # shards read together, interleaved record by record
WINDOW_RECORDS = 4096    # records permuted together (about 6 MB at seq 128)
SHARD_RECORDS = 4096     # records per training shard written by write_stream (round-robin)
INDEX_NAME = "input_index.json"
INDEX_VERSION = 2  # 2: with the record offsets beside it
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
    cache: str | None = None  # the index file; its record offsets beside it (offsets_path)

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
    """Records in one TFRecord file."""
    return len(record_offsets(path))


def record_offsets(path: str) -> np.ndarray:
    """The byte offset of every record of a TFRecord file (int64), from the framing alone: a
    record is an 8-byte little-endian length, a 4-byte CRC of it, the data and a 4-byte CRC."""
    offsets = []
    at = 0          # the next record's offset
    pos, chunk = 0, b""   # chunk: the file's bytes from pos on, read in large pieces (gs://)
    with tf.io.gfile.GFile(path, "rb") as f:
        size = f.size()
        while at < size:
            if at + 8 > pos + len(chunk):
                if at > pos + len(chunk):  # past a record longer than a piece
                    f.seek(at)
                    pos, chunk = at, b""
                else:
                    pos, chunk = at, chunk[at - pos:]
                chunk += f.read(8 * _READ_BUFFER)
                if at + 8 > pos + len(chunk):
                    break
            offsets.append(at)
            at += 16 + int.from_bytes(chunk[at - pos:at - pos + 8], "little")
    if at != size:
        raise ConfigError(f"{path} is truncated (a record at byte {offsets[-1] if offsets else 0} "
                          f"ends past its {size} bytes); recreate the data")
    return np.asarray(offsets, np.int64)


def offsets_path(cache: str, i: int) -> str:
    """Where the record offsets of the index's i-th file are kept (int64, little-endian)."""
    return f"{cache}.offsets/{i:05d}"


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
        if cached is not None and cached.files == tuple(files) and cached.sizes == sizes and \
                all(tf.io.gfile.exists(offsets_path(cache, i)) for i in range(len(files))):
            return dataclasses.replace(cached, cache=cache)
        if cached is not None:
            log(f"input files differ from {cache} (files or sizes changed): counting again; the "
                "example order of this run changes from here on")
    offsets = [record_offsets(f) for f in files]
    index = RecordIndex(tuple(files), tuple(len(o) for o in offsets), sizes)
    if index.total == 0:
        raise ConfigError(f"the input files ({files[0]}{' ...' if len(files) > 1 else ''}) hold no "
                          "records; recreate the data")
    if cache:
        tf.io.gfile.makedirs(f"{cache}.offsets")
        for i, values in enumerate(offsets):  # before the index that vouches for them
            with tf.io.gfile.GFile(offsets_path(cache, i), "wb") as f:
                f.write(values.astype("<i8").tobytes())
        tmp = cache + ".tmp"
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(index.to_json())
        tf.io.gfile.rename(tmp, cache, overwrite=True)
        index = dataclasses.replace(index, cache=cache)
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

    def host_records(self, position: int, global_batch: int, hosts: int, host: int,
                     parallel: int = 16) -> tf.data.Dataset:
        """Host ``host`` of ``hosts``'s part of every global batch from ``position`` on: the
        records at stream positions ``p >= position`` with ``(p - position) mod B`` in
        ``[h * B / H, (h + 1) * B / H)``, in stream order, each read by itself at its byte
        offset (the index's offsets files), so a host reads 1/H of the data. Needs an index
        built with a cache (:func:`build_index`)."""
        if not self.index.cache:
            raise ValueError("reading by record needs an index with its offsets (build_index cache)")
        epoch, group, _ = self.locate(position)
        per_host = global_batch // hosts
        pairs = tf.data.Dataset.range(epoch, _FOREVER).flat_map(
            lambda e: tf.data.Dataset.range(self.num_groups).map(lambda g: (e, g)))
        first = tf.constant(int(position), tf.int64)

        def windows(e, g):
            start, names, offsets, ends, counts = self._group_layout(e, g)
            size = tf.reduce_sum(counts)
            w_size = tf.constant(self.window_records, tf.int64)
            count = (size + w_size - 1) // w_size

            def window(w):
                lo = start + w * w_size
                begin = tf.maximum(lo, first)
                at = tf.range(begin, tf.maximum(begin, start + tf.minimum((w + 1) * w_size, size)))
                mine = tf.math.floormod(at - first, global_batch) // per_host == host
                at = tf.boolean_mask(at, mine)
                n = tf.minimum(w_size, size - w * w_size)
                key = _key(self.seed, _WINDOW_ORDER, e, g, w)
                # the window's output q is its record permutation(n)[q] (see _group's gather)
                # (one extra index: the kernel refuses an empty vector)
                q = tf.random.experimental.index_shuffle(
                    tf.concat([at - lo, [0]], 0), key, tf.maximum(n - 1, 0))[:-1]
                shard, record = _round_robin(w * w_size + q, counts)
                base = tf.concat([[0], tf.cumsum(counts)[:-1]], 0)
                at_record = tf.gather(base, shard) + record
                return tf.data.Dataset.from_tensor_slices(
                    (tf.gather(names, shard), tf.gather(offsets, at_record), tf.gather(ends, at_record)))

            return tf.data.Dataset.range(count).flat_map(window)

        def read(name, offset, end):  # one read of exactly the record's bytes
            return _RecordAt(name, offset, end - offset).take(1)

        return pairs.skip(group).flat_map(windows).interleave(
            read, cycle_length=parallel, block_length=1, num_parallel_calls=parallel,
            deterministic=True)

    def _group_layout(self, epoch, group):
        """(first stream position, file names, record offsets and ends (concatenated), record
        counts) of group ``group`` of epoch ``epoch``, in graph."""
        k = self.group_shards
        order = self.shard_order(epoch)
        counts = tf.gather(tf.constant(self.index.counts, tf.int64), order)
        padded = tf.concat([counts, tf.zeros([self.num_groups * k - len(self.index.files)], tf.int64)], 0)
        sizes = tf.reduce_sum(tf.reshape(padded, [self.num_groups, k]), 1)
        start = epoch * self.index.total + tf.reduce_sum(sizes[:group])
        ids = order[group * k:(group + 1) * k]
        names = tf.gather(tf.constant(self.index.files), ids)
        paths = tf.gather(tf.constant([offsets_path(self.index.cache, i)
                                       for i in range(len(self.index.files))]), ids)
        sizes = tf.gather(tf.constant(self.index.sizes, tf.int64), ids)

        def starts_and_ends(args):
            path, size = args
            starts = tf.io.decode_raw(tf.io.read_file(path), tf.int64, little_endian=True)
            ends = tf.concat([starts[1:], [size]], 0)
            return (tf.RaggedTensor.from_tensor(starts[None]), tf.RaggedTensor.from_tensor(ends[None]))

        ragged = tf.RaggedTensorSpec([1, None], tf.int64)
        offsets, ends = tf.map_fn(starts_and_ends, (paths, sizes), fn_output_signature=(ragged, ragged))
        return (start, names, offsets.flat_values, ends.flat_values,
                tf.gather(tf.constant(self.index.counts, tf.int64), ids))

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


def _round_robin(r: tf.Tensor, counts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(shard, record in shard) of the records ``r`` of a group whose shards (``counts``
    records each) are interleaved record by record, shards dropping out as they end (what
    ``_group``'s interleave yields). Round t holds one record of each shard longer than t, so
    with breakpoints T (0 and the sorted counts) and F(T) = sum(min(counts, T)) records before
    round T, record r is in round T_a + (r - F_a) // m, m the shards longer than T_a."""
    t_points = tf.concat([[0], tf.sort(counts)], 0)
    f_points = tf.reduce_sum(tf.minimum(counts[None, :], t_points[:, None]), 1)
    active = tf.reduce_sum(tf.cast(counts[None, :] > t_points[:, None], tf.int64), 1)
    a = tf.searchsorted(f_points, r, side="right") - 1
    into = r - tf.gather(f_points, a)
    m = tf.maximum(tf.gather(active, a), 1)
    rnd = tf.gather(t_points, a) + into // m
    rank = into % m
    longer = tf.cast(counts[None, :] > rnd[:, None], tf.int64)        # [n, k]
    before = tf.cumsum(longer, axis=1, exclusive=True)
    shard = tf.argmax(tf.cast(tf.logical_and(longer > 0, tf.equal(before, rank[:, None])), tf.int32),
                      axis=1, output_type=tf.int64)
    return shard, rnd


class _RecordAt(dataset_ops.DatasetSource):
    """The records of one TFRecord file from a byte offset on (``TFRecordDatasetV2``'s
    ``byte_offsets``, which ``tf.data.TFRecordDataset`` does not expose): it seeks, where
    ``FixedLengthRecordDataset``'s ``header_bytes`` reads through. Its graph form drops the
    offsets, so it is only ever built inside a function (interleave), never serialized itself."""

    def __init__(self, name, offset, length):
        variant = gen_dataset_ops.tf_record_dataset_v2(
            tf.reshape(name, [1]), tf.constant(""), tf.cast(length, tf.int64),
            tf.reshape(tf.cast(offset, tf.int64), [1]))
        super().__init__(variant)

    @property
    def element_spec(self):
        return tf.TensorSpec([], tf.string)


def stream_batches(stream: EpochStream, position: int, ctx: tf.distribute.InputContext,
                   global_batch: int, parse: Callable[[tf.Tensor], dict]) -> tf.data.Dataset:
    """This input pipeline's per-replica batches of the epoch stream from ``position``: with
    the index's offsets, reading only this host's records (:meth:`EpochStream.host_records`);
    else reading the whole stream and keeping this host's part (:func:`host_batches`)."""
    hosts = ctx.num_input_pipelines
    if not stream.index.cache:
        return host_batches(stream.records(position), ctx, global_batch, parse)
    if global_batch % hosts:
        raise ConfigError(f"batch size {global_batch} does not divide over {hosts} hosts; use a "
                          f"multiple of {hosts}")
    records = stream.host_records(position, global_batch, hosts, ctx.input_pipeline_id)
    return host_batches(records, ctx, global_batch, parse, own_part=True)


def host_batches(records: tf.data.Dataset, ctx: tf.distribute.InputContext, global_batch: int,
                 parse: Callable[[tf.Tensor], dict], drop_remainder: bool = True,
                 own_part: bool = False) -> tf.data.Dataset:
    """This input pipeline's per-replica batches of a record stream.

    Global batch N is records ``[N * B, (N + 1) * B)``; host h of H takes the h-th ``B / H`` of
    it, split into its replicas' batches in replica order (the order in which the strategy
    hands a pipeline's elements to its replicas). ``parse`` maps a batch of serialized records
    to features. ``own_part``: ``records`` already holds only this host's parts, in order.
    """
    hosts, host = ctx.num_input_pipelines, ctx.input_pipeline_id
    if global_batch % hosts:
        raise ConfigError(f"batch size {global_batch} does not divide over {hosts} hosts; use a "
                          f"multiple of {hosts}")
    per_host = global_batch // hosts
    per_replica = ctx.get_per_replica_batch_size(global_batch)
    batches = records.batch(per_host, drop_remainder=drop_remainder)
    if hosts > 1 and not own_part:
        batches = batches.shard(hosts, host)
    if per_replica != per_host:
        batches = batches.unbatch().batch(per_replica, drop_remainder=drop_remainder)
    return (batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE))


def blank_record(schema: dict) -> bytes:
    """A serialized example of ``schema`` (FixedLenFeatures) with every value 0: the padding
    row of an evaluation batch (weight 0, and no tokens, so no [CLS] in ``input_mask``)."""
    feature = {}
    for name, spec in sorted(schema.items()):
        n = int(np.prod(spec.shape)) if spec.shape else 1
        if spec.dtype == tf.float32:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[0.0] * n))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[0] * n))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def padded(records: tf.data.Dataset, examples: int, global_batch: int, blank: bytes) -> tf.data.Dataset:
    """The first ``examples`` records, then ``blank`` up to a whole number of global batches."""
    pad = -(-examples // global_batch) * global_batch - examples
    return records.take(examples).concatenate(tf.data.Dataset.from_tensors(blank).repeat(pad))


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
