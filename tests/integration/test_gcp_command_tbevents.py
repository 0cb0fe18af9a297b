"""A `job: command` program on a GCP host that reports its progress only as TensorBoard events in
its `gs://` model directory (what `tf.summary`, Keras' callback, Flax's metric writers and
`SummaryWriter` through `tf.io.gfile` write there): the host agent lists the event objects under
the model directory and reads each one's new tail, so the run's progress, and `tpuctl status`,
show the program's step and loss while it runs, not "no progress reported". Over the wire: the fake
cloud (a v4-8 TPU VM and its metadata server), the agent as a process, fake-gcs-server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_tpuctl_process
from tests.integration.test_gcp_train import _read_object

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gcp-command")]

# Writes events as a writer on Cloud Storage flushes them: the whole object rewritten, longer each
# time. Steps 1-4, then it waits until the run's progress.json says step 4 (what the agent read of
# the bucket while it ran), then steps 5-6 and an evaluation in logs/validation.
PROGRAM = r'''
import json, os, struct, sys, time
import google_crc32c
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

def masked(b):
    c = google_crc32c.value(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out

def field(number, wire, payload):
    key = varint(number << 3 | wire)
    return key + (varint(payload) if wire == 0 else varint(len(payload)) + payload if wire == 2 else payload)

def event(step, **values):
    summary = b"".join(field(1, 2, field(1, 2, tag.replace("__", "/").encode()) + field(2, 5, struct.pack("<f", v)))
                       for tag, v in values.items())
    data = field(1, 1, struct.pack("<d", time.time())) + field(2, 0, step) + field(5, 2, summary)
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))

bucket_name, _, prefix = os.environ["TPUCTL_MODEL_DIR"][len("gs://"):].partition("/")
client = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials(),
                        client_options={"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]})
bucket = client.bucket(bucket_name)
train = bucket.blob(f"{prefix}/logs/events.out.tfevents.1700000000.host.1.v2")
written = event(0)          # a file version event's place: no scalars
for step in range(1, 5):
    written += event(step, train__loss=8.0 / step, learning_rate=0.5)
    train.upload_from_string(written)
    time.sleep(0.2)
deadline = time.time() + 60
while time.time() < deadline:
    blob = bucket.blob(f"{prefix}/progress.json")
    seen = json.loads(blob.download_as_text()) if blob.exists() else {}
    if seen.get("step") == 4:
        print(f"the agent read step 4, loss {seen.get('loss')}", flush=True)
        break
    time.sleep(0.2)
else:
    print("the agent never reported step 4", flush=True)
    sys.exit(3)
for step in (5, 6):
    written += event(step, train__loss=8.0 / step, learning_rate=0.5)
    train.upload_from_string(written)
bucket.blob(f"{prefix}/logs/validation/events.out.tfevents.1700000001.host.1.v2").upload_from_string(
    event(6, epoch_loss=3.0))
'''


def test_events_written_into_the_gs_model_dir_are_the_runs_step_and_loss(fakegcp_env, gcs_env, tmp_path):
    bucket = f"gs://{gcs_env.create_bucket()}"
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text("job: command\ncommand: [python, train.py]\nnum_train_steps: 6\n")
    up = run_tpuctl_process("up", "lab", "--zone", "us-central2-b", "--accelerator-type", "v4-8", "--no-vm", "--json")
    assert up.code == 0, up.err
    agent = subprocess.Popen([sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "lab", "--bucket",
                              bucket, "--project", "tpuctl-test", "--role", "worker", "--worker", "0", "--poll", "0.5"],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ,
                                  "TPUCTL_METADATA_URL": fakegcp_env.metadata_url("us-central2-b", "lab", worker=0)})
    try:
        r = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--bucket", bucket, "--poll", "1",
                               "--json", timeout=300)
    finally:
        agent.kill()
        agent.wait()
    # the program finishes only once the agent has reported its step 4, read from the bucket while it ran
    assert r.code == 0, r.err[-3000:]
    run = r.json()["run"]
    assert run["status"] == "finished", run
    assert run["model_dir"].startswith(bucket)
    progress = _read_object(bucket, run["model_dir"][len(bucket) + 1:] + "/progress.json")
    assert (progress["step"], progress["loss"], progress["progress_reported"]) == (6, pytest.approx(8.0 / 6), True)
    assert progress["metrics"] == {"learning_rate": 0.5, "validation/epoch_loss": 3.0}
    assert run["last_progress"]["step"] == 6
    row = next(line for line in run_tpuctl_process("status").out.splitlines() if line.startswith(run["run_id"]))
    assert "6/6" in row and "1.3333" in row and "no progress reported" not in row, row
