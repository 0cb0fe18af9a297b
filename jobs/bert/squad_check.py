"""SQuAD files checked without TensorFlow (the spec check runs where TensorFlow is not installed).

One-line :class:`SquadError` messages name the fix: a file that is not SQuAD JSON, a v2.0 file
without ``version_2_with_negative``, a training answer that is not at its ``answer_start``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class SquadError(ValueError):
    """Input that is not usable SQuAD; ``str(exc)`` is one line naming the fix."""


def parse_json(text: str, path: str) -> dict:
    """The parsed file, checked to be SQuAD JSON (``data`` -> paragraphs -> qas)."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise SquadError(f"{path} is not JSON ({str(exc).splitlines()[0][:80]}); pass a SQuAD "
                         "file such as train-v1.1.json") from None
    if (not isinstance(raw, dict) or not isinstance(raw.get("data"), list)
            or not all(isinstance(a, dict) and isinstance(a.get("paragraphs"), list)
                       for a in raw["data"])):
        raise SquadError(f"{path} is not SQuAD JSON (it needs {{\"data\": [{{\"paragraphs\": "
                         "[{\"context\": ..., \"qas\": [...]}]}]}); pass a file such as "
                         "train-v1.1.json or dev-v2.0.json")
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            if (not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str)
                    or not isinstance(paragraph.get("qas"), list)):
                raise SquadError(f"{path} is not SQuAD JSON: a paragraph lacks its context text "
                                 "or its qas list; pass a file such as train-v1.1.json")
            for qa in paragraph["qas"]:
                if (not isinstance(qa, dict) or "id" not in qa
                        or not isinstance(qa.get("question"), str)
                        or not isinstance(qa.get("answers", []), list)):
                    raise SquadError(f"{path} is not SQuAD JSON: a question lacks its id, its "
                                     "question text or its answers list; fix the file")
    return raw


def is_v2(raw: dict) -> bool:
    """Whether a SQuAD file has v2.0 unanswerable questions (or says it is v2)."""
    if str(raw.get("version", "")).lstrip("v").startswith("2"):
        return True
    return any("is_impossible" in qa for article in raw["data"]
               for p in article["paragraphs"] for qa in p["qas"])


def load(path: str, opener: Callable[[str], Any] | None = None) -> dict:
    """The parsed SQuAD file at ``path``, checked to be SQuAD JSON; ``opener`` opens it as text
    (the job passes one that reads gs:// through TensorFlow; this module never imports it)."""
    try:
        with (opener(path) if opener else open(path, encoding="utf-8")) as f:
            text = f.read()
    except FileNotFoundError:
        raise SquadError(f"{path} not found; pass an existing SQuAD JSON file") from None
    except UnicodeDecodeError:
        raise SquadError(f"{path} is not UTF-8 JSON; pass a SQuAD file such as "
                         "train-v1.1.json") from None
    return parse_json(text, path)


def check_file(path: str, training: bool, version_2: bool) -> int:
    """Check a SQuAD file before TensorFlow starts; returns the number of questions."""
    return check_data(load(path), path, training, version_2)


def check_data(raw: dict, path: str, training: bool, version_2: bool) -> int:
    """:func:`check_file` on parsed SQuAD JSON (the job checks gs:// files with it)."""
    if is_v2(raw) and not version_2:
        raise SquadError(f"{path} is SQuAD v2.0 (unanswerable questions); set "
                         "--set version_2_with_negative=true")
    count = 0
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                count += 1
                if not training or qa.get("is_impossible"):
                    continue
                answers = qa.get("answers") or []
                if len(answers) != 1 and not version_2:
                    raise SquadError(f"{path}: training question {qa['id']!r} has {len(answers)} "
                                     "answers; a training file has exactly one per question")
                for answer in answers[:1]:
                    start, text = answer.get("answer_start"), answer.get("text")
                    if not isinstance(start, int) or not isinstance(text, str):
                        raise SquadError(f"{path}: question {qa['id']!r} has an answer without "
                                         "text and answer_start; fix the file")
                    if context[start:start + len(text)] != text:
                        raise SquadError(
                            f"{path}: question {qa['id']!r}: answer {text[:40]!r} is not at "
                            f"answer_start {start} of its context (found "
                            f"{context[start:start + len(text)][:40]!r}); fix answer_start "
                            "(character offsets into the context)")
    if count == 0:
        raise SquadError(f"{path} has no questions; pass a SQuAD file with data")
    return count
