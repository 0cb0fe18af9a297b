"""Fuzz the job spec loader (no TensorFlow): random mappings, overrides and YAML files.

Invariant: ``jobs.spec.from_dict`` / ``load`` return a spec or raise ``SpecError`` whose message is
one printable line of bounded length; never another exception, never a hang.
``TPUCTL_FUZZ_EXAMPLES=5000`` runs a longer campaign."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import spec as spec_lib
from jobs.spec import SpecError

FIELDS = sorted({f.name for cls in spec_lib.JOBS.values() for f in dataclasses.fields(cls)})
SETTINGS = settings(max_examples=int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "250")), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz-bert")
    (d / "bert_config.json").write_text(json.dumps({"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
                                                    "num_attention_heads": 2, "intermediate_size": 8,
                                                    "max_position_embeddings": 64, "type_vocab_size": 2}))
    (d / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n")
    (d / "train.tsv").write_text("text\tlabel\na\tx\nb\ty\n")
    (d / "data.tfrecord").write_text("")
    return d


def _paths(bert_dir):
    return st.sampled_from([str(bert_dir), str(bert_dir / "train.tsv"), str(bert_dir / "*.tfrecord"),
                            str(bert_dir / "missing"), "gs://bucket/bert", "", "/", "\x00", "../../etc/passwd",
                            "a" * 5000, "$(touch /tmp/tpuctl-pwned)"])


SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40)
           | st.sampled_from(["1e400", "nan", "-inf", "9" * 5000, "true", "null", "~", "1_000", "0x10", "1,2",
                              "neg,pos", "bert-finetune", "bert-pretrain", "auto", "bfloat16"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=12)
KEYS = st.sampled_from(FIELDS) | st.text(max_size=20) | st.integers() | st.booleans() | st.none()


def _check_error(exc: SpecError) -> None:
    text = str(exc)
    assert "\n" not in text and text.isprintable(), repr(text)
    assert len(text) < 3000, len(text)


def _mapping(bert_dir):
    base = st.fixed_dictionaries({"job": st.sampled_from(["bert-finetune", "bert-pretrain"]) | VALUES,
                                  "model_dir": _paths(bert_dir), "bert_dir": _paths(bert_dir),
                                  "train_file": _paths(bert_dir), "input_files": _paths(bert_dir)})
    extra = st.dictionaries(KEYS, VALUES | _paths(bert_dir), max_size=6)
    return st.tuples(base, extra, st.lists(st.sampled_from(["model_dir", "bert_dir", "train_file", "input_files",
                                                            "corpus_files"]), max_size=3))


def _overrides(bert_dir):
    pair = st.tuples(st.sampled_from(FIELDS) | st.text(max_size=12), st.text(max_size=20) | _paths(bert_dir)
                     | st.sampled_from(["1e400", "nan", "9" * 5000, "", "true", "a,b", "none"]))
    return st.lists(pair.map(lambda kv: f"{kv[0]}={kv[1]}") | st.text(max_size=30), max_size=4)


@SETTINGS
@given(data=st.data())
def test_from_dict_returns_a_spec_or_a_one_line_spec_error(bert_dir, data):
    base, extra, drop = data.draw(_mapping(bert_dir))
    raw = {**base, **extra}
    for key in drop:
        raw.pop(key, None)
    overrides = data.draw(_overrides(bert_dir))
    try:
        spec = spec_lib.from_dict(raw, overrides)
    except SpecError as exc:
        _check_error(exc)
    else:
        assert spec.job in spec_lib.JOBS and isinstance(spec.num_train_steps, int)


@SETTINGS
@given(data=st.data())
def test_load_survives_any_yaml_file(bert_dir, tmp_path_factory, data):
    base, extra, _ = data.draw(_mapping(bert_dir))
    kind = data.draw(st.sampled_from(["dump", "text", "bytes", "bomb"]))
    if kind == "dump":
        try:
            body = yaml.safe_dump({**base, **extra}).encode()
        except yaml.YAMLError:
            body = b"job: bert-finetune\n"
    elif kind == "text":
        body = data.draw(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#%@`,? \n\t0123456789")),
                                 max_size=200)).encode()
    elif kind == "bytes":
        body = data.draw(st.binary(max_size=200))
    else:
        depth = data.draw(st.integers(1, 9))
        parts = ['&x0 ["lol","lol","lol"]'] + [f"&x{i} [" + ",".join([f"*x{i - 1}"] * 9) + "]"
                                                for i in range(1, depth)]
        key = data.draw(st.sampled_from(FIELDS))
        body = f"job: bert-finetune\n{key}: [{', '.join(parts)}]\n".encode()
    path = tmp_path_factory.mktemp("fuzz-spec") / "spec.yaml"
    path.write_bytes(body)
    try:
        spec_lib.load(str(path), data.draw(_overrides(bert_dir)))
    except SpecError as exc:
        _check_error(exc)
