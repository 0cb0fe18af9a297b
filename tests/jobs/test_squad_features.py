"""SQuAD without TensorFlow: features worked by hand, span decoding, the official metrics on
normalisation traps, and one-line errors for bad files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jobs import spec as spec_lib
from jobs.bert import squad
from jobs.bert.tokenization import FullTokenizer

from .conftest import REPO

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "who", "?", "a", "b", "c", "d", "e", "f", "g", "h",
         "cafe", "##s", "中", "文", "good", "!"]


@pytest.fixture
def tokenizer() -> FullTokenizer:
    return FullTokenizer(vocab={t: i for i, t in enumerate(VOCAB)})


def squad_file(path, paragraphs, version=None):
    data = {"data": [{"title": "t", "paragraphs": paragraphs}]}
    if version:
        data["version"] = version
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def examples_of(tmp_path, context, answers, training=True, v2=False):
    qas = [{"id": f"q{i}", "question": "who ?",
            "answers": [] if a is None else [{"text": a[0], "answer_start": a[1]}],
            **({"is_impossible": a is None} if v2 else {})} for i, a in enumerate(answers)]
    path = squad_file(tmp_path / "f.json", [{"context": context, "qas": qas}])
    return squad.read_examples(str(path), training, v2)


def test_context_words_and_character_offsets_with_accents_cjk_and_narrow_spaces():
    words, char_to_word = squad.split_context("Café  中文 b\u202fcafés")
    assert words == ["Café", "中文", "b", "cafés"]
    assert char_to_word == [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3]


def test_long_context_is_split_by_the_stride_with_max_context_and_answer_positions(tmp_path,
                                                                                   tokenizer):
    # 8 words = 8 tokens; question 2 tokens; max_seq_length 9 leaves 9 - 2 - 3 = 4 per window;
    # stride 2: windows a-d, c-f, e-h. The answer "d e" (words 3-4) is whole only in window 2.
    [example] = examples_of(tmp_path, "a b c d e f g h", [("d e", 6)])
    assert (example.start_position, example.end_position) == (3, 4)
    features = squad.convert_to_features([example], tokenizer, 9, 2, 64, training=True)
    assert [f.tokens for f in features] == [
        ["[CLS]", "who", "?", "[SEP]", "a", "b", "c", "d", "[SEP]"],
        ["[CLS]", "who", "?", "[SEP]", "c", "d", "e", "f", "[SEP]"],
        ["[CLS]", "who", "?", "[SEP]", "e", "f", "g", "h", "[SEP]"]]
    assert [(f.start_position, f.end_position) for f in features] == [(0, 0), (5, 6), (0, 0)]
    middle = features[1]
    assert middle.segment_ids == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert middle.input_mask == [1] * 9
    assert middle.input_ids == tokenizer.convert_tokens_to_ids(middle.tokens)
    assert middle.token_to_orig_map == {4: 2, 5: 3, 6: 4, 7: 5}
    # c: 1.04 in window 0 (1 left... min(2, 1)) vs 0.04 here; d and e are centred here; f in window 2.
    assert middle.token_is_max_context == {4: False, 5: True, 6: True, 7: False}
    assert features[0].token_is_max_context == {4: True, 5: True, 6: True, 7: False}
    assert squad.doc_windows(8, 4, 2) == [(0, 4), (2, 4), (4, 4)]
    assert squad.doc_windows(8, 4, 8) == [(0, 4), (4, 4)]   # stride capped at the window


def test_answers_at_window_edges(tmp_path, tokenizer):
    # The last word of the context (end_position is the last word) and the first one.
    last, first = examples_of(tmp_path, "a b c d e f g h", [("h", 14), ("a", 0)])
    feats = squad.convert_to_features([last, first], tokenizer, 9, 2, 64, training=True)
    by_example = [[(f.start_position, f.end_position) for f in feats if f.example_index == i]
                  for i in (0, 1)]
    assert by_example[0] == [(0, 0), (0, 0), (7, 7)]     # h is the last token of window 3
    assert by_example[1] == [(4, 4), (0, 0), (0, 0)]     # a is the first token of window 1
    # Padding: a short context fills max_seq_length with zeros.
    [short] = examples_of(tmp_path, "a b", [("b", 2)])
    [f] = squad.convert_to_features([short], tokenizer, 12, 2, 64, training=True)
    assert f.input_ids[-5:] == [0] * 5 and f.input_mask == [1] * 7 + [0] * 5
    assert (f.start_position, f.end_position) == (5, 5)


def test_accents_and_cjk_map_sub_tokens_back_to_words(tmp_path, tokenizer):
    context = "Café  中文 b\u202fcafés"
    cjk, accented = examples_of(tmp_path, context, [("文", 7), ("cafés", 11)])
    # run_squad.py: "文" is inside the whitespace word "中文" (word 1); the span is tightened to
    # the sub-token of "文" (_improve_answer_span).
    assert (cjk.start_position, cjk.end_position) == (1, 1)
    feats = squad.convert_to_features([cjk, accented], tokenizer, 20, 8, 64, training=True)
    assert feats[0].tokens == ["[CLS]", "who", "?", "[SEP]", "cafe", "中", "文", "b", "cafe",
                               "##s", "[SEP]"]
    assert (feats[0].start_position, feats[0].end_position) == (6, 6)
    assert (feats[1].start_position, feats[1].end_position) == (8, 9)
    assert feats[0].token_to_orig_map == {4: 0, 5: 1, 6: 1, 7: 2, 8: 3, 9: 3}
    # Back to the original text: accents and CJK come back from the whitespace-free map.
    assert squad.final_text("cafes", "cafés", True) == "cafés"
    assert squad.final_text("cafe", "Café", True) == "Café"
    assert squad.final_text("文", "中文", True) == "文"
    assert squad.final_text("good", "good!", True) == "good"
    assert squad.final_text("zzz", "good!", True) == "good!"   # not found: the whole words


def test_answer_text_not_in_its_words_is_skipped_with_a_warning(tmp_path):
    warnings = []
    path = squad_file(tmp_path / "f.json", [{"context": "a bc d", "qas": [
        {"id": "x", "question": "?", "answers": [{"text": "b", "answer_start": 2}]}]}])
    assert squad.read_examples(str(path), True, False, warn=warnings.append)[0].answer_text == "b"
    path = squad_file(tmp_path / "g.json", [{"context": "a b\u00a0c d", "qas": [
        {"id": "y", "question": "?", "answers": [{"text": "b\u00a0c", "answer_start": 2}]}]}])
    # U+00A0 is not run_squad.py whitespace: "b\u00a0c" is one word and the cleaned answer
    # "b c" is not in it.
    assert squad.read_examples(str(path), True, False, warn=warnings.append) == []
    assert len(warnings) == 1 and "'y'" in warnings[0]


def test_v2_impossible_questions_train_on_cls(tmp_path, tokenizer):
    ex = examples_of(tmp_path, "a b c", [None, ("b", 2)], v2=True)
    assert ex[0].is_impossible and ex[0].start_position == -1
    feats = squad.convert_to_features(ex, tokenizer, 12, 4, 64, training=True)
    assert [(f.start_position, f.end_position, f.is_impossible) for f in feats] == [
        (0, 0, True), (5, 5, False)]


def test_decoding_nbest_max_answer_length_and_null_threshold(tmp_path, tokenizer):
    [example] = examples_of(tmp_path, "a b c good!", [("b", 2)], training=False)
    [feature] = squad.convert_to_features([example], tokenizer, 12, 4, 64, training=False)
    assert feature.tokens == ["[CLS]", "who", "?", "[SEP]", "a", "b", "c", "good", "!", "[SEP]"]
    n = 12
    start, end = [0.0] * n, [0.0] * n
    start[7], end[7] = 5.0, 5.0    # "good" -> the word "good!" -> final text "good"
    start[4], end[8] = 7.0, 4.0    # "a b c good": 12, but longer than max_answer_length 3
    start[1], end[1] = 9.0, 9.0    # in the question: never an answer
    logits = {feature.unique_id: (start, end)}
    out = squad.predict([example], [feature], logits, 20, 3, True, False)
    assert out.answers == {"q0": "good"}
    out = squad.predict([example], [feature], logits, 20, 5, True, False)
    assert out.answers == {"q0": "a b c good"}
    # v2.0: null score = start[0] + end[0] against the best span (10 for "good").
    start[0], end[0] = 5.5, 5.0
    v2 = squad.predict([example], [feature], logits, 20, 3, True, True, 0.0)
    assert v2.answers == {"q0": ""} and v2.null_odds == {"q0": pytest.approx(0.5)}
    v2 = squad.predict([example], [feature], logits, 20, 3, True, True, 1.0)
    assert v2.answers == {"q0": "good"}
    assert abs(sum(e["probability"] for e in v2.nbest["q0"]) - 1.0) < 1e-9


TRAPS = [  # (gold answers, prediction, EM, F1): the official v1.1 definitions
    (["The Eiffel Tower"], "eiffel  tower", 1, 1.0),        # articles, case, whitespace
    (["an apple", "Apples!"], "apple", 1, 1.0),              # best over several gold answers
    (["New  York\tCity"], "new york", 0, 0.8),               # p 1, r 2/3
    (["a"], "the", 1, 0.0),                                  # both empty: EM 1, v1.1 F1 0
    (["U.S.", "United States"], "US", 1, 1.0),               # punctuation removed, not spaced
    (["theatre"], "the atre", 0, 0.0),                       # articles only as whole words
    (["cat cat dog"], "cat dog dog", 0, 2 / 3),              # Counter intersection
    (["Paris"], None, 0, 0.0),                               # no prediction: scores 0
]


def traps_file(tmp_path):
    qas = [{"id": f"t{i}", "question": "?", "answers": [{"text": g, "answer_start": 0}
                                                         for g in golds]}
           for i, (golds, *_rest) in enumerate(TRAPS)]
    path = squad_file(tmp_path / "traps.json", [{"context": "x", "qas": qas}], version="1.1")
    preds = {f"t{i}": p for i, (_g, p, *_r) in enumerate(TRAPS) if p is not None}
    (tmp_path / "preds.json").write_text(json.dumps(preds))
    return path, tmp_path / "preds.json"


def test_official_v1_metrics_on_normalisation_traps(tmp_path):
    for golds, pred, em, f1 in TRAPS:
        if pred is not None:
            assert max(squad.exact_score(pred, g) for g in golds) == em, (golds, pred)
            assert max(squad.f1_score(pred, g) for g in golds) == pytest.approx(f1), (golds, pred)
    assert squad.normalize_answer("  The  Cat's\tA-team, an ox!") == "cats ateam ox"
    path, preds = traps_file(tmp_path)
    want = {"exact_match": 100.0 * sum(t[2] for t in TRAPS) / len(TRAPS),
            "f1": 100.0 * sum(t[3] for t in TRAPS) / len(TRAPS)}
    got = squad.evaluate(squad.load_json(str(path)), json.loads(preds.read_text()))
    assert got == pytest.approx(want) and set(got) == {"exact_match", "f1"}
    assert want == pytest.approx({"exact_match": 50.0, "f1": 100 * (3.8 + 2 / 3) / 8})
    # The command line prints the same JSON, as the official script does.
    proc = subprocess.run([sys.executable, "-m", "jobs.bert.squad", "evaluate", str(path),
                           str(preds)], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == pytest.approx(want)


def test_official_v2_metrics_has_ans_no_ans_and_best_threshold(tmp_path):
    qas = [{"id": "n1", "question": "?", "answers": [], "is_impossible": True},
           {"id": "n2", "question": "?", "answers": [], "is_impossible": True},
           {"id": "h1", "question": "?", "answers": [{"text": "the cat", "answer_start": 0}]},
           {"id": "h2", "question": "?", "answers": [{"text": "dog", "answer_start": 0}]}]
    path = squad_file(tmp_path / "v2.json", [{"context": "x", "qas": qas}], version="v2.0")
    preds = {"n1": "", "n2": "x", "h1": "Cat", "h2": ""}
    got = squad.evaluate(squad.load_json(str(path)), preds)
    assert got == pytest.approx({
        "exact_match": 50.0, "f1": 50.0, "exact": 50.0, "total": 4,
        "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})
    # With null odds: abstaining on n2 (odds 0.9 > the threshold found) gets 3 of 4 right.
    na = {"n1": 0.8, "n2": 0.9, "h1": 0.1, "h2": 0.2}
    got = squad.evaluate(squad.load_json(str(path)), preds, na)
    assert got["best_exact"] == pytest.approx(75.0) and got["best_exact_thresh"] == 0.1
    assert squad.f1_score("", "", v2=True) == 1.0 and squad.f1_score("a", "", v2=True) == 1.0
    assert squad.f1_score("x", "", v2=True) == 0.0


@pytest.mark.parametrize("content, version_2, expected", [
    ("not json", False, "is not JSON"),
    ('{"data": 3}', False, "is not SQuAD JSON"),
    (('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": "?", '
      '"answers": [{"text": "bc", "answer_start": 0}]}]}]}]}'), False, "answer_start"),
    ('{"version": "v2.0", "data": [{"paragraphs": [{"context": "abc", "qas": []}]}]}', False,
     "version_2_with_negative=true"),
    (('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": "?", '
      '"answers": [], "is_impossible": true}]}]}]}'), False, "version_2_with_negative=true"),
])
def test_bad_squad_files_are_one_line_spec_errors(tmp_path, content, version_2, expected):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(squad.SquadError) as info:
        squad.check_file(str(tmp_path / "bad.json"), True, version_2)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_squad_spec_counts_steps_from_epochs_and_rejects_bad_files_before_tensorflow(
        tmp_path, tiny_dir):
    base = [f"bert_dir={tiny_dir}", f"model_dir={tmp_path / 'run'}"]
    train = tiny_dir / "squad" / "train-v1.1.json"
    spec = spec_lib.load(str(REPO / "templates" / "bert-squad.yaml"),
                         [*base, f"train_file={train}", "max_seq_length=64", "max_query_length=16"])
    assert (spec.doc_stride, spec.max_query_length, spec.learning_rate, spec.train_batch_size,
            spec.n_best_size, spec.max_answer_length) == (128, 16, 3e-5, 32, 20, 30)
    questions = sum(len(p["qas"]) for a in json.loads(train.read_text())["data"]
                    for p in a["paragraphs"])
    assert spec.num_train_steps == int(questions / 32 * 2.0)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(spec_lib.SpecError, match="train_file: .* is not SQuAD JSON"):
        spec_lib.load(str(REPO / "templates" / "bert-squad.yaml"),
                      [*base, f"train_file={tmp_path / 'bad.json'}", "max_seq_length=64"])
    import yaml

    keys = set(yaml.safe_load((REPO / "templates" / "bert-squad.yaml").read_text()))
    assert keys == {k for k, *_ in spec_lib.describe("bert-squad")}
    argv = [sys.executable, "-m", "jobs", "run", str(REPO / "templates" / "bert-squad.yaml")]
    for item in [*base, f"train_file={tmp_path / 'bad.json'}"]:
        argv += ["--set", item]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "is not SQuAD JSON" in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1


def test_v2_with_only_the_null_answer_uses_run_squads_placeholder(tmp_path, tokenizer):
    [example] = examples_of(tmp_path, "a b", [("b", 2)], training=False)
    [feature] = squad.convert_to_features([example], tokenizer, 8, 4, 64, training=False)
    start, end = [-9.0] * 8, [-9.0] * 8
    start[0], end[0] = 1.0, 1.0
    out = squad.predict([example], [feature], {feature.unique_id: (start, end)}, 1, 30, True, True)
    # n_best_size 1: the null entry alone; the placeholder "empty" (logits 0) is the best span.
    assert [e["text"] for e in out.nbest["q0"]] == ["empty", ""]
    assert out.null_odds == {"q0": 2.0} and out.answers == {"q0": ""}
