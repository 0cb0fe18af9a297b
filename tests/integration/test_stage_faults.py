"""`tpuctl stage` (the installed command) through a fault-injecting proxy to fake-gcs-server.

A few seeds of the staging chaos campaign (``python -m tests.chaos staging`` runs many, with
larger trees), and the faults that once left a bucket partly staged: a reply lost after the
last request of a resumable upload, sessions that are gone, retries that run out.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.chaos.staging import SMALL, Campaign
from tests.conftest import run_tpuctl_process
from tests.faultproxy import FaultProxy

from .stage_helpers import read_tree, write_tree

RESUMABLE = 9 << 20  # above google-cloud-storage's 8 MiB multipart limit: a resumable upload


@pytest.mark.parametrize("seed, rate", [(101, 0.15), pytest.param(102, 0.20, marks=pytest.mark.long)])
def test_stage_under_network_faults_loses_nothing_and_converges(fake_gcs, tmp_path, seed, rate):
    res = Campaign(fake_gcs, tmp_path, SMALL).run_seed(seed, rate)
    assert res.ok, res.violations
    assert res.scenarios == 4 and sum(res.faults.values()) > 0


def _env(proxy):
    return {"STORAGE_EMULATOR_HOST": proxy.url}


def _last_resumable_put(method: str, path: str) -> bool:
    return method == "PUT" and "upload_id=" in path


def test_reply_lost_after_the_last_resumable_put_still_exits_0(gcs_env, gcs_client, tmp_path):
    """The server stores the object, the answer is lost; the client resends and the finished
    session answers 404. tpuctl finds the object stored with the file's CRC32C: done, exit 0."""
    bucket = gcs_env.create_bucket()
    big = os.urandom(RESUMABLE)
    write_tree(tmp_path / "src", {"big file.bin": big, "small.txt": b"s"})
    lost = []

    def lose_first_reply(method, path):
        if _last_resumable_put(method, path) and not lost:
            lost.append(path)
            return "reset_after"
        return None

    with FaultProxy(gcs_env.url, script=lose_first_reply) as proxy:
        r = run_tpuctl_process("stage", str(tmp_path / "src"), f"gs://{bucket}/d", "--json", env=_env(proxy))
    assert lost, "the scenario did not happen: no resumable upload went through the proxy"
    assert r.code == 0, r.err
    assert r.json()["uploaded"] == 2 and r.json()["verified"] == 2
    assert gcs_client.bucket(bucket).blob("d/big file.bin").download_as_bytes() == big
    assert "upload_id" not in r.out + r.err


def test_sessions_that_stay_gone_fail_one_line_naming_the_file_and_no_session_uri(gcs_env, gcs_client, tmp_path):
    bucket = gcs_env.create_bucket()
    write_tree(tmp_path / "src", {"big file.bin": os.urandom(RESUMABLE), "small.txt": b"s"})
    with FaultProxy(gcs_env.url, script=lambda m, p: "410" if _last_resumable_put(m, p) else None) as proxy:
        r = run_tpuctl_process("stage", str(tmp_path / "src"), f"gs://{bucket}/d", "--json", env=_env(proxy))
        assert proxy.faults["410"] >= 3  # every session was given a new start
    assert r.code == 1, r.err
    doc = r.json()
    assert doc["uploaded"] == 1 and [f["path"] for f in doc["failures"]] == ["big file.bin"]
    assert f"gs://{bucket}/d/big file.bin" in doc["failures"][0]["error"]
    errors = [line for line in r.err.splitlines() if line.startswith("tpuctl: error:")]
    assert len(errors) == 1 and "big file.bin" in errors[0] and "re-run" in errors[0]
    assert "Traceback" not in r.err and "internal error" not in r.err
    assert "upload_id" not in r.out + r.err and "uploadType=resumable" not in r.out + r.err
    # nothing partial under the file's name; the good file is there
    assert {b.name for b in gcs_client.list_blobs(bucket)} == {"d/small.txt"}
    r = run_tpuctl_process("stage", str(tmp_path / "src"), f"gs://{bucket}/d", "--json", env=gcs_env.env())
    assert r.code == 0 and r.json()["uploaded"] == 1 and r.json()["skipped"] == 1


def test_truncated_downloads_are_resumed_and_verified(gcs_env, tmp_path):
    bucket = gcs_env.create_bucket()
    files = {"model.data": os.urandom(600_000), "ü name.txt": b"x" * 5000}
    write_tree(tmp_path / "src", files)
    assert run_tpuctl_process("stage", str(tmp_path / "src"), f"gs://{bucket}/d", env=gcs_env.env()).code == 0
    cut = []

    def cut_media(method, path):
        if method == "GET" and "alt=media" in path and len(cut) < 3:
            cut.append(path)
            return "truncate"
        return None

    with FaultProxy(gcs_env.url, script=cut_media) as proxy:
        r = run_tpuctl_process("stage", f"gs://{bucket}/d", str(tmp_path / "back"), "--part-size", "256K",
                               "--json", env=_env(proxy))
    assert len(cut) == 3 and r.code == 0, r.err
    assert read_tree(tmp_path / "back") == files


def test_retries_running_out_are_the_designed_line_naming_the_object():
    from google.api_core.exceptions import RetryError

    from provision.basics.errors import CloudError
    from provision.cloud.storage.gcs import translate

    with pytest.raises(CloudError) as info, translate("upload gs://b/d/model.data"):
        raise RetryError("Timeout of 30.0s exceeded, last exception: ('Connection aborted.', "
                         "ConnectionResetError(104, 'Connection reset by peer'))", ConnectionResetError(104, "reset"))
    line = info.value.one_line()
    assert "upload gs://b/d/model.data: cannot reach Cloud Storage" in line and "re-run" in line
    assert "finished files are not sent again" in line and "Timeout of" not in line
    assert info.value.kind == "transient"


def test_session_uris_are_scrubbed():
    from provision.basics.redact import redact

    uri = "https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=ADPycdsecret123"
    assert "ADPycdsecret123" not in redact(f"404 PUT {uri}: Not Found")
    assert "ADPycdsecret123" not in json.dumps(redact(json.dumps({"error": uri})))


def test_a_record_read_is_one_request_and_a_missing_one_says_so(gcs_env, gcs_client, monkeypatch):
    """``down --idle`` on a fleet reads a run record per training cluster: each read is one download
    whose CRC32C comes in Cloud Storage's ``x-goog-hash`` header (no metadata request before it),
    and the bytes are still checked. A missing record is the one line it always was."""
    from provision.cloud.storage.base import ObjectNotFound
    from provision.cloud.storage.gcs import GcsBucket, make_client

    bucket = gcs_env.create_bucket()
    gcs_client.bucket(bucket).blob("runs/r1/current.json").upload_from_string(b'{"run": "r1"}')
    paths: list[tuple[str, str]] = []

    def record(method: str, path: str) -> None:
        if "/o/" in path:                       # requests about objects (not the client's bucket look-up)
            paths.append((method, path.split("?")[0]))

    with FaultProxy(gcs_env.url, script=record) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        b = GcsBucket(bucket, make_client("tpuctl-test"))
        assert b.read_bytes("runs/r1/current.json") == b'{"run": "r1"}'
        assert paths == [("GET", f"/download/storage/v1/b/{bucket}/o/runs%2Fr1%2Fcurrent.json")], paths
        with pytest.raises(ObjectNotFound, match=f"gs://{bucket}/runs/r2/current.json does not exist"):
            b.read_bytes("runs/r2/current.json")
