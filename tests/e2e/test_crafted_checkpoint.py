"""A BERT directory may come from anyone: a crafted ``bert_model.ckpt.index`` must not make the spec
check of ``tpuctl job run --dry-run`` (jobs/bert/ckpt_index.py, no TensorFlow) allocate
gigabytes or spin. A header naming 2^40 data shards, and an index whose every entry extends the
last key by one byte (prefix compression), are refused in one line with exit 2 by the installed
tpuctl running under an address-space limit of 384 MiB (without the caps on shards and names,
both end in ``internal error: MemoryError`` there: the shards' file names, the names' bytes). So
is a 36 kB index pointing at one data block thousands of times (before, 18.6 s of parsing, and
no refusal).

The tables are built byte by byte in LevelDB's format (tests/ckpt_tables.py: what TensorFlow's
tensor_bundle writes, prefix-compressed blocks, a block trailer, a 48-byte footer ending in the
magic number)."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest

from tests.bert_dirs import config_only_bert
from tests.ckpt_tables import block, header, repeated_block, table
from tests.conftest import REPO, TPUCTL_BIN

LIMIT = 384 << 20


def _many_shards() -> bytes:
    return table([block([header(1 << 40)])])


def _extending_keys() -> bytes:
    # after the header, each entry keeps all of the last key and adds a byte: 80,000 names of up
    # to 80 kB (3 GB of names) in a 400 kB file
    return table([block([header()] + [(n, b"k", b"") for n in range(80_000)])])


def _repeated_block() -> bytes:
    # 36 kB whose index points at one data block of empty entries 2,600 times: 18.6 s of work
    return repeated_block(36_000)


def _bert_dir(root: Path, index: bytes) -> Path:
    bert = config_only_bert(root)
    (bert / "bert_model.ckpt.index").write_bytes(index)
    return bert


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.parametrize("index, reason", [
    (_many_shards, "it names 1099511627776 data shards"),
    (_extending_keys, "tensor names adding up to more than 32 times the file's size"),
    (_repeated_block, "its index points at a data block twice or out of order"),
], ids=["2^40-shards", "extending-keys", "repeated-block"])
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
