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


# -- vocab.txt: ids are line numbers, exactly as google-research/bert's load_vocab gives them --

def original_load_vocab(data: bytes) -> dict[str, int]:
    """The original loader's behaviour, written out independently: read a line up to "\\n"
    (tf.gfile's readline), stop at end of file, strip it, and number it; a later line with the
    same token overwrites the earlier id."""
    import io

    vocab: dict[str, int] = {}
    reader = io.BytesIO(data)
    index = 0
    while True:
        line = reader.readline().decode("utf-8", "ignore")
        if not line:
            break
        vocab[line.strip()] = index
        index += 1
    return vocab


# Blank, whitespace-only (U+2028, the Chinese vocabulary's line; a no-break space), repeated and
# CR-containing lines between ordinary tokens: every one of them takes an id.
AWKWARD_VOCAB = ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n\nworld\n\u2028\n##ing\n"
                 "hello\n \t\n中\n\u00a0\ncafe\nab\rcd\n,\nrun\n")


def test_awkward_vocab_gives_the_original_ids(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(AWKWARD_VOCAB.encode("utf-8"))
    tok = FullTokenizer(vocab_file=str(path), do_lower_case=True)
    original = original_load_vocab(path.read_bytes())
    assert tok.vocab == original
    lines = AWKWARD_VOCAB.encode().split(b"\n")[:-1]
    assert len(lines) == 18 and tok.vocab_size == 18
    # Every later token keeps its line number: nothing shifts after the blank lines.
    assert tok.vocab["world"] == 7 and tok.vocab["##ing"] == 9 and tok.vocab["中"] == 12
    assert tok.vocab["cafe"] == 14 and tok.vocab[","] == 16 and tok.vocab["run"] == 17
    assert tok.vocab["hello"] == 10  # a repeated token: its last line, as the original
    assert tok.vocab["ab\rcd"] == 15  # a lone CR does not end a line for the original either
    ids = tok.convert_tokens_to_ids(tok.tokenize("Hello, WORLD runing café 中 unknown"))
    assert ids == [original[t] for t in ["hello", ",", "world", "run", "##ing", "cafe", "中",
                                          "[UNK]"]]
    # convert_ids_to_tokens inverts every line number, the earlier "hello" line included.
    assert tok.convert_ids_to_tokens(range(18)) == [line.decode().strip() for line in lines]
    assert tok.convert_ids_to_tokens(ids) == ["hello", ",", "world", "run", "##ing", "cafe", "中",
                                              "[UNK]"]


def test_vocab_without_final_newline_and_with_trailing_blank_line(tmp_path):
    for text, count in (("a\nb", 2), ("a\nb\n", 2), ("a\nb\n\n", 3), ("\n", 1), ("", 0)):
        path = tmp_path / "v.txt"
        path.write_text(text, encoding="utf-8")
        tok = FullTokenizer(vocab_file=str(path))
        assert tok.vocab == original_load_vocab(text.encode()), text
        assert tok.vocab_size == count, text
