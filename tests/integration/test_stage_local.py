"""tpuctl stage with the local provider (buckets are directories) and plain local paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from provision.basics.config import home, resolve
from provision.cloud.storage import open_bucket
from provision.cloud.storage.base import OBJECT_ROLE, PARTIAL_PREFIX

from .stage_helpers import digest, make_bert_dir, read_tree

JSON_KEYS = {"ok", "provider", "project", "source", "destination", "direction", "dry_run", "files", "uploaded",
             "downloaded", "copied", "skipped", "deleted", "verified", "failed", "excluded", "bytes_total",
             "bytes_sent", "bytes_uploaded", "bytes_downloaded", "bytes_copied", "bytes_skipped", "bytes_resumed",
             "retries", "seconds", "mb_per_s", "bucket_created", "stale_parts_removed"}


def bucket_dir(name: str) -> Path:
    return home() / "local" / "buckets" / name


@pytest.fixture
def bert(tmp_path):
    src = tmp_path / "bert"
    files = make_bert_dir(src)
    return src, files


def test_upload_and_download_round_trip(tpuctl, bert, tmp_path):
    src, files = bert
    r = tpuctl("stage", str(src), "gs://bert-lab/bert/base", "--create-bucket", "--location", "us-central1", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert set(doc) >= JSON_KEYS
    assert doc["provider"] == "local" and doc["direction"] == "upload" and doc["bucket_created"]
    assert doc["uploaded"] == len(files) == doc["verified"] and doc["skipped"] == 0 and doc["failed"] == 0
    assert doc["bytes_uploaded"] == sum(map(len, files.values())) == doc["bytes_total"]
    assert doc["destination_directory"] == str(bucket_dir("bert-lab") / "bert" / "base")
    assert "local provider's directory" in r.err and "provider=local" in r.err
    assert digest(read_tree(bucket_dir("bert-lab") / "bert" / "base")) == digest(files)

    out = tmp_path / "back"
    r = tpuctl("stage", "gs://bert-lab/bert/base", str(out), "--json")
    assert r.code == 0, r.err
    assert r.json()["downloaded"] == len(files) and r.json()["direction"] == "download"
    assert digest(read_tree(out)) == digest(files)


def test_unchanged_files_are_not_sent_again(tpuctl, bert):
    src, files = bert
    assert tpuctl("stage", str(src), "gs://bert-lab/b", "--create-bucket").code == 0
    dest = bucket_dir("bert-lab") / "b"
    before = {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in dest.rglob("*") if p.is_file()}
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--json")
    doc = r.json()
    assert r.code == 0 and doc["uploaded"] == 0 and doc["skipped"] == len(files) == doc["verified"]
    assert doc["bytes_sent"] == 0
    after = {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in dest.rglob("*") if p.is_file()}
    assert after == before  # not rewritten: same inode, same mtime


def test_a_changed_or_tampered_file_of_the_same_size_is_sent_again(tpuctl, bert):
    src, files = bert
    assert tpuctl("stage", str(src), "gs://bert-lab/b", "--create-bucket").code == 0
    target = bucket_dir("bert-lab") / "b" / "bert_model.ckpt.index"
    target.write_bytes(os.urandom(len(files["bert_model.ckpt.index"])))  # behind tpuctl's back
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--json", "--dry-run")
    assert r.json()["plan"] == [{"action": "send", "path": "bert_model.ckpt.index", "bytes": 8000,
                                 "reason": "checksum differs"}]
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--json")
    assert r.json()["uploaded"] == 1 and target.read_bytes() == files["bert_model.ckpt.index"]


def test_delete_removes_what_src_no_longer_has(tpuctl, bert):
    src, files = bert
    assert tpuctl("stage", str(src), "gs://bert-lab/b", "--create-bucket").code == 0
    (src / "assets" / "part-000.txt").unlink()
    (src / "vocab.txt").unlink()
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--json")
    assert r.json()["deleted"] == 0 and (bucket_dir("bert-lab") / "b" / "vocab.txt").exists()
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--delete", "--json")
    assert r.code == 0 and r.json()["deleted"] == 2
    assert not (bucket_dir("bert-lab") / "b" / "vocab.txt").exists()
    assert set(read_tree(bucket_dir("bert-lab") / "b")) == set(files) - {"assets/part-000.txt", "vocab.txt"}


def test_excludes_and_tpuctlignore(tpuctl, bert):
    src, files = bert
    (src / ".tpuctlignore").write_text("# scratch\n*.tmp\nevents/\n")
    (src / "scratch.tmp").write_text("x")
    (src / "events").mkdir()
    (src / "events" / "events.out.tfevents.1").write_text("e")
    (src / "debug.log").write_text("l")
    dest = bucket_dir("bert-lab") / "b"
    dest.mkdir(parents=True)
    (dest / "remote-only.tmp").write_text("stays: excluded on both sides")
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--exclude", "*.log", "--delete", "--json")
    doc = r.json()
    assert r.code == 0 and doc["excluded"] == 3 and doc["deleted"] == 0
    staged = set(read_tree(dest))
    assert staged == set(files) | {".tpuctlignore", "remote-only.tmp"}


def test_dry_run_changes_nothing(tpuctl, bert):
    src, files = bert
    r = tpuctl("stage", str(src), "gs://fresh-bucket/b", "--create-bucket", "--dry-run")
    assert r.code == 0
    assert "would create bucket gs://fresh-bucket" in r.err
    assert "would upload  bert_model.ckpt.data-00000-of-00001" in r.out and "nothing was changed" in r.out
    assert not bucket_dir("fresh-bucket").exists()
    assert tpuctl("stage", str(src), "gs://fresh-bucket/b", "--create-bucket").code == 0
    (src / "vocab.txt").unlink()
    snapshot = digest(read_tree(bucket_dir("fresh-bucket")))
    r = tpuctl("stage", str(src), "gs://fresh-bucket/b", "--delete", "--dry-run", "--json")
    assert r.json()["plan"] == [{"action": "delete", "path": "vocab.txt", "bytes": len(files["vocab.txt"]),
                                 "reason": "not in source"}]
    assert digest(read_tree(bucket_dir("fresh-bucket"))) == snapshot


def test_missing_bucket_is_a_usage_error_naming_the_fix(tpuctl, bert):
    src, _ = bert
    r = tpuctl("stage", str(src), "gs://no-such-bucket/x")
    assert r.code == 2 and "does not exist" in r.err and "--create-bucket" in r.err
    assert len(r.err.strip().splitlines()[-1]) < 250 and not bucket_dir("no-such-bucket").exists()
    r = tpuctl("stage", "gs://no-such-bucket/x", str(src.parent / "out"), "--json")
    assert r.code == 2 and r.json()["ok"] is False and "does not exist" in r.json()["error"]


@pytest.mark.parametrize("src,dest,needle", [
    ("gs://Bad_Bucket/x", "out", "invalid bucket name"),
    ("s3://bucket/x", "out", "unsupported location"),
    ("gs:/bucket/x", "out", "unsupported location"),
    ("gs://bucket/../x", "out", "invalid object prefix"),
    ("SRC", "gs://bucket/a//x", "empty path segment"),
    ("does-not-exist", "gs://bucket/x", "does not exist"),
])
def test_bad_urls_and_paths_are_one_line_usage_errors(tpuctl, tmp_path, monkeypatch, src, dest, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SRC").mkdir()
    (tmp_path / "SRC" / "f").write_text("x")
    bucket_dir("bucket").mkdir(parents=True)
    r = tpuctl("stage", src, dest)
    assert r.code == 2 and needle in r.err
    assert len([line for line in r.err.splitlines() if line.startswith("tpuctl: error")]) == 1


@pytest.mark.parametrize("args,needle", [
    (["--jobs", "0"], "--jobs"), (["--part-size", "1K"], "too small"), (["--exclude", "[z-a]"], "exclude pattern"),
    (["--location", "not a place"], "location"),
])
def test_bad_options_are_usage_errors(tpuctl, bert, args, needle):
    src, _ = bert
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--create-bucket", *args)
    assert r.code == 2 and needle in r.err and not bucket_dir("bert-lab").exists()


def test_interrupted_copy_leaves_only_hidden_partials_which_the_next_run_removes(tpuctl, bert):
    src, files = bert
    dest = bucket_dir("bert-lab") / "b"
    dest.mkdir(parents=True)
    # what a killed run leaves: a partial file, never under the final name
    stale = dest / f"{PARTIAL_PREFIX}bert_model.ckpt.data-00000-of-00001.deadbeef"
    stale.write_bytes(files["bert_model.ckpt.data-00000-of-00001"][:1000])
    target = resolve(provider="local")
    assert [o.name for o in open_bucket("gs://bert-lab", target).list("b/")] == []
    r = tpuctl("stage", str(src), "gs://bert-lab/b", "--json")
    assert r.code == 0 and r.json()["stale_parts_removed"] == 1 and not stale.exists()
    assert digest(read_tree(dest)) == digest(files)


def test_local_paths_copy_without_a_provider(tpuctl, bert, tmp_path):
    src, files = bert
    r = tpuctl("stage", str(src), str(tmp_path / "copy"), "--json")
    assert r.code == 0 and r.json()["direction"] == "copy" and r.json()["copied"] == len(files)
    assert "provider" not in r.json() and "local paths only" in r.err
    assert digest(read_tree(tmp_path / "copy")) == digest(files)
    r = tpuctl("stage", str(src), str(src / "inside"))
    assert r.code == 2 and "overlap" in r.err


def test_a_single_file_goes_into_dest(tpuctl, bert):
    src, files = bert
    bucket_dir("bert-lab").mkdir(parents=True)
    r = tpuctl("stage", str(src / "vocab.txt"), "gs://bert-lab/v", "--json")
    assert r.code == 0 and r.json()["uploaded"] == 1
    assert (bucket_dir("bert-lab") / "v" / "vocab.txt").read_bytes() == files["vocab.txt"]
    r = tpuctl("stage", str(src / "vocab.txt"), "gs://bert-lab/v", "--delete")
    assert r.code == 2 and "--delete needs a directory" in r.err


def test_bucket_api_for_the_rest_of_tpuctl(bert):
    target = resolve(provider="local")
    b = open_bucket("gs://runs-bucket/ignored/prefix", target)
    assert not b.exists()
    b.create("us-central1")
    info = b.write_bytes("runs/r1/progress.json", json.dumps({"step": 5}).encode())
    assert b.read_bytes("runs/r1/progress.json") == b'{"step": 5}'
    assert b.stat("runs/r1/progress.json").crc32c == info.crc32c
    assert [o.name for o in b.list("runs/")] == ["runs/r1/progress.json"]
    member = "serviceAccount:service-123@cloud-tpu.iam.gserviceaccount.com"
    assert b.grant_object_access(member) is True
    assert b.grant_object_access(member) is False  # idempotent
    assert b.policy() == {OBJECT_ROLE: [member]}
    assert b.delete("runs/r1/progress.json") and not b.delete("runs/r1/progress.json")
    assert not (bucket_dir("runs-bucket") / "runs").exists()  # no empty folders left behind


def test_stage_paths_is_the_same_stage_for_tpuctl_train(bert):
    from provision.staging.run import stage_paths

    src, files = bert
    target = resolve(provider="local")
    report = stage_paths(str(src), "gs://train-bucket/bert", target, create_bucket=True)
    assert report.ok and report.to_dict()["uploaded"] == len(files)
    again = stage_paths(str(src), "gs://train-bucket/bert", target)
    assert again.to_dict()["skipped"] == len(files)
