"""A finished run with one real preemption and a sweep's records, and `tpuctl ui` serving them:
what tests/e2e/test_ui_browser.py looks at in Chromium and tests/e2e/test_ui_server.py asks over HTTP.
Both sign in as a user does, with the token in the URL that `tpuctl ui` printed.

The run is a real supervised run on the local provider with one real preemption (its job
scripted, as in tests/integration/test_overlapping_preemptions.py); the sweep's records are the
controller's record types written to its bucket directory. The page is what `tpuctl ui` (the
installed entry point) serves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.runs import store as runs
from provision.runs import training
from provision.runs.estimate import Estimate
from provision.runs.store import RunRecord, RunStore
from provision.runs.supervisor import Supervisor
from provision.sweeps import store as sweeps
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.integration.test_overlapping_preemptions import STEPS, ScriptedJob

HOSTILE = '<img src=x onerror="document.title=\'pwned\'">'


class Losing(ScriptedJob):
    """The scripted job, with a loss that falls and an accuracy that rises as it trains."""

    def _write(self, **fields) -> None:
        fields.setdefault("loss", round(2.0 * 0.97 ** self.step, 4))
        fields.setdefault("metrics", {"eval_accuracy": round(0.5 + 0.4 * self.step / STEPS, 4)})
        super()._write(**fields)


@pytest.fixture
def records(isolated_env, tmp_path, monkeypatch):
    for var, value in (("TPUCTL_LOCAL_TPU_CREATE_SECONDS", "0.3"), ("TPUCTL_LOCAL_VM_CREATE_SECONDS", "0.05"),
                       ("TPUCTL_LOCAL_DELETE_SECONDS", "0.05")):
        monkeypatch.setenv(var, value)
    assert run_tpuctl_process("up", "lab", "--accelerator-type", "v3-8", "--preemptible").code == 0
    provider = LocalProvider(home())
    bucket = local_bucket("tpuctl-local")
    if not bucket.exists():
        bucket.create("local")
    tpu = provider.get_tpu(*next((t.zone, t.name) for t in provider.list_tpus()))
    rec = RunRecord(run_id="lab-20261127-120000-ab12", cluster="lab", provider="local", project="local",
                    zone=tpu.zone, bucket="gs://tpuctl-local", model_dir=str(tmp_path / "model"),
                    num_train_steps=STEPS, save_checkpoints_steps=20, job="bert-finetune", reason=HOSTILE)
    store = RunStore(bucket, rec.run_id)
    store.save(rec)
    spec = training.cluster_spec_for(provider, "lab", tpu, bucket=rec.bucket)
    store.bucket.write_bytes(runs.cluster_spec_name("lab"), json.dumps(spec.to_dict(), default=str).encode())
    runs.remember(rec)

    class Slow(Losing):
        def poll(self, rec, n):
            time.sleep(0.1)          # a curve of several looks, and a timeline with some width
            return super().poll(rec, n)

    sup = Supervisor(provider, spec, store, Slow(provider, tmp_path / "model", preempt_at=50),
                     lambda rec, n, tpu: {"workers": {"0": {}}}, where="test", poll_s=0.05, log=lambda m: None)
    done = sup.run()
    assert done.status == "finished" and done.preemptions == 1

    sweep_id = "sweep-20261127-120000-cd34"
    sweep = sweeps.SweepRecord(sweep_id=sweep_id, provider="local", project="local",
                               bucket="gs://tpuctl-local", zones=[tpu.zone], accelerator_type="v3-8",
                               preemptible=True, spot=False, max_concurrent=2, max_trials=4, state="finished",
                               spec={"metric": "eval_accuracy", "goal": "maximize", "method": "random",
                                     "pruner": "none"}, budget_usd=20.0,
                               best={"trial": 1, "params": {"learning_rate": 3e-5, "train_batch_size": 32},
                                     "metric": 0.86, "run": f"{sweep_id}-t1"})
    sstore = sweeps.SweepStore(bucket, sweep.sweep_id)
    sstore.save(sweep)
    for i, (lr, bs, acc) in enumerate(((1e-5, 16, 0.71), (3e-5, 32, 0.86), (1e-4, 16, 0.79), (5e-5, 32, None))):
        sstore.save_trial(sweeps.TrialRecord(trial=i, params={"learning_rate": lr, "train_batch_size": bs},
                                             state="finished" if acc else "pruned", metric=acc, steps=STEPS,
                                             cost_usd=0.4 + i / 10, run=f"{sweep.sweep_id}-t{i}"))
    sweeps.remember(sweep)
    _estimated_runs(bucket)
    _timeline_run(bucket)
    return rec.run_id, sweep.sweep_id, store


# two finished runs as their records hold them, beside the real one: one started with an estimate
# (what provision.runs.forecast stores: Estimate.to_dict() and when), its loss driven to 7e-13 and
# its eval_accuracy measured once; one started with none
ESTIMATED, UNESTIMATED = "probe-20261127-130000-ef56", "probe-20261127-140000-ab78"
NO_ESTIMATE_WHY = "the measured 5000 steps/s puts 300 steps under a second"
MADE_AT = 1_795_780_800.0         # 2026-11-27 12:00 UTC: that date in any time zone from -11 to +11


def _estimated_runs(bucket) -> None:
    est = Estimate(accelerator_type="v2-8", zone="us-central1-b", region="us-central1", tier="preemptible",
                   usd_per_hour=1.35, steps=300, steps_per_sec=0.0806, speed_source="measured", compute_s=3720.0,
                   interruptions=0.347, overhead_s=5.0, total_s=3725.0, total_usd=1.234,
                   basis=("measured: 0.0806 steps/s over 900 steps in 3 past run(s) on this type",
                          "price: $1.35/h (preemptible list price in us-central1)"), cheapest=True)
    curve = [{"step": s, "t": MADE_AT + s, "loss": 7e-13 * (301 - s), "m": {}} for s in (50, 100, 200, 299)]
    curve.append({"step": 300, "t": MADE_AT + 300, "loss": 7e-13, "m": {"eval_accuracy": 0.9123}})
    for run_id, estimate in ((ESTIMATED, {**est.to_dict(), "at": MADE_AT}),
                             (UNESTIMATED, {"none": NO_ESTIMATE_WHY, "at": MADE_AT})):
        rec = RunRecord(run_id=run_id, cluster="probe", provider="local", project="local", zone="us-central1-b",
                        bucket="gs://tpuctl-local", model_dir="gs://tpuctl-local/probe", num_train_steps=300,
                        save_checkpoints_steps=100, job="bert-finetune", status="finished", created_at=MADE_AT,
                        ended_at=MADE_AT + 3800, last_progress={"step": 300, "loss": 7e-13}, curve=curve,
                        estimate=estimate)
        RunStore(bucket, run_id).save(rec)
        runs.remember(rec)


# a finished run whose records are the hand-built timeline of tests/unit/test_goodput.py (preempted
# twice: once with the notice, saved inside it; once hard, two steps redone), on cluster "bench",
# whose TPU lifetimes are in this machine's cost ledger: every goodput category and both
# preemptions' phases are known to the second
TIMELINE_RUN = "bench-20261127-150000-cd90"
TIMELINE_AT = MADE_AT + 7200 - 1000     # the timeline's second 1000 is 14:00 UTC that day


def _timeline_run(bucket) -> None:
    from provision.cluster import ledger
    from tests.unit.test_goodput import BILLED, EVENTS, EXITS, RECORD

    def at(t: float) -> float:
        return TIMELINE_AT + t

    rec = RunRecord(run_id=TIMELINE_RUN, cluster="bench", provider="local", project="local", zone="us-central1-b",
                    bucket="gs://tpuctl-local", model_dir="gs://tpuctl-local/bench", num_train_steps=20,
                    save_checkpoints_steps=2, job="command", status="finished", attempts=3, preemptions=2,
                    steps_lost=2, created_at=at(RECORD["created_at"]), ended_at=at(RECORD["ended_at"]),
                    curve=[{**c, "t": at(c["t"]), "loss": round(2.0 * 0.9 ** c["step"], 4)} for c in RECORD["curve"]],
                    last_progress={"step": 20, "loss": 0.2432, **{k: at(v) for k, v in RECORD["last_progress"].items()
                                                                  if k != "step"}})
    store = RunStore(bucket, TIMELINE_RUN)
    store.save(rec)
    moved = ("time", "program_started_at", "first_step_at", "step_at")
    store.bucket.write_bytes(f"{store.prefix}/events.jsonl", "".join(
        json.dumps({**e, **{k: at(e[k]) for k in moved if k in e}}) + "\n" for e in EVENTS).encode())
    for n, workers in EXITS.items():
        for w, x in workers.items():
            store.bucket.write_bytes(f"{store.attempt_prefix(n)}/exit-{w}.json", json.dumps({**x, "time": at(x["time"])}).encode())
    runs.remember(rec)
    for i, b in enumerate(BILLED):
        node = {"node": "bench", "zone": "us-central1-b", "accelerator_type": "v2-8", "interruptible": True,
                "created_at": at(b.start)}
        ledger.append("local", "local", ledger.event("tpu_created", "bench", t=at(b.start), by="up" if i == 0 else "recreate",
                                                     state="READY", **node))
        ledger.append("local", "local", ledger.event("tpu_deleted", "bench", t=at(b.end), by="recreate",
                                                     hourly_usd=1.35, state="PREEMPTED", **node))


# the one line `tpuctl ui` prints on stdout: its URL, with the token that lets a browser in
SERVING = re.compile(r"tpuctl ui: serving (http://127\.0\.0\.1:\d+/)\?token=([A-Za-z0-9._~-]+)")


class Serving(NamedTuple):
    url: str                      # without the token: what the address bar shows once signed in
    token: str
    proc: subprocess.Popen


@contextlib.contextmanager
def serving(env: dict | None = None) -> Iterator[Serving]:
    """`tpuctl ui --port 0` (the installed entry point) as a user starts it, until the block ends;
    its stdout and stderr stay readable after it. A random token unless ``env`` names one."""
    proc = subprocess.Popen([str(TPUCTL_BIN), "ui", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env={**{k: v for k, v in os.environ.items() if k != "TPUCTL_UI_TOKEN"},
                                                      **(env or {})})
    try:
        line = proc.stdout.readline()
        m = SERVING.fullmatch(line.rstrip("\n"))
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield Serving(m.group(1), m.group(2), proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def ui(records):
    with serving() as s:
        yield s.url, s.token, records
