"""WordPiece through Hugging Face ``tokenizers`` (Rust) where it gives the reference's tokens.

:class:`jobs.bert.tokenization.FullTokenizer` (pure Python, the original's behaviour) stays the
reference. ``tokenizers``' BertNormalizer + BertPreTokenizer + WordPiece implement the same
rules, but their Unicode tables (lower-casing, categories, accents) are Rust's, not Python's
``unicodedata``, so they are used only for pure-ASCII lines, where the rules are the same
character for character (control characters dropped, whitespace split, ASCII punctuation split,
ASCII lower-casing, greedy longest match with ``##``, ``[UNK]`` past 200 characters); any other
line goes to the reference. tests/jobs/test_pretraining_parallel.py checks equality; the extra
``tpuctl[data]`` installs the library, and without it everything runs on the reference.
"""

from __future__ import annotations

from collections.abc import Callable

from ..bert.tokenization import UNK, FullTokenizer


def line_tokenizer(reference: FullTokenizer, use_fast: bool = True) -> Callable[[str], list[str]]:
    """``tokenize(line)``: the fast path for ASCII lines when available, else the reference."""
    if not use_fast or UNK not in reference.vocab:
        return reference.tokenize
    try:
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    except ImportError:
        return reference.tokenize
    fast = Tokenizer(models.WordPiece(vocab=dict(reference.vocab), unk_token=UNK,
                                      max_input_chars_per_word=200))
    lower = reference.do_lower_case
    fast.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                 strip_accents=lower, lowercase=lower)
    fast.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    encode, slow = fast.encode, reference.tokenize

    def tokenize(line: str) -> list[str]:
        if line.isascii():
            return encode(line, add_special_tokens=False).tokens
        return slow(line)

    return tokenize
