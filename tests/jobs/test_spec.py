"""Job specs: templates, overrides with typed coercion, and one-line errors before TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs import spec as spec_lib
from jobs.spec import SpecError

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates"


@pytest.fixture
def bert_dir(tmp_path) -> Path:
    d = tmp_path / "bert"
    d.mkdir()
    (d / "bert_config.json").write_text('{"vocab_size": 10, "max_position_embeddings": 128}')
    (d / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    return d


@pytest.fixture
def data(tmp_path) -> Path:
    f = tmp_path / "train.tsv"
    f.write_text("text\tlabel\ngood\tpos\nbad\tneg\n")
    return f


def finetune(bert_dir: Path, data: Path, tmp_path: Path, *sets: str):
    return spec_lib.load(str(TEMPLATES / "bert-finetune.yaml"),
                         [f"bert_dir={bert_dir}", f"train_file={data}",
                          f"model_dir={tmp_path / 'run'}", *sets])


def test_templates_carry_the_original_defaults(bert_dir, data, tmp_path):
    ft = finetune(bert_dir, data, tmp_path)
    assert (ft.max_seq_length, ft.train_batch_size, ft.learning_rate, ft.warmup_proportion) == \
        (128, 32, 5e-5, 0.1)
    (tmp_path / "a.tfrecord").write_text("")
    pt = spec_lib.load(str(TEMPLATES / "bert-pretrain.yaml"),
                       [f"bert_dir={bert_dir}", f"input_files={tmp_path}/*.tfrecord",
                        f"model_dir={tmp_path / 'pt'}"])
    assert (pt.max_seq_length, pt.max_predictions_per_seq, pt.train_batch_size) == (128, 20, 32)
    assert (pt.learning_rate, pt.warmup_proportion, pt.masked_lm_prob, pt.dupe_factor) == \
        (1e-4, 0.1, 0.15, 10)
    assert pt.warmup_steps == 10000 and pt.save_checkpoints_steps == 1000
    # Every key a template documents is a key of its job, and vice versa.
    for job, name in (("bert-pretrain", "bert-pretrain.yaml"), ("bert-finetune", "bert-finetune.yaml")):
        keys = set(yaml.safe_load((TEMPLATES / name).read_text()))
        assert keys == {k for k, *_ in spec_lib.describe(job)}, name


def test_overrides_are_coerced_to_the_declared_type(bert_dir, data, tmp_path):
    s = finetune(bert_dir, data, tmp_path, "num_train_steps=2e3", "learning_rate=3e-5",
                 "do_lower_case=false", "labels=neg,pos", "num_warmup_steps=100",
                 "init_checkpoint=none")
    assert s.num_train_steps == 2000 and isinstance(s.num_train_steps, int)
    assert s.learning_rate == 3e-5 and s.do_lower_case is False
    assert s.labels == ["neg", "pos"] and s.warmup_steps == 100
    assert s.resolved_init_checkpoint is None
    # The supervisor's override of model_dir wins over the file.
    assert s.model_dir == str(tmp_path / "run")


@pytest.mark.parametrize("sets, expected", [
    (["num_train_step=10"], ("unknown key 'num_train_step' in --set num_train_step=...; "
                             "did you mean 'num_train_steps'?")),
    (["num_train_steps=ten"], "num_train_steps must be an integer, got 'ten'"),
    (["do_lower_case=maybe"], "do_lower_case must be a boolean"),
    (["keep_checkpoint_max=1"], "keep at least 2"),
    (["train_batch_size=0"], "train_batch_size must be a positive integer"),
    (["precision=fp8"], "precision 'fp8' is not one of auto, float32, bfloat16"),
    (["max_seq_length=512"], "exceeds the model's max_position_embeddings 128"),
    (["dev_file=/nonexistent/dev.tsv"], "dev_file /nonexistent/dev.tsv not found"),
    (["init_checkpoint=/nonexistent/ckpt"], "init_checkpoint /nonexistent/ckpt not found"),
    (["max_predictions_per_seq=5"], "unknown key 'max_predictions_per_seq'"),
    (["labels=pos"], "labels needs at least two distinct values"),
])
def test_bad_values_give_one_line_errors_naming_the_fix(bert_dir, data, tmp_path, sets, expected):
    with pytest.raises(SpecError) as err:
        finetune(bert_dir, data, tmp_path, *sets)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message


def test_missing_required_keys_and_files(tmp_path, bert_dir, data):
    with pytest.raises(SpecError, match=r"missing model_dir .*--set model_dir="):
        spec_lib.load(str(TEMPLATES / "bert-finetune.yaml"),
                      [f"bert_dir={bert_dir}", f"train_file={data}"])
    with pytest.raises(SpecError, match="exactly one of input_files .* and corpus_files"):
        spec_lib.from_dict({"job": "bert-pretrain", "model_dir": str(tmp_path),
                            "bert_dir": str(bert_dir)})
    with pytest.raises(SpecError, match="has no vocab.txt"):
        (bert_dir / "vocab.txt").unlink()
        finetune(bert_dir, data, tmp_path)
    with pytest.raises(SpecError, match="job spec .* not found"):
        spec_lib.load(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("job: bert-finetune\nmodel_dir: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        spec_lib.load(str(bad))
    bad.write_text("job: bert-classify\n")
    with pytest.raises(SpecError, match="unknown job 'bert-classify'.*bert-pretrain, bert-finetune"):
        spec_lib.load(str(bad))


def test_spec_and_progress_modules_import_no_tensorflow():
    code = ("import sys, jobs.spec, jobs.runner.progress, jobs.bert.tokenization, jobs.bert.config; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_python_m_jobs_rejects_a_bad_spec_before_tensorflow(tmp_path, bert_dir, data):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"job: bert-finetune\nmodel_dir: {tmp_path}/m\nbert_dir: {bert_dir}\n"
                    f"train_file: {data}\nnum_train_steps: -5\n")
    code = ("import sys; from jobs.__main__ import main; rc = main(['run', sys.argv[1]]); "
            "print(rc, 'tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(spec)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.stdout.split() == ["2", "False"]
    lines = proc.stderr.strip().splitlines()
    assert lines == [("tpuctl: error: num_train_steps must be a positive integer, got -5; "
                      "e.g. --set num_train_steps=1000")]


def test_tpuctl_job_run_validates_before_exec(tpuctl, tmp_path, bert_dir, data):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"job: bert-finetune\nmodel_dir: {tmp_path}/m\nbert_dir: {bert_dir}\n"
                    f"train_file: {data}\n")
    result = tpuctl("job", "run", str(spec), "--set", "train_batch_size=big")
    assert result.code == 2
    assert "train_batch_size must be an integer, got 'big'" in result.err
    assert len(result.err.strip().splitlines()) == 1
    result = tpuctl("job", "run", str(tmp_path / "missing.yaml"))
    assert result.code == 2 and "not found" in result.err


def test_yaml_aliases_may_repeat_single_values_but_not_collections(tmp_path, bert_dir, data):
    ok = tmp_path / "alias.yaml"
    ok.write_text(f"job: bert-finetune\nmodel_dir: {tmp_path}/m\nbert_dir: {bert_dir}\n"
                  f"train_file: &data {data}\ndev_file: *data\n")
    assert spec_lib.load(str(ok)).dev_file == str(data)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("job: bert-finetune\nlabels: [&a [x, y], [*a, *a]]\n")
    with pytest.raises(SpecError, match="alias \\*a to repeat a list or mapping"):
        spec_lib.load(str(bomb))


@pytest.mark.parametrize("written, read", [
    ("1e-4", 1e-4), ("1E5", 1e5), ("1.0e4", 1e4), ("-2e-5", -2e-5), ("+1e+3", 1e3), (".5e3", 500.0),
    ("1.0e-4", 1e-4), ("1.5", 1.5), ("12", 12), ("1_000", 1000), ("'1e-4'", "1e-4"), ("1e", "1e"),
])
def test_numbers_are_read_as_people_write_them(written, read):
    """YAML 1.1 (PyYAML) reads 1e-4, 1E5 and 1.0e4 as strings; job and sweep specs read them as
    numbers, as YAML 1.2 and JSON do. A quoted value stays a string."""
    got = spec_lib.parse_yaml(f"learning_rate: {written}\n", "job spec s.yaml")["learning_rate"]
    assert got == read and type(got) is type(read)
    assert yaml.safe_load("a: 1e-4")["a"] == "1e-4"    # PyYAML's own loader is left as it was


@pytest.mark.parametrize("module, args, line", [
    ("jobs", ["run"], "tpuctl: error: the following arguments are required: spec (see python -m jobs run --help)"),
    ("jobs.bert.predict", ["model"], ("tpuctl: error: the following arguments are required: file "
                                     "(see python -m jobs.bert.predict --help)")),
])
def test_every_job_side_entry_point_speaks_with_tpuctls_error_prefix(module, args, line):
    """python -m jobs, jobs.bert.predict and the data tools said "jobs: error:", "jobs.bert.predict:
    error:", "error:" or argparse's usage block: one prefix now, the control plane's."""
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [line]
