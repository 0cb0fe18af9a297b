"""WordPiece tokenization behaves like google-research/bert's FullTokenizer."""

from __future__ import annotations

from jobs.bert.tokenization import FullTokenizer, basic_tokenize, wordpiece

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "want", "##ed",
         "runn", "##ing", ",", ".", "!", "hello", "world", "中", "国", "人", "the", "cafe", "Hello"]


def tokenizer(lower: bool = True) -> FullTokenizer:
    return FullTokenizer(vocab={t: i for i, t in enumerate(VOCAB)}, do_lower_case=lower)


def test_wordpiece_splits_greedily_into_longest_pieces():
    assert tokenizer().tokenize("unaffable running wanted") == \
        ["un", "##aff", "##able", "runn", "##ing", "want", "##ed"]


def test_unknown_words_become_unk_whole():
    # "unwanted": "un" matches but "##wanted" has no piece, so the whole word is [UNK].
    assert tokenizer().tokenize("unwanted hello xyz") == ["[UNK]", "hello", "[UNK]"]
    assert wordpiece("a" * 201, {"a"}) == ["[UNK]"]


def test_lower_casing_strips_accents_and_cased_keeps_them():
    assert tokenizer().tokenize("HeLLo Café!") == ["hello", "cafe", "!"]
    assert tokenizer(lower=False).tokenize("Hello Café") == ["Hello", "[UNK]"]
    assert basic_tokenize("Café", do_lower_case=False) == ["Café"]


def test_chinese_characters_are_one_token_each_even_without_spaces():
    assert basic_tokenize("中国人hello") == ["中", "国", "人", "hello"]
    assert tokenizer().tokenize("中国人，世界") == ["中", "国", "人", "[UNK]", "[UNK]", "[UNK]"]


def test_punctuation_control_characters_and_whitespace():
    assert basic_tokenize("hello,world.\x00\u200b\tthe\u00a0end") == \
        ["hello", ",", "world", ".", "the", "end"]
    # Every non-alphanumeric ASCII symbol is split off, like the original ($, +, ^, `).
    assert basic_tokenize("a$b+c^d`e") == ["a", "$", "b", "+", "c", "^", "d", "`", "e"]


def test_ids_round_trip():
    t = tokenizer()
    ids = t.convert_tokens_to_ids(["[CLS]", "hello", "not-in-vocab", "[SEP]"])
    assert ids == [2, 15, 1, 3]
    assert t.convert_ids_to_tokens(ids) == ["[CLS]", "hello", "[UNK]", "[SEP]"]
