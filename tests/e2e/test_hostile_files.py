"""Files tpuctl reads that anyone may have written (a sweep spec from elsewhere, a sweep's journal
in a bucket others can write, a model directory's vocab.txt): hostile ones are one line naming
the file or object, exit 2, through the installed tpuctl; before, each was an ``internal error``
(RecursionError; JSONDecodeError, TypeError, KeyError or AssertionError inside Optuna's replay;
MemoryError after half a minute)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs.bert.vocab import MAX_VOCAB_BYTES
from tests.conftest import run_tpuctl_process

CONFIG = {"vocab_size": 8, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 32, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64, "type_vocab_size": 2,
          "initializer_range": 0.02}


def one_line(res, expected: str) -> None:
    assert res.code == 2, (res.code, res.err)
    errors = [line for line in res.err.splitlines() if line.startswith("tpuctl")]
    assert errors[-1] == f"tpuctl: error: {expected}", res.err
    assert "internal error" not in res.err and "Traceback" not in res.err


def _bert_dir(root: Path) -> Path:
    """Config and vocabulary, no checkpoint: enough for a spec that trains from scratch."""
    bert = root / "bert"
    bert.mkdir()
    (bert / "bert_config.json").write_text(json.dumps(CONFIG))
    (bert / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\n")
    return bert


def _sweep_spec(root: Path, text: str | None = None) -> Path:
    bert = _bert_dir(root)
    (root / "train.tsv").write_text("a\t0\n")
    (root / "job.yaml").write_text(f"job: bert-finetune\nbert_dir: {bert}\ntrain_file: {root}/train.tsv\n"
                                   f"dev_file: {root}/train.tsv\ninit_checkpoint: none\nmax_seq_length: 32\n"
                                   "num_train_steps: 10\n")
    spec = root / "sweep.yaml"
    spec.write_text(text if text is not None else
                    "job: job.yaml\nmetric: eval_accuracy\ngoal: maximize\nmethod: grid\n"
                    "parameters:\n  learning_rate: {values: [0.001, 0.01]}\n")
    return spec


def test_a_sweep_spec_nested_30000_deep_is_one_line(tmp_path):
    spec = _sweep_spec(tmp_path, "job: job.yaml\nparameters: " + "[" * 30_000 + "]" * 30_000 + "\n")
    res = run_tpuctl_process("sweep", "start", str(spec), "--dry-run", "--provider", "local")
    one_line(res, f"sweep spec {spec} nests deeper than 16 levels; a spec is flat key: value lines")


def test_a_sweep_spec_bomb_is_one_line(tmp_path):
    laughs = ["&a0 [x, x, x, x, x, x, x, x, x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
                                                   for i in range(1, 9)]
    spec = _sweep_spec(tmp_path, "job: job.yaml\nset: {bomb: [" + ", ".join(laughs) + "]}\n")
    res = run_tpuctl_process("sweep", "start", str(spec), "--dry-run", "--provider", "local")
    one_line(res, f"sweep spec {spec} uses the alias *a0 to repeat a list or mapping (or too many aliases); "
                  "write the values out, aliases may only repeat single values")


def _made_sweep(tmp_path: Path) -> tuple[str, Path]:
    """A sweep made as `tpuctl sweep start` makes it (its record, spec and job in the bucket),
    with no controller: the state `sweep resume` continues from."""
    from provision.basics.config import resolve
    from provision.cloud.storage import open_bucket
    from provision.sweeps import create
    from provision.sweeps.store import SweepStore

    spec = _sweep_spec(tmp_path)
    plan = create.plan(str(spec), provider="local", project="local", bucket="gs://tpuctl-local",
                       zones=["us-central1-b"], accelerator_type="v2-8", preemptible=False, spot=False,
                       max_concurrent=1, max_trials=None, budget_usd=None, poll_s=1.0, max_failures=3)
    bucket = open_bucket("gs://tpuctl-local", resolve(provider="local"))
    bucket.create("local")
    store = SweepStore(bucket, plan.record.sweep_id)
    create.write(store, plan)
    return plan.record.sweep_id, bucket.root / store.name("study/journal")


@pytest.mark.parametrize("batch, why", [
    (b"[{\"op_code\": 0, ", "is not JSON"),
    (b"\xff\xfe[]", "is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply for a list of journal entries"),
    (b'{"op_code": 0}', "is not a list of Optuna journal entries"),
    (b'[{"op_code": "0"}]', "is not a list of Optuna journal entries"),
    (b'[{"op_code": 4, "worker_id": "w"}]', "holds entries Optuna cannot replay (KeyError)"),
    (b'[{"op_code": 99, "worker_id": "w"}]', "holds entries Optuna cannot replay (AssertionError)"),
], ids=["truncated", "not-utf8", "deep", "not-a-list", "op-code-string", "missing-fields", "unknown-op"])
def test_a_garbage_sweep_journal_is_refused_by_sweep_resume_naming_the_object(tmp_path, batch, why):
    sweep_id, journal = _made_sweep(tmp_path)
    journal.mkdir(parents=True)
    (journal / "00000000.json").write_bytes(b'[{"op_code": 0, "worker_id": "w", "study_name": "'
                                            + sweep_id.encode() + b'", "directions": [2]}]')
    (journal / "00000001.json").write_bytes(batch)
    expected = (f"the study journal of sweep {sweep_id} cannot be read: gs://tpuctl-local/tpuctl/sweeps/"
                f"{sweep_id}/study/journal/00000001.json {why}; tpuctl did not write it: restore the object, "
                "or start the sweep again (tpuctl sweep start SPEC)")
    one_line(run_tpuctl_process("sweep", "resume", sweep_id, "--provider", "local"), expected)
    if why == "is not JSON":
        # the controller that refused it released the sweep: the next resume says the same, not
        # "still has a live controller"
        one_line(run_tpuctl_process("sweep", "resume", sweep_id, "--provider", "local"), expected)


@pytest.mark.parametrize("on", [False, True], ids=["here", "on-a-host"])
def test_a_vocab_txt_larger_than_any_vocabulary_is_refused_before_it_is_read(tmp_path, on):
    bert = _bert_dir(tmp_path)
    with open(bert / "vocab.txt", "r+b") as fh:
        fh.truncate(MAX_VOCAB_BYTES + 1)             # sparse: 64 MiB that take no disk
    (tmp_path / "corpus.txt").write_text("a b c.\n\nb c a.\n")
    args = ["data", str(tmp_path / "corpus.txt"), "--bert-dir", str(bert), "--provider", "local"]
    if on:
        assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
        args += ["--out", "gs://tpuctl-local/data", "--on", "lab"]
    else:
        args += ["--out", str(tmp_path / "out")]
    res = run_tpuctl_process(*args, "--dry-run", timeout=60)
    one_line(res, f"{bert}/vocab.txt is {MAX_VOCAB_BYTES + 1} bytes, more than any BERT vocabulary (one token "
                  f"per line, a few hundred kB; at most {MAX_VOCAB_BYTES} bytes); give --bert-dir the model "
                  "directory whose vocab.txt tokenizes the corpus")
    assert not (tmp_path / "out").exists() and not os.path.exists(Path(os.environ["TPUCTL_HOME"]) / "data")
