"""`python -m jobs.bert.squad evaluate` on malformed inputs (a user's own dev file or
predictions, often hand-edited): one line naming
the file and the fix, exit 2, never a traceback and never a silent score; the v2.0 HasAns/NoAns
split as evaluate-v2.0.py decides it; n-best probabilities independent of the Python version."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from jobs.bert import squad
from jobs.bert.tokenization import FullTokenizer

from .conftest import REPO

QAS_V1 = [{"id": "q1", "question": "?", "answers": [{"text": "cat", "answer_start": 0}]},
          {"id": "q2", "question": "?", "answers": [{"text": "dog", "answer_start": 4}]}]
QAS_V2 = [{"id": "h1", "question": "?", "answers": [{"text": "cat", "answer_start": 0}]},
          {"id": "n1", "question": "?", "answers": [], "is_impossible": True}]


def dataset(qas, version="1.1"):
    doc = {"data": [{"title": "t", "paragraphs": [{"context": "cat dog", "qas": qas}]}]}
    if version is not None:
        doc["version"] = version
    return doc


def run_evaluate(tmp_path, data, preds, na=None, raw_preds=None):
    (tmp_path / "dev.json").write_text(json.dumps(data))
    (tmp_path / "preds.json").write_text(raw_preds if raw_preds is not None else json.dumps(preds))
    args = [sys.executable, "-m", "jobs.bert.squad", "evaluate", str(tmp_path / "dev.json"),
            str(tmp_path / "preds.json")]
    if na is not None:
        (tmp_path / "na.json").write_text(json.dumps(na))
        args += ["--na-prob-file", str(tmp_path / "na.json")]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


GOOD_V1 = {"q1": "cat", "q2": "dog"}
GOOD_V2 = {"h1": "cat", "n1": ""}


@pytest.mark.parametrize("data, preds, na, file, expected", [
    # prediction values that are not text
    (dataset(QAS_V1), {"q1": 3, "q2": "dog"}, None, "preds.json", "is a number, not text"),
    (dataset(QAS_V1), {"q1": None, "q2": "dog"}, None, "preds.json", "is null, not text"),
    (dataset(QAS_V1), {"q1": ["cat"], "q2": "dog"}, None, "preds.json", "is a list, not text"),
    (dataset(QAS_V2, "v2.0"), {"h1": 1.5, "n1": ""}, None, "preds.json", "is a number, not text"),
    (dataset(QAS_V1), ["cat", "dog"], None, "preds.json", "must map question ids to answer text"),
    # a v1.1 question without answers
    (dataset([*QAS_V1, {"id": "q3", "question": "?", "answers": []}]), GOOD_V1, None, "dev.json",
     "v1.1 question 'q3' has no answers"),
    # versions that are not 1.1 or 2.0, or none on a file that does not say it is v2.0
    (dataset(QAS_V1, "3.0"), GOOD_V1, None, "dev.json", "has version '3.0'"),
    (dataset(QAS_V1, None), GOOD_V1, None, "dev.json", 'has no "version"'),
    # predictions for another file
    (dataset(QAS_V2, "v2.0"), {"x1": "cat", "x2": ""}, None, "preds.json", "none of its 2 predictions"),
    (dataset(QAS_V1), {}, None, "preds.json", "none of its 0 predictions"),
    # null odds that are not numbers, not a mapping, or that miss answered questions
    (dataset(QAS_V2, "v2.0"), GOOD_V2, {"h1": "0.1", "n1": 0.9}, "na.json", "must be a number"),
    (dataset(QAS_V2, "v2.0"), GOOD_V2, [0.1, 0.9], "na.json", "must map question ids to null odds"),
    (dataset(QAS_V2, "v2.0"), GOOD_V2, {"h1": 0.1}, "na.json", "no null odds for 1 answered question"),
    (dataset(QAS_V1), GOOD_V1, {"q1": 0.1, "q2": 0.2}, "na.json", "null odds are for SQuAD v2.0"),
])
def test_bad_inputs_are_one_line_naming_the_file_and_exit_2(tmp_path, data, preds, na, file, expected):
    proc = run_evaluate(tmp_path, data, preds, na)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpuctl: error: ") and expected in lines[0], lines
    assert str(tmp_path / file) in lines[0]


def test_predictions_that_are_not_json_name_the_file(tmp_path):
    proc = run_evaluate(tmp_path, dataset(QAS_V1), None, raw_preds="{not json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'preds.json'} is not JSON" in proc.stderr


def test_good_inputs_score_and_partial_v2_predictions_follow_the_official_script(tmp_path):
    proc = run_evaluate(tmp_path, dataset(QAS_V1), GOOD_V1)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"exact_match": 100.0, "f1": 100.0}
    # evaluate-v2.0.py leaves questions without a prediction out, saying so
    proc = run_evaluate(tmp_path, dataset(QAS_V2, "v2.0"), {"h1": "cat"})
    assert proc.returncode == 0 and "Missing prediction for n1" in proc.stderr
    assert json.loads(proc.stdout)["total"] == 1
    # a file without a version but with is_impossible questions is v2.0
    proc = run_evaluate(tmp_path, dataset(QAS_V2, None), GOOD_V2)
    assert proc.returncode == 0 and json.loads(proc.stdout)["NoAns_total"] == 1


def test_a_gold_answer_that_normalises_to_nothing_still_makes_the_question_answerable(tmp_path):
    """evaluate-v2.0.py: qid_to_has_ans[qid] = bool(qa['answers']); such a question is HasAns, its
    gold scores as "" and, above the threshold, abstaining on it is wrong."""
    qas = [{"id": "a", "question": "?", "answers": [{"text": "the", "answer_start": 0}]},
           {"id": "b", "question": "?", "answers": [{"text": "cat", "answer_start": 0}]},
           {"id": "n", "question": "?", "answers": [], "is_impossible": True}]
    preds = {"a": "", "b": "cat", "n": ""}
    proc = run_evaluate(tmp_path, dataset(qas, "v2.0"), preds, na={"a": 0.9, "b": 0.1, "n": 0.8})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["HasAns_total"] == 2 and got["NoAns_total"] == 1
    # a: "" against its gold "" (normalised) is right; odds 0.9 stay under the threshold of 1.0
    assert got["exact"] == 100.0 and got["HasAns_exact"] == 100.0
    # with odds above the default threshold of 1.0 the official script marks "a" as abstained:
    # right only if the question has no answer, and it has one
    proc = run_evaluate(tmp_path, dataset(qas, "v2.0"), preds, na={"a": 1.5, "b": 0.1, "n": 0.8})
    got = json.loads(proc.stdout)
    assert got["exact"] == pytest.approx(200 / 3) and got["HasAns_exact"] == 50.0 and got["NoAns_exact"] == 100.0


def test_nbest_probabilities_are_exact_sums_on_every_python(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "who", "?", "a", "b", "c", "d", "e", "f"]
    tokenizer = FullTokenizer(vocab={t: i for i, t in enumerate(vocab)})
    path = tmp_path / "f.json"
    # a context of six words, random logits until plain left-to-right summation rounds differently
    path.write_text(json.dumps({"version": "1.1", "data": [{"paragraphs": [{"context": "a b c d e f", "qas": [
        {"id": "q0", "question": "who ?", "answers": [{"text": "a", "answer_start": 0}]}]}]}]}))
    [example] = squad.read_examples(str(path), False, False)
    [feature] = squad.convert_to_features([example], tokenizer, 16, 8, 8, training=False)
    for seed in range(200):
        rng = random.Random(seed)
        n = len(feature.tokens)
        start = [rng.uniform(-40, 10) for _ in range(n)]
        end = [rng.uniform(-40, 10) for _ in range(n)]
        out = squad.predict([example], [feature], {feature.unique_id: (start, end)}, 20, 6, True, False)
        nbest = out.nbest["q0"]
        totals = [e["start_logit"] + e["end_logit"] for e in nbest]
        exps = [math.exp(t - max(totals)) for t in totals]
        naive = 0.0
        for x in exps:
            naive += x
        if naive != math.fsum(exps):
            break
    else:
        pytest.fail("no logits found where left-to-right summation rounds differently")
    assert [e["probability"] for e in nbest] == [x / math.fsum(exps) for x in exps]
