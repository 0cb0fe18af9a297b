"""Small BERT-shaped directories for the stage tests."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def make_bert_dir(root: Path, data_bytes: int = 1_500_000, small: int = 6) -> dict[str, bytes]:
    """A miniature google-research BERT directory; returns {relative path: content}."""
    files = {
        "bert_config.json": json.dumps({"hidden_size": 768, "num_hidden_layers": 12}).encode(),
        "vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na",
        "bert_model.ckpt.index": os.urandom(8_000),
        "bert_model.ckpt.data-00000-of-00001": os.urandom(data_bytes),
    }
    for i in range(small):
        files[f"assets/part-{i:03d}.txt"] = f"small file {i}\n".encode() * (i + 1)
    write_tree(root, files)
    return files


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def read_tree(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def digest(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
