"""Parallel pretraining data: parts that partition the corpus, output independent of the worker
count, the original's statistics, resume and no-op re-runs, and bad input refused in one line."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.bert.tiny import corpus
from jobs.bert.tokenization import FullTokenizer
from jobs.pretraining import corpus_parts
from jobs.pretraining import create as pd

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--max_seq_length", "64", "--max_predictions_per_seq", "10"]


def create(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "jobs.pretraining", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> Path:
    """300 documents in two files, one with CRLF line ends."""
    out = tmp_path_factory.mktemp("corpus")
    text = corpus(random.Random(3), documents=300)
    half = text.index("\n\n", len(text) // 2) + 2
    (out / "a.txt").write_text(text[:half], encoding="utf-8")
    (out / "b.txt").write_bytes(text[half:].replace("\n", "\r\n").encode())
    return out


def shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecord"))}


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 40])
def test_parts_hold_every_document_once_in_order(big_corpus, parts):
    paths = [str(big_corpus / "a.txt"), str(big_corpus / "b.txt")]
    sizes = [Path(p).stat().st_size for p in paths]
    got = [doc for p in range(parts)
           for span in corpus_parts.part_spans(paths, sizes, p, parts)
           for doc, _ in corpus_parts.documents(span)]
    expected = [d.split("\n") for f in paths
                for d in Path(f).read_text(encoding="utf-8").replace("\r\n", "\n").strip().split("\n\n")]
    assert got == expected


def test_output_is_the_same_for_one_or_two_workers_and_a_rerun_is_a_no_op(tmp_path, big_corpus, tiny_dir):
    common = ["--input_file", f"{big_corpus}/*.txt", "--vocab_file", str(tiny_dir / "vocab.txt"),
              *SMALL, "--dupe_factor", "2", "--parts", "3"]
    one = create(*common, "--output_dir", str(tmp_path / "one"), "--workers", "1")
    create(*common, "--output_dir", str(tmp_path / "two"), "--workers", "2")
    a, b = shards(tmp_path / "one"), shards(tmp_path / "two")
    assert list(a) == [f"part-0000{i}-of-00003.tfrecord" for i in range(3)] and a == b
    report = json.loads(one.stdout)
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["total"] == report["instances"] > 500
    assert report["input_files"] == f"{tmp_path / 'one'}/part-*.tfrecord"
    # the same again: nothing is rewritten
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "one").iterdir()}
    again = create(*common, "--output_dir", str(tmp_path / "one"), "--workers", "2")
    assert "nothing to do" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "one").iterdir()} == before
    # another seed gives other data
    create(*common, "--output_dir", str(tmp_path / "seed"), "--random_seed", "1")
    assert shards(tmp_path / "seed") != a


def test_an_interrupted_run_resumes_the_missing_parts(tmp_path, big_corpus, tiny_dir):
    common = ["--input_file", f"{big_corpus}/*.txt", "--vocab_file", str(tiny_dir / "vocab.txt"),
              *SMALL, "--dupe_factor", "1", "--parts", "4", "--output_dir", str(tmp_path / "o")]
    create(*common)
    whole = shards(tmp_path / "o")
    # as a run killed after two parts leaves it: two finished shards, one partial, no "complete"
    manifest_path = tmp_path / "o" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["complete"] = False
    manifest["counts"] = {k: v for k, v in manifest["counts"].items() if k in ("0", "2")}
    manifest_path.write_text(json.dumps(manifest))
    for p in (1, 3):
        (tmp_path / "o" / f"part-0000{p}-of-00004.tfrecord").unlink()
    (tmp_path / "o" / "part-00001-of-00004.tfrecord.partial").write_bytes(b"half")
    kept = (tmp_path / "o" / "part-00000-of-00004.tfrecord").stat().st_mtime_ns
    proc = create(*common)
    assert "resuming: 2 of 4 parts are done" in proc.stderr
    assert shards(tmp_path / "o") == whole
    assert (tmp_path / "o" / "part-00000-of-00004.tfrecord").stat().st_mtime_ns == kept
    assert not list((tmp_path / "o").glob("*.partial"))


@pytest.mark.tf
def test_exact_is_the_single_stream_and_parallel_matches_its_statistics(tmp_path, big_corpus, tiny_dir):
    import numpy as np
    import tensorflow as tf

    vocab = str(tiny_dir / "vocab.txt")
    common = ["--input_file", f"{big_corpus}/a.txt", "--vocab_file", vocab, *SMALL, "--dupe_factor", "5"]
    create(*common, "--output_dir", str(tmp_path / "exact"), "--exact")
    reference = [str(tmp_path / "ref.tfrecord")]
    opts = pd.DataOptions(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=5)
    pd.create([str(big_corpus / "a.txt")], reference, FullTokenizer(vocab), opts)
    assert (tmp_path / "exact" / "pretraining-00000-of-00001.tfrecord").read_bytes() == \
        Path(reference[0]).read_bytes()
    create(*common, "--output_dir", str(tmp_path / "par"), "--parts", "3")
    # the TF-free writer gives the bytes of TensorFlow's deterministic serialization
    from jobs.pretraining.records import encode_example

    for raw in tf.data.TFRecordDataset(str(tmp_path / "par" / "part-00001-of-00003.tfrecord")).take(5):
        feats = tf.train.Example.FromString(raw.numpy()).features.feature
        values = {k: list(v.int64_list.value) or list(v.float_list.value) for k, v in feats.items()}
        assert encode_example(values) == raw.numpy()

    def stats(files):
        rows = [tf.train.Example.FromString(r.numpy()).features.feature
                for r in tf.data.TFRecordDataset(files)]
        lengths = np.array([sum(f["input_mask"].int64_list.value) for f in rows])
        masked = sum(sum(f["masked_lm_weights"].float_list.value) for f in rows) / lengths.sum()
        random_next = np.mean([f["next_sentence_labels"].int64_list.value[0] for f in rows])
        return len(rows), masked, random_next, np.histogram(lengths, bins=[0, 16, 32, 48, 62, 65])[0] / len(rows)

    n_exact, m_exact, r_exact, h_exact = stats(sorted(map(str, (tmp_path / "exact").glob("*.tfrecord"))))
    n_par, m_par, r_par, h_par = stats(sorted(map(str, (tmp_path / "par").glob("*.tfrecord"))))
    assert abs(n_par - n_exact) < 0.05 * n_exact  # same corpus, same procedure
    assert abs(m_par - m_exact) < 0.005  # round(0.15 * len), capped at 10: nearly deterministic
    se = 2 * np.sqrt(0.25 / n_exact)  # random next: a Bernoulli(~0.5) mean, two sample sizes
    assert abs(r_par - r_exact) < 3 * se
    assert np.abs(h_par - h_exact).max() < 0.05, (h_par, h_exact)


def test_bad_input_is_one_line_exit_2_and_leaves_nothing_complete(tmp_path, big_corpus, tiny_dir):
    vocab = str(tiny_dir / "vocab.txt")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait .\n".encode("latin-1"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n\n")
    out = tmp_path / "out"
    cases = {
        "is not UTF-8 text": ["--input_file", str(bad), "--vocab_file", vocab],
        "holds no text": ["--input_file", str(empty), "--vocab_file", vocab],
        "matches no file": ["--input_file", str(tmp_path / "nothing*.txt"), "--vocab_file", vocab],
        "do_lower_case is false": ["--input_file", str(big_corpus / "a.txt"), "--vocab_file", vocab,
                                   "--no-do_lower_case"],
    }
    for needle, args in cases.items():
        proc = create(*args, "--output_dir", str(out), check=False)
        assert proc.returncode == 2, (needle, proc.stderr[-1000:])
        line = proc.stderr.strip().splitlines()[-1]
        assert needle in line and line.startswith("tpuctl: error: "), (needle, proc.stderr)
        assert not (out / "manifest.json").exists()
    # an output directory made with other options is refused, and left as it was
    common = ["--input_file", str(big_corpus / "a.txt"), "--vocab_file", vocab, *SMALL,
              "--dupe_factor", "1", "--parts", "2", "--output_dir", str(out)]
    create(*common)
    before = shards(out)
    proc = create(*common[:-4], "--parts", "2", "--output_dir", str(out), "--dupe_factor", "1",
                  "--masked_lm_prob", "0.2", check=False)
    assert proc.returncode == 2 and "made from other inputs or options (differs in options)" in proc.stderr
    assert shards(out) == before and json.loads((out / "manifest.json").read_text())["complete"]
    # shards with no manifest (say, from create_pretraining_data.py) are not mixed with ours
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x.tfrecord").write_bytes(b"")
    proc = create(*common[:-1], str(foreign), check=False)
    assert proc.returncode == 2 and "give an empty output directory" in proc.stderr


@pytest.mark.parametrize("lower", [True, False])
def test_fast_tokenizer_gives_the_reference_tokens(tiny_dir, big_corpus, lower):
    from jobs.pretraining.fast_tokenization import line_tokenizer

    reference = FullTokenizer(str(tiny_dir / "vocab.txt"), lower)
    fast = line_tokenizer(reference)
    assert fast is not reference.tokenize  # tokenizers is installed (the `data` extra)
    rng = random.Random(0)
    alphabet = "".join(map(chr, range(128)))
    lines = [line for line in (big_corpus / "a.txt").read_text().splitlines() if line]
    lines += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(3000)]
    lines += ["a" * 200, "a" * 201, "cat" * 67, "The CATS, jumped!", "x\ty\x00z\x1b", "[MASK] cat##s",
              "caf\u00e9 \u00c9t\u00e9 \u4e2d\u6587 na\u00efve \u0130stanbul"]  # non-ASCII: the reference
    assert [fast(line) for line in lines] == [reference.tokenize(line) for line in lines]


def test_the_tokenizer_path_does_not_change_the_shards(tmp_path, big_corpus, tiny_dir):
    common = ["--input_file", str(big_corpus / "a.txt"), "--vocab_file", str(tiny_dir / "vocab.txt"),
              *SMALL, "--dupe_factor", "1", "--parts", "2"]
    create(*common, "--output_dir", str(tmp_path / "fast"))
    create(*common, "--output_dir", str(tmp_path / "python"), "--tokenizer", "python")
    assert shards(tmp_path / "fast") == shards(tmp_path / "python") != {}


def test_corpus_files_above_the_threshold_warns_with_the_tpuctl_data_command(tmp_path, tiny_dir, monkeypatch,
                                                                              capsys):
    """The job's corpus_files path (data made on the TPU host) names the command that makes it first."""
    from types import SimpleNamespace

    from jobs.bert import pretrain
    from jobs.runner.runner import Runner
    from jobs.spec import load

    from .conftest import pretrain_spec

    spec = load(str(pretrain_spec(tmp_path, tiny_dir)))
    monkeypatch.setattr(pretrain, "CORPUS_WARN_BYTES", (tiny_dir / "corpus.txt").stat().st_size - 1)
    runner = Runner(spec, pretrain.PretrainJob(spec))   # the runner times data creation
    record = runner.progress.record
    files = runner.job._create_data(SimpleNamespace(out_dir=str(tmp_path / "out"),
                                                    making_data=runner.making_data))
    err = capsys.readouterr().err
    assert "warning: corpus_files holds" in err
    assert f"tpuctl data {tiny_dir / 'corpus.txt'} --bert-dir {tiny_dir} --out gs://BUCKET/data/NAME" in err
    assert files and all(Path(f).stat().st_size > 0 for f in files)
    [[made_from, made_to]] = record.data_creation
    assert made_from <= made_to
