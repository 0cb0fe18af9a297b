"""A startup script planted under its content-addressed name is replaced, not trusted.

Every new host's bootstrap fetches ``tpuctl/startup/<sha256>.sh`` and runs it only if its bytes have
that sha256. A bucket writer knows the name (it is this tpuctl's script's digest) and can plant other
bytes there with the same size and a forged CRC32C; had staging trusted size and CRC32C, it would
never send the real script, and every host created afterwards would refuse the plant and never boot.
Over Cloud Storage's wire (fake-gcs-server), whose CRC32C is the server's own."""

from __future__ import annotations

import hashlib

from provision.basics.config import Target
from provision.cloud import startup
from provision.cloud.storage import crc, open_bucket
from tests.lookalikes import CountingReads, look_alike


def test_a_startup_script_planted_with_a_forged_crc32c_is_replaced_and_restaging_costs_a_stat(gcs_env):
    name = gcs_env.create_bucket()
    bucket = CountingReads(open_bucket(f"gs://{name}", Target(provider="gcp", project=gcs_env.env()["TPUCTL_PROJECT"],
                                                              zone=None)))
    s = startup.current()
    bucket.write_bytes(s.object_name, look_alike(s.script))                              # the plant
    assert bucket.stat(s.object_name).crc32c == crc.value(s.script)
    assert startup.stage(bucket) is True
    assert hashlib.sha256(bucket.read_bytes(s.object_name)).hexdigest() == s.sha256      # what the bootstrap pins
    downloads = bucket.downloads
    assert startup.stage(bucket) is False and bucket.downloads == downloads             # the version it wrote
