"""vocab.txt as google-research/bert's ``load_vocab`` reads it: token id = line number.

Pure Python, no TensorFlow: the spec checker (which runs where TensorFlow is not installed)
counts the ids with it, and :mod:`jobs.bert.tokenization` builds the vocabulary from it.
"""

from __future__ import annotations

from collections.abc import Iterable

# A BERT vocabulary is one token per line: 30,522 (uncased) to 119,547 (multilingual) lines, a few
# hundred kB. A file much larger is not one, and reading it whole would take minutes and gigabytes.
MAX_VOCAB_BYTES = 64 << 20


def too_large(size: int) -> str | None:
    """Why a vocab.txt of ``size`` bytes is not a BERT vocabulary (checked before reading it), or
    None; the caller names the file and the fix."""
    if size <= MAX_VOCAB_BYTES:
        return None
    return (f"is {size} bytes, more than any BERT vocabulary (one token per line, a few hundred kB; "
            f"at most {MAX_VOCAB_BYTES} bytes)")


def vocab_lines(data: bytes | str) -> list[str]:
    r"""The tokens of vocab.txt, one per line, in line order: line ``i`` is token id ``i``.

    As google-research/bert's ``load_vocab`` reads the file: lines end at ``\n`` only (a
    U+2028 or a lone ``\r`` inside a line does not end it), invalid UTF-8 is dropped, and each
    line is ``strip()``ped -- so a blank or whitespace-only line (the U+2028 line of the Chinese
    vocabulary) becomes the empty token and still takes its id, and every later id stays put.
    """
    text = data.decode("utf-8", "ignore") if isinstance(data, bytes) else data
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another one
    return [line.strip() for line in lines]


def vocab_from_lines(lines: Iterable[str]) -> dict[str, int]:
    """token -> id; a token on several lines keeps the id of its last line (as the original's
    dict assignment does)."""
    vocab: dict[str, int] = {}
    for index, token in enumerate(lines):
        vocab[token] = index
    return vocab
