"""CRC32C helpers and the part layout of large files (no network)."""

from __future__ import annotations

import os

import google_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.cloud.storage import crc, parts
from provision.cloud.storage.gcs import FileSlice


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_combine_equals_crc_of_concatenation(a, b):
    assert crc.combine(google_crc32c.value(a), google_crc32c.value(b), len(b)) == google_crc32c.value(a + b)


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=1, max_size=5000), st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_combine_all_over_any_split(data, cuts):
    pieces, pos = [], 0
    for n in cuts:
        pieces.append(data[pos:pos + n])
        pos += n
    pieces.append(data[pos:])
    pieces = [p for p in pieces if p] or [data]
    assert crc.combine_all([(google_crc32c.value(p), len(p)) for p in pieces]) == google_crc32c.value(data)


def test_combine_handles_large_lengths_quickly():
    # zeros: crc(A + 0^n) computed by extension, compared with combine's O(log n) operator
    a = b"bert"
    zeros = bytes(5 << 20)
    assert crc.combine(google_crc32c.value(a), google_crc32c.value(zeros), len(zeros)) == google_crc32c.value(a + zeros)


def test_base64_round_trip_matches_gcs_format():
    assert crc.to_b64(google_crc32c.value(b"hello")) == "mnG7TA=="
    assert crc.from_b64("mnG7TA==") == google_crc32c.value(b"hello")
    assert crc.from_b64(None) is None and crc.to_b64(0) == "AAAAAA=="


def test_of_file_ranges_and_progress(tmp_path):
    data = os.urandom(3 * crc.BLOCK + 17)
    p = tmp_path / "f"
    p.write_bytes(data)
    seen = []
    assert crc.of_file(p, progress=seen.append) == google_crc32c.value(data)
    assert sum(seen) == len(data) and max(seen) <= crc.BLOCK
    assert crc.of_file(p, 100, 2 * crc.BLOCK) == google_crc32c.value(data[100:100 + 2 * crc.BLOCK])


def test_file_slice_reads_its_window_and_reports_each_byte_once(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(bytes(range(256)) * 40)
    seen = []
    with open(p, "rb") as fh:
        s = FileSlice(fh.fileno(), 1000, 5000, seen.append)
        assert s.read(10) == (bytes(range(256)) * 40)[1000:1010]
        s.seek(0)
        whole = s.read()  # a retry rereads from the start
        assert len(whole) == 5000 and s.read() == b""
        assert s.tell() == 5000 and s.seek(-10, 2) == 4990
    assert sum(seen) == 5000


def test_part_layout():
    mib = 1 << 20
    assert not parts.in_parts(63 * mib, 32 * mib) and parts.in_parts(64 * mib, 32 * mib)
    r = parts.ranges(100 * mib + 1, 32 * mib)
    assert r[0] == (0, 32 * mib) and sum(n for _, n in r) == 100 * mib + 1 and len(r) == 4
    big = parts.ranges(10 * 1024 * mib, 32 * mib)  # 10 GiB: parts grow so one compose suffices
    assert len(big) <= parts.MAX_PARTS and sum(n for _, n in big) == 10 * 1024 * mib
    name = parts.part_name("bert/model.data", 100, 30, 3)
    assert name.startswith(parts.layout_dir("bert/model.data", 100, 30)) and name.endswith("00003")
    assert name.startswith(parts.object_dir("bert/model.data")) and name.startswith(parts.prefix_dir("bert"))
    # the parts of "a/b" and of "a/b/c" never mix
    assert not parts.part_name("a/b/c", 1, 1, 0).startswith(parts.object_dir("a/b"))
    assert parts.prefix_dir("") == ".tpuctl-parts/"
