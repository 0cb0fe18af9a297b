"""`tpuctl simulate preempt` against the fake cloud, over the wire, on a TPU VM (Cloud TPU API, and
a single-host Spot TPU VM on Compute Engine): the notice first -- every worker's metadata server
answers `instance/preempted` TRUE, which the host agent's watcher (provision/host/preemption.py)
turns into SIGTERM for the program -- then, the grace period later, the node PREEMPTED (the
Compute Engine VM deleted, as its termination action says). The program saves on SIGTERM and says so in its log;
the supervisor recreates the TPU and the run resumes from that save and finishes, one preemption.
The host agent runs here as a subprocess standing in for the TPU VM worker's, with
TPUCTL_METADATA_URL pointing at the fake's per-worker metadata server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gcp-command")]

# its state in a directory of this machine (the stand-in host of both attempts), given in argv
PROGRAM = r'''
import json, os, signal, sys, time
ckpt = os.path.join(sys.argv[1], "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
print(f"resumed at step {step}", flush=True)
def save():
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
def term(*_):
    save()
    print(f"saved at step {step}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
report = open(os.environ["TPUCTL_PROGRESS_FILE"], "a", buffering=1)
while step < 200:
    time.sleep(0.05)
    step += 1
    report.write(json.dumps({"step": step}) + "\n")
    if step % 100 == 0:
        save()
save()
'''


def _preempted(url: str, query: str = "") -> tuple[str, str | None]:
    req = urllib.request.Request(f"{url}/instance/preempted{query}", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read().decode(), resp.headers.get("ETag")


def test_every_worker_of_a_tpu_vm_reads_the_notice_at_once_and_the_node_goes_after_it(fakegcp_env):
    up = run_tpuctl_process("up", "pod", "--zone", "us-central2-b", "--accelerator-type", "v4-16", "--no-vm",
                            "--spot")
    assert up.code == 0, up.err
    urls = [fakegcp_env.metadata_url("us-central2-b", "pod", worker=w) for w in (0, 1)]
    value, tag = _preempted(urls[0])
    assert value == "FALSE" and tag
    waiting = subprocess.Popen([sys.executable, "-c", (
        "import sys, urllib.request\n"
        f"r = urllib.request.Request(sys.argv[1] + '/instance/preempted?wait_for_change=true&last_etag={tag}',"
        " headers={'Metadata-Flavor': 'Google'})\n"
        "print(urllib.request.urlopen(r, timeout=30).read().decode())"), urls[1]], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert waiting.poll() is None                               # a long poll: nothing has changed yet
    fakegcp_env.preempt("us-central2-b", "pod", notice=2.0)
    assert waiting.communicate(timeout=10)[0].strip() == "TRUE"
    assert [_preempted(u)[0] for u in urls] == ["TRUE", "TRUE"]
    node = next(n for n in fakegcp_env.resources()["nodes"] if n["name"].endswith("/nodes/pod"))
    assert node["state"] == "READY"                             # the grace period: still there
    time.sleep(2.5)
    node = next(n for n in fakegcp_env.resources()["nodes"] if n["name"].endswith("/nodes/pod"))
    assert node["state"] == "PREEMPTED"


@pytest.mark.parametrize("api, zone, accelerator, flags", [
    ("tpu", "us-central1-b", "v2-8", ["--preemptible"]),
    pytest.param("compute", "us-east5-a", "v6e-8", ["--spot", "--api", "compute"], marks=pytest.mark.long),
])
def test_a_rehearsed_preemption_lets_the_program_save_and_the_run_resumes_from_it(fakegcp_env, gcs_env, tmp_path,
                                                                                   api, zone, accelerator, flags):
    """On the Cloud TPU API the notice reaches the node's worker; on Compute Engine (a single-host
    Spot TPU VM, deleted by its preemption and made again by the supervisor) the instance's guest.
    Either way the agent reads ``instance/preempted`` TRUE from its metadata server."""
    bucket = f"gs://{gcs_env.create_bucket()}"
    work, state = tmp_path / "prog", tmp_path / "state"
    work.mkdir()
    state.mkdir()
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text(f'job: command\ncommand: [python, train.py, "{state}"]\nnum_train_steps: 200\n')
    if api == "compute":
        fakegcp_env.set_latencies(vm_create=0.1, vm_delete=0.05, tpu_create=0.15, tpu_delete=0.1)
        metadata = fakegcp_env.guest_metadata_url(zone, "lab-tpu")
    else:
        metadata = fakegcp_env.metadata_url(zone, "lab", worker=0)
    up = run_tpuctl_process("up", "lab", "--zone", zone, "--accelerator-type", accelerator, "--no-vm", *flags)
    assert up.code == 0, up.err
    agent = subprocess.Popen([sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "lab", "--bucket",
                              bucket, "--project", "tpuctl-test", "--role", "worker", "--worker", "0", "--poll", "0.5"],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "TPUCTL_METADATA_URL": metadata})
    train = subprocess.Popen([str(TPUCTL_BIN), "train", "lab", "--job", str(work / "spec.yaml"), "--bucket", bucket,
                              "--poll", "1", "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.time() + 120
        while not (state / "state.json").exists():
            assert train.poll() is None and time.time() < deadline, train.stderr.read()[-3000:]
            time.sleep(0.1)
        time.sleep(0.5)
        sim = run_tpuctl_process("simulate", "preempt", "lab", "--grace", "3")
        out, err = train.communicate(timeout=240)
    finally:
        agent.kill()
        agent.wait()
        if train.poll() is None:
            train.kill()
    assert sim.code == 0, sim.err
    lines = sim.out.splitlines()
    assert lines[-2] == (f"TPU lab in {zone}: preemption notice given; its job gets SIGTERM and has 3 s "
                         "to save before the power-off"), sim.out
    gone = (f"TPU lab in {zone} is now PREEMPTED (", f"TPU lab in {zone} is gone: powered off and deleted (",
            f"TPU lab in {zone} is already being recreated by its supervisor: ")
    assert lines[-1].startswith(gone), sim.out
    assert train.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["last_progress"]["step"], run["preemptions"], run["attempts"]) == \
        ("finished", 200, 1, 2), err[-3000:]
    log = run_tpuctl_process("logs", run["run_id"]).out
    saved = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("saved at step ")]
    resumed = [int(x.split()[-1]) for x in log.splitlines() if x.startswith("resumed at step ")]
    assert "preemption notice from the metadata server" in log, log
    assert len(saved) == 1 and saved[0] > 100 and resumed == [0, saved[0]], log
