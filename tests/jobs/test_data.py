"""The epoch stream: every example once per epoch, an order fixed by (seed, epoch), any position
reachable without replaying, and the same global batch on any number of hosts and replicas."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from jobs import data

pytestmark = pytest.mark.tf

COUNTS = [7, 5, 9, 3, 6, 11]  # uneven shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    files = []
    for s, n in enumerate(COUNTS):
        path = str(d / f"s{s}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(n):
                writer.write(f"{s}-{i}".encode())
        files.append(path)
    return d, files


def stream(files, seed=3, **kw):
    index = data.build_index(files)
    return data.EpochStream(index, seed, group_shards=2, window_records=4, **kw)


def take(dataset, n):
    return [x.decode() for x in dataset.take(n).as_numpy_iterator()]


def test_each_epoch_has_every_record_once_in_its_own_order(shards):
    _, files = shards
    total = sum(COUNTS)
    s = stream(files)
    full = take(s.records(0), 3 * total)
    epochs = [full[i * total:(i + 1) * total] for i in range(3)]
    everything = sorted(f"{s}-{i}" for s, n in enumerate(COUNTS) for i in range(n))
    for epoch in epochs:
        assert sorted(epoch) == everything
    assert epochs[0] != epochs[1] != epochs[2]
    assert take(stream(files, seed=4).records(0), total) != epochs[0]  # the seed matters
    assert take(stream(files).records(0), total) == epochs[0]          # and nothing else


def test_any_position_continues_the_stream_exactly(shards):
    _, files = shards
    total = sum(COUNTS)
    s = stream(files)
    full = take(s.records(0), 3 * total)
    for position in (1, 6, 7, 19, total - 1, total, total + 13, 2 * total + 5):
        assert take(s.records(position), 12) == full[position:position + 12], position


@pytest.mark.parametrize("hosts, replicas", [(1, 1), (1, 2), (2, 2), (2, 4), (4, 4)])
def test_global_batch_n_is_the_same_on_any_number_of_hosts_and_replicas(shards, hosts, replicas):
    """Host h's pipeline yields its replicas' batches in order; together they are records
    [N * B, (N + 1) * B) of the stream, whatever the split."""
    _, files = shards
    s, batch, steps, start = stream(files), 8, 6, 20
    expected = take(s.records(start), batch * steps)
    per_replica = batch // replicas
    local = replicas // hosts
    got = [[] for _ in range(steps)]
    for h in range(hosts):
        ctx = tf.distribute.InputContext(num_input_pipelines=hosts, input_pipeline_id=h,
                                         num_replicas_in_sync=replicas)
        batches = data.host_batches(s.records(start), ctx, batch, lambda r: r)
        out = list(batches.take(steps * local).as_numpy_iterator())
        assert all(len(b) == per_replica for b in out)
        for step in range(steps):
            for b in out[step * local:(step + 1) * local]:
                got[step].extend(x.decode() for x in b)
    for step in range(steps):
        # replica r of host h holds slice (h * local + r) of the global batch
        assert got[step] == expected[step * batch:(step + 1) * batch]


@pytest.mark.parametrize("group_shards, window_records", [(2, 4), pytest.param(3, 5, marks=pytest.mark.long)])
def test_each_host_reads_only_its_records_and_the_global_batches_stay_the_same(
        shards, tmp_path, group_shards, window_records):
    """With the index's record offsets a host reads each of its records at its byte offset:
    host h of H yields exactly its part of global batch N of the stream (uneven shards, windows
    and groups cut anywhere, any start), for 1, 2 and 4 hosts."""
    _, files = shards
    index = data.build_index(files, str(tmp_path / data.INDEX_NAME))
    s = data.EpochStream(index, 3, group_shards=group_shards, window_records=window_records)
    batch, steps = 8, 9
    for start in (8, sum(COUNTS) + 3):
        expected = take(s.records(start), batch * steps)
        for hosts in (1, 2, 4):
            part = batch // hosts
            got = [None] * len(expected)
            for h in range(hosts):
                for j, record in enumerate(take(s.host_records(start, batch, hosts, h), steps * part)):
                    got[j // part * batch + h * part + j % part] = record
            assert got == expected, (start, hosts)


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_a_host_of_four_reads_a_quarter_of_the_bytes(tmp_path):
    """Measured in this process (read(2)/pread(2) bytes): host 0 of 4 reads about a quarter of
    what one host reads for the same global batches, where reading the whole stream and keeping
    a part reads everything on every host."""
    files = []
    for s in range(4):
        path = str(tmp_path / f"big{s}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(500):
                writer.write(bytes([s]) * 2000 + i.to_bytes(4, "little"))
        files.append(path)
    stream = data.EpochStream(data.build_index(files, str(tmp_path / data.INDEX_NAME)), 5)
    batch, steps = 32, 40

    def bytes_for(hosts: int, own: bool) -> int:
        ctx = tf.distribute.InputContext(num_input_pipelines=hosts, input_pipeline_id=0,
                                         num_replicas_in_sync=hosts)
        batches = (data.stream_batches(stream, 0, ctx, batch, lambda r: r) if own else
                   data.host_batches(stream.records(0), ctx, batch, lambda r: r))
        iterator = iter(batches)
        before = _rchar()
        for _ in range(steps):
            next(iterator)
        return _rchar() - before

    one, four = bytes_for(1, True), bytes_for(4, True)
    record = 2004 + 16
    assert steps * batch * record <= one < 1.3 * steps * batch * record, one
    assert steps * batch // 4 * record <= four < 1.3 * steps * batch // 4 * record, four
    assert bytes_for(4, False) > 3 * four   # the whole stream, read by every host


def test_the_index_is_reused_and_rebuilt_when_a_file_changes(shards, tmp_path):
    _, files = shards
    cache = str(tmp_path / data.INDEX_NAME)
    first = data.build_index(files, cache)
    assert first.counts == tuple(COUNTS) and first.total == sum(COUNTS)
    messages = []
    assert data.build_index(files, cache, messages.append) == first and messages == []
    extra = tmp_path / "extra.tfrecord"
    with tf.io.TFRecordWriter(str(extra)) as writer:
        writer.write(b"x")
    grown = data.build_index([*files, str(extra)], cache, messages.append)
    assert grown.counts == (*COUNTS, 1)
    assert "input files differ" in messages[0]


def test_empty_data_is_a_config_error(tmp_path):
    from jobs.errors import ConfigError

    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match="hold no records"):
        data.build_index([str(empty)])
