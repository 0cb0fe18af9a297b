"""``TPUCTL_CHECKPOINT_DIR`` kept in the run's bucket (provision/host/checkpoint_dir.py), with real
files, real writer processes and the real bucket clients: fake-gcs-server over the wire (the
GCP path) and the local provider's directory bucket.

What a program that writes files relies on: what it saved is restored on a new VM (an empty
directory); a file it still holds open is never sent half-written; an in-place rewrite during
an upload never replaces the bucket's good copy with a torn one; files it rotates out go from
the bucket after the newer one is there, and a file written after one whose upload failed (a
pointer after its data) waits for it; and an upload cut by a hard kill leaves the previous copy
intact and verified, and the next upload sends only what the cut one had not stored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.cloud.storage import LocalBucket, crc
from provision.host import checkpoint_dir
from provision.host.checkpoint_dir import CheckpointDir, part_name
from tests.conftest import REPO
from tests.faultproxy import FaultProxy

pytestmark = [pytest.mark.xdist_group("checkpoint-dir")]


def _open(model_dir: str, work: Path, said: list[str]) -> CheckpointDir:
    provider = "gcp" if model_dir.startswith("gs://") else "local"
    return CheckpointDir.open(model_dir, "0", work, said.append, provider=provider, project="tpuctl-test")


@pytest.fixture(params=["gcs", "local"])
def model_dir(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "bucket" / "runs" / "r1" / "model")
    gcs = request.getfixturevalue("gcs_env")
    return f"gs://{gcs.create_bucket()}/tpuctl/runs/r1/model"


def _bucket_files(kept: CheckpointDir) -> dict[str, bytes]:
    base = f"{kept.prefix}/" if kept.prefix else ""
    if isinstance(kept.bucket, LocalBucket) and not kept.bucket.exists():
        return {}
    return {o.name[len(base):]: kept.bucket.read_bytes(o.name) for o in kept.bucket.list(base)}


def test_what_a_program_saved_is_restored_on_a_new_vm_and_rotated_files_follow(model_dir, tmp_path):
    said: list[str] = []
    first = _open(model_dir, tmp_path / "vm1", said)
    assert first.restore() == (0, 0)
    (first.path / "ckpt-100").mkdir()
    (first.path / "ckpt-100" / "weights.bin").write_bytes(os.urandom(3000))
    (first.path / "checkpoint").write_text("ckpt-100\n")
    first.sync(None, final=False)                     # closed files: taken at once where /proc shows it
    first.sync(None, final=False)
    assert set(_bucket_files(first)) == {"ckpt-100/weights.bin", "checkpoint"}
    # the program saves ckpt-200, points at it and rotates ckpt-100 out
    (first.path / "ckpt-200").mkdir()
    (first.path / "ckpt-200" / "weights.bin").write_bytes(b"two" * 1000)
    (first.path / "checkpoint").write_text("ckpt-200\n")
    for old in (first.path / "ckpt-100").iterdir():
        old.unlink()
    (first.path / "ckpt-100").rmdir()
    done = first.finish()
    assert "ckpt-100/weights.bin" in done.deleted
    kept = _bucket_files(first)
    assert kept == {"ckpt-200/weights.bin": b"two" * 1000, "checkpoint": b"ckpt-200\n"}
    assert any("kept" in line and "final upload" in line for line in said)

    # a recreated VM: another host directory, empty
    second = _open(model_dir, tmp_path / "vm2", [])
    files, size = second.restore()
    assert (files, size) == (2, 3009)
    assert (second.path / "checkpoint").read_text() == "ckpt-200\n"
    assert (second.path / "ckpt-200" / "weights.bin").read_bytes() == b"two" * 1000
    # a job error on a VM that survived: the directory is made the bucket's copy again
    (second.path / "stray.tmp").write_text("half")
    (second.path / "checkpoint").write_text("ckpt-300\n")
    assert second.restore() == (2, 3009)
    assert not (second.path / "stray.tmp").exists() and (second.path / "checkpoint").read_text() == "ckpt-200\n"


def _rotate(kept: CheckpointDir, old: str, new: str, data: bytes) -> None:
    """The program saves ``new``, then points ``checkpoint`` at it, then removes ``old`` (TF's
    checkpoint manager, Flax's ``keep``): the pointer written after its data, a second later."""
    (kept.path / new).mkdir()
    (kept.path / new / "weights.bin").write_bytes(data)
    (kept.path / "checkpoint").write_text(f"{new}\n")
    written = time.time()
    os.utime(kept.path / new / "weights.bin", (written - 1, written - 1))
    for f in (kept.path / old).iterdir():
        f.unlink()
    (kept.path / old).rmdir()


def _consistent(kept: CheckpointDir) -> dict[str, bytes]:
    """The bucket's copy, asserted whole: the checkpoint its pointer names is there."""
    files = _bucket_files(kept)
    named = files["checkpoint"].decode().strip()
    assert f"{named}/weights.bin" in files, f"the bucket's pointer names {named}, which it does not hold: {sorted(files)}"
    return files


def test_a_failed_upload_holds_back_the_files_written_after_it_and_the_removals(gcs_env, tmp_path, monkeypatch):
    """The data's upload fails (Cloud Storage loses its upload session every time) while its small
    pointer could go up: the pointer must wait, and the checkpoint the program rotated out must
    stay, or a hard kill then restores a pointer to nothing. The next scan, the bucket working
    again, sends both in order and then removes the old one."""
    model_dir = f"gs://{gcs_env.create_bucket()}/tpuctl/runs/r1/model"
    refusing = []

    def lose_sessions(method: str, path: str) -> str | None:
        # a file above 8 MiB goes in a resumable session (PUTs), a small one in one multipart POST
        return "410" if refusing and method == "PUT" and "upload_id=" in path else None

    with FaultProxy(gcs_env.url, script=lose_sessions) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        kept = _open(model_dir, tmp_path / "vm", [])
        kept.restore()
        old, new = os.urandom(3000), os.urandom(9 << 20)
        (kept.path / "ckpt-100").mkdir()
        (kept.path / "ckpt-100" / "weights.bin").write_bytes(old)
        (kept.path / "checkpoint").write_text("ckpt-100\n")
        assert sorted(kept.sync(None).uploaded) == ["checkpoint", "ckpt-100/weights.bin"]
        _rotate(kept, "ckpt-100", "ckpt-200", new)
        refusing.append(True)
        done = kept.sync(None)
        assert proxy.faults["410"] > 0, "the scenario did not happen: no upload session reached the proxy"
        assert (done.uploaded, done.deleted) == ([], []), done
        assert len(done.failed) == 1 and done.failed[0].startswith("ckpt-200/weights.bin: "), done.failed
        assert _consistent(kept) == {"ckpt-100/weights.bin": old, "checkpoint": b"ckpt-100\n"}
        # a hard kill now: a new VM gets the old checkpoint, whole
        fresh = _open(model_dir, tmp_path / "vm2", [])
        assert fresh.restore() == (2, 3009)
        assert (fresh.path / "checkpoint").read_text() == "ckpt-100\n"
        assert (fresh.path / "ckpt-100" / "weights.bin").read_bytes() == old
        # the sessions work again: the next scan starts from the file that failed
        refusing.clear()
        done = kept.sync(None)
    assert (done.uploaded, done.deleted, done.failed) == (["ckpt-200/weights.bin", "checkpoint"],
                                                          ["ckpt-100/weights.bin"], []), done
    assert _consistent(kept) == {"ckpt-200/weights.bin": new, "checkpoint": b"ckpt-200\n"}


def test_where_open_files_cannot_be_seen_a_rotated_out_file_stays_until_the_newer_one_has_settled(
        model_dir, tmp_path, monkeypatch):
    """A laptop's local provider (no /proc): a file is taken once it is unchanged for a scan, so
    the scan that first sees the new checkpoint sends nothing; the old one must stay until the
    new one is up, or a hard kill in between leaves no checkpoint at all."""
    monkeypatch.setattr(checkpoint_dir, "SEES_OPEN_FILES", False)
    kept = _open(model_dir, tmp_path / "vm", [])
    kept.restore()
    (kept.path / "ckpt-100").mkdir()
    (kept.path / "ckpt-100" / "weights.bin").write_bytes(b"one" * 1000)
    (kept.path / "checkpoint").write_text("ckpt-100\n")
    assert kept.sync(None).uploaded == []                      # seen once: not settled yet
    assert sorted(kept.sync(None).uploaded) == ["checkpoint", "ckpt-100/weights.bin"]
    _rotate(kept, "ckpt-100", "ckpt-200", b"two" * 1000)
    done = kept.sync(None)
    assert (done.uploaded, done.deleted) == ([], []), done
    assert _consistent(kept) == {"ckpt-100/weights.bin": b"one" * 1000, "checkpoint": b"ckpt-100\n"}
    done = kept.sync(None)
    assert (done.uploaded, done.deleted) == (["ckpt-200/weights.bin", "checkpoint"], ["ckpt-100/weights.bin"]), done
    assert _consistent(kept) == {"ckpt-200/weights.bin": b"two" * 1000, "checkpoint": b"ckpt-200\n"}


def test_the_part_is_kept_under_the_model_dir_per_worker():
    assert part_name("gs://b/tpuctl/runs/r/model", "3") == "gs://b/tpuctl/runs/r/model/checkpoint-dir/worker-3"
    assert part_name("/home/u/run/", "0") == "/home/u/run/checkpoint-dir/worker-0"


WRITER = r'''
import os, sys, time
path = sys.argv[1]
f = open(path, "wb")
f.write(b"x" * 1000)
f.flush()
print("writing", flush=True)
time.sleep(30)
'''


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="open files are seen through Linux's /proc")
def test_a_file_the_program_holds_open_for_writing_is_not_taken_until_closed(tmp_path):
    said: list[str] = []
    kept = _open(str(tmp_path / "model"), tmp_path / "vm", said)
    kept.restore()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(kept.path / "ckpt.pt")], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        for _ in range(3):                       # unchanged, but open: half a checkpoint
            assert kept.sync(proc.pid).uploaded == []
        (kept.path / "done.txt").write_text("a closed file beside it goes")
        assert kept.sync(proc.pid).uploaded == ["done.txt"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert kept.sync(proc.pid).uploaded == ["ckpt.pt"]         # closed (its writer is gone): taken


def test_a_rewrite_in_place_while_copying_never_replaces_the_good_copy(tmp_path, monkeypatch):
    """torch.save to the same name every evaluation: the bucket holds a whole version, always."""
    import shutil

    kept = _open(str(tmp_path / "model"), tmp_path / "vm", [])
    kept.restore()
    target = kept.path / "ckpt.pt"
    target.write_bytes(b"A" * 5000)
    kept.sync(None)
    assert _bucket_files(kept) == {"ckpt.pt": b"A" * 5000}
    target.write_bytes(b"B" * 5000)
    real = shutil.copyfile

    def copy_then_program_writes(src, dst, *a, **kw):      # the program rewrites it mid-copy
        out = real(src, dst, *a, **kw)
        with open(src, "r+b") as fh:
            fh.write(b"C" * 100)
        return out

    monkeypatch.setattr(shutil, "copyfile", copy_then_program_writes)
    assert kept.sync(None).uploaded == []                 # changed while copied: not sent
    assert _bucket_files(kept) == {"ckpt.pt": b"A" * 5000}
    monkeypatch.setattr(shutil, "copyfile", real)
    assert kept.sync(None).uploaded == ["ckpt.pt"]
    assert _bucket_files(kept) == {"ckpt.pt": b"C" * 100 + b"B" * 4900}


CUT = r'''
import sys
from pathlib import Path
from provision.host.checkpoint_dir import CheckpointDir
kept = CheckpointDir.open(sys.argv[1], "0", Path(sys.argv[2]), print, provider="gcp", project="tpuctl-test")
kept.seen = {}
kept.sync(None, final=True)
print("uploaded", flush=True)
'''


def test_an_upload_cut_by_a_hard_kill_leaves_the_old_copy_whole_and_the_next_one_publishes_the_new(gcs_env, tmp_path):
    model_dir = f"gs://{gcs_env.create_bucket()}/runs/r/model"
    kept = _open(model_dir, tmp_path / "vm", [])
    kept.restore()
    old = os.urandom(1 << 20)
    (kept.path / "ckpt.pt").write_bytes(old)
    kept.finish()
    new = os.urandom(40 << 20)                             # three 16 MiB parts
    (kept.path / "ckpt.pt").write_bytes(new)
    proc = subprocess.Popen([sys.executable, "-c", CUT, model_dir, str(tmp_path / "vm")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, **gcs_env.env()})
    bucket = kept.bucket
    deadline = time.time() + 60
    while time.time() < deadline and not list(bucket.list_internal(".tpuctl-parts/")):
        time.sleep(0.02)
    proc.kill()                                            # the power-off, mid-upload
    proc.wait()
    assert "uploaded" not in proc.stdout.read()
    info = bucket.stat(f"{kept.prefix}/ckpt.pt")
    assert info is not None and info.size == len(old) and info.crc32c == crc.value(old)
    fresh = _open(model_dir, tmp_path / "vm2", [])
    fresh.restore()
    assert (fresh.path / "ckpt.pt").read_bytes() == old
    # the next attempt's upload resumes the cut one: the parts it had stored (each a whole object,
    # verified against the file's CRC32C of that range) are kept, only the rest is sent
    stored = sum(o.size for o in bucket.list_internal(".tpuctl-parts/"))
    said: list[str] = []
    again = _open(model_dir, tmp_path / "vm", said)
    again.sent = {}
    done = again.finish()
    assert done.uploaded == ["ckpt.pt"]
    assert done.reused >= stored > 0 and done.sent <= len(new) - done.reused, done
    assert any("of it from an interrupted upload" in line for line in said), said
    assert bucket.read_bytes(f"{kept.prefix}/ckpt.pt") == new
    assert not list(bucket.list_internal(".tpuctl-parts/"))
