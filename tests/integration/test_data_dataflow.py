"""``tpuctl data --runner dataflow``: the Beam pipeline options handed to Dataflow, and bad options
refused in one line before anything is submitted. Dataflow itself is not reached here (the
pipeline is tested with Beam's in-process runner in tests/beam, `make test-beam`)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from jobs.bert.tiny import vocabulary

GOOD = ("--runner", "dataflow", "--project", "my-proj", "--region", "us-central1",
        "--temp-location", "gs://my-bucket/tmp")


@pytest.fixture
def bert_dir(tmp_path) -> Path:
    d = tmp_path / "uncased_tiny"
    d.mkdir()
    (d / "vocab.txt").write_text("\n".join(vocabulary()) + "\n", encoding="utf-8")
    return d


def test_dry_run_shows_the_pipeline_options_and_ships_this_code(tpuctl_process, bert_dir):
    r = tpuctl_process("data", "gs://my-bucket/wiki/a.txt", "gs://my-bucket/wiki/b.txt", "--bert-dir", str(bert_dir),
                       "--out", "gs://my-bucket/data/wiki", *GOOD, "--workers", "40", "--job-name", "wiki-data",
                       "--dry-run", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    opts = doc["pipeline_options"]
    wheel = next(o.split("=", 1)[1] for o in opts if o.startswith("--extra_package="))
    requirements = next(o.split("=", 1)[1] for o in opts if o.startswith("--requirements_file="))
    assert opts == ["--runner=DataflowRunner", "--project=my-proj", "--region=us-central1",
                    "--temp_location=gs://my-bucket/tmp", f"--extra_package={wheel}",
                    f"--requirements_file={requirements}", "--job_name=wiki-data", "--max_num_workers=40"]
    assert doc["input_files"] == "gs://my-bucket/data/wiki/part-*.tfrecord"
    # the workers get the pipeline's code (the running tpuctl as a wheel) and the fast tokenizer
    with zipfile.ZipFile(wheel) as z:
        assert "jobs/pretraining/beam.py" in z.namelist()
    assert any(line.startswith("tokenizers") for line in Path(requirements).read_text().splitlines())
    cmd = doc["command"]
    assert cmd[cmd.index("--input_file") + 1] == "gs://my-bucket/wiki/a.txt,gs://my-bucket/wiki/b.txt"


@pytest.mark.parametrize("change, expected", [
    ({"--temp-location": "/tmp/x"}, "--temp-location gs://BUCKET/PATH"),
    ({"--region": "central"}, "--region REGION"),
    ({"corpus": "local.txt"}, "is not gs://"),
    ({"--out": "/tmp/shards"}, "give a gs:// output"),
    ({"--job-name": "Wiki_Data"}, "--job-name Wiki_Data"),
])
def test_bad_dataflow_options_are_one_line_exit_2(tpuctl_process, bert_dir, change, expected):
    args = dict(zip(GOOD[::2], GOOD[1::2]))
    args.update({"--out": "gs://my-bucket/data/wiki", **{k: v for k, v in change.items() if k != "corpus"}})
    corpus = change.get("corpus", "gs://my-bucket/wiki/a.txt")
    r = tpuctl_process("data", corpus, "--bert-dir", str(bert_dir), *[x for kv in args.items() for x in kv],
                       "--dry-run")
    assert r.code == 2, r.err
    assert expected in r.err and len(r.err.strip().splitlines()) == 1, r.err
