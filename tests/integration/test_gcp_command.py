"""`job: command` on a TPU VM pod slice, over the wire: the fake cloud (a v4-16, two workers, each
with its own metadata server view) and fake-gcs-server. With `hosts: all` both workers' agents
run the program, each with its index, the count and worker 0's internal address from the node's
`networkEndpoints` as the coordinator; the program's workdir comes from the bucket (checked
against the pin), and worker 0's progress lines become the run's `progress.json` in the bucket,
which the supervisor reads as it reads the TensorFlow runner's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_tpuctl_process
from tests.integration.test_gcp_train import _read_object

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gcp-command")]

PROGRAM = r'''
import json, os
seen = {k: os.environ.get(k) for k in ("TPUCTL_WORKER_INDEX", "TPUCTL_NUM_WORKERS", "TPUCTL_COORDINATOR",
                                       "TPUCTL_ACCELERATOR_TYPE", "TPUCTL_ATTEMPT")}
print("seen", json.dumps(seen, sort_keys=True), flush=True)
with open(os.environ["TPUCTL_PROGRESS_FILE"], "a") as f:
    f.write(json.dumps({"step": 5, "loss": 0.5, "metrics": {"worker": int(seen["TPUCTL_WORKER_INDEX"])}}) + "\n")
'''


def test_hosts_all_runs_the_program_on_every_worker_of_a_pod_with_its_coordinator(fakegcp_env, gcs_env, tmp_path):
    bucket = f"gs://{gcs_env.create_bucket()}"
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text("job: command\ncommand: [python, train.py]\nhosts: all\nnum_train_steps: 5\n")
    up = run_tpuctl_process("up", "pod", "--zone", "us-central2-b", "--accelerator-type", "v4-16", "--no-vm", "--json")
    assert up.code == 0, up.err
    agents = [subprocess.Popen([sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "pod", "--bucket",
                                bucket, "--project", "tpuctl-test", "--role", "worker", "--worker", str(w),
                                "--poll", "0.5"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "TPUCTL_METADATA_URL": fakegcp_env.metadata_url("us-central2-b", "pod",
                                                                                                worker=w)})
              for w in (0, 1)]
    try:
        r = run_tpuctl_process("train", "pod", "--job", str(work / "spec.yaml"), "--bucket", bucket, "--poll", "1",
                               "--json", timeout=300)
    finally:
        for a in agents:
            a.kill()
            a.wait()
    assert r.code == 0, r.err[-3000:]
    run = r.json()["run"]
    assert (run["status"], run["attempts"], run["attempt"]["workers"]) == ("finished", 1, 2)
    node = next(n for n in fakegcp_env.resources()["nodes"] if n["name"].endswith("/nodes/pod"))
    first = node["networkEndpoints"][0]["ipAddress"]
    for w in (0, 1):
        log = run_tpuctl_process("logs", run["run_id"], "--worker", str(w)).out
        seen = json.loads(next(line for line in log.splitlines() if line.startswith("seen "))[5:])
        assert seen == {"TPUCTL_WORKER_INDEX": str(w), "TPUCTL_NUM_WORKERS": "2", "TPUCTL_COORDINATOR": f"{first}:8482",
                        "TPUCTL_ACCELERATOR_TYPE": "v4-16", "TPUCTL_ATTEMPT": "0"}
    assert run["model_dir"].startswith(bucket)
    progress = _read_object(bucket, run["model_dir"][len(bucket) + 1:] + "/progress.json")
    assert (progress["status"], progress["step"], progress["metrics"]) == ("finished", 5, {"worker": 0.0})
    assert run["last_progress"]["step"] == 5
