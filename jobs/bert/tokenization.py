"""WordPiece tokenization from ``vocab.txt``, behaving like google-research/bert's tokenizer.

Two passes, as in the original:

1. *basic*: drop control characters, turn every whitespace into a space, put spaces around
   each CJK ideograph (so Chinese text becomes one token per character), optionally lower-case
   and strip accents (NFD, drop combining marks), and split off every punctuation character;
2. *WordPiece*: split each word greedily into the longest vocabulary pieces, continuation pieces
   prefixed with ``##``; a word that cannot be split (or is longer than 200 characters) becomes
   ``[UNK]``.

Pure Python, no TensorFlow (the vocabulary file is read through :func:`open_text`, which uses
``tf.io.gfile`` only for gs:// paths).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from .vocab import vocab_from_lines, vocab_lines

__all__ = ["CLS", "MASK", "PAD", "SEP", "UNK", "FullTokenizer", "basic_tokenize", "load_vocab",
           "open_text", "read_bytes", "vocab_from_lines", "vocab_lines", "wordpiece"]

UNK, CLS, SEP, MASK, PAD = "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"

# CJK Unified Ideographs blocks and their extensions / compatibility blocks. Hangul, kana and
# other scripts are written with spaces or are handled as ordinary letters, like the original.
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def open_text(path: str):
    """Open a text file for reading from a local path or, through TensorFlow, from gs://."""
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "r")
    return open(path, encoding="utf-8")


def read_bytes(path: str) -> bytes:
    """The bytes of a local file or, through TensorFlow, of a gs:// object."""
    if "://" in path:
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def load_vocab(path: str) -> dict[str, int]:
    """token -> id of ``vocab.txt``, ids exactly as google-research/bert's loader gives them."""
    return vocab_from_lines(vocab_lines(read_bytes(path)))


def is_cjk(char: str) -> bool:
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """Unicode punctuation, plus every non-alphanumeric printable ASCII character ($, +, ^ ...)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def basic_tokenize(text: str, do_lower_case: bool = True) -> list[str]:
    """Words and punctuation marks, before WordPiece."""
    cleaned = []
    for char in text:
        if char in ("\x00", "\ufffd") or is_control(char):
            continue
        if is_whitespace(char):
            cleaned.append(" ")
        elif is_cjk(char):
            cleaned.append(f" {char} ")
        else:
            cleaned.append(char)
    words = []
    for word in "".join(cleaned).split():
        if do_lower_case:
            word = _strip_accents(word.lower())
        words.extend(_split_punctuation(word))
    return words


def _strip_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word)
                   if unicodedata.category(c) != "Mn")


def _split_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    current = ""
    for char in word:
        if is_punctuation(char):
            if current:
                pieces.append(current)
                current = ""
            pieces.append(char)
        else:
            current += char
    if current:
        pieces.append(current)
    return pieces


def wordpiece(word: str, vocab: dict[str, int] | set[str],
              max_chars: int = 200) -> list[str]:
    """Greedy longest-match-first split of one word; ``[UNK]`` if any part has no piece."""
    if len(word) > max_chars:
        return [UNK]
    pieces = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        else:
            return [UNK]
        pieces.append(piece)
        start = end
    return pieces


class FullTokenizer:
    """Basic tokenization then WordPiece, with the vocabulary of a BERT directory.

    ``convert_tokens_to_ids`` gives vocab.txt line numbers exactly as the original does;
    ``convert_ids_to_tokens`` maps every line number back to that line's token (also the
    earlier line of a repeated token, which the original's inverse dict loses).
    """

    def __init__(self, vocab_file: str | None = None, do_lower_case: bool = True,
                 vocab: dict[str, int] | None = None):
        if vocab is None:
            if vocab_file is None:
                raise ValueError("give vocab_file or vocab")
            lines = vocab_lines(read_bytes(vocab_file))
            vocab = vocab_from_lines(lines)
            self.inv_vocab = dict(enumerate(lines))
        else:
            self.inv_vocab = {i: t for t, i in vocab.items()}
        self.vocab = vocab
        self.do_lower_case = do_lower_case

    @property
    def vocab_size(self) -> int:
        """Ids in use: the number of lines of vocab.txt."""
        return max(self.inv_vocab) + 1 if self.inv_vocab else 0

    def tokenize(self, text: str) -> list[str]:
        out: list[str] = []
        for word in basic_tokenize(text, self.do_lower_case):
            out.extend(wordpiece(word, self.vocab))
        return out

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        unk = self.vocab.get(UNK)
        ids = []
        for token in tokens:
            if token in self.vocab:
                ids.append(self.vocab[token])
            elif unk is not None:
                ids.append(unk)
            else:
                raise KeyError(f"token {token!r} is not in the vocabulary, which has no {UNK}")
        return ids

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.inv_vocab[int(i)] for i in ids]
