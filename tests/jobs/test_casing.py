"""do_lower_case against the model: by the release's name (as run_classifier.py's
validate_case_matches_checkpoint), else by its vocabulary; a mismatch stops before TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import spec as spec_lib
from jobs.bert.casing import case_from_name, case_from_vocab, model_names
from jobs.spec import SpecError

REPO = Path(__file__).resolve().parents[2]
WORDS = ["the", "movie", "was", "good", "bad", "city", "river", "house", "green", "water",
         "run", "##ing", "##ed", "##s", "read", "book", "story", "great", "small", "big"] * 4
CASED = [w.capitalize() if i % 3 == 0 and not w.startswith("#") else w for i, w in enumerate(WORDS)]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.mark.parametrize("name, lower", [
    ("uncased_L-12_H-768_A-12", True), ("uncased_L-24_H-1024_A-16", True),
    ("multilingual_L-12_H-768_A-12", True), ("chinese_L-12_H-768_A-12", True),
    ("wwm_uncased_L-24_H-1024_A-16", True),
    ("cased_L-12_H-768_A-12", False), ("cased_L-24_H-1024_A-16", False),
    ("multi_cased_L-12_H-768_A-12", False), ("wwm_cased_L-24_H-1024_A-16", False),
    ("base", None), ("export", None), ("showcased", None), (None, None),
])
def test_release_names(name, lower):
    assert case_from_name(name) is lower


def test_names_come_from_the_checkpoint_directory_then_bert_dir():
    assert model_names("gs://b/bert/base", "gs://b/cased_L-12_H-768_A-12/bert_model.ckpt") == \
        ["cased_L-12_H-768_A-12", "base"]
    assert model_names("/m/uncased_L-12_H-768_A-12/", None) == ["uncased_L-12_H-768_A-12"]
    assert model_names("/runs/p/export", "/runs/p/export/bert_model.ckpt") == ["export"]


def test_vocabularies():
    assert case_from_vocab(SPECIALS + WORDS) is True
    assert case_from_vocab(SPECIALS + CASED) is False
    # Mostly CJK with a few upper-case Latin letters (as in Chinese vocabularies): no verdict.
    chinese = SPECIALS + [chr(0x4E00 + i) for i in range(300)] + WORDS + ["A", "B", "C"]
    assert case_from_vocab(chinese) is None
    assert case_from_vocab(SPECIALS + ["[unused1]", "中", "文"]) is None


def make_bert_dir(root: Path, name: str, tokens: list[str]) -> Path:
    d = root / name
    d.mkdir()
    (d / "bert_config.json").write_text(json.dumps({"vocab_size": 200, "max_position_embeddings": 128}))
    (d / "vocab.txt").write_text("".join(f"{t}\n" for t in tokens))
    return d


def load(bert_dir: Path, tmp_path: Path, *sets: str):
    data = tmp_path / "train.tsv"
    data.write_text("text\tlabel\ngood\tpos\nbad\tneg\n")
    return spec_lib.load(str(REPO / "templates" / "bert-finetune.yaml"),
                         [f"bert_dir={bert_dir}", f"train_file={data}",
                          f"model_dir={tmp_path / 'run'}", *sets])


def test_a_cased_release_with_lower_casing_is_refused_in_one_line(tmp_path):
    cased = make_bert_dir(tmp_path, "cased_L-12_H-768_A-12", SPECIALS + CASED)
    with pytest.raises(SpecError) as err:
        load(cased, tmp_path)
    assert str(err.value) == ("do_lower_case is true but the model cased_L-12_H-768_A-12 is cased: "
                              "lower-casing would give it token ids it never learnt; use "
                              "--set do_lower_case=false")
    assert load(cased, tmp_path, "do_lower_case=false").do_lower_case is False
    uncased = make_bert_dir(tmp_path, "uncased_L-12_H-768_A-12", SPECIALS + WORDS)
    with pytest.raises(SpecError, match="do_lower_case is false but the model uncased_L-12_H-768_A-12 "
                                        "is uncased.*--set do_lower_case=true"):
        load(uncased, tmp_path, "do_lower_case=false")


def test_without_a_telling_name_the_vocabulary_decides(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cased = make_bert_dir(tmp_path / "a", "base", SPECIALS + CASED)
    with pytest.raises(SpecError, match="base: its vocab.txt is cased .*--set do_lower_case=false"):
        load(cased, tmp_path)
    lower = make_bert_dir(tmp_path / "b", "base", SPECIALS + WORDS)
    with pytest.raises(SpecError, match="its vocab.txt is lower-cased .*--set do_lower_case=true"):
        load(lower, tmp_path, "do_lower_case=false")
    assert load(lower, tmp_path).do_lower_case is True


def test_python_m_jobs_exits_2_before_tensorflow_on_a_case_mismatch(tmp_path):
    cased = make_bert_dir(tmp_path, "multi_cased_L-12_H-768_A-12", SPECIALS + CASED)
    data = tmp_path / "train.tsv"
    data.write_text("text\tlabel\ngood\tpos\nbad\tneg\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"job: bert-finetune\nmodel_dir: {tmp_path}/m\nbert_dir: {cased}\n"
                    f"train_file: {data}\n")
    code = ("import sys; from jobs.__main__ import main; rc = main(['run', sys.argv[1]]); "
            "print(rc, 'tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(spec)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.stdout.split() == ["2", "False"]
    assert "do_lower_case is true but the model multi_cased_L-12_H-768_A-12 is cased" in proc.stderr
