"""The spec check's checkpoint reader (jobs/bert/ckpt_index.py) against what a bucket writer can
plant as ``bert_model.ckpt.index``: whatever the bytes, it finishes in time linear in the file's
size or refuses the file with a one-line reason, and it still reads every index TensorFlow writes.

Before the reader bounded its work, index entries could point at one data block again and again
and empty names cost nothing: 36 kB of that took 18.6 s, 360 kB about half an hour. The crafted
tables come from tests/ckpt_tables.py; ``TPUCTL_FUZZ_EXAMPLES=5000`` runs a longer campaign."""

from __future__ import annotations

import os
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from jobs.bert.ckpt_index import WORK_PER_BYTE, IndexError_, Work, parse_index, read_index
from tests.ckpt_tables import ALL, block, header, repeated_block, table

SETTINGS = settings(max_examples=int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "150")), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# a BundleEntryProto of a float32 [2, 3] tensor: dtype 1, shape { dim { size 2 } dim { size 3 } }
ENTRY = b"\x08\x01\x12\x08\x12\x02\x08\x02\x12\x02\x08\x03"


def _timed(data: bytes) -> tuple[float, Work, str | None]:
    """Seconds :func:`parse_index` took on ``data``, its work, and its refusal if it refused."""
    work = Work(len(data))
    start = time.perf_counter()
    try:
        parse_index(data, work)
        refusal = None
    except IndexError_ as exc:
        refusal = str(exc)
    return time.perf_counter() - start, work, refusal


def test_an_index_pointing_at_one_data_block_again_and_again_is_refused_at_once(tmp_path):
    index = repeated_block(36_000)
    (tmp_path / "bert_model.ckpt.index").write_bytes(index)
    start = time.perf_counter()
    with pytest.raises(IndexError_) as refused:
        read_index(str(tmp_path / "bert_model.ckpt"))
    took = time.perf_counter() - start
    assert refused.value.corrupt
    assert str(refused.value) == "its index points at a data block twice or out of order"
    assert 35_000 < len(index) < 37_000 and took < 1.0, f"{len(index)} bytes took {took:.2f} s"


def test_names_that_prefix_compression_stores_for_free_still_cost_their_bytes():
    # one 2,000-byte name, then 10,000 entries repeating it (3 bytes each): 20 MB of names in 30 kB
    data = table([block([header(), (0, b"n" * 2000, ENTRY)] + [(ALL, b"", ENTRY)] * 10_000)])
    took, work, refusal = _timed(data)
    assert refusal == "tensor names adding up to more than 32 times the file's size"
    assert work.touched <= WORK_PER_BYTE * len(data) and took < 1.0


def _cheap_blocks(size: int) -> bytes:
    """A valid index of about ``size`` bytes in data blocks of 2,000 entries, each as short as an
    entry can be (all of the last name again, no value): the most entries its bytes can hold."""
    blocks = [block([header(), (0, b"a", b"")])]
    while sum(map(len, blocks)) < size:
        blocks.append(block([(0, b"b%07d" % len(blocks), ENTRY)] + [(ALL, b"", b"")] * 2000))
    return table(blocks)


def test_ten_times_the_file_takes_about_ten_times_as_long():
    # the fastest of three runs each, taken in turns, so that another process on the machine does
    # not decide it
    files = {"small": _cheap_blocks(36_000), "large": _cheap_blocks(360_000)}
    runs: dict[str, list[float]] = {"small": [], "large": []}
    touched: dict[str, int] = {}
    for _ in range(3):
        for name, data in files.items():
            took, work, refusal = _timed(data)
            assert refusal is None and work.touched <= WORK_PER_BYTE * len(data)
            runs[name].append(took)
            touched[name] = work.touched
    # the work counted is linear to the byte; the clock only has to rule out the quadratic reader
    # (10 times the file took 100 times as long), with room for a machine busy with other tests
    assert touched["large"] <= 11 * touched["small"], touched
    assert min(runs["large"]) <= 30 * min(runs["small"]), runs


# mostly what TensorFlow writes (a header, a tensor's entry), so that reading goes on past the first entries
GOOD_VALUES = st.sampled_from([b"", b"\x08\x01", ENTRY])
VALUES = st.one_of(GOOD_VALUES, GOOD_VALUES, GOOD_VALUES, st.just(b"\x08" + b"\xff" * 9 + b"\x01"), st.binary(max_size=16))
# an entry stored in a few bytes whatever its name: an empty name, or all of the last one again
CHEAP = st.tuples(st.sampled_from([0, ALL]), st.just(b""), VALUES)
NAMED = st.tuples(st.one_of(st.just(0), st.just(ALL), st.integers(0, 3000)),  # more than the last key: bogus
                  st.one_of(st.binary(max_size=8), st.binary(min_size=500, max_size=3000)), VALUES)
RUNS = st.lists(st.one_of(st.tuples(CHEAP, st.integers(1, 3000)), st.tuples(NAMED, st.just(1))), max_size=8)
# the restart count: mostly the real one (None), else one the block cannot hold
RESTARTS = st.one_of(st.none(), st.none(), st.none(), st.sampled_from([0, 7, 1 << 20, (1 << 32) - 1]))
BY_NUMBER = st.tuples(st.integers(0, 3), st.integers(1, 3000))    # a data block, maybe again and again
ANYWHERE = st.tuples(st.tuples(st.integers(0, 300_000), st.integers(0, 300_000)), st.integers(1, 30))
BOGUS = st.tuples(st.tuples(st.integers(0, 1 << 62), st.integers(0, 1 << 62)), st.just(1))
HANDLES = st.one_of(st.none(), st.lists(st.one_of(BY_NUMBER, BY_NUMBER, ANYWHERE, BOGUS), min_size=1, max_size=6))
# the footer's handle of the index block: mostly the real one
INDEX_HANDLE = st.one_of(st.none(), st.none(), st.none(), st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20)))


@st.composite
def crafted_indexes(draw) -> bytes:
    blocks = []
    for runs, restarts in draw(st.lists(st.tuples(RUNS, RESTARTS), min_size=1, max_size=4)):
        data = block([entry for entry, count in runs for _ in range(count)])
        blocks.append(data if restarts is None else data[:-4] + struct.pack("<I", restarts))
    handles = draw(HANDLES)
    if handles is not None:
        handles = [h % len(blocks) if isinstance(h, int) else h for h, times in handles for _ in range(times)]
    return table(blocks, handles, draw(INDEX_HANDLE))


@SETTINGS
@given(crafted_indexes())
def test_a_crafted_index_is_read_or_refused_in_work_linear_in_its_size(data):
    took, work, refusal = _timed(data)
    target(work.touched / len(data))  # steers the search towards the files that cost the most per byte
    assert work.touched <= WORK_PER_BYTE * len(data)
    assert refusal is None or (refusal and "\n" not in refusal)
    assert took < 10.0, f"{len(data)} bytes took {took:.2f} s"  # up to 2 MB: well under a second alone


def _tf_checkpoint(prefix, names):
    import tensorflow as tf

    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.zeros([i % 3 + 1, 2]) for i in range(len(names))])
    return {name: tuple(shape) for name, shape in tf.train.list_variables(str(prefix))}


@pytest.mark.tf
def test_what_tensorflow_writes_is_read_whole(tmp_path):
    # 2,000-byte names that differ in their last bytes: TensorFlow's names at their densest (14
    # bytes of names per byte of the file); then names long enough for several 256 kB data blocks
    dense = [("p" * 2000) + f"/{i:05d}" for i in range(300)]
    many = [f"bert/encoder/layer_{i}/" + os.urandom(1000).hex() for i in range(150)]
    for name, names in (("dense", dense), ("blocks", many)):
        want = _tf_checkpoint(tmp_path / name / "model.ckpt", names)
        shapes, shards = read_index(str(tmp_path / name / "model.ckpt"))
        assert (shapes, shards) == (want, 1)
