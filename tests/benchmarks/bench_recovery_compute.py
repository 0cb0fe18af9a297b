"""Recovery from a Spot preemption of a Compute Engine TPU slice, on the fake cloud, measured as
``bench_recovery`` measures it on the local provider.

A spot v5p-16 slice (a MIG of 2 ``ct5p-hightpu-4t`` VMs with its workload policy) trains a tiny
BERT run of 400 steps (checkpoints every 50) through the GCP provider against the fake cloud and
fake-gcs-server, each worker's agent a local process reading its VM's metadata server through the
fake. Worker 0 is preempted at steps 100 and 250 as Compute Engine preempts a Spot VM: its guest's
``instance/preempted`` turns TRUE, and ``NOTICE_S`` later the VM is deleted (termination action
DELETE) and powered off: its agent and job are killed, and the recreated VM's agent starts. Side
by side, the same schedule without a notice (the VM gone at once, the job killed mid-step),
which is what the job gets when nothing watches the metadata server.

Reported per preemption, from the run's events: detection, the slice's recreation (delete the
MIG, template and policy; make them again; all workers at once), preemption to the first step of
the resumed attempt, and the steps lost (what the notice saves: the job checkpoints on SIGTERM).
The fake's latencies are its defaults (a VM in 0.4 s), so recreation is tpuctl's own work, not
Google's provisioning time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = 400
CKPT = 50
SCHEDULE = (100, 250)
NOTICE_S = 3.0
ZONE = "us-east5-c"
POLL_S = 0.5


def _run(home: Path, tiny: Path, notice: float) -> dict:
    from tests.fakegcp.fixture import FakeGCP
    from tests.gcs_fixture import FakeGcs

    with FakeGCP() as fake, FakeGcs() as gcs:
        bucket = f"gs://{gcs.create_bucket()}"
        env = {**os.environ, **fake.env(), **gcs.env(), "TPUCTL_HOME": str(home), "TPUCTL_CONFIG": str(home / "c.toml"),
               "CLOUDSDK_CONFIG": str(home / "gcloud"), "TPUCTL_DEVICE": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}

        def tpuctl(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "provision", *args], env=env, cwd=REPO, capture_output=True,
                                  text=True, check=False)

        up = tpuctl("up", "bench", "--zone", ZONE, "-a", "v5p-16", "--spot", "--no-vm")
        if up.returncode != 0:
            raise RuntimeError(up.stderr[-1000:])
        def boot(w: int) -> subprocess.Popen:
            """The agent of worker ``w``'s VM (its own session: powering the VM off ends its job too)."""
            return subprocess.Popen(
                [sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "bench", "--bucket", bucket,
                 "--project", fake.project, "--role", "worker", "--worker", str(w), "--poll", str(POLL_S)],
                cwd=REPO, env={**env, "TPUCTL_METADATA_URL": fake.guest_metadata_url(ZONE, f"bench-tpu-{w}")},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        agents = [boot(w) for w in range(2)]

        def power_off_and_replace() -> None:
            """Worker 0's VM goes (its agent and job with it); the recreated VM's agent starts."""
            os.killpg(agents[0].pid, 9)
            agents[0].wait()
            agents[0] = boot(0)

        model = home / "model"
        try:
            start = time.time()
            proc = subprocess.Popen(
                [sys.executable, "-m", "provision", "train", "bench", "--job", "templates/bert-pretrain-tiny.yaml",
                 "--set", f"bert_dir={tiny}", "--set", f"corpus_files={tiny}/corpus.txt", "--set", f"model_dir={model}",
                 "--set", f"num_train_steps={STEPS}", "--set", f"save_checkpoints_steps={CKPT}",
                 "--set", "steps_per_execution=10", "--allow-local-paths", "--bucket", bucket, "--poll", str(POLL_S),
                 "--json"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            injected: list[float] = []
            pending = list(SCHEDULE)
            while proc.poll() is None:
                time.sleep(0.2)
                try:
                    p = json.loads((model / "progress.json").read_text())
                except (OSError, ValueError):
                    p = {}
                due = pending and p.get("status") == "running" and (p.get("step") or 0) >= pending[0] and \
                    (not injected or (p.get("started_at") or 0) > injected[-1])
                if due:
                    fake.preempt_instance(ZONE, "bench-tpu-0", notice=notice)
                    injected.append(time.time())
                    pending.pop(0)
                    threading.Timer(notice, power_off_and_replace).start()
            out, err = proc.communicate()
            wall = time.time() - start
            if proc.returncode != 0:
                raise RuntimeError(err[-1000:])
            run = json.loads(out)["run"]
            blob = gcs.client().bucket(bucket[5:]).blob(f"tpuctl/runs/{run['run_id']}/events.jsonl")
            events = [json.loads(line) for line in blob.download_as_text().splitlines() if line.strip()]
            counts = fake.call_counts()
        finally:
            for a in agents:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(a.pid, 9)
                a.wait()
        tpuctl("down", "bench")
    return {"wall_s": wall, "run": run, "events": events, "injected": injected, "calls": counts}


def _recoveries(result: dict) -> list[dict]:
    ev = result["events"]
    recreated = [e for e in ev if e.get("event") == "recreated"]
    resumed = [e for e in ev if e.get("event") == "resumed"]
    out = []
    for inj, rec, res in zip(result["injected"], recreated, resumed):
        first_new_step = res["time"]
        out.append({"recreate_s": rec.get("seconds"), "preemption_to_resumed_s": round(first_new_step - inj, 2),
                    "steps_lost": res.get("steps_lost"), "resumed_at_step": res.get("step")})
    return out


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny = tmp / "tiny"
        subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(tiny)], check=True, capture_output=True, cwd=REPO)
        noticed = _run(tmp / "notice", tiny, NOTICE_S)
        silent = _run(tmp / "silent", tiny, 0.0)
    return {
        "slice": "v5p-16 (2 x ct5p-hightpu-4t, spot) on the fake cloud", "steps": STEPS, "save_checkpoints_steps": CKPT,
        "preempt_at_steps": list(SCHEDULE), "notice_s": NOTICE_S, "poll_s": POLL_S,
        "with_notice": {"recoveries": _recoveries(noticed), "wall_s": round(noticed["wall_s"], 1),
                        "run_steps_lost": noticed["run"].get("steps_lost"),
                        "mig_inserts": noticed["calls"].get("compute.instanceGroupManagers.insert")},
        "without_notice": {"recoveries": _recoveries(silent), "wall_s": round(silent["wall_s"], 1),
                           "run_steps_lost": silent["run"].get("steps_lost")},
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
