"""Staging over Cloud Storage's wire (fake-gcs-server) replaces look-alikes and trusts only the
generation it wrote or hashed: Cloud Storage computes an object's CRC32C itself, so a planted
archive with a forged CRC32C passes as the real one to any check but the sha256; every write
gets a new generation, so a plant is never mistaken for what tpuctl wrote."""

from __future__ import annotations

import hashlib

from provision.basics.config import Target
from provision.cloud.storage import crc, open_bucket
from provision.runs import wheelhouse
from provision.runs.training import stage_workdir
from provision.staging import workdir
from provision.staging.selection import select
from tests.lookalikes import CountingReads, look_alike, tiny_wheel


def _bucket(gcs_env):
    name = gcs_env.create_bucket()
    return CountingReads(open_bucket(f"gs://{name}", Target(provider="gcp", project=gcs_env.env()["TPUCTL_PROJECT"],
                                                            zone=None)))


def test_a_forged_archive_is_replaced_and_restaging_costs_a_stat(gcs_env, tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "main.py").write_text("print('the real code')\n" * 100)
    packed = workdir.pack(select(tmp_path / "code"))
    bucket = _bucket(gcs_env)
    bucket.write_bytes(packed.object_name, look_alike(packed.data), metadata={"sha256": packed.digest})
    assert bucket.stat(packed.object_name).crc32c == crc.value(packed.data)    # the server's own CRC32C
    assert stage_workdir(bucket, packed) is True and bucket.downloads == 1            # read, found wrong, sent
    assert hashlib.sha256(bucket.read_bytes(packed.object_name)).hexdigest() == packed.digest
    assert stage_workdir(bucket, packed) is False and bucket.downloads == 1           # the version it wrote
    monkeypatch.setenv("TPUCTL_HOME", str(tmp_path / "other-machine"))
    assert stage_workdir(bucket, packed) is False and bucket.downloads == 2           # hashed once ...
    assert stage_workdir(bucket, packed) is False and bucket.downloads == 2           # ... then a stat


def test_a_same_size_wheel_is_replaced_and_a_host_installs_the_pinned_one(gcs_env, tmp_path):
    real = tiny_wheel(tmp_path / "index", "from the wheelhouse")
    evil = tiny_wheel(tmp_path / "evil", "from the attacker!!")
    sha = hashlib.sha256(real.read_bytes()).hexdigest()
    bucket = _bucket(gcs_env)
    bucket.write_bytes(wheelhouse.wheel_name(sha, real.name), evil.read_bytes())
    digest = wheelhouse.stage(bucket, [(real.name, real, sha)])
    site = wheelhouse.install(bucket, digest, tmp_path / "host", log=lambda _m: None)
    assert (site / "tinydep" / "__init__.py").read_text() == "VALUE = 'from the wheelhouse'\n"
