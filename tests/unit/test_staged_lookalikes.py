"""A look-alike planted under a name staging will use is replaced, not trusted.

Workdir archives and requirement wheels are named by their sha256, so a bucket writer knows the
names before ``tpuctl train`` runs (a public wheel's digest is on PyPI). One who plants an object
there with the right size, or with the right CRC32C too (four chosen bytes force any CRC32C), used
to make staging skip the upload: the host refused the bytes (not the pinned sha256) and every later
run of that code failed. Now staging sends the real bytes, and the host takes them; an unchanged
object staged again costs one stat, no download."""

from __future__ import annotations

import hashlib

from provision.cloud.storage import local_bucket
from provision.runs import wheelhouse
from provision.runs.training import stage_workdir
from provision.staging import workdir
from provision.staging.selection import select
from tests.lookalikes import CountingReads, look_alike, tiny_wheel


def test_a_same_size_wheel_planted_where_train_will_stage_is_replaced_and_the_host_installs(tmp_path):
    real = tiny_wheel(tmp_path / "index", "from the wheelhouse")
    evil = tiny_wheel(tmp_path / "evil", "from the attacker!!")
    assert evil.stat().st_size == real.stat().st_size
    sha = hashlib.sha256(real.read_bytes()).hexdigest()
    bucket = local_bucket("tpuctl-local")
    bucket.write_bytes(wheelhouse.wheel_name(sha, real.name), evil.read_bytes())     # the plant
    digest = wheelhouse.stage(bucket, [(real.name, real, sha)])
    site = wheelhouse.install(bucket, digest, tmp_path / "host", log=lambda _m: None)
    assert (site / "tinydep" / "__init__.py").read_text() == "VALUE = 'from the wheelhouse'\n"


def test_an_archive_planted_with_the_same_size_and_crc32c_is_replaced(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "main.py").write_text("print('the real code')\n" * 50)
    packed = workdir.pack(select(tmp_path / "code"))
    bucket = local_bucket("tpuctl-local")
    bucket.write_bytes(packed.object_name, look_alike(packed.data))                  # the plant
    assert stage_workdir(bucket, packed) is True
    assert hashlib.sha256(bucket.read_bytes(packed.object_name)).hexdigest() == packed.digest


def test_restaging_unchanged_code_costs_a_stat_and_a_replaced_object_is_sent_again(tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "main.py").write_text("print('the real code')\n")
    packed = workdir.pack(select(tmp_path / "code"))
    bucket = CountingReads(local_bucket("tpuctl-local"))
    assert stage_workdir(bucket, packed) is True
    assert stage_workdir(bucket, packed) is False and bucket.downloads == 0      # written here: a stat
    # another machine (its own TPUCTL_HOME) reads the archive back once, then trusts that version
    monkeypatch.setenv("TPUCTL_HOME", str(tmp_path / "other-home"))
    assert stage_workdir(bucket, packed) is False and bucket.downloads == 1
    assert stage_workdir(bucket, packed) is False and bucket.downloads == 1
    # a bucket writer's look-alike is a new version: read, found wrong, replaced
    # (its metadata claims the pinned digest, which proves nothing: the same writer sets it)
    bucket.write_bytes(packed.object_name, look_alike(packed.data), metadata={"sha256": packed.digest})
    assert stage_workdir(bucket, packed) is True and bucket.downloads == 2
    assert hashlib.sha256(bucket.read_bytes(packed.object_name)).hexdigest() == packed.digest
