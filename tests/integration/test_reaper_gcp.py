"""`tpuctl down --idle`, the host agent's autodown and `--min-duty-cycle` on the GCP provider.

Over the wire only: the real Google client libraries against the fake cloud (tests/fakegcp), the
run records in fake-gcs-server, and a loopback stub of Cloud Monitoring's timeSeries.list and of
the metadata server. A live run is written the way `tpuctl train`, its job and its supervisor
leave it in the bucket: run.json, current.json, the job's progress.json and the supervisor's lease.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from provision.basics.config import Target, home
from provision.cloud.storage import open_bucket
from provision.runs import store as runs
from provision.runs.store import RunRecord, RunStore
from tests.conftest import REPO, run_tpuctl_process

PROJECT = "tpuctl-test"
ZONE = "us-central1-b"
TARGET = Target(provider="gcp", project=PROJECT, zone=None)


@pytest.fixture
def cloud(fakegcp_env, gcs_env, gcs_bucket):
    """The fake cloud and a bucket for the clusters' runs (both in os.environ for in-process tpuctl)."""
    fakegcp_env.bucket = f"gs://{gcs_bucket}"
    return fakegcp_env


def nodes(fake) -> dict[str, str]:
    return {n["name"].rsplit("/", 1)[-1]: n["state"] for n in fake.resources()["nodes"]}


def instances(fake) -> list[str]:
    return sorted(i["name"] for i in fake.resources()["instances"])


class BucketRun:
    """A run of ``cluster`` whose records live in the bucket, driven by hand."""

    def __init__(self, bucket_url: str, cluster: str, status: str = "running"):
        bucket = open_bucket(bucket_url, TARGET)
        run_id = runs.new_run_id(cluster)
        self.rec = RunRecord(run_id=run_id, cluster=cluster, provider="gcp", project=PROJECT, zone=ZONE,
                             bucket=bucket_url, model_dir=f"{bucket_url}/tpuctl/runs/{run_id}/model",
                             num_train_steps=100, save_checkpoints_steps=10, status=status)
        self.store = RunStore(bucket, run_id)
        self.store.save(self.rec)
        self.store.write_json(runs.current_name(cluster), {"run_id": run_id, "attempt": 1, "time": time.time()})

    def beat(self, age: float = 0.0, status: str = "running") -> float:
        t = time.time() - age
        self.store.write_json(f"{self.store.prefix}/model/progress.json",
                              {"run_id": self.rec.run_id, "time": t, "status": status, "step": 5})
        return t

    def lease(self, age: float = 0.0) -> None:
        self.store.write_json(f"{self.store.prefix}/supervisor.json",
                              {"owner": "o", "host": "h", "pid": 1, "where": "host", "heartbeat_at": time.time() - age})


def up(tpuctl, name: str, bucket: str, *extra: str) -> None:
    r = tpuctl("up", name, "--zone", ZONE, "--arch", "vm", "--bucket", bucket, *extra)
    assert r.code == 0, r.err


def test_down_idle_over_the_wire(cloud, tpuctl):
    b = cloud.bucket
    for name, extra in (("idle", ["--preemptible"]), ("busy", []), ("pre", ["--preemptible"]),
                        ("kept", ["--label", "tpuctl-keep=true"])):
        up(tpuctl, name, b, *extra)
    cloud.preempt(ZONE, "pre")
    busy = BucketRun(b, "busy")
    time.sleep(1.2)
    busy.beat()
    busy.lease()
    # a reaper on another machine: no local cluster cache, no run index; the buckets come from the
    # host VMs' tpuctl-bucket metadata
    shutil.rmtree(home() / "clusters", ignore_errors=True)
    shutil.rmtree(home() / "runs", ignore_errors=True)
    cloud.clear_calls()

    dry = tpuctl("down", "--idle", "--idle-for", "1s", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    doc = dry.json()
    verdicts = {n["cluster"]: n for n in doc["nodes"]}
    assert {c for c, n in verdicts.items() if n["verdict"] == "delete"} == {"idle", "pre"}
    assert verdicts["busy"]["run_source"].endswith("tpuctl/clusters/busy/current.json")
    assert "training" in verdicts["busy"]["reason"]
    assert doc["provider"] == "gcp" and doc["project"] == PROJECT
    assert not [c for c in cloud.call_counts() if c.endswith(".delete")], "--dry-run deleted something"
    assert "tpuctl down --idle: provider=gcp project=tpuctl-test zone=all" in dry.err

    r = tpuctl("down", "--idle", "--idle-for", "1s", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert sorted(doc["deleted"]) == [f"TPU idle ({ZONE})", f"TPU pre ({ZONE})"]
    assert doc["saves_usd_per_hour"] == 1.35
    assert set(nodes(cloud)) == {"busy", "kept"}
    assert instances(cloud) == ["busy", "idle", "kept", "pre"], "the reaper deletes TPUs, never host VMs"
    counts = cloud.call_counts()
    assert counts.get("tpu.v2.nodes.delete") == 2
    # the deletion is recorded in the cluster's bucket too, where a laptop's `tpuctl cost` finds it
    blobs = list(open_bucket(b, TARGET).list("tpuctl/clusters/idle/ledger/"))
    [event] = [json.loads(open_bucket(b, TARGET).read_bytes(x.name)) for x in blobs]
    assert event["event"] == "tpu_deleted" and event["by"] == "reaper" and event["hourly_usd"] == 1.35


def test_unreadable_run_records_keep_the_tpu(cloud, tpuctl):
    up(tpuctl, "blind", cloud.bucket)
    run = BucketRun(cloud.bucket, "blind")
    run.beat(age=3600)
    run.store.bucket.write_bytes(f"{run.store.prefix}/run.json", b"{half a record")
    time.sleep(1.1)
    # the reaper cannot see whether the run lives, so it keeps the TPU and says why
    r = tpuctl("down", "--idle", "--idle-for", "1s", "--json")
    assert r.code == 0, r.err
    [n] = r.json()["nodes"]
    assert n["verdict"] == "keep" and "run records cannot be read" in n["reason"], n
    assert set(nodes(cloud)) == {"blind"}


class _Stub(BaseHTTPRequestHandler):
    """Cloud Monitoring's projects.timeSeries.list and the metadata server, on loopback."""

    series: ClassVar[list] = []                 # series dicts, or callables that make one when asked
    requests: ClassVar[list] = []
    metadata: ClassVar[dict] = {}
    refuse: ClassVar[tuple | None] = None       # (status, body): timeSeries.list answers that error

    def log_message(self, *args):
        pass

    def do_GET(self):
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        type(self).requests.append((parts.path, query))
        if parts.path.startswith("/computeMetadata/v1/instance/attributes/"):
            key = parts.path.rsplit("/", 1)[-1]
            if key in self.metadata and self.headers.get("Metadata-Flavor") == "Google":
                return self._send(200, self.metadata[key].encode(), "text/plain")
            return self._send(404, b"not found", "text/plain")
        if parts.path == f"/v3/projects/{PROJECT}/timeSeries" and self.refuse:
            return self._send(self.refuse[0], json.dumps(self.refuse[1]).encode())
        if parts.path == f"/v3/projects/{PROJECT}/timeSeries":
            flt = query.get("filter", [""])[0]
            assert 'metric.type = "tpu.googleapis.com/accelerator/duty_cycle"' in flt, flt
            assert 'resource.type = "tpu.googleapis.com/GceTpuWorker"' in flt, flt
            assert query.get("interval.startTime") and query.get("interval.endTime")
            # a callable is a series made when asked, its newest point "now" (no race with a slow run)
            return self._send(200, json.dumps({"timeSeries": [x() if callable(x) else x for x in self.series]}).encode())
        return self._send(404, json.dumps({"error": {"code": 404, "status": "NOT_FOUND"}}).encode())

    def _send(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def stub():
    handler = type("Stub", (_Stub,), {"series": [], "requests": [], "metadata": {}, "refuse": None})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield handler
    server.shutdown()
    server.server_close()


def series(zone: str, worker_id: str, value_at, minutes: int = 20, accelerator: str = "0") -> dict:
    """One chip's duty cycle as Cloud Monitoring returns it: on ``tpu.googleapis.com/GceTpuWorker``,
    whose labels are exactly resource_container, location and worker_id (none names the node)."""
    now = time.time()
    points = []
    for i in range(minutes):
        t = now - 60 * i
        end = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        points.append({"interval": {"startTime": end, "endTime": end}, "value": {"doubleValue": value_at(t)}})
    return {"metric": {"type": "tpu.googleapis.com/accelerator/duty_cycle", "labels": {"accelerator_id": accelerator}},
            "resource": {"type": "tpu.googleapis.com/GceTpuWorker",
                         "labels": {"resource_container": PROJECT, "location": zone, "worker_id": worker_id}},
            "metricKind": "GAUGE", "valueType": "DOUBLE", "points": points}


def test_min_duty_cycle_from_cloud_monitoring(cloud, tpuctl, stub, monkeypatch):
    """Series are mapped to nodes by zone, the one thing their labels say: each TPU alone in its
    zone gets its workers' series; TPUs that share a zone cannot be told apart."""
    b = cloud.bucket
    zones = {"handson": "us-central1-c", "stuck": "us-central1-f", "quiet": "us-central1-b",
             "twin-a": "europe-west4-a", "twin-b": "europe-west4-a"}
    for name, zone in zones.items():
        r = tpuctl("up", name, "--zone", zone, "--arch", "vm", "--no-vm", "--bucket", b)
        assert r.code == 0, r.err
    stuck = BucketRun(b, "stuck")
    time.sleep(2.2)
    stuck.beat()
    stuck.lease()
    now = time.time()
    stub.series = [
        series("us-central1-c", "7023718341", lambda t: 85.0 if t > now - 90 else 0.0),   # someone computes on it
        series("us-central1-c", "7023718341", lambda t: 3.0, accelerator="1"),
        series("us-central1-f", "1158303367", lambda t: 0.4),                              # the job hangs, the TPU idles
        series("europe-west4-a", "5567112094", lambda t: 95.0),                            # one of the twins, unknown
        series("europe-west4-a", "5567112095", lambda t: 0.0),
        series("asia-east1-c", "9990001112", lambda t: 50.0),                              # no TPU of ours there
    ]
    monkeypatch.setenv("TPUCTL_MONITORING_API_ENDPOINT", stub.url)
    doc = tpuctl("down", "--idle", "--idle-for", "2s", "--min-duty-cycle", "5", "--dry-run", "--json").json()
    v = {n["cluster"]: n for n in doc["nodes"]}
    assert doc["duty_cycle"].startswith("read from Cloud Monitoring")
    assert v["handson"]["verdict"] == "keep" and "outside tpuctl" in v["handson"]["reason"]
    assert v["stuck"]["verdict"] == "delete" and "duty cycle stayed under 5%" in v["stuck"]["reason"]
    assert v["quiet"]["verdict"] == "delete" and v["quiet"]["duty_cycle"].startswith("no samples name this node")
    for twin in ("twin-a", "twin-b"):      # two TPUs in europe-west4-a: whose series is whose is unknown
        assert v[twin]["duty_cycle"].startswith("no samples name this node"), v[twin]
        assert v[twin]["verdict"] == "delete"
    assert stub.requests and stub.requests[-1][0] == f"/v3/projects/{PROJECT}/timeSeries"
    # Monitoring unreachable: said so, and the progress record decides alone
    monkeypatch.setenv("TPUCTL_MONITORING_API_ENDPOINT", "http://127.0.0.1:9")
    doc = tpuctl("down", "--idle", "--idle-for", "2s", "--min-duty-cycle", "5", "--dry-run", "--json").json()
    v = {n["cluster"]: n for n in doc["nodes"]}
    assert doc["duty_cycle"].startswith("unavailable (Cloud Monitoring unreachable")
    assert v["stuck"]["verdict"] == "keep" and v["handson"]["verdict"] == "delete"


def _service_account_key(path: Path, token_uri: str) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    path.write_text(json.dumps({"type": "service_account", "project_id": PROJECT, "private_key_id": "k1",
                                "private_key": pem, "client_email": f"reaper@{PROJECT}.iam.gserviceaccount.com",
                                "client_id": "1", "token_uri": token_uri}))
    return path


def _granted_scopes(fake) -> list[set[str]]:
    """The scopes of every JWT-bearer grant the fake's token endpoint was asked for."""
    import base64

    out = []
    for req in fake.set_token()["requests"]:
        claims = req.get("assertion", "").split(".")
        if len(claims) == 3:
            payload = json.loads(base64.urlsafe_b64decode(claims[1] + "=" * (-len(claims[1]) % 4)))
            out.append(set(str(payload.get("scope") or "").split()))
    return out


def test_min_duty_cycle_from_a_laptop_with_a_service_account_key(cloud, tpuctl, stub, monkeypatch, tmp_path):
    """Off a GCE VM the scope asked for is the scope granted: a monitoring.read token, which the duty
    cycle used to ask for, is refused by the TPU API (403 ACCESS_TOKEN_SCOPE_INSUFFICIENT, as the fake
    answers a token granted without its scope), and the duty cycle silently fell back. It is read with
    the provider's cloud-platform token; when Monitoring refuses, the output says why and what fixes it."""
    b = cloud.bucket
    r = tpuctl("up", "laptop", "--zone", "us-central1-c", "--arch", "vm", "--no-vm", "--bucket", b)
    assert r.code == 0, r.err
    time.sleep(2.2)                                              # idle longer than --idle-for
    # 85 % busy up to the moment Monitoring is asked: within --idle-for 2s of the judging however
    # long the run took to get there
    stub.series = [lambda: series("us-central1-c", "7023718341", lambda t: 85.0)]
    monkeypatch.setenv("TPUCTL_MONITORING_API_ENDPOINT", stub.url)
    key = _service_account_key(tmp_path / "sa.json", cloud.token_uri)
    monkeypatch.delenv("TPUCTL_CREDENTIALS", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")     # a laptop: no metadata server
    monkeypatch.setenv("NO_GCE_CHECK", "True")

    # what a token granted for monitoring.read alone gets from the TPU API
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2 import service_account

    narrow = service_account.Credentials.from_service_account_file(
        str(key), scopes=["https://www.googleapis.com/auth/monitoring.read"])
    with AuthorizedSession(narrow) as session:
        resp = session.get(f"{cloud.url}/v2/projects/{PROJECT}/locations/-/nodes")
    assert resp.status_code == 403, resp.text
    assert resp.json()["error"]["details"][0]["reason"] == "ACCESS_TOKEN_SCOPE_INSUFFICIENT"

    down = ("down", "--idle", "--idle-for", "2s", "--min-duty-cycle", "5", "--dry-run")
    doc = run_tpuctl_process(*down, "--json").json()           # the installed tpuctl, as a user runs it
    assert doc["duty_cycle"].startswith("read from Cloud Monitoring"), doc["duty_cycle"]
    [n] = doc["nodes"]
    assert n["verdict"] == "keep" and "outside tpuctl" in n["reason"], n      # 85% busy: someone computes
    granted = _granted_scopes(cloud)[1:]                        # tpuctl's grants, after the probe's
    assert {"https://www.googleapis.com/auth/cloud-platform"} in granted, granted
    assert not any("https://www.googleapis.com/auth/monitoring.read" in g for g in granted), granted
    assert stub.requests[-1][0] == f"/v3/projects/{PROJECT}/timeSeries"

    # Monitoring refuses: the fallback says why (Google's words) and the fix, in JSON and in the table
    from tests.fakegcp.errors import permission_denied

    stub.refuse = (403, permission_denied("monitoring.timeSeries.list", f"projects/{PROJECT}",
                                          "monitoring.googleapis.com").rest_body())
    doc = run_tpuctl_process(*down, "--json").json()
    why = doc["duty_cycle"]
    assert why.startswith("unavailable (Cloud Monitoring answered 403 PERMISSION_DENIED: Permission "
                          "'monitoring.timeSeries.list' denied"), why
    assert "roles/monitoring.viewer" in why and why.endswith("the progress record decides"), why
    r = run_tpuctl_process(*down)
    assert r.code == 0 and "duty cycle: unavailable (Cloud Monitoring answered 403" in r.out, r.out


def test_autodown_by_the_host_vms_agent(cloud, tpuctl, stub, tmp_path):
    """`up --autodown` puts the threshold in the host VM's metadata; the host's agent (run here as a
    subprocess standing in for the VM, with its own empty TPUCTL_HOME) deletes the idle TPU."""
    b = cloud.bucket
    r = tpuctl("up", "auto", "--zone", ZONE, "--arch", "vm", "--preemptible", "--bucket", b, "--autodown", "3s",
               "--json")
    assert r.code == 0, r.err
    assert any("host VM's agent deletes the TPU once idle for 3s" in n for n in r.json()["notes"])
    [inst] = cloud.resources()["instances"]
    meta = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
    assert meta["tpuctl-autodown-seconds"] == "3" and meta["tpuctl-bucket"] == b
    stub.metadata.update(meta)
    run = BucketRun(b, "auto")
    env = {**os.environ, "TPUCTL_METADATA_URL": f"{stub.url}/computeMetadata/v1", "TPUCTL_AUTODOWN_EVERY_S": "0.5",
           "TPUCTL_HOME": str(tmp_path / "host-home")}
    with open(tmp_path / "agent.log", "wb") as log:
        agent = subprocess.Popen([sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "auto", "--bucket",
                                  b, "--project", PROJECT, "--role", "host", "--worker", "host"],
                                 cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 5
        while time.time() < deadline:
            last = run.beat()
            run.lease()
            time.sleep(0.4)
        assert "auto" in nodes(cloud), "autodown deleted a TPU that was training: " + _tail(tmp_path)
        gone_at = None
        deadline = time.time() + 30
        while time.time() < deadline and gone_at is None:
            if nodes(cloud).get("auto") in (None, "DELETING"):
                gone_at = time.time()
            time.sleep(0.1)
        assert gone_at is not None, "the host agent did not delete the idle TPU: " + _tail(tmp_path)
        assert gone_at - last <= 3 + 30
        assert instances(cloud) == ["auto"], "autodown keeps the host VM"
        ledger = open_bucket(b, TARGET)
        deadline = time.time() + 10   # written once the deletion operation is done
        while time.time() < deadline and not list(ledger.list("tpuctl/clusters/auto/ledger/")):
            time.sleep(0.1)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    assert "enforcing autodown 3s for cluster auto" in _tail(tmp_path)
    # the laptop's `tpuctl cost` sees the host's deletion (from the bucket ledger)
    doc = tpuctl("cost", "auto", "--json").json()
    [c] = doc["clusters"]
    assert [s["by"] for s in c["savings"]] == ["autodown"] and c["saving_usd_per_hour"] == 1.35


def _tail(tmp_path: Path) -> str:
    try:
        return (tmp_path / "agent.log").read_text()[-3000:]
    except OSError:
        return ""
