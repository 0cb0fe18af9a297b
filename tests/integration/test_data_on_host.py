"""``tpuctl data --on CLUSTER``: the shards made on the cluster's host VM, not on this machine's
foreground nor on a TPU. On the local provider the host VM is this machine (a detached process);
the GCP host agent's side (a request in the bucket) runs here against a local-provider bucket."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from jobs.bert.tiny import corpus, vocabulary
from provision.host import data_requests as dr

SMALL = ("--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2", "--parts", "3",
         "--workers", "1")


@pytest.fixture
def inputs(tmp_path) -> tuple[Path, Path]:
    bert = tmp_path / "uncased_tiny"
    bert.mkdir()
    (bert / "vocab.txt").write_text("\n".join(vocabulary()) + "\n", encoding="utf-8")
    text = tmp_path / "wiki.txt"
    text.write_text(corpus(random.Random(9), documents=80), encoding="utf-8")
    return text, bert


def buckets() -> Path:
    return Path(os.environ["TPUCTL_HOME"]) / "local" / "buckets"


def shards(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.tfrecord"))}


def wait_complete(manifest: Path, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if manifest.exists():
            doc = json.loads(manifest.read_text())
            if doc.get("complete"):
                return doc
        time.sleep(0.3)
    raise AssertionError(f"{manifest} not complete after {timeout} s")


def test_data_on_a_local_cluster_runs_on_its_host_and_equals_a_local_run(tpuctl_process, inputs, tmp_path):
    text, bert = inputs
    assert tpuctl_process("up", "lab").code == 0
    r = tpuctl_process("data", str(text), "--bert-dir", str(bert), "--out", "gs://data-on/wiki", *SMALL,
                       "--on", "lab", "--create-bucket", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["on"] == "lab" and "host VM" in doc["where"] and doc["follow"].startswith("tail -f ")
    # the corpus and vocab went to the bucket first; the host reads them from there
    staged = buckets() / "data-on" / dr.inputs_prefix(doc["request"]["id"])
    assert (staged / "corpus" / "00000-wiki.txt").read_bytes() == text.read_bytes()
    assert doc["request"]["bert_dir"].endswith("/uncased_tiny")
    manifest = wait_complete(buckets() / "data-on" / "wiki" / "manifest.json")
    assert "instances in 3 shard(s) at gs://data-on/wiki" in Path(doc["log"]).read_text()

    here = tpuctl_process("data", str(text), "--bert-dir", str(bert), "--out", str(tmp_path / "here"), *SMALL,
                          "--json")
    assert here.code == 0, here.err
    assert shards(buckets() / "data-on" / "wiki") == shards(tmp_path / "here")
    assert manifest["total"] == here.json()["instances"] > 0


def test_bad_cluster_or_destination_is_one_line_before_anything_is_staged(tpuctl_process, inputs):
    text, bert = inputs
    assert tpuctl_process("up", "bare", "--no-vm").code == 0
    assert tpuctl_process("up", "lab").code == 0
    (text.parent / "latin1.txt").write_bytes("caf\xe9 au lait.\n".encode("latin-1"))
    cases = [("nope", "gs://data-on/wiki", "no cluster named nope"),
             ("bare", "gs://data-on/wiki", "cluster bare has no host VM"),
             ("bare", "/tmp/not-a-bucket", "is not a bucket"),
             ("lab", "gs://data-on/wiki", "latin1.txt is not UTF-8 text")]
    for cluster, out, expected in cases:
        corpus = text.parent / "latin1.txt" if cluster == "lab" else text
        r = tpuctl_process("data", str(corpus), "--bert-dir", str(bert), "--out", out, *SMALL, "--on", cluster,
                           "--create-bucket")
        assert r.code == 2, r.err
        errors = [ln for ln in r.err.splitlines() if "error" in ln]
        assert len(errors) == 1 and expected in errors[0], r.err
    assert not (buckets() / "data-on").exists()


def test_host_agent_runs_a_data_request_from_the_bucket(inputs, tmp_path):
    """The GCP host VM's side: the agent finds the request, runs tpuctl data, uploads its log and
    status, drops the request; a request that is not one (a local path, an unknown option), or
    one not pinned on the host (only written to the bucket), is dropped unrun."""
    from provision.basics.config import Target, home
    from provision.basics.validate import bucket_url
    from provision.cloud.local import LocalProvider
    from provision.cloud.storage import open_bucket
    from provision.host.agent import watch_data
    from provision.host.trust import HostPin
    from provision.runs.pins import KEY, updated

    text, bert = inputs
    bucket_dir = buckets() / "agent-bkt"
    bucket_dir.mkdir(parents=True)
    bucket = open_bucket(bucket_url("gs://agent-bkt"), Target(provider="local", project="local", zone=None))
    bucket.upload_file(text, "in/wiki.txt")
    bucket.upload_file(bert / "vocab.txt", "in/uncased_tiny/vocab.txt")
    options = tuple(x for x in SMALL)
    req = dr.DataRequest("0123456789abcdef", ("gs://agent-bkt/in/wiki.txt",), "gs://agent-bkt/in/uncased_tiny",
                         "gs://agent-bkt/out", options)
    bucket.write_bytes(dr.request_name("lab", req.request_id), json.dumps(dr.to_json(req)).encode())
    LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur: updated(
        cur, "data", req.request_id, {"request": dr.digest(req), "wheel": None}))
    bad = {**dr.to_json(req), "id": "fedcba9876543210", "options": ["--work-dir", "/etc"]}
    bucket.write_bytes(dr.request_name("lab", bad["id"]), json.dumps(bad).encode())
    unpinned = {**dr.to_json(req), "id": "00000000deadbeef", "out": "gs://agent-bkt/elsewhere"}
    bucket.write_bytes(dr.request_name("lab", unpinned["id"]), json.dumps(unpinned).encode())

    runs: dict = {}
    trust = HostPin("local", "lab")
    watch_data(bucket, "lab", ["--provider", "local"], runs, trust=trust)
    assert list(runs) == [req.request_id]
    assert bucket.stat(dr.request_name("lab", bad["id"])) is None
    assert bucket.stat(dr.request_name("lab", unpinned["id"])) is None
    deadline = time.monotonic() + 120
    while runs and time.monotonic() < deadline:
        time.sleep(0.3)
        watch_data(bucket, "lab", ["--provider", "local"], runs, trust=trust)
    assert not runs
    assert json.loads(bucket.read_bytes(dr.status_name(req.request_id)))["code"] == 0
    assert b"instances in 3 shard(s)" in bucket.read_bytes(dr.log_name(req.request_id))
    assert bucket.stat(dr.request_name("lab", req.request_id)) is None
    assert json.loads((bucket_dir / "out" / "manifest.json").read_text())["complete"]
    assert not (bucket_dir / "elsewhere").exists()


@pytest.mark.parametrize("change", [
    {"corpus": ["/etc/passwd"]}, {"out": "file:///tmp/x"}, {"options": ["--workers"]},
    {"options": ["--seed", "1; rm -rf /"]}, {"id": "../../x"}, {"options": ["--runner", "dataflow"]},
])
def test_a_request_from_the_bucket_is_parsed_not_trusted(change):
    good = {"id": "0123456789abcdef", "corpus": ["gs://b-1/c.txt"], "bert_dir": "gs://b-1/bert",
            "out": "gs://b-1/out", "options": ["--seed", "7", "--exact"]}
    assert dr.from_json(good) is not None
    assert dr.from_json({**good, **change}) is None


def test_data_on_a_gcp_cluster_is_a_request_its_host_agent_runs(fakegcp_env, gcs_env, gcs_bucket, inputs, tmp_path,
                                                                monkeypatch):
    """Over the wire (the fake cloud and fake-gcs-server): the inputs staged, the host VM pointed at
    the bucket and given this tpuctl, the request written; then the host VM's agent (run here)
    makes the shards, uploads its log and status."""
    from provision.basics.config import Target
    from provision.cloud.gcp import GcpProvider
    from provision.cloud.storage import open_bucket
    from provision.host.agent import watch_data
    from provision.host.trust import HostPin
    from provision.runs.pins import Pin
    from tests.conftest import run_tpuctl_process

    project = "tpuctl-test"
    text, bert = inputs
    bucket, out = f"gs://{gcs_bucket}", f"gs://{gcs_bucket}/data/wiki"
    b = open_bucket(bucket, Target(provider="gcp", project=project, zone=None))
    assert run_tpuctl_process("up", "hostc", "--zone", "us-central1-b").code == 0
    r = run_tpuctl_process("data", str(text), "--bert-dir", str(bert), "--out", out, *SMALL, "--on", "hostc",
                           "--provider", "gcp", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    rid = doc["request"]["id"]
    assert doc["where"] == "the host VM" and doc["log"] == f"{bucket}/{dr.log_name(rid)}"
    assert b.read_bytes(f"{dr.inputs_prefix(rid)}/corpus/00000-wiki.txt") == text.read_bytes()
    assert dr.from_json(json.loads(b.read_bytes(dr.request_name("hostc", rid)))).out == out
    wheel = json.loads(b.read_bytes("tpuctl/clusters/hostc/agent.json"))["wheel_object"]
    assert b.stat(wheel) is not None
    meta = GcpProvider(project).metadata_of("vm", "us-central1-b", "hostc")
    assert meta["tpuctl-bucket"] == bucket
    assert Pin.parse(meta["tpuctl-pin"]).entry("data", rid)["request"] == dr.digest(dr.from_json(doc["request"]))
    # the wheel the data request staged is under the request's prefix, where the bootstrap accepts it
    assert wheel.startswith(f"{dr.request_prefix(rid)}/tpuctl/tpuctl-")

    monkeypatch.setenv("TPUCTL_METADATA_URL", fakegcp_env.metadata_url("us-central1-b", "hostc"))
    trust = HostPin("gcp", "hostc")
    runs: dict = {}
    deadline = time.monotonic() + 120
    watch_data(b, "hostc", ["--provider", "gcp", "--project", project], runs, trust=trust)
    assert list(runs) == [rid]
    while runs and time.monotonic() < deadline:
        time.sleep(0.3)
        watch_data(b, "hostc", ["--provider", "gcp", "--project", project], runs, trust=trust)
    assert json.loads(b.read_bytes(dr.status_name(rid)))["code"] == 0, b.read_bytes(dr.log_name(rid))
    assert json.loads(b.read_bytes("data/wiki/manifest.json"))["complete"]
    here = run_tpuctl_process("data", str(text), "--bert-dir", str(bert), "--out", str(tmp_path / "here"), *SMALL)
    assert here.code == 0, here.err
    assert {n: b.read_bytes(f"data/wiki/{n}") for n in shards(tmp_path / "here")} == shards(tmp_path / "here")
