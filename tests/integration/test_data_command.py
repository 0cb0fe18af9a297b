"""``tpuctl data``: shards made on this machine, staged to a bucket of the local provider or of
Cloud Storage (the fake GCS server), manifest last; re-runs are no-ops, interrupted runs resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# the tiny BERT directory (its vocabulary and casing) is made with TensorFlow; the command itself
# needs none
pytestmark = pytest.mark.tf

SMALL = ("--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2", "--parts", "3")


def data(tpuctl_process, tiny: Path, out: str, *extra: str, env=None, corpus=None):
    return tpuctl_process("data", str(corpus or tiny / "corpus.txt"), "--bert-dir", str(tiny), "--out", out,
                          *SMALL, *extra, env=env, timeout=300)


def test_local_provider_bucket_made_resumed_and_a_rerun_is_a_no_op(tpuctl_process, tiny_bert, tmp_path):
    env = {"TPUCTL_HOME": str(tmp_path / "home"), "TPUCTL_PROVIDER": "local"}
    missing = data(tpuctl_process, tiny_bert, "gs://data-bkt/tiny", "--json", env=env)
    assert missing.code == 2 and "bucket gs://data-bkt does not exist" in missing.out
    work = tmp_path / "work"
    first = data(tpuctl_process, tiny_bert, "gs://data-bkt/tiny", "--create-bucket", "--work-dir", str(work),
                 "--json", env=env)
    assert first.code == 0, first.err
    doc = json.loads(first.out)
    assert doc["input_files"] == "gs://data-bkt/tiny/part-*.tfrecord" and doc["made_parts"] == 3
    dest = tmp_path / "home" / "local" / "buckets" / "data-bkt" / "tiny"
    made = {p.name: p.read_bytes() for p in dest.iterdir()}
    assert sorted(made) == ["manifest.json"] + [f"part-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert json.loads(made["manifest.json"])["total"] == doc["instances"] > 100

    again = data(tpuctl_process, tiny_bert, "gs://data-bkt/tiny", "--work-dir", str(work), "--json", env=env)
    assert again.code == 0 and json.loads(again.out)["made_parts"] == 0

    # killed after part 0 was made, before anything was uploaded: parts 1 and 2 are made again
    manifest = json.loads((work / "manifest.json").read_text())
    manifest.update(complete=False, counts={"0": manifest["counts"]["0"]})
    (work / "manifest.json").write_text(json.dumps(manifest))
    for p in (1, 2):
        (work / f"part-0000{p}-of-00003.tfrecord").unlink()
    for p in dest.iterdir():
        p.unlink()
    resumed = data(tpuctl_process, tiny_bert, "gs://data-bkt/tiny", "--work-dir", str(work), "--json", env=env)
    assert resumed.code == 0, resumed.err
    assert "resuming: 1 of 3 parts are done" in resumed.err and json.loads(resumed.out)["made_parts"] == 2
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == made


def test_fake_gcs_shards_then_manifest_and_other_options_refused(tpuctl_process, tiny_bert, tmp_path,
                                                                 fake_gcs, gcs_client):
    bucket = fake_gcs.create_bucket()
    env = {**fake_gcs.env(), "TPUCTL_HOME": str(tmp_path / "home")}
    out = f"gs://{bucket}/data/tiny"
    made = data(tpuctl_process, tiny_bert, out, env=env)
    assert made.code == 0, made.err
    assert f"input_files: {out}/part-*.tfrecord" in made.out
    names = sorted(b.name for b in gcs_client.list_blobs(bucket))
    assert names == ["data/tiny/manifest.json"] + [f"data/tiny/part-0000{i}-of-00003.tfrecord" for i in range(3)]
    manifest = json.loads(gcs_client.bucket(bucket).blob("data/tiny/manifest.json").download_as_bytes())
    assert manifest["complete"] and manifest["parts"] == 3
    assert list((tmp_path / "home" / "data").iterdir()) == []  # the work directory went once uploaded

    # a new machine (no work directory) with the same inputs: the bucket's manifest says done
    fresh = {**env, "TPUCTL_HOME": str(tmp_path / "home2")}
    again = data(tpuctl_process, tiny_bert, out, env=fresh)
    assert again.code == 0 and "nothing was made" in again.out
    # other options into the same prefix: one line, exit 2, the bucket untouched
    other = data(tpuctl_process, tiny_bert, out, "--masked-lm-prob", "0.2", env=fresh)
    assert other.code == 2 and "made from other inputs or options" in other.err
    assert len(other.err.strip().splitlines()) <= 2
    assert sorted(b.name for b in gcs_client.list_blobs(bucket)) == names


def test_bad_corpus_is_refused_before_anything_is_written(tpuctl_process, tiny_bert, tmp_path, fake_gcs, gcs_client):
    bucket = fake_gcs.create_bucket()
    env = {**fake_gcs.env(), "TPUCTL_HOME": str(tmp_path / "home")}
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe not text\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    for corpus, needle in ((bad, "is not UTF-8 text"), (empty, "holds no text")):
        r = data(tpuctl_process, tiny_bert, f"gs://{bucket}/d", env=env, corpus=corpus)
        assert r.code == 2 and needle in r.err and r.err.strip().splitlines()[-1].startswith("tpuctl: error:")
        assert r.err.count("error: ") == 1, r.err      # the tool's own line, its prefix not doubled
    assert list(gcs_client.list_blobs(bucket)) == []
