"""A BERT directory may come from anyone: a crafted ``bert_model.ckpt.index`` must not make the spec
check of ``tpuctl job run --dry-run`` (jobs/bert/ckpt_index.py, no TensorFlow) allocate
gigabytes. A header naming 2^40 data shards, and an index whose every entry extends the last
key by one byte (prefix compression), are refused in one line with exit 2 by the installed
tpuctl running under an address-space limit of 384 MiB (without the caps on shards and names,
both end in ``internal error: MemoryError`` there: the shards' file names, the names' bytes).

The tables are built here byte by byte in LevelDB's format (what TensorFlow's tensor_bundle
writes: prefix-compressed blocks, a block trailer, a 48-byte footer ending in the magic number)."""

from __future__ import annotations

import resource
import struct
import subprocess
from pathlib import Path

import pytest

from tests.bert_dirs import config_only_bert
from tests.conftest import REPO, TPUCTL_BIN

LIMIT = 384 << 20
MAGIC = 0xDB4775248B80FB57


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _block(entries: list[tuple[int, bytes, bytes]]) -> bytes:
    """(bytes shared with the previous key, the key's other bytes, value) entries, one restart."""
    body = bytearray()
    for shared, rest, value in entries:
        body += _varint(shared) + _varint(len(rest)) + _varint(len(value)) + rest + value
    return bytes(body + struct.pack("<II", 0, 1))


def _table(entries: list[tuple[int, bytes, bytes]]) -> bytes:
    data = _block(entries)
    out = bytearray(data + b"\0" * 5)                       # trailer: no compression, CRC unread
    meta = struct.pack("<I", 0)
    meta_at = len(out)
    out += meta + b"\0" * 5
    index = _block([(0, b"", _varint(0) + _varint(len(data)))])
    index_at = len(out)
    out += index + b"\0" * 5
    footer = _varint(meta_at) + _varint(len(meta)) + _varint(index_at) + _varint(len(index))
    return bytes(out + footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", MAGIC))


def _many_shards() -> bytes:
    return _table([(0, b"", b"\x08" + _varint(1 << 40))])   # BundleHeaderProto num_shards = 2^40


def _extending_keys() -> bytes:
    # after the header, each entry keeps all of the last key and adds a byte: 80,000 names of up
    # to 80 kB (3 GB of names) in a 400 kB file
    return _table([(0, b"", b"\x08\x01")] + [(n, b"k", b"") for n in range(80_000)])


def _bert_dir(root: Path, index: bytes) -> Path:
    bert = config_only_bert(root)
    (bert / "bert_model.ckpt.index").write_bytes(index)
    return bert


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.parametrize("index, reason", [
    (_many_shards, "it names 1099511627776 data shards"),
    (_extending_keys, "tensor names of more than 32 MiB in all"),
], ids=["2^40-shards", "extending-keys"])
def test_a_crafted_checkpoint_index_is_refused_in_bounded_memory(tmp_path, index, reason):
    bert = _bert_dir(tmp_path, index())
    (tmp_path / "train.tsv").write_text("a\t0\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"job: bert-finetune\nmodel_dir: {tmp_path / 'model'}\nbert_dir: {bert}\n"
                    f"train_file: {tmp_path / 'train.tsv'}\nmax_seq_length: 32\nnum_train_steps: 10\n")
    res = subprocess.run([str(TPUCTL_BIN), "job", "run", str(spec), "--dry-run"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False, preexec_fn=_limited)
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [
        (f"tpuctl: error: bert_dir {bert}: bert_model.ckpt.index is not a TensorFlow checkpoint index ({reason}); "
         "if it is a truncated or corrupted copy, copy the bert_model.ckpt.* files again")]
