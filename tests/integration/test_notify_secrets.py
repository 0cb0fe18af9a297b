"""A channel whose secret is in Secret Manager, read over REST as the host VM reads it.

The stand-in answers as Secret Manager's REST API documents it:
- success, ``AccessSecretVersionResponse``: ``{"name": ".../versions/N", "payload": {"data": <base64>,
  "dataCrc32c": <int64 as a string>}}``
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access);
- refusal, Google's error model (https://google.aip.dev/193): ``{"error": {"code": 403, "message":
  ..., "status": "PERMISSION_DENIED"}}``, the message as Secret Manager words a missing
  secretAccessor grant ("Permission 'secretmanager.versions.access' denied for resource ...").
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import google_crc32c
import pytest

from provision.notify.notifier import Notifier
from provision.notify.settings import Channel, Settings
from tests.receivers import http_receiver

SECRET_PATH = "/v1/projects/my-project/secrets/tpuctl-hook/versions/latest:access"


@pytest.fixture
def secret_manager(monkeypatch):
    hook = http_receiver()
    value = json.dumps({"url": f"{hook.url}/from-secret-manager-0123456789", "signing_key": "sm-key-0123456789"})
    seen: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path == SECRET_PATH:
                data = value.encode()
                body = {"name": "projects/123456789/secrets/tpuctl-hook/versions/1",
                        "payload": {"data": base64.b64encode(data).decode(),
                                    "dataCrc32c": str(google_crc32c.value(data))}}
                status = 200
            else:
                resource = self.path[len("/v1/"):].removesuffix(":access")
                body = {"error": {"code": 403, "message": f"Permission 'secretmanager.versions.access' denied for "
                                                          f"resource '{resource}' (or it may not exist).",
                                  "status": "PERMISSION_DENIED"}}
                status = 403
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("TPUCTL_SECRETMANAGER_API_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("TPUCTL_CREDENTIALS", "anonymous")
    yield hook, seen, value
    server.shutdown()
    hook.close()


def _send(secret_ref: str) -> list[dict]:
    records: list[dict] = []
    said: list[str] = []
    n = Notifier(Settings(channels=(Channel(name="ops", kind="webhook", secret=secret_ref),)),
                 record=lambda kind, **data: records.append({"event": kind, **data}), log=said.append)
    from provision.notify.messages import Notice

    n.notice(Notice(kind="finished", subject="run-1", title="run run-1 finished", text="run run-1 finished",
                    time=0.0, final=True))
    n.close(timeout=30)
    return records + [{"said": line} for line in said]


def test_a_secret_manager_secret_is_read_and_the_webhook_gets_the_notice(secret_manager):
    hook, seen, _value = secret_manager
    out = _send("sm://projects/my-project/secrets/tpuctl-hook")
    assert out[0] == {"event": "notify_sent", "channel": "ops", "via": "webhook", "notice": "finished",
                      "subject": "run-1", "tries": 1}
    [got] = hook.received
    assert got.path == "/from-secret-manager-0123456789" and got.headers["X-Tpuctl-Signature"].startswith("v1=")
    assert seen == [(SECRET_PATH, None)]          # anonymous here; the host's own token on GCP
    assert "from-secret-manager" not in json.dumps(out) and "sm-key" not in json.dumps(out)


def test_a_secret_the_account_may_not_read_fails_the_message_with_the_grant_to_add(secret_manager):
    _hook, _seen, _value = secret_manager
    out = _send("sm://projects/my-project/secrets/other")
    failed = out[0]
    assert failed["event"] == "notify_failed" and failed["tries"] == 1
    assert failed["error"].startswith("Secret Manager answered HTTP 403 PERMISSION_DENIED for "
                                      "sm://projects/my-project/secrets/other; grant the supervisor's account")
    assert "roles/secretmanager.secretAccessor on secret other" in failed["error"]
