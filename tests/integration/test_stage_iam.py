"""Bucket IAM through the real google-cloud-storage client.

fake-gcs-server has no bucket IAM endpoint, so these tests point the client at a minimal stub of
the two JSON-API calls involved (GET and PUT ``/storage/v1/b/BUCKET/iam``, with etags) on
127.0.0.1: it checks the requests tpuctl sends, the idempotence and the retry on a concurrent
change. What fake-gcs-server itself answers is covered in test_stage_gcs.py.
"""

from __future__ import annotations

import json
import threading
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from provision.cloud.storage import crc
from provision.cloud.storage.base import OBJECT_ROLE
from provision.cloud.storage.gcs import GcsBucket, make_client

MEMBER = "serviceAccount:service-123456789@cloud-tpu.iam.gserviceaccount.com"


class IamStub:
    def __init__(self):
        self.policy = {"version": 1, "etag": "e1",
                       "bindings": [{"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:p"]}]}
        self.requests: list[tuple[str, str, dict | None]] = []
        self.objects: dict[str, dict] = {}   # object name -> its resource
        self.conflicts = 0  # PUTs to answer as if someone else changed the policy first
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                stub.requests.append(("GET", self.path, None))
                name = unquote(self.path.split("?")[0].partition("/storage/v1/b/iam-bucket/o/")[2])
                if name in stub.objects:
                    self._reply(200, stub.objects[name])
                elif name:
                    self._reply(404, {"error": {"code": 404, "message": "No such object: iam-bucket/" + name}})
                elif self.path.startswith("/storage/v1/b/iam-bucket/iam"):
                    self._reply(200, {"kind": "storage#policy", **stub.policy})
                elif self.path.startswith("/storage/v1/b/iam-bucket"):
                    self._reply(200, {"name": "iam-bucket"})
                else:
                    self._reply(404, {"error": {"code": 404, "message": "Not Found"}})

            def do_POST(self):
                """A multipart object upload (`up --bucket` stages the hosts' startup script)."""
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stub.requests.append(("POST", self.path, None))
                msg = message_from_bytes(f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
                meta_part, data_part = msg.get_payload()
                name, data = json.loads(meta_part.get_payload())["name"], data_part.get_payload(decode=True)
                stub.objects[name] = {"kind": "storage#object", "bucket": "iam-bucket", "name": name,
                                      "size": str(len(data)), "generation": "1", "metageneration": "1",
                                      "crc32c": crc.to_b64(crc.value(data))}
                self._reply(200, stub.objects[name])

            def do_PUT(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(("PUT", self.path, body))
                if stub.conflicts:
                    stub.conflicts -= 1
                    stub.policy["bindings"].append({"role": "roles/storage.objectViewer", "members": ["user:x@y.z"]})
                    stub.policy["etag"] += "x"
                if body.get("etag") != stub.policy["etag"]:
                    self._reply(412, {"error": {"code": 412, "message": "Precondition Failed"}})
                    return
                stub.policy = {"version": body.get("version", 1), "etag": stub.policy["etag"] + "+",
                               "bindings": body["bindings"]}
                self._reply(200, {"kind": "storage#policy", **stub.policy})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def puts(self):
        return [r for r in self.requests if r[0] == "PUT"]


@pytest.fixture
def stub(monkeypatch):
    s = IamStub()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", s.url)
    monkeypatch.setenv("TPUCTL_CREDENTIALS", "anonymous")
    yield s
    s.server.shutdown()


def test_grant_binds_object_user_on_the_bucket_once(stub):
    bucket = GcsBucket("iam-bucket", make_client("tpuctl-test"))
    assert bucket.grant_object_access(MEMBER) is True
    (_method, path, body), = stub.puts()
    assert path.startswith("/storage/v1/b/iam-bucket/iam") and body["etag"] == "e1"
    assert {"role": OBJECT_ROLE, "members": [MEMBER]} in body["bindings"]
    assert {"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:p"]} in body["bindings"]
    assert any("optionsRequestedPolicyVersion=3" in p for m, p, _ in stub.requests if m == "GET")
    assert bucket.grant_object_access(MEMBER) is False  # already there: no second write
    assert len(stub.puts()) == 1


def test_a_concurrent_policy_change_is_reread_and_kept(stub):
    stub.conflicts = 1
    bucket = GcsBucket("iam-bucket", make_client("tpuctl-test"))
    assert bucket.grant_object_access(MEMBER) is True
    assert len(stub.puts()) == 2
    roles = {b["role"]: b["members"] for b in stub.policy["bindings"]}
    assert roles[OBJECT_ROLE] == [MEMBER] and roles["roles/storage.objectViewer"] == ["user:x@y.z"]


def test_new_buckets_use_uniform_access_and_are_never_public(stub):
    resource = GcsBucket("iam-bucket", make_client("tpuctl-test")).new_bucket_resource()
    assert resource.iam_configuration.uniform_bucket_level_access_enabled is True
    assert resource.iam_configuration.public_access_prevention == "enforced"
