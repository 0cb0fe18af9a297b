"""Cased or uncased: ``do_lower_case`` must match the model, or every id is quietly wrong.

google-research/bert's run_classifier.py refuses a lower-casing run on a cased checkpoint and
the reverse (``validate_case_matches_checkpoint``), judging by the release's directory name
(``uncased_L-12_H-768_A-12``, ``cased_L-12_H-768_A-12``, ``chinese_L-12_H-768_A-12`` ...).
We do the same, and when no name says anything (a release copied to ``gs://bucket/bert/base``,
a pretraining run's ``export``) we ask the vocabulary: a lower-casing tokenizer can never
produce a token with an upper-case letter, so an uncased vocabulary has none, and a cased one
has many.

Pure Python: the spec checker runs it before TensorFlow loads (local directories) and the jobs
run it again for gs:// directories.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import ConfigError

# The original's names, generalised: whole-word-masking releases (wwm_uncased_..., wwm_cased_...)
# and renamed copies keep the word.
_LOWER_PREFIXES = ("chinese_", "multilingual_")

MIN_CASED_TOKENS = 50      # letters with case in fewer tokens than this: the vocabulary says nothing
CASED_FRACTION = 0.10      # a cased vocabulary: at least this share of those tokens has upper case


def case_from_name(name: str | None) -> bool | None:
    """True: an uncased (lower-casing) model, False: a cased one, None: the name says nothing."""
    if not name:
        return None
    n = name.lower()
    if "uncased" in n:
        return True
    if re.search(r"(^|[^a-z])cased", n):
        return False
    if n.startswith(_LOWER_PREFIXES):
        return True
    return None


def case_from_vocab(tokens: Sequence[str]) -> bool | None:
    """True: a lower-cased vocabulary, False: a cased one, None: cannot tell (too few tokens
    with cased letters -- a Chinese vocabulary has few -- or only a handful upper-case)."""
    with_case = upper = 0
    for token in tokens:
        if not token or (token.startswith("[") and token.endswith("]")):
            continue  # [CLS], [unused12] ...: the same in both
        if any(ch.lower() != ch.upper() for ch in token):
            with_case += 1
            if any(ch.isupper() for ch in token):
                upper += 1
    if with_case < MIN_CASED_TOKENS:
        return None
    if upper == 0:
        return True
    if upper >= CASED_FRACTION * with_case:
        return False
    return None


def model_names(bert_dir: str, init_checkpoint: str | None) -> list[str]:
    """Directory names that may name the release: the one holding ``init_checkpoint``
    (the original looks there), then ``bert_dir`` itself."""
    names = []
    for path in (init_checkpoint, bert_dir):
        if not path:
            continue
        path = path.rstrip("/")
        if path.endswith(("bert_model.ckpt", ".ckpt")) or re.search(r"ckpt-\d+$", path):
            path = path.rsplit("/", 1)[0] if "/" in path else ""
        name = path.rsplit("/", 1)[-1]
        if name and name not in names:
            names.append(name)
    return names


def check(do_lower_case: bool, bert_dir: str, init_checkpoint: str | None,
          vocab_tokens: Sequence[str]) -> None:
    """Raise :class:`ConfigError` (one line naming the fix) when ``do_lower_case`` contradicts
    the model's name or, failing a name, its vocabulary."""
    for name in model_names(bert_dir, init_checkpoint):
        lower = case_from_name(name)
        if lower is not None:
            _compare(do_lower_case, lower, f"the model {name} is {'uncased' if lower else 'cased'}")
            return
    lower = case_from_vocab(vocab_tokens)
    if lower is not None:
        what = ("its vocab.txt is lower-cased (no token has an upper-case letter)" if lower
                else "its vocab.txt is cased (many tokens have upper-case letters)")
        _compare(do_lower_case, lower, f"{bert_dir}: {what}")


def _compare(do_lower_case: bool, lower: bool, why: str) -> None:
    if do_lower_case and not lower:
        raise ConfigError(f"do_lower_case is true but {why}: lower-casing would give it token "
                          "ids it never learnt; use --set do_lower_case=false")
    if not do_lower_case and lower:
        raise ConfigError(f"do_lower_case is false but {why}: capitalised words would become "
                          "[UNK] or wrong pieces; use --set do_lower_case=true")
