"""SQuAD v1.1 / v2.0 without TensorFlow: examples, features, span decoding and the official metrics.

The ``bert-squad`` job (:mod:`jobs.bert.squad_job`) trains on the features built here; this module
is pure Python so that the spec check, the tests and ``python -m jobs.bert.squad evaluate`` run
without TensorFlow.

- :func:`read_examples`: the SQuAD JSON as google-research/bert's run_squad.py reads it: the
  context split on whitespace (space, tab, CR, LF, U+202F), each character mapped to its word,
  the answer's first and last word from ``answer_start`` and the answer's length; a training
  answer whose words do not contain the answer text is skipped with a warning.
- :func:`convert_to_features`: WordPiece sub-tokens mapped back to words, the answer span
  tightened to the tokenized answer (``_improve_answer_span``), windows of
  ``max_seq_length - len(query) - 3`` tokens every ``doc_stride`` tokens, each token's
  max-context window, ``[CLS] query [SEP] window [SEP]``; a window without the answer trains
  on start = end = 0 ([CLS]).
- :func:`predict`: the n-best spans of every question over its windows, ``max_answer_length``,
  the text mapped back to the original context (``get_final_text``), and for v2.0 the null
  score against ``null_score_diff_threshold``.
- :func:`evaluate`: the official evaluate-v1.1.py / evaluate-v2.0.py definitions.
"""

from __future__ import annotations

import collections
import json
import math
import re
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ArgumentParser
from .squad_check import SquadError, check_data, check_file, is_v2, load, parse_json
from .tokenization import basic_tokenize, open_text

__all__ = ["SquadError", "check_data", "check_file", "is_v2", "parse_json"]


# --------------------------------------------------------------------------------------------
# Examples


def is_squad_whitespace(char: str) -> bool:
    return char in (" ", "\t", "\r", "\n") or ord(char) == 0x202F


def split_context(context: str) -> tuple[list[str], list[int]]:
    """(words, word index of every character) as run_squad.py splits a paragraph."""
    words: list[str] = []
    char_to_word: list[int] = []
    previous_space = True
    for char in context:
        if is_squad_whitespace(char):
            previous_space = True
        else:
            if previous_space:
                words.append(char)
            else:
                words[-1] += char
            previous_space = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


@dataclass
class Example:
    qas_id: str
    question: str
    doc_tokens: list[str]
    answer_text: str = ""
    start_position: int = -1    # word index; -1: none (prediction, or impossible)
    end_position: int = -1
    is_impossible: bool = False


def load_json(path: str) -> dict:
    """The parsed SQuAD file at ``path`` (local or gs://), checked to be SQuAD JSON."""
    return load(path, open_text)


def read_examples(path: str, training: bool, version_2: bool,
                  warn=lambda message: print(message, file=sys.stderr)) -> list[Example]:
    raw = load_json(path)
    check_data(raw, path, training, version_2)   # again: gs:// files are not checked by the spec
    examples = []
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            words, char_to_word = split_context(paragraph["context"])
            for qa in paragraph["qas"]:
                example = Example(str(qa["id"]), qa["question"], words)
                if training:
                    example.is_impossible = bool(version_2 and qa.get("is_impossible", False))
                    if not example.is_impossible:
                        answers = qa.get("answers") or []
                        if not answers:
                            raise SquadError(f"{path}: training question {qa['id']!r} has no "
                                             "answer; mark it is_impossible (v2.0) or remove it")
                        text, start = answers[0]["text"], int(answers[0]["answer_start"])
                        if not text or start + len(text) > len(char_to_word):
                            raise SquadError(f"{path}: question {qa['id']!r}: answer {text!r} "
                                             f"at {start} is outside its context; fix answer_start")
                        example.answer_text = text
                        example.start_position = char_to_word[start]
                        example.end_position = char_to_word[start + len(text) - 1]
                        actual = " ".join(words[example.start_position:example.end_position + 1])
                        cleaned = " ".join(text.split())
                        if cleaned not in actual:
                            warn(f"jobs: skipping question {qa['id']!r}: answer {cleaned!r} is "
                                 f"not in its words {actual!r}")
                            continue
                examples.append(example)
    return examples


# --------------------------------------------------------------------------------------------
# Features


@dataclass
class Feature:
    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list[str]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False


def improve_answer_span(doc_tokens: Sequence[str], start: int, end: int, tokenizer,
                        answer_text: str) -> tuple[int, int]:
    """The smallest sub-token span inside [start, end] that tokenizes as the answer does."""
    wanted = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == wanted:
                return new_start, new_end
    return start, end


def doc_windows(num_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of every window over ``num_tokens`` sub-tokens."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, stride)
    return spans


def is_max_context(spans: Sequence[tuple[int, int]], current: int, position: int) -> bool:
    """Whether window ``current`` gives token ``position`` the most context (score: the smaller
    side plus 0.01 x window length; the first best window wins)."""
    best_score, best = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, index
    return current == best


def convert_to_features(examples: Sequence[Example], tokenizer, max_seq_length: int,
                        doc_stride: int, max_query_length: int, training: bool,
                        first_unique_id: int = 1000000000) -> list[Feature]:
    features = []
    unique_id = first_unique_id
    for example_index, example in enumerate(examples):
        query = tokenizer.tokenize(example.question)[:max_query_length]
        tok_to_orig: list[int] = []
        orig_to_tok: list[int] = []
        doc_subtokens: list[str] = []
        for i, word in enumerate(example.doc_tokens):
            orig_to_tok.append(len(doc_subtokens))
            for sub in tokenizer.tokenize(word):
                tok_to_orig.append(i)
                doc_subtokens.append(sub)
        tok_start = tok_end = -1
        if training and not example.is_impossible:
            tok_start = orig_to_tok[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok[example.end_position + 1] - 1
            else:
                tok_end = len(doc_subtokens) - 1
            tok_start, tok_end = improve_answer_span(doc_subtokens, tok_start, tok_end, tokenizer,
                                                     example.answer_text)
        max_tokens = max_seq_length - len(query) - 3
        if max_tokens <= 0:
            raise SquadError(f"max_seq_length {max_seq_length} leaves no room for the context "
                             f"after a {len(query)}-token question; raise max_seq_length or "
                             "lower max_query_length")
        spans = doc_windows(len(doc_subtokens), max_tokens, doc_stride)
        for span_index, (span_start, span_length) in enumerate(spans):
            tokens = ["[CLS]", *query, "[SEP]"]
            segment_ids = [0] * len(tokens)
            to_orig: dict[int, int] = {}
            max_context: dict[int, bool] = {}
            for i in range(span_length):
                split = span_start + i
                to_orig[len(tokens)] = tok_to_orig[split]
                max_context[len(tokens)] = is_max_context(spans, span_index, split)
                tokens.append(doc_subtokens[split])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)
            ids = tokenizer.convert_tokens_to_ids(tokens)
            pad = max_seq_length - len(ids)
            start_position = end_position = 0
            if training and not example.is_impossible:
                span_end = span_start + span_length - 1
                if span_start <= tok_start and tok_end <= span_end:
                    offset = len(query) + 2
                    start_position = tok_start - span_start + offset
                    end_position = tok_end - span_start + offset
            features.append(Feature(
                unique_id, example_index, span_index, tokens, to_orig, max_context,
                ids + [0] * pad, [1] * len(ids) + [0] * pad, segment_ids + [0] * pad,
                start_position, end_position, bool(training and example.is_impossible)))
            unique_id += 1
    return features


# --------------------------------------------------------------------------------------------
# Prediction


def best_indexes(logits: Sequence[float], n: int) -> list[int]:
    order = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
    return [i for i, _ in order[:n]]


def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
    chars, ns_to_s = [], {}
    for i, c in enumerate(text):
        if c == " ":
            continue
        ns_to_s[len(chars)] = i
        chars.append(c)
    return "".join(chars), ns_to_s


def final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """The part of ``orig_text`` (original words) that the de-tokenized ``pred_text`` covers."""
    tok_text = " ".join(basic_tokenize(orig_text, do_lower_case))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_map = _strip_spaces(orig_text)
    tok_ns, tok_map = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in tok_map.items()}
    if start not in tok_s_to_ns or end not in tok_s_to_ns:
        return orig_text
    orig_start = orig_map.get(tok_s_to_ns[start])
    orig_end = orig_map.get(tok_s_to_ns[end])
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start:orig_end + 1]


@dataclass
class _Candidate:
    feature_index: int
    start: int
    end: int
    start_logit: float
    end_logit: float


@dataclass
class Prediction:
    answers: dict[str, str] = field(default_factory=dict)
    null_odds: dict[str, float] = field(default_factory=dict)
    nbest: dict[str, list[dict]] = field(default_factory=dict)


def predict(examples: Sequence[Example], features: Sequence[Feature],
            logits: dict[int, tuple[Sequence[float], Sequence[float]]], n_best_size: int,
            max_answer_length: int, do_lower_case: bool, version_2: bool,
            null_score_diff_threshold: float = 0.0) -> Prediction:
    """Answers from ``logits`` (unique_id -> (start logits, end logits))."""
    by_example: dict[int, list[Feature]] = collections.defaultdict(list)
    for feature in features:
        by_example[feature.example_index].append(feature)
    out = Prediction()
    for example_index, example in enumerate(examples):
        feats = by_example[example_index]
        candidates: list[_Candidate] = []
        score_null, null_feature, null_start, null_end = math.inf, 0, 0.0, 0.0
        for fi, feature in enumerate(feats):
            starts, ends = logits[feature.unique_id]
            if version_2:
                score = starts[0] + ends[0]
                if score < score_null:
                    score_null, null_feature, null_start, null_end = score, fi, starts[0], ends[0]
            for s in best_indexes(starts, n_best_size):
                for e in best_indexes(ends, n_best_size):
                    if (s >= len(feature.tokens) or e >= len(feature.tokens)
                            or s not in feature.token_to_orig_map
                            or e not in feature.token_to_orig_map
                            or not feature.token_is_max_context.get(s, False)
                            or e < s or e - s + 1 > max_answer_length):
                        continue
                    candidates.append(_Candidate(fi, s, e, starts[s], ends[e]))
        if version_2:
            candidates.append(_Candidate(null_feature, 0, 0, null_start, null_end))
        candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
        seen: set[str] = set()
        nbest: list[tuple[str, float, float]] = []
        for c in candidates:
            if len(nbest) >= n_best_size:
                break
            if c.start > 0:
                feature = feats[c.feature_index]
                pieces = " ".join(feature.tokens[c.start:c.end + 1])
                pieces = " ".join(pieces.replace(" ##", "").replace("##", "").strip().split())
                first = feature.token_to_orig_map[c.start]
                last = feature.token_to_orig_map[c.end]
                text = final_text(pieces, " ".join(example.doc_tokens[first:last + 1]),
                                  do_lower_case)
            else:
                text = ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append((text, c.start_logit, c.end_logit))
        if version_2 and "" not in seen:
            nbest.append(("", null_start, null_end))
        if version_2 and len(nbest) == 1:   # only the null answer: a placeholder span, as run_squad.py
            nbest.insert(0, ("empty", 0.0, 0.0))
        if not nbest:
            nbest.append(("empty", 0.0, 0.0))
        totals = [s + e for _, s, e in nbest]
        top = max(totals)
        exps = [math.exp(t - top) for t in totals]
        norm = math.fsum(exps)  # exact: the same on every Python (3.12 changed sum() of floats)
        out.nbest[example.qas_id] = [
            {"text": t, "probability": x / norm, "start_logit": s, "end_logit": e}
            for (t, s, e), x in zip(nbest, exps)]
        if not version_2:
            out.answers[example.qas_id] = nbest[0][0]
            continue
        best_non_null = next(n for n in nbest if n[0])
        diff = score_null - best_non_null[1] - best_non_null[2]
        out.null_odds[example.qas_id] = float(diff)
        out.answers[example.qas_id] = "" if diff > null_score_diff_threshold else best_non_null[0]
    return out


# --------------------------------------------------------------------------------------------
# The official metrics


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the official normalisation)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_score(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, v2: bool = False) -> float:
    pred = normalize_answer(prediction).split()
    truth = normalize_answer(gold).split()
    if v2 and (not pred or not truth):
        return float(pred == truth)
    common = collections.Counter(pred) & collections.Counter(truth)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def _questions(dataset: list) -> list[dict]:
    return [qa for article in dataset for p in article["paragraphs"] for qa in p["qas"]]


def evaluate_v1(dataset: list, predictions: dict[str, str]) -> dict[str, float]:
    """evaluate-v1.1.py: a question without a prediction scores 0."""
    em = f1 = 0.0
    total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
            continue
        golds = [a["text"] for a in qa["answers"]]
        prediction = predictions[qa["id"]]
        em += max(exact_score(prediction, g) for g in golds)
        f1 += max(f1_score(prediction, g) for g in golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def _best_threshold(preds, scores, na_probs, has_ans) -> tuple[float, float]:
    current = best = float(sum(1 for q in has_ans if not has_ans[q]))
    threshold = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1.0 if preds[qid] else 0.0
        current += diff
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def evaluate_v2(dataset: list, predictions: dict[str, str],
                na_probs: dict[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float]:
    """evaluate-v2.0.py: questions without a prediction are left out (with a message)."""
    has_ans, exact, f1 = {}, {}, {}
    for qa in _questions(dataset):
        qid = qa["id"]
        # evaluate-v2.0.py: answerable when it has any gold answer, even one that normalises
        # to empty text (qid_to_has_ans[qid] = bool(qa['answers'])); such a gold scores as "".
        has_ans[qid] = bool(qa.get("answers"))
        golds = [a["text"] for a in qa.get("answers", []) if normalize_answer(a["text"])]
        if not golds:
            golds = [""]
        if qid not in predictions:
            print(f"Missing prediction for {qid}", file=sys.stderr)
            continue
        exact[qid] = max(exact_score(predictions[qid], g) for g in golds)
        f1[qid] = max(f1_score(predictions[qid], g, v2=True) for g in golds)
    probs = na_probs if na_probs is not None else {q: 0.0 for q in predictions}

    def thresholded(scores):
        out = {}
        for qid, s in scores.items():
            out[qid] = float(not has_ans[qid]) if probs.get(qid, 0.0) > na_prob_thresh else s
        return out

    exact_t, f1_t = thresholded(exact), thresholded(f1)

    def summary(ids, prefix=""):
        n = len(ids)
        return {f"{prefix}exact": 100.0 * sum(exact_t[q] for q in ids) / n if n else 0.0,
                f"{prefix}f1": 100.0 * sum(f1_t[q] for q in ids) / n if n else 0.0,
                f"{prefix}total": n}

    result = summary(list(exact_t))
    has = [q for q in exact_t if has_ans[q]]
    no = [q for q in exact_t if not has_ans[q]]
    if has:
        result.update(summary(has, "HasAns_"))
    if no:
        result.update(summary(no, "NoAns_"))
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            predictions, exact, na_probs, has_ans)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            predictions, f1, na_probs, has_ans)
    return result


def evaluate(data: dict, predictions: dict[str, str],
             na_probs: dict[str, float] | None = None, version: str | None = None) -> dict[str, float]:
    """The official metrics for the file's version (``version`` "1.1" or "2.0" as
    :func:`eval_version` decides; by default v2.0 if the file looks like it); v2.0 results also
    carry ``exact_match`` (= ``exact``) so both versions share the keys the run summary reads."""
    if (version == "2.0") if version else is_v2(data):
        result = evaluate_v2(data["data"], predictions, na_probs)
        return {"exact_match": result["exact"], "f1": result["f1"], **result}
    return evaluate_v1(data["data"], predictions)


_KIND = {bool: "true/false", int: "a number", float: "a number", type(None): "null", list: "a list",
         dict: "an object"}


def _kind(value: object) -> str:
    return _KIND.get(type(value), type(value).__name__)


def eval_version(data: dict, path: str) -> str:
    """"1.1" or "2.0": the version ``evaluate`` scores ``data`` as, or a SquadError naming the fix.

    The official scripts disagree on files of other versions (evaluate-v1.1.py warns and scores
    any version as v1.1, and fails on a file without one; evaluate-v2.0.py ignores the version),
    so a version other than 1.1 or 2.0 is refused; a file without a version is v2.0 only if it
    has ``is_impossible`` questions, and otherwise refused (v1.1 and v2.0 score differently)."""
    version = data.get("version")
    text = str(version).strip().lower().lstrip("v") if version is not None else None
    if text in ("1.1", "2.0", "2"):
        return "1.1" if text == "1.1" else "2.0"
    if version is None and is_v2(data):
        return "2.0"
    if version is None:
        raise SquadError(f'{path} has no "version"; add "version": "1.1" (or "v2.0" for a file with '
                         "unanswerable questions) so that it is scored by the right rules")
    raise SquadError(f"{path} has version {version!r}; evaluate scores SQuAD 1.1 and v2.0 files: "
                     'set "version" to "1.1" or "v2.0" if the file follows one of them')


def check_eval_inputs(data: dict, predictions: object, na_probs: object, paths: tuple[str, str, str | None]) -> str:
    """Everything ``evaluate`` would trip on, as one SquadError naming the file and the fix;
    returns the version (see :func:`eval_version`)."""
    data_path, pred_path, na_path = paths
    version = eval_version(data, data_path)
    questions = _questions(data["data"])
    if not questions:
        raise SquadError(f"{data_path} has no questions; pass a SQuAD dev file")
    for qa in questions:
        answers = qa.get("answers", [])
        if not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
            raise SquadError(f"{data_path}: question {qa['id']!r} has an answer without text; every "
                             'answer needs {"text": ...}; fix the file')
        if version == "1.1" and not answers:
            raise SquadError(f"{data_path}: v1.1 question {qa['id']!r} has no answers; a v1.1 file gives "
                             'every question one at least (unanswerable questions need "version": "v2.0")')
    if not isinstance(predictions, dict):
        raise SquadError(f"{pred_path} is {_kind(predictions)}; it must map question ids to answer text, "
                         'such as {"56be4db0acb8001400a502ec": "Denver Broncos"}')
    for qid, text in predictions.items():
        if not isinstance(text, str):
            raise SquadError(f"{pred_path}: the prediction for question {qid!r} is {_kind(text)}, not text; "
                             'map every question id to its answer text ("" to abstain)')
    ids = {qa["id"] for qa in questions}
    answered = [q for q in predictions if q in ids]
    if not answered:
        sample = next(iter(predictions), None)
        raise SquadError(f"{pred_path}: none of its {len(predictions)} predictions answers a question of "
                         f"{data_path}" + (f" (such as {sample!r})" if sample is not None else "")
                         + "; pass the predictions made for this file")
    if na_probs is None:
        return version
    if version != "2.0":
        raise SquadError(f"--na-prob-file {na_path}: null odds are for SQuAD v2.0, and {data_path} is v1.1; "
                         "leave the option out")
    if not isinstance(na_probs, dict):
        raise SquadError(f"{na_path} is {_kind(na_probs)}; it must map question ids to null odds (numbers), "
                         "as null_odds.json does")
    for qid, value in na_probs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SquadError(f"{na_path}: the null odds of question {qid!r} are {_kind(value)} ({value!r:.20}); "
                             "every value must be a number")
    missing = [q for q in answered if q not in na_probs]
    if missing:
        raise SquadError(f"{na_path} has no null odds for {len(missing)} answered question(s), such as "
                         f"{missing[0]!r}; pass the null_odds.json written with {pred_path}")
    return version


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m jobs.bert.squad",
                                     description="SQuAD tools without TensorFlow.")
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="print the official EM/F1 of a predictions file as JSON")
    ev.add_argument("data_file")
    ev.add_argument("pred_file")
    ev.add_argument("--na-prob-file", default=None, help="v2.0: null odds (null_odds.json)")
    args = parser.parse_args(argv)
    try:
        data = load_json(args.data_file)
        predictions = _read_json(args.pred_file, "a predictions file (question id -> answer text)")
        na_probs = None
        if args.na_prob_file:
            na_probs = _read_json(args.na_prob_file, "null odds (question id -> number), as null_odds.json")
        version = check_eval_inputs(data, predictions, na_probs, (args.data_file, args.pred_file, args.na_prob_file))
    except (SquadError, OSError) as exc:
        from ..errors import report

        report(exc)
        return 2
    print(json.dumps(evaluate(data, predictions, na_probs, version)))
    return 0


def _read_json(path: str, what: str) -> object:
    try:
        with open_text(path) as f:
            text = f.read()
    except FileNotFoundError:
        raise SquadError(f"{path} not found; pass {what}") from None
    except UnicodeDecodeError:
        raise SquadError(f"{path} is not UTF-8 JSON; pass {what}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SquadError(f"{path} is not JSON ({str(exc).splitlines()[0][:80]}); pass {what}") from None


if __name__ == "__main__":
    raise SystemExit(main())
