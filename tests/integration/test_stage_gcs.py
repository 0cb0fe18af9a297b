"""tpuctl stage against fake-gcs-server, through the real google-cloud-storage client on 127.0.0.1."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from provision.basics.config import resolve
from provision.basics.errors import CloudError
from provision.cloud.storage import PARTS_PREFIX, open_bucket
from provision.cloud.storage.gcs import GcsBucket, make_client
from provision.staging.endpoints import Endpoint, open_endpoint
from provision.staging.options import StageOptions
from provision.staging.run import stage
from tests.conftest import REPO

from .stage_helpers import digest, make_bert_dir, read_tree, write_tree

PART = "256K"  # small parts so a 1.5 MB file goes as a composite of 6 parts


def objects(client, bucket, prefix=""):
    return {b.name: b for b in client.list_blobs(bucket, prefix=prefix)}


@pytest.fixture
def bert(tmp_path):
    src = tmp_path / "bert"
    return src, make_bert_dir(src)


def test_upload_in_parts_and_download_round_trip(tpuctl, gcs_bucket, gcs_client, bert, tmp_path):
    src, files = bert
    url = f"gs://{gcs_bucket}/bert/base"
    r = tpuctl("stage", str(src), url, "--part-size", PART, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["provider"] == "gcp" and doc["project"] == "tpuctl-test" and "provider=gcp" in r.err
    assert doc["uploaded"] == len(files) == doc["verified"] and doc["bytes_uploaded"] == doc["bytes_total"]
    stored = objects(gcs_client, gcs_bucket)
    assert set(stored) == {f"bert/base/{k}" for k in files}  # no parts left behind
    data = stored["bert/base/bert_model.ckpt.data-00000-of-00001"]
    assert data.component_count in (None, 6) and data.download_as_bytes() == files["bert_model.ckpt.data-00000-of-00001"]
    assert stored["bert/base/bert_config.json"].content_type == "application/json"

    out = tmp_path / "back"
    r = tpuctl("stage", url, str(out), "--part-size", PART, "--json")
    assert r.code == 0, r.err and r.json()["downloaded"] == len(files)
    assert digest(read_tree(out)) == digest(files)


def test_unchanged_files_are_not_sent_again(tpuctl, gcs_bucket, gcs_client, bert, tmp_path):
    src, files = bert
    url = f"gs://{gcs_bucket}/b"
    assert tpuctl("stage", str(src), url, "--part-size", PART).code == 0
    generations = {n: b.generation for n, b in objects(gcs_client, gcs_bucket).items()}
    r = tpuctl("stage", str(src), url, "--part-size", PART, "--json")
    assert r.code == 0 and r.json()["uploaded"] == 0 and r.json()["skipped"] == len(files) and r.json()["bytes_sent"] == 0
    assert {n: b.generation for n, b in objects(gcs_client, gcs_bucket).items()} == generations

    out = tmp_path / "back"
    assert tpuctl("stage", url, str(out)).code == 0
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    r = tpuctl("stage", url, str(out), "--json")
    assert r.json()["downloaded"] == 0 and r.json()["skipped"] == len(files)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == mtimes


def test_objects_replaced_behind_tpuctls_back_are_detected_and_resent(tpuctl, gcs_bucket, gcs_client, bert, tmp_path):
    src, files = bert
    url = f"gs://{gcs_bucket}/b"
    assert tpuctl("stage", str(src), url, "--part-size", PART).code == 0
    name = "bert_model.ckpt.data-00000-of-00001"
    gcs_client.bucket(gcs_bucket).blob(f"b/{name}").upload_from_string(os.urandom(len(files[name])))  # same size
    r = tpuctl("stage", str(src), url, "--part-size", PART, "--json")
    assert r.json()["uploaded"] == 1
    assert gcs_client.bucket(gcs_bucket).blob(f"b/{name}").download_as_bytes() == files[name]

    out = tmp_path / "back"
    assert tpuctl("stage", url, str(out)).code == 0
    (out / "vocab.txt").write_bytes(b"X" * len(files["vocab.txt"]))  # a local copy damaged on disk
    r = tpuctl("stage", url, str(out), "--json")
    assert r.json()["downloaded"] == 1 and (out / "vocab.txt").read_bytes() == files["vocab.txt"]


def test_delete_and_excludes(tpuctl, gcs_bucket, gcs_client, bert):
    src, files = bert
    url = f"gs://{gcs_bucket}/b"
    (src / ".tpuctlignore").write_text("*.tmp\n")
    (src / "x.tmp").write_text("scratch")
    (src / "train.log").write_text("log")
    gcs_client.bucket(gcs_bucket).blob("b/old-checkpoint.index").upload_from_string(b"old")
    gcs_client.bucket(gcs_bucket).blob("b/keep.tmp").upload_from_string(b"excluded: never deleted")
    gcs_client.bucket(gcs_bucket).blob("other/untouched").upload_from_string(b"outside the prefix")
    r = tpuctl("stage", str(src), url, "--exclude", "*.log", "--delete", "--json")
    assert r.code == 0, r.err
    assert r.json()["deleted"] == 1 and r.json()["excluded"] == 2
    assert set(objects(gcs_client, gcs_bucket)) == ({f"b/{k}" for k in files}
                                                    | {"b/.tpuctlignore", "b/keep.tmp", "other/untouched"})


def test_tpuctlignore_in_a_bucket_source_applies_to_downloads(tpuctl, gcs_bucket, gcs_client, tmp_path):
    b = gcs_client.bucket(gcs_bucket)
    b.blob("d/.tpuctlignore").upload_from_string(b"events/\n")
    b.blob("d/events/events.out.tfevents.1").upload_from_string(b"e")
    b.blob("d/model.ckpt-1.index").upload_from_string(b"i")
    r = tpuctl("stage", f"gs://{gcs_bucket}/d", str(tmp_path / "out"), "--json")
    assert r.code == 0 and r.json()["excluded"] == 1
    assert set(read_tree(tmp_path / "out")) == {".tpuctlignore", "model.ckpt-1.index"}


def test_dry_run_changes_nothing(tpuctl, gcs_bucket, gcs_client, bert):
    src, files = bert
    r = tpuctl("stage", str(src), f"gs://{gcs_bucket}/b", "--dry-run", "--json")
    assert r.code == 0 and r.json()["dry_run"] and len(r.json()["plan"]) == len(files)
    assert objects(gcs_client, gcs_bucket) == {}
    r = tpuctl("stage", str(src), "gs://not-created-yet/b", "--create-bucket", "--dry-run")
    assert r.code == 0 and "would create bucket" in r.err and not gcs_client.bucket("not-created-yet").exists()


def test_missing_buckets_and_create_bucket(tpuctl, gcs_env, gcs_client, bert, tmp_path):
    src, _ = bert
    r = tpuctl("stage", str(src), "gs://missing-bucket-1/b")
    assert r.code == 2 and "gs://missing-bucket-1 does not exist" in r.err and "--create-bucket" in r.err
    r = tpuctl("stage", "gs://missing-bucket-1/b", str(tmp_path / "o"))
    assert r.code == 2 and "check the bucket name" in r.err
    r = tpuctl("stage", str(src), "gs://new-bucket-1/b", "--create-bucket", "--location", "europe-west4", "--json")
    assert r.code == 0 and r.json()["bucket_created"] and gcs_client.bucket("new-bucket-1").exists()
    r = tpuctl("stage", str(src), "gs://new-bucket-1/b", "--create-bucket")
    assert r.code == 0 and "already exists" in r.err


def test_names_that_cannot_be_local_files_are_refused_before_downloading(tpuctl, gcs_bucket, gcs_client, tmp_path):
    b = gcs_client.bucket(gcs_bucket)
    b.blob("d/a").upload_from_string(b"file")
    b.blob("d/a/b").upload_from_string(b"and folder")
    r = tpuctl("stage", f"gs://{gcs_bucket}/d", str(tmp_path / "out"))
    assert r.code == 2 and "both a file and a folder" in r.err and not (tmp_path / "out").exists()
    r = tpuctl("stage", f"gs://{gcs_bucket}/d", str(tmp_path / "out"), "--exclude", "/a/")
    assert r.code == 0 and (tmp_path / "out" / "a").read_bytes() == b"file"


# -- verification failures and interruptions, injected at tpuctl's own upload seam (GcsBucket.put):
#    the bytes still travel through the real client to the server.

class CorruptingBucket(GcsBucket):
    """Flips one byte of the first ``bad`` uploads on their way out (a flaky NIC, a bad proxy)."""

    def __init__(self, name, client, bad):
        super().__init__(name, client)
        self.bad, self.lock = bad, threading.Lock()

    def put(self, blob, stream, size, want, ctype="application/octet-stream"):
        with self.lock:
            corrupt, self.bad = self.bad > 0, self.bad - 1
        if corrupt and size:
            data = bytearray(stream.read(size))
            data[size // 2] ^= 0xFF
            stream = io.BytesIO(bytes(data))
        super().put(blob, stream, size, want, ctype)


class InterruptingBucket(GcsBucket):
    """Sends SIGINT to this process (Ctrl-C) once ``after`` uploads have gone through."""

    def __init__(self, name, client, after):
        super().__init__(name, client)
        self.left = after

    def put(self, blob, stream, size, want, ctype="application/octet-stream"):
        super().put(blob, stream, size, want, ctype)
        self.left -= 1
        if self.left == 0:
            os.kill(os.getpid(), signal.SIGINT)


def _stage_with(bucket, src, prefix, **opts):
    dest = Endpoint(f"gs://{bucket.name}/{prefix}", bucket, prefix, True)
    return stage(open_endpoint(str(src), None), dest, StageOptions(**opts), say=lambda m: None)


def test_corrupted_uploads_are_retried_then_verified(gcs_bucket, gcs_client, bert):
    src, files = bert
    bucket = CorruptingBucket(gcs_bucket, make_client("tpuctl-test"), bad=2)
    report = _stage_with(bucket, src, "b", jobs=1, part_size=256 << 10)
    doc = report.to_dict()
    assert report.ok and doc["retries"] == 2 and doc["verified"] == len(files)
    for name, data in files.items():
        assert gcs_client.bucket(gcs_bucket).blob(f"b/{name}").download_as_bytes() == data


def test_persistent_corruption_is_reported_and_never_kept(gcs_bucket, gcs_client, tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"vocab.txt": b"[PAD]\n[UNK]\n" * 100})
    bucket = CorruptingBucket(gcs_bucket, make_client("tpuctl-test"), bad=99)
    report = _stage_with(bucket, src, "b", jobs=1)
    doc = report.to_dict()
    assert not report.ok and doc["failed"] == 1 and doc["verified"] == 0
    assert "CRC32C" in doc["failures"][0]["error"] and doc["failures"][0]["path"] == "vocab.txt"
    assert objects(gcs_client, gcs_bucket) == {}  # the corrupted copy was removed


def test_persistent_corruption_through_the_cli_exits_1(tpuctl, gcs_bucket, gcs_client, bert, monkeypatch):
    src, _ = bert
    from provision.cloud.storage import gcs

    monkeypatch.setattr(gcs, "GcsBucket", lambda name, client: CorruptingBucket(name, client, bad=10_000))
    r = tpuctl("stage", str(src), f"gs://{gcs_bucket}/b", "--json", "--jobs", "2")
    assert r.code == 1 and r.json()["ok"] is False and r.json()["failed"] >= 1
    assert "re-run" in r.json()["error"] and "tpuctl: error:" in r.err


def test_interrupted_stage_resumes_with_what_is_missing(gcs_bucket, gcs_client, tmp_path):
    src = tmp_path / "src"
    big = os.urandom(4 << 20)
    write_tree(src, {"model.data": big, "vocab.txt": b"v" * 100})
    bucket = InterruptingBucket(gcs_bucket, make_client("tpuctl-test"), after=5)
    with pytest.raises(KeyboardInterrupt):
        _stage_with(bucket, src, "b", jobs=1, part_size=256 << 10)
    stored = objects(gcs_client, gcs_bucket)
    assert "b/model.data" not in stored  # nothing incomplete under the final name
    assert any(n.startswith(PARTS_PREFIX + "b/model.data/") for n in stored)

    report = _stage_with(GcsBucket(gcs_bucket, make_client("tpuctl-test")), src, "b", jobs=4, part_size=256 << 10)
    doc = report.to_dict()
    assert report.ok and doc["bytes_resumed"] >= 4 * (256 << 10) and doc["bytes_sent"] < len(big)
    stored = objects(gcs_client, gcs_bucket)
    assert set(stored) == {"b/model.data", "b/vocab.txt"}  # parts composed and removed
    assert stored["b/model.data"].download_as_bytes() == big


def test_killed_stage_process_leaves_nothing_that_looks_complete(gcs_bucket, gcs_client, tmp_path):
    src = tmp_path / "src"
    big = os.urandom(48 << 20)
    write_tree(src, {"bert_model.ckpt.data-00000-of-00001": big, "vocab.txt": b"v" * 100})
    name = "b/bert_model.ckpt.data-00000-of-00001"
    proc = subprocess.Popen([sys.executable, "-m", "provision", "stage", str(src), f"gs://{gcs_bucket}/b",
                             "--jobs", "1", "--part-size", "1M"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if len(objects(gcs_client, gcs_bucket, PARTS_PREFIX)) >= 3:
                break
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the stage finished before it could be interrupted"
    stored = objects(gcs_client, gcs_bucket)
    assert name not in stored
    n_parts = sum(1 for n in stored if n.startswith(PARTS_PREFIX))
    assert n_parts >= 3

    from tests.conftest import run_tpuctl_process

    r = run_tpuctl_process("stage", str(src), f"gs://{gcs_bucket}/b", "--part-size", "1M", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["bytes_resumed"] >= 3 * (1 << 20) and doc["bytes_sent"] < len(big) + 100
    stored = objects(gcs_client, gcs_bucket)
    assert set(stored) == {name, "b/vocab.txt"}
    assert stored[name].download_as_bytes() == big
    stored[name].delete()  # the server keeps objects in memory for the whole session
    (src / "bert_model.ckpt.data-00000-of-00001").unlink()


def test_stale_parts_of_an_older_version_are_removed(tpuctl, gcs_bucket, gcs_client, tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"model.data": os.urandom(1 << 20)})
    b = gcs_client.bucket(gcs_bucket)
    b.blob(f"{PARTS_PREFIX}b/model.data/.tpuctl-999-111/00000").upload_from_string(b"older file's part")
    b.blob(f"{PARTS_PREFIX}b/gone.data/.tpuctl-5-5/00000").upload_from_string(b"file no longer in SRC")
    b.blob(f"{PARTS_PREFIX}elsewhere/x/.tpuctl-5-5/00000").upload_from_string(b"another prefix: untouched")
    r = tpuctl("stage", str(src), f"gs://{gcs_bucket}/b", "--part-size", PART, "--json")
    assert r.code == 0 and r.json()["stale_parts_removed"] == 1
    assert set(objects(gcs_client, gcs_bucket)) == {"b/model.data", f"{PARTS_PREFIX}elsewhere/x/.tpuctl-5-5/00000"}


def test_bucket_api_and_iam_on_the_emulator(gcs_env, gcs_bucket):
    target = resolve()
    assert target.provider == "gcp"
    b = open_bucket(f"gs://{gcs_bucket}", target)
    assert b.exists() and not open_bucket("gs://no-such-bucket-9", target).exists()
    info = b.write_bytes("runs/r1/progress.json", b'{"step": 5}')
    assert b.read_bytes("runs/r1/progress.json") == b'{"step": 5}' and b.stat("runs/r1/progress.json") == info
    assert [o.name for o in b.list("runs/")] == ["runs/r1/progress.json"]
    assert b.stat("runs/none") is None
    with pytest.raises(CloudError, match="does not serve bucket IAM policies"):
        b.grant_object_access("serviceAccount:service-123@cloud-tpu.iam.gserviceaccount.com")
    assert b.delete("runs/r1/progress.json") and not b.delete("runs/r1/progress.json")


@pytest.mark.slow
def test_memory_stays_bounded_whatever_the_file_size(gcs_env, gcs_bucket, gcs_client, tmp_path):
    """A 320 MiB file through a real tpuctl process with 2 transfers in flight: its peak RSS stays
    near interpreter + client (~60 MB) + 2 x 16 MiB upload chunks, far below the file's size."""
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "big.bin", "wb") as fh:
        fh.truncate(320 << 20)  # sparse: no disk traffic, same bytes on the wire
    probe = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
             "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "provision", "stage", str(src),
                          f"gs://{gcs_bucket}/m", "--jobs", "2", "--json"], cwd=REPO, capture_output=True, text=True,
                         check=False)
    rc, peak_mb = map(int, out.stdout.strip().splitlines()[-1].split())
    try:
        assert rc == 0, out.stderr
        assert peak_mb < 160, f"peak RSS {peak_mb} MB for a 320 MiB file"
        assert gcs_client.bucket(gcs_bucket).get_blob("m/big.bin").size == 320 << 20
    finally:
        gcs_client.bucket(gcs_bucket).blob("m/big.bin").delete()
