"""The corpus files a plan names: size and sha256 (the manifest's identity), read once, and
checked on the way to be UTF-8 text and not empty. No TensorFlow (``tpuctl data --on`` checks a
local corpus with it before staging anything)."""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import ConfigError
from . import corpus_parts


@dataclass(frozen=True)
class InputFile:
    path: str
    bytes: int
    sha256: str


def inspect_input(path: str, open_file: Callable[[str], BinaryIO] | None = None) -> InputFile:
    """Size and sha256 of a corpus file, checking on the way that it is UTF-8 text.
    ``open_file``: how to read it (default: a local file; the Beam launcher reads gs:// ones)."""
    if open_file is None:
        if "://" in path:
            raise ConfigError(f"{path}: the parallel path reads local corpus files; copy it here "
                              "first or use --exact")
        if not os.path.isfile(path):
            raise ConfigError(f"corpus file {path} does not exist")
    digest, decoder, offset = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")(), 0
    with (open_file or corpus_parts.open_local)(path) as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            try:
                decoder.decode(chunk)
                if chunk.find(b"\x00") >= 0:
                    raise UnicodeDecodeError("utf-8", chunk, 0, 1, "NUL byte")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{path} is not UTF-8 text (bad bytes near offset "
                                  f"{offset + exc.start}); give a plain-text corpus, one "
                                  "sentence per line, a blank line between documents") from None
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ConfigError(f"{path} is not UTF-8 text (it ends inside a character)") from None
    return InputFile(path, offset, digest.hexdigest())


def check_not_empty(inputs: Sequence[InputFile],
                    open_file: Callable[[str], BinaryIO] | None = None) -> None:
    for i in inputs:
        with (open_file or corpus_parts.open_local)(i.path) as f:
            while chunk := f.read(1 << 20):
                if chunk.strip():
                    return
    names = ", ".join(i.path for i in inputs) or "(no files)"
    raise ConfigError(f"the corpus ({names}) holds no text; give text files with one sentence "
                      "per line and a blank line between documents")
