"""Programs written the way public trainers are, unchanged, against the fake Google Cloud: a PyTorch
trainer shaped like nanoGPT's (``torch.save`` of ``ckpt.pt`` into its ``out_dir``, resumed with
``init_from=resume``, no SIGTERM handler) and a JAX trainer shaped like the Flax examples'
(``checkpoint_<step>`` files renamed into place and rotated, a save on SIGTERM). Each spec only
points the program's output directory at ``$TPUCTL_CHECKPOINT_DIR`` (a shell-string ``command``)
and reads its progress from the line it prints (``progress_pattern``).

The run is supervised by ``tpuctl train`` over the wire (the Cloud TPU API of tests/fakegcp, the
bucket in fake-gcs-server); the TPU VM's worker is a host agent process on this machine with a
home of its own, standing in for the VM and its disk. Preempted first with the notice (``tpuctl
simulate preempt --grace``: the worker's metadata server says ``instance/preempted`` TRUE, the
agent signals the program's group, the program's files go up, then the node is PREEMPTED) and
then without (``--no-notice``: the metadata value never turns TRUE, so the program hears nothing
and resumes from a periodic checkpoint of its own), each time the VM is powered off with
everything on it and its disk deleted; the recreated VM's agent starts empty. The program must
say it resumed from its own files (iteration > 0), restored from the bucket, and the run must
finish.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.netcheck import descendants

pytestmark = [pytest.mark.frameworks, pytest.mark.slow, pytest.mark.xdist_group("gcp-programs")]

PROGRAMS = Path(__file__).parent / "programs"
ZONE = "us-central1-b"


class Vm:
    """The TPU VM's worker 0: its agent (and everything it starts) and its disk ($TPUCTL_HOME)."""

    def __init__(self, fake, bucket: str, base: Path):
        self.fake, self.bucket, self.base = fake, bucket, base
        self.incarnation = 0
        self.proc: subprocess.Popen | None = None

    def boot(self) -> None:
        self.incarnation += 1
        home = self.base / f"disk-{self.incarnation}"
        home.mkdir(parents=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "lab", "--bucket", self.bucket,
             "--project", "tpuctl-test", "--role", "worker", "--worker", "0", "--poll", "0.3"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "TPUCTL_HOME": str(home),
                 "TPUCTL_METADATA_URL": self.fake.metadata_url(ZONE, "lab", worker=0)})

    def power_off(self) -> None:
        """Everything on the VM dies at once, and its disk goes with it (a Spot VM is deleted)."""
        assert self.proc is not None
        for pid in descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        shutil.rmtree(self.base / f"disk-{self.incarnation}")


def _object(client, bucket: str, name: str) -> bytes | None:
    blob = client.bucket(bucket[len("gs://"):]).get_blob(name)
    return blob.download_as_bytes() if blob is not None else None


def _run_id(client, bucket: str) -> str | None:
    names = [b.name for b in client.list_blobs(bucket[len("gs://"):], prefix="tpuctl/runs/")]
    ids = sorted({n.split("/")[2] for n in names if n.endswith("/run.json")})
    return ids[-1] if ids else None


def _first(pattern: str, text: str) -> int:
    """The step of the first progress line the program printed in an attempt."""
    return next(int(m.group(1)) for m in (re.search(pattern, line) for line in text.splitlines()) if m)


def _wait(what, timeout: float, train: subprocess.Popen, why: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = what()
        if got:
            return got
        if train.poll() is not None:
            raise AssertionError(f"train ended while waiting for {why}: {train.stderr.read()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {why}")


@pytest.mark.parametrize("program, saved_line, resumed_line, first_line, every", [
    ("gpt_torch", r"saving checkpoint to ", r"Resuming training from ", r"iter (\d+): loss", 20),
    ("gpt_jax", r"Saved checkpoint at step (\d+)", r"Restored checkpoint at step (\d+)", r"step (\d+): train_loss",
     25),
])
def test_a_public_shaped_program_survives_a_preemption_with_the_notice_and_a_hard_kill_on_the_fake_cloud(
        fakegcp_env, gcs_env, tmp_path, program, saved_line, resumed_line, first_line, every):
    bucket = f"gs://{gcs_env.create_bucket()}"
    client = gcs_env.client()
    work = tmp_path / program
    shutil.copytree(PROGRAMS / program, work)
    up = run_tpuctl_process("up", "lab", "--zone", ZONE, "--accelerator-type", "v2-8", "--no-vm", "--preemptible")
    assert up.code == 0, up.err
    vm = Vm(fakegcp_env, bucket, tmp_path / "vm")
    vm.boot()
    train = subprocess.Popen([str(TPUCTL_BIN), "train", "lab", "--job", str(work / "spec.yaml"), "--workdir", str(work),
                              "--bucket", bucket, "--poll", "1", "--json"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        run_id = _wait(lambda: _run_id(client, bucket), 120, train, "the run")
        prefix = f"tpuctl/runs/{run_id}"

        def log(n: int) -> str:
            return (_object(client, bucket, f"{prefix}/attempts/{n}/log-0.txt") or b"").decode()

        def uploaded(n: int) -> bool:
            # a checkpoint attempt n made after its start is in the bucket: two uploads, as a
            # resumed program may save again at once the step it resumed at
            text = log(n)
            return text.count("checkpoint dir: kept") >= 2 and len(re.findall(saved_line, text)) >= 2

        # 1. the notice: the program's files go up, then the VM is powered off and its disk deleted
        _wait(lambda: uploaded(1), 180, train, "attempt 1's checkpoints in the bucket")
        sim = run_tpuctl_process("simulate", "preempt", "lab", "--grace", "5", timeout=120)
        assert sim.code == 0, sim.err
        _wait(lambda: _object(client, bucket, f"{prefix}/attempts/1/exit-0.json"), 60, train, "attempt 1's exit")
        vm.power_off()
        vm.boot()
        # 2. the hard kill, once attempt 2 has resumed and kept a checkpoint of its own
        _wait(lambda: uploaded(2), 180, train, "attempt 2's checkpoints in the bucket")
        hard = run_tpuctl_process("simulate", "preempt", "lab", "--no-notice", timeout=60)
        assert hard.code == 0, hard.err
        vm.power_off()
        vm.boot()
        out, err = train.communicate(timeout=300)
    finally:
        if train.poll() is None:
            train.kill()
        if vm.proc is not None and vm.proc.poll() is None:
            vm.power_off()
    assert train.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["attempts"]) == ("finished", 2, 3), err[-3000:]
    exit1 = json.loads(_object(client, bucket, f"{prefix}/attempts/1/exit-0.json"))
    assert exit1["code"] == 42 and exit1.get("after_sigterm"), exit1
    fresh = _first(first_line, log(1))
    assert fresh <= 1                              # the first attempt starts from scratch (iteration 0, step 1)
    for n in (2, 3):
        text = log(n)
        assert re.search(r"TPUCTL_CHECKPOINT_DIR=\S+: restored \d+ file\(s\)", text), text[-3000:]
        assert re.search(resumed_line, text), text[-3000:]
        resumed = _first(first_line, text)
        assert resumed > fresh + 1, text[-3000:]   # from its own checkpoint, not from the start
    assert "preemption notice from the metadata server" in log(1), log(1)[-3000:]
    # the hard kill gave no notice: attempt 2 never heard of a preemption, and attempt 3 resumed from
    # a periodic checkpoint attempt 2 wrote itself (a multiple of its interval), not a save on SIGTERM
    assert "preemption notice from the metadata server" not in log(2), log(2)[-3000:]
    second, third = _first(first_line, log(2)), _first(first_line, log(3))
    if program == "gpt_jax":                       # it saved on the notice, and resumed from exactly that save
        saved = [int(x) for x in re.findall(saved_line, log(1))]
        assert re.search(resumed_line, log(2)).group(1) == str(saved[-1])
        restored = int(re.search(resumed_line, log(3)).group(1))
        assert restored == third - 1, log(3)[-3000:]    # (attempt 2's log in the bucket lags its last steps)
    else:                                          # nanoGPT prints iteration N first after resuming at N
        restored = third
    assert restored % every == 0 and restored > second, (restored, second)
    # the run's progress came from the lines it printed
    assert run["last_progress"]["step"] >= run["num_train_steps"] - 1
    events = run_tpuctl_process("logs", run_id, "--events").out
    assert events.count("resumed") >= 2, events
