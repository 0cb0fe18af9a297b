"""`tpuctl down --idle`, `up --autodown` and `cost` on the local provider, through the real CLI.

A live run is written the way `tpuctl train` and its job leave it: the run record in the bucket,
the local run index, the job's progress.json (refreshed by the job at least every 20 s) and the
supervisor's lease (renewed every 5 s).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from provision.basics import statefile
from provision.basics.config import home
from provision.basics.procs import alive as _alive
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.cluster import ledger
from provision.runs import store as runs
from provision.runs.store import RunRecord, RunStore
from provision.runs.training import local_path_for

ZONE = "us-central1-b"


def provider() -> LocalProvider:
    return LocalProvider(home())


def tpus() -> dict[str, str]:
    return {n.name: n.state.value for n in provider().list_tpus()}


def backdate_tpu(name: str, seconds: float) -> None:
    """Make a local TPU look created ``seconds`` ago (its record is JSON under TPUCTL_HOME)."""
    path = provider()._tpu_path(ZONE, name)

    def older(cur):
        cur["created_at"] -= seconds
        return cur

    statefile.update_json(path, older)


class FakeRun:
    """A run as `tpuctl train` writes it, whose job and supervisor we drive by hand."""

    def __init__(self, cluster: str, *, status: str = "running", created_ago: float = 60.0):
        bucket = local_bucket("tpuctl-local")
        if not bucket.exists():
            bucket.create("local")
        run_id = runs.new_run_id(cluster)
        self.model_dir = Path(local_path_for(f"gs://tpuctl-local/tpuctl/runs/{run_id}/model"))
        self.rec = RunRecord(run_id=run_id, cluster=cluster, provider="local", project="local", zone=ZONE,
                             bucket="gs://tpuctl-local", model_dir=str(self.model_dir), num_train_steps=100,
                             save_checkpoints_steps=10, status=status, created_at=time.time() - created_ago)
        self.store = RunStore(bucket, run_id)
        self.store.save(self.rec)
        runs.remember(self.rec)

    @property
    def run_id(self) -> str:
        return self.rec.run_id

    def beat(self, age: float = 0.0, status: str = "running", step: int = 10) -> float:
        """The job's progress record, written ``age`` seconds ago."""
        t = time.time() - age
        self.model_dir.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "progress.json").write_text(json.dumps(
            {"run_id": self.run_id, "time": t, "status": status, "step": step, "num_train_steps": 100,
             "started_at": t - 30, "step_time": t}))
        return t

    def lease(self, age: float = 0.0, released: bool = False) -> None:
        data = {"owner": "abc", "host": "here", "pid": 1, "where": "foreground", "heartbeat_at": time.time() - age}
        if released:
            data["released"] = True
        self.store.write_json(f"{self.store.prefix}/supervisor.json", data)

    def end(self, status: str = "finished", ago: float = 0.0) -> None:
        self.rec.status, self.rec.ended_at = status, time.time() - ago
        self.store.save(self.rec)


def test_idle_busy_preempted_keep_and_dry_run(tpuctl):
    for name, extra in (("idle", []), ("busy", []), ("stale", []), ("done", []), ("pre", ["--preemptible"]),
                        ("recov", ["--preemptible"]), ("kept", ["--label", "tpuctl-keep=true"])):
        assert tpuctl("up", name, *extra).code == 0
        backdate_tpu(name, 3600)
    busy = FakeRun("busy")
    busy.beat(age=5)
    busy.lease(age=2)
    stale = FakeRun("stale", created_ago=3000)
    stale.beat(age=2400)
    stale.lease(age=2400)                       # its supervisor died with the laptop
    done = FakeRun("done", created_ago=3000)
    done.beat(age=2000, status="finished")
    done.end(ago=1990)
    assert tpuctl("simulate", "preempt", "pre").code == 0
    recov = FakeRun("recov", status="recovering")
    recov.beat(age=30)
    recov.lease(age=1)                          # a live supervisor is about to recreate it
    assert tpuctl("simulate", "preempt", "recov").code == 0

    before = tpus()
    dry = tpuctl("down", "--idle", "--idle-for", "30m", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    doc = dry.json()
    assert tpus() == before, "--dry-run deleted something"
    verdicts = {n["cluster"]: n for n in doc["nodes"]}
    assert {c for c, n in verdicts.items() if n["verdict"] == "delete"} == {"idle", "stale", "done", "pre"}
    assert "no run attached" in verdicts["idle"]["reason"]
    assert "has not reported progress" in verdicts["stale"]["reason"]
    assert f"run {done.run_id} finished" in verdicts["done"]["reason"]
    assert "PREEMPTED" in verdicts["pre"]["reason"] and verdicts["pre"]["saves_usd_per_hour"] == 0.0
    assert "training" in verdicts["busy"]["reason"] and verdicts["busy"]["run_id"] == busy.run_id
    assert "recreating" in verdicts["recov"]["reason"]
    assert verdicts["kept"]["reason"] == "labelled tpuctl-keep=true"
    assert doc["dry_run"] and doc["deleted"] == [] and len(doc["would_delete"]) == 4
    assert doc["saves_usd_per_hour"] == 4.5 * 3
    assert "tpuctl down --idle: provider=local project=local zone=all" in dry.err

    r = tpuctl("down", "--idle", "--idle-for", "30m")
    assert r.code == 0, r.err
    assert set(tpus()) == {"busy", "recov", "kept"}
    # each deletion is reported once, in its row: done, why, and what it saves (it used to be said
    # three times: a log line, the row, and a line after the table)
    lines = (r.err + r.out).splitlines()
    rows = {line.split()[0]: line for line in lines if line.split()[1:2] == [ZONE]}
    for name in ("idle", "stale", "done"):
        assert " deleted " in rows[name] and rows[name].rstrip().endswith("4.50"), rows[name]
    assert " deleted " in rows["pre"] and "PREEMPTED" in rows["pre"] and rows["pre"].rstrip().endswith("0.00")
    for name in ("idle", "stale", "done", "pre"):
        said = [line for line in lines if f"TPU {name} " in f"{line} " or line == rows[name]]
        assert said == [f"deleting TPU {name} in {ZONE}", rows[name]], said
    assert "deleted 4 TPU(s), saves $13.50/hour at list price (us-central1 on-demand, bundled table, 2026-11-24)" \
        in r.out
    # host VMs stay: the reaper deletes TPUs only
    assert len(provider().list_vms()) == 7
    assert f"kept host VM idle ({ZONE}, $0.07/hour)" in r.out     # e2-standard-2, the default host
    # each deletion is in the cost ledger with when the TPU became idle
    [deleted] = [e for e in ledger.read_local("local", "local", "done") if e["event"] == "tpu_deleted"]
    assert deleted["by"] == "reaper" and deleted["idle_since"] == pytest.approx(done.rec.ended_at, abs=11)
    # nothing more to do
    again = tpuctl("down", "--idle", "--json").json()
    assert again["deleted"] == [] and again["saves_usd_per_hour"] == 0


def test_autodown_deletes_an_idle_tpu_without_any_command(tpuctl, monkeypatch):
    monkeypatch.setenv("TPUCTL_AUTODOWN_EVERY_S", "0.3")
    r = tpuctl("up", "auto", "--autodown", "2s", "--json")
    assert r.code == 0, r.err
    note = next(n for n in r.json()["notes"] if n.startswith("autodown"))
    assert "a local agent (pid" in note
    agent = provider().agent(ZONE, "auto")
    assert agent is not None and _alive(agent["pid"])
    # a training run keeps its TPU: the job heartbeats, the supervisor renews its lease
    run = FakeRun("auto")
    deadline = time.time() + 4
    while time.time() < deadline:
        last = run.beat()
        run.lease()
        time.sleep(0.3)
    assert "auto" in tpus(), "autodown deleted a TPU that was training"
    # the job dies with its supervisor: nobody runs a command, the agent deletes the TPU
    gone_at = None
    deadline = time.time() + 20
    while time.time() < deadline:
        if "auto" not in tpus() or tpus().get("auto") == "DELETING":
            gone_at = time.time()
            break
        time.sleep(0.1)
    assert gone_at is not None, "autodown did not delete the idle TPU"
    billed_idle = gone_at - last
    assert 2.0 <= billed_idle <= 2.0 + 30, billed_idle
    assert [v.name for v in provider().list_vms()] == ["auto"], "autodown must keep the host VM"
    deadline = time.time() + 5   # the agent writes the ledger once the deletion has completed
    while time.time() < deadline and not [e for e in ledger.read_local("local", "local", "auto")
                                          if e["event"] == "tpu_deleted"]:
        time.sleep(0.05)
    [e] = [e for e in ledger.read_local("local", "local", "auto") if e["event"] == "tpu_deleted"]
    assert e["by"] == "autodown" and e["idle_since"] == pytest.approx(last, abs=0.01)
    # down of the cluster stops its agent
    assert tpuctl("down", "auto").code == 0
    deadline = time.time() + 5
    while _alive(agent["pid"]) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(agent["pid"])


def test_a_second_up_does_not_start_a_second_agent(tpuctl, monkeypatch):
    monkeypatch.setenv("TPUCTL_AUTODOWN_EVERY_S", "5")
    assert tpuctl("up", "twice", "--autodown", "1h").code == 0
    first = provider().agent(ZONE, "twice")
    r = tpuctl("up", "twice", "--autodown", "1h", "--json")
    assert any("already enforced by the local agent" in n for n in r.json()["notes"])
    assert provider().agent(ZONE, "twice")["pid"] == first["pid"]


def test_bad_input_is_refused_before_anything_is_deleted(tpuctl):
    assert tpuctl("up", "lab").code == 0
    backdate_tpu("lab", 7200)
    cases = [
        (("down",), "nothing to delete"),
        (("down", "lab", "--idle"), "not both"),
        (("down", "--idle", "--idle-for", "soon"), "invalid duration"),
        (("down", "--idle", "--min-duty-cycle", "150"), "invalid --min-duty-cycle"),
        (("down", "--idle", "--min-duty-cycle", "abc%"), "invalid --min-duty-cycle"),
        (("down", "lab", "--idle-for", "5m"), "--idle-for only applies with --idle"),
        (("down", "--idle", "--keep-vm"), "--keep-vm is implied by --idle"),
        (("down", "--idle", "--zone", "us-central1-b", "--all-zones"), "--zone and --all-zones"),
        (("down", "--idle", "--zone", "Central"), "zone"),
        (("down", "--idle", "--bucket", "s3://x"), "bucket"),
        (("up", "nov", "--no-vm", "--autodown", "5m"), "--autodown needs the host VM"),
        (("up", "nov", "--autodown", "later"), "invalid duration"),
        (("cost", "Bad_Name"), "invalid cluster name or run id"),
    ]
    for args, fragment in cases:
        r = tpuctl(*args, "--json")
        assert r.code == 2, (args, r.err)
        assert fragment in r.json()["error"], (args, r.json())
        assert r.err.startswith("tpuctl: error: ") and len(r.err.strip().splitlines()) == 1, r.err
    assert tpus() == {"lab": "READY"} and [v.name for v in provider().list_vms()] == ["lab"]
    r = tpuctl("cost", "nope")
    assert r.code == 2 and "no cluster or run named nope" in r.err


def test_records_of_clusters_with_nothing_left_are_cleared(tpuctl):
    assert tpuctl("up", "solo", "--no-vm", "--arch", "vm").code == 0
    backdate_tpu("solo", 3600)
    prov = provider()
    old = time.time() - 3600
    statefile.update_json(prov._ranges_path(), lambda cur: {
        **(cur or {}),
        "ghost": {"cidr": "10.240.9.0/29", "network": "default", "zone": ZONE, "at": old},
        "fresh": {"cidr": "10.240.10.0/29", "network": "default", "zone": ZONE, "at": time.time()}}, default={})
    # a dry run judges with the reservations read while the TPUs were judged; it clears nothing
    r = tpuctl("down", "--idle", "--dry-run", "--json")
    assert r.code == 0, r.err
    would = " ".join(r.json()["cleared"])
    assert "cluster ghost's range reservation 10.240.9.0/29 (no VM or TPU left)" in would and "fresh" not in would
    assert set(prov.reservations()) == {"ghost", "fresh"}          # nothing cleared
    r = tpuctl("down", "--idle", "--json")
    assert r.code == 0, r.err
    cleared = " ".join(r.json()["cleared"])
    # solo (a TPU VM) never held a range (reservations were ghost and fresh): only its record goes
    assert "cluster solo's local record (its TPU was deleted and it has no host VM)" in cleared
    assert "solo's range reservation" not in cleared
    assert "cluster ghost's range reservation 10.240.9.0/29" in cleared and "fresh" not in cleared
    assert set(prov.reservations()) == {"fresh"}   # an up in progress keeps its claim
    assert tpuctl("status", "--json").json()["clusters"] == []


def test_duty_cycle_is_unavailable_on_the_local_provider(tpuctl):
    assert tpuctl("up", "d1").code == 0
    doc = tpuctl("down", "--idle", "--min-duty-cycle", "5%", "--dry-run", "--json").json()
    assert doc["min_duty_cycle"] == 5.0
    assert doc["duty_cycle"].startswith("unavailable (the local provider has no Cloud Monitoring)")
    assert "progress record decides" in doc["duty_cycle"]


def test_cost_of_a_known_ledger(tpuctl):
    """A cluster's known history: hours by state, cost at both list prices, idle reaping saved."""
    now = time.time()
    t0 = now - 6 * 3600

    def at(h: float) -> float:
        return t0 + h * 3600

    node = {"zone": ZONE, "node": "lab", "accelerator_type": "v2-8", "interruptible": True}
    for kind, h, extra in (("tpu_created", 0.0, {"created_at": at(0), "by": "up"}),
                           ("tpu_deleted", 2.1, {"created_at": at(0), "by": "recreate", "state": "PREEMPTED",
                                                 "preempted_at": at(2.0)}),
                           ("tpu_created", 2.2, {"created_at": at(2.2), "by": "up"}),
                           ("tpu_deleted", 4.5, {"created_at": at(2.2), "by": "reaper", "idle_since": at(4.0),
                                                 "state": "READY"})):
        ledger.append("local", "local", ledger.event(kind, "lab", t=at(h), **node, **extra))
    run = FakeRun("lab", status="finished", created_ago=now - at(0.5))
    run.rec.ended_at = at(4.0)
    run.rec.seconds_by_state = {"training": 2.9 * 3600, "waiting": 0.3 * 3600, "starting": 0.1 * 3600}
    run.store.save(run.rec)
    events = [(0.6, "attempt_started"), (2.0, "preempted"), (2.5, "resumed"), (4.0, "finished")]
    run.store.bucket.write_bytes(f"{run.store.prefix}/events.jsonl", "".join(
        json.dumps({"time": at(h), "event": k}) + "\n" for h, k in events).encode())

    r = tpuctl("cost", "lab", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    [c] = doc["clusters"]
    hours = c["account"]["hours"]
    assert hours == pytest.approx({"training": 2.9, "starting": 0.1, "waiting": 0.3, "idle": 1.0, "making_data": 0.0}, abs=1e-3)
    assert c["account"]["total_usd"] == pytest.approx(4.3 * 1.35, abs=1e-3)
    assert c["account"]["cost_usd_on_demand"]["training"] == pytest.approx(2.9 * 4.5, abs=1e-3)
    assert c["account"]["waiting_unbilled_hours"] == pytest.approx(0.2, abs=1e-3)
    # reaped at 4.5h, nobody touched the cluster since: 1.5 h at $1.35 so far, and still $1.35/hour
    assert c["saved_usd"] == pytest.approx(1.5 * 1.35, abs=0.01) and c["saving_usd_per_hour"] == 1.35
    [row] = doc["prices"]      # skypilot-catalog v8 gcp/vms.csv: tpu-v2-8 us-central1 4.5 / 1.35
    assert (row["accelerator_type"], row["region"], row["on_demand_usd_per_hour"], row["preemptible_usd_per_hour"]) \
        == ("v2-8", "us-central1", 4.5, 1.35)
    assert row["recorded"] == "2026-11-24" and "skypilot-catalog" in row["source"] and row["spot"]["note"] is None
    assert "until now" in doc["counterfactual"]

    text = tpuctl("cost", "lab").out
    assert "idle (no live run)" in text and "waiting after preemption" in text
    assert "idle reaping saved $2.0" in text and "still saving $1.35/hour" in text
    assert "ON-DEMAND $/H" in text and "read 2026-11-24" in text and "us-central1" in text

    per_run = tpuctl("cost", run.run_id, "--json").json()
    assert per_run["run"] == run.run_id
    assert per_run["clusters"][0]["account"]["hours"] == pytest.approx(
        {"training": 2.9, "starting": 0.1, "waiting": 0.3, "idle": 0.0, "making_data": 0.0}, abs=1e-3)


def test_a_run_that_starts_while_the_reaper_judges_keeps_its_tpu(tpuctl):
    from provision.basics.config import resolve
    from provision.billing.idle import judge
    from provision.billing.reaper import NodeReport, _recheck

    assert tpuctl("up", "race").code == 0
    backdate_tpu("race", 3600)
    [node] = provider().list_tpus()
    report = NodeReport(node=node, verdict=judge(node, None, now=time.time(), idle_for=60), bucket="gs://tpuctl-local")
    assert report.verdict.delete
    run = FakeRun("race")           # `tpuctl train` started after the verdict, before the deletion
    run.beat()
    run.lease()
    _recheck(provider(), resolve(provider="local"), [report], 60, None)
    assert not report.verdict.delete and "changed while judging" in report.verdict.reason


def test_the_channels_hear_which_idle_tpu_was_deleted_and_what_it_saves(tpuctl, tmp_path):
    """docs/notify.md: a reaped TPU is told to the cluster's channels (the config file's), with
    what its deletion saves per hour; a busy one is not deleted and not told of."""
    import os
    import subprocess

    from tests.conftest import TPUCTL_BIN
    from tests.receivers import http_receiver

    hook = http_receiver()
    try:
        added = subprocess.run([str(TPUCTL_BIN), "notify", "add", "hook", "--webhook"], input=f"{hook.url}/reaper\n",
                               text=True, capture_output=True, timeout=60, check=False)
        assert added.returncode == 0, added.stderr
        Path(os.environ["TPUCTL_CONFIG"]).write_text('[notify.clusters.idle]\nchannels = ["hook"]\n'
                                                     '[notify.clusters.busy]\nchannels = ["hook"]\n')
        for name in ("idle", "busy"):
            assert tpuctl("up", name, "--zone", ZONE).code == 0
            backdate_tpu(name, 3600)
        busy = FakeRun("busy")
        busy.beat()
        busy.lease()
        r = tpuctl("down", "--idle", "--idle-for", "30m")
        assert r.code == 0, r.err
        assert set(tpus()) == {"busy"}
    finally:
        hook.close()
    [told] = [m.json() for m in hook.received]
    assert told["kind"] == "reaped" and told["subject"] == "idle" and told["fields"]["saves_usd_per_hour"] == 4.5
    assert told["text"].startswith("cluster idle: TPU idle deleted (v2-8 in us-central1-b)") and \
        told["text"].endswith("saves $4.50/hour at list price")
