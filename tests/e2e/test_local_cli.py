"""The local provider through the real CLI: lifecycle, idempotence, validation, concurrency, preemption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from tests.conftest import run_tpuctl_process


def provider() -> LocalProvider:
    return LocalProvider(home())


def test_up_status_down_lifecycle(tpuctl):
    r = tpuctl("up", "bert-lab", "--zone", "us-central1-b", "-a", "v2-8", "--preemptible", "--arch", "node")
    assert r.code == 0, r.err
    assert "cluster bert-lab is up in us-central1-b" in r.out and "range 10.240.0.0/29" in r.out
    assert "tpuctl up: provider=local project=local zone=us-central1-b" in r.err
    tpu = provider().get_tpu("us-central1-b", "bert-lab")
    assert tpu.state.value == "READY" and tpu.health.value == "HEALTHY" and tpu.preemptible
    assert tpu.labels == {"tpuctl-cluster": "bert-lab", "tpuctl-role": "tpu"}

    r = tpuctl("status")
    assert r.code == 0
    line = next(ln for ln in r.out.splitlines() if ln.startswith("bert-lab"))
    for cell in ("us-central1-b", "RUNNING", "v2-8 (node)", "READY", "HEALTHY", "10.240.0.0/29", "yes", "1.42"):
        assert cell in line
    assert "prices: list prices" in r.out

    r = tpuctl("down", "bert-lab")
    assert r.code == 0, r.err
    assert "deleted: TPU bert-lab (us-central1-b), VM bert-lab (us-central1-b)" in r.out
    assert "saves $1.42/hour" in r.out
    assert provider().list_tpus() == [] and provider().list_vms() == []
    assert tpuctl("status").out.strip() == "no clusters"


def test_json_shapes(tpuctl):
    up = tpuctl("up", "j1", "-a", "v3-8", "--preemptible", "--label", "team=nlp", "--json").json()
    assert up["ok"] is True and up["cluster"] == "j1" and up["provider"] == "local"
    assert up["tpu"]["state"] == "READY" and up["tpu"]["labels"]["team"] == "nlp"
    assert up["vm"]["labels"]["team"] == "nlp" and up["vm"]["state"] == "RUNNING"
    # skypilot-catalog v8 gcp/vms.csv: tpu-v3-8 us-central1 SpotPrice 2.04; e2-standard-2 0.06701 (the host's default here)
    assert up["created"] == ["VM j1 (us-central1-b)", "TPU j1 (us-central1-b)"] and up["hourly_usd"] == 2.107
    assert up["price"]["tpu"]["region"] == "us-central1" and up["price"]["tpu"]["tier"] == "spot/preemptible"
    st = tpuctl("status", "--json").json()
    assert st["ok"] and [c["name"] for c in st["clusters"]] == ["j1"]
    assert set(st["clusters"][0]) >= {"name", "provider", "zone", "vm", "tpu", "run", "uptime_seconds", "hourly_usd"}
    down = tpuctl("down", "j1", "--json").json()
    assert down["deleted"] == ["TPU j1 (us-central1-b)", "VM j1 (us-central1-b)"]
    assert down["saves_usd_per_hour"] == 2.107
    err = tpuctl("up", "Bad_Name", "--json")
    assert err.code == 2 and err.json() == {"ok": False, "exit_code": 2, "error": err.json()["error"]}
    assert "invalid cluster name" in err.json()["error"]


def test_up_is_idempotent(tpuctl):
    assert tpuctl("up", "same", "--arch", "node").code == 0
    r = tpuctl("up", "same", "--arch", "node", "--json")
    assert r.code == 0 and r.json()["created"] == []
    assert len(r.json()["adopted"]) == 2
    assert len(provider().list_tpus()) == 1 and len(provider().list_vms()) == 1
    r = tpuctl("up", "same", "--arch", "node", "-a", "v3-8")
    assert r.code == 2 and "already has a v2-8 TPU" in r.err and "tpuctl down same" in r.err


def test_dry_run_changes_nothing(tpuctl):
    r = tpuctl("up", "dry", "--arch", "node", "--dry-run")
    assert r.code == 0 and "would create TPU dry v2-8 in us-central1-b with range 10.240.0.0/29" in r.out
    assert provider().list_tpus() == [] and provider().list_vms() == []
    tpuctl("up", "dry")
    r = tpuctl("down", "dry", "--dry-run", "--json")
    assert r.json()["dry_run"] and len(r.json()["deleted"]) == 2
    assert len(provider().list_tpus()) == 1


@pytest.mark.parametrize("args, fragment", [
    (["up", "Bert"], "invalid cluster name"),
    (["up", "b", "--zone", "uscentral"], "invalid zone"),
    (["up", "b", "-a", "v2-16"], "not a v2 slice size"),
    (["up", "b", "-a", "v4-8", "--arch", "node"], "not offered as a TPU Node; use --arch vm"),
    (["up", "b", "--preemptible", "--spot"], "choose one of them"),
    (["up", "b", "--cidr", "10.0.0.1/29"], "host bits zero"),
    (["up", "b", "--cidr", "8.8.8.0/29", "--arch", "node"], "not private"),
    (["up", "b", "--label", "Team=x"], "invalid label key"),
    (["up", "b", "--timeout", "soon"], "invalid duration"),
    (["up", "b", "--valid-until", "1h"], "--valid-until needs --queued"),
    (["up", "b", "--bucket", "s3://x"], "use gs://BUCKET"),
    # the local provider rehearses the zone's catalogue with the images seen in public use
    (["up", "b", "--tf-version", "2.12.0"], "no single-host TensorFlow 2.12.0 image for v2"),
    (["up", "b", "--runtime-version", "tpu-vm-tf-2.18.0-pjrt"], "tpu-vm-tf-2.18.0-pjrt is not offered there"),
    (["up", "b", "--machine-type", "e2-standrad-2"], "machine type e2-standrad-2 is not offered there"),
    (["up", "b", "--tf-version", "2.17", "--runtime-version", "tpu-vm-tf-2.17.0-pjrt"], "both given"),
    (["up", "b", "--arch", "node", "--no-vm"], "needs a host VM"),
    (["up", "b", "--provider", "gcp"], "gcp needs a project"),
    (["down"], "nothing to delete"),
    (["down", "x", "--idle"], "not both"),
    (["down", "--idle", "--idle-for", "-3m"], "invalid duration"),
    (["status", "--zone", "moon"], "invalid zone"),
    (["simulate", "preempt", "UPPER"], "invalid cluster name"),
])
def test_validation_errors_exit_2_with_one_line_and_create_nothing(tpuctl, args, fragment):
    r = tpuctl(*args)
    assert r.code == 2, (r.code, r.err)
    errors = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(errors) == 1 and fragment in errors[0], r.err
    assert provider().list_tpus() == [] and provider().list_vms() == []


def test_click_usage_errors_exit_2(tpuctl):
    r = tpuctl("up", "b", "--arch", "gpu")
    assert r.code == 2 and "Invalid value for '--arch'" in r.err
    assert tpuctl("frobnicate").code == 2


def test_two_concurrent_ups_get_disjoint_ranges():
    def up(name):
        return run_tpuctl_process("up", name, "--arch", "node", "--preemptible", "--json")

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(up, ["c1", "c2", "c3", "c4"]))
    assert all(r.code == 0 for r in results), [r.err for r in results]
    blocks = {r.json()["cidr"] for r in results}
    assert len(blocks) == 4
    assert len(provider().list_tpus()) == 4 and len(provider().list_vms()) == 4


def test_state_changes_are_real(tmp_path):
    env = {"TPUCTL_LOCAL_TPU_CREATE_SECONDS": "2.5"}
    proc = subprocess.Popen([sys.executable, "-m", "provision", "up", "slow", "--json"], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    deadline = time.time() + 30
    while proc.poll() is None and time.time() < deadline:
        node = provider().get_tpu("us-central1-b", "slow")
        if node:
            seen.add(node.state.value)
        time.sleep(0.1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "CREATING" in seen
    assert json.loads(out)["tpu"]["state"] == "READY"


def test_rerun_after_a_crash_mid_up_adopts_instead_of_duplicating():
    env = {**os.environ, "TPUCTL_LOCAL_TPU_CREATE_SECONDS": "4"}
    proc = subprocess.Popen([sys.executable, "-m", "provision", "up", "crashy", "--arch", "node"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline and provider().get_tpu("us-central1-b", "crashy") is None:
        time.sleep(0.05)
    proc.kill()   # tpuctl dies mid-up: no rollback ran
    proc.wait()
    tpu = provider().get_tpu("us-central1-b", "crashy")
    assert tpu is not None and tpu.state.value == "CREATING"
    r = run_tpuctl_process("up", "crashy", "--arch", "node", "--json",
                           env={"TPUCTL_LOCAL_TPU_CREATE_SECONDS": "0.1"}, timeout=60)
    # The crashed run's TPU is still CREATING (4 s); the rerun adopts it and waits for it.
    assert r.code == 0, r.err
    assert r.json()["created"] == [] or r.json()["created"] == ["VM crashy (us-central1-b)"]
    assert any(a.startswith("TPU crashy") for a in r.json()["adopted"])
    assert len(provider().list_tpus()) == 1 and len(provider().list_vms()) == 1


def test_stockout_fails_over_to_the_next_zone(tpuctl, monkeypatch):
    monkeypatch.setenv("TPUCTL_LOCAL_STOCKOUT_ZONES", "us-central1-b")
    r = tpuctl("up", "fo", "--zone", "us-central1-b,us-central1-c", "--preemptible", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-c"
    assert "moving on to zone us-central1-c (us-central1-b: stockout)" in r.err


def test_status_shows_the_host_vms_zone_where_failover_put_the_tpu_elsewhere(monkeypatch):
    """The host VM is made in the first zone while the TPU fails over: status had one ZONE column,
    the TPU's, and said nothing of the VM being in another zone."""
    monkeypatch.setenv("TPUCTL_PROVIDER", "local")
    monkeypatch.setenv("TPUCTL_LOCAL_STOCKOUT_ZONES", "us-central1-b")
    r = run_tpuctl_process("up", "split", "--zone", "us-central1-b,us-central1-c", "--json")
    assert r.code == 0, r.err
    assert (r.json()["zone"], r.json()["vm"]["zone"]) == ("us-central1-c", "us-central1-b")
    assert run_tpuctl_process("up", "same", "--zone", "us-central1-c").code == 0
    r = run_tpuctl_process("status")
    assert r.code == 0, r.err
    rows = {line.split()[0]: line.split() for line in r.out.splitlines()[1:] if line.strip()}
    assert rows["split"][1:5] == ["us-central1-c", "RUNNING", "in", "us-central1-b"], r.out
    assert rows["same"][1:4] == ["us-central1-c", "RUNNING", "v2-8"], r.out


def test_prices_and_a_preempted_tpu_in_a_few_words(monkeypatch):
    """Each figure ended with its full source (a catalog commit or a SKU id) and status with a
    220-character line; a PREEMPTED TPU showed HEALTH_UNSPECIFIED and "(..., nothing billed, -;
    PREEMPTED: billing stopped)". The full sources stay in --json and tpuctl cost."""
    monkeypatch.setenv("TPUCTL_PROVIDER", "local")
    up = run_tpuctl_process("up", "pp", "--preemptible")
    assert up.code == 0, up.err
    assert "  TPU v2-8: $1.35/hour (us-central1 spot/preemptible, bundled table, 2026-11-24)" in up.out.splitlines()
    assert run_tpuctl_process("simulate", "preempt", "pp").code == 0
    st = run_tpuctl_process("status")
    lines = st.out.splitlines()
    assert lines[1].split()[:7] == ["pp", "us-central1-b", "RUNNING", "v2-8", "(vm)", "tpu", "PREEMPTED"]
    assert lines[1].split()[7] == "-" and "HEALTH_UNSPECIFIED" not in st.out
    assert "pp: TPU v2-8 $0.00/hour (PREEMPTED: nothing billed)" in lines
    assert lines[-1] == ("prices: list prices from the bundled table of 2026-11-24; the local provider bills "
                         "nothing; Google Cloud would bill these")
    assert max(len(line) for line in lines) <= 125, st.out
    doc = json.loads(run_tpuctl_process("status", "--json").out)
    assert "skypilot-catalog" in doc["price_source"] and "skypilot-catalog" in doc["clusters"][0]["price"]["vm"]["source"]
    down = run_tpuctl_process("down", "pp")
    assert down.code == 0, down.err
    assert "  VM pp (us-central1-b): $0.07/hour (us-central1 on-demand, bundled table, 2026-11-24)" in down.out.splitlines()


def test_errors_about_gs_paths_say_the_url_typed_not_the_local_directory(monkeypatch):
    """The local provider keeps gs://B/P under TPUCTL_HOME; a spec error named that directory."""
    monkeypatch.setenv("TPUCTL_PROVIDER", "local")
    assert run_tpuctl_process("up", "gsp", "--no-vm").code == 0
    r = run_tpuctl_process("train", "gsp", "--job", "templates/bert-pretrain-tiny.yaml", "--bucket", "gs://my-bucket",
                           "--set", "bert_dir=gs://my-bucket/bert/tiny", "--dry-run")
    assert r.code == 2, r.err
    assert r.err.splitlines()[-1] == (
        "tpuctl: error: bert_dir gs://my-bucket/bert/tiny is not a directory; pass an original BERT directory "
        "(bert_config.json, vocab.txt, bert_model.ckpt.*) with --set bert_dir=PATH")
    assert os.environ["TPUCTL_HOME"] not in r.err


def test_failure_everywhere_rolls_back_what_this_call_created(tpuctl, monkeypatch):
    monkeypatch.setenv("TPUCTL_LOCAL_STOCKOUT_ZONES", "us-central1-b,us-central1-c")
    r = tpuctl("up", "rb", "--zone", "us-central1-b,us-central1-c", "--arch", "node")
    assert r.code == 1
    line = r.err.strip().splitlines()[-1]
    assert line.startswith("tpuctl: error: no zone could create a v2-8 TPU")
    assert "rolled back VM rb (us-central1-b), nothing remains" in line
    assert provider().list_tpus() == [] and provider().list_vms() == []
    assert provider().reserved_range(_spec("rb")) is None


def test_keep_on_failure_says_exactly_what_remains(tpuctl, monkeypatch):
    monkeypatch.setenv("TPUCTL_LOCAL_STOCKOUT_ZONES", "us-central1-b")
    r = tpuctl("up", "kept", "--arch", "node", "--keep-on-failure")
    assert r.code == 1
    assert "still exists: VM kept in us-central1-b (billed; delete with tpuctl down kept" in r.err
    assert len(provider().list_vms()) == 1
    assert tpuctl("down", "kept").code == 0
    assert provider().list_vms() == []


def _spec(name):
    from provision.cloud.base import ClusterSpec
    return ClusterSpec(name=name, accelerator_type="v2-8", zones=("us-central1-b",))


@pytest.mark.parametrize("flags", [["--no-notice"], ["--grace", "0"]], ids=["no-notice", "grace-0"])
def test_simulate_preempt_without_notice_kills_the_job_without_warning(tpuctl, flags):
    assert tpuctl("up", "pre", "--preemptible").code == 0
    # a job that would checkpoint on SIGTERM: a preemption without notice must not give it the chance
    job = subprocess.Popen([sys.executable, "-c",
                            ("import signal,time,sys\n"
                            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
                            "time.sleep(600)")], start_new_session=True)
    provider().register_job("us-central1-b", "pre", job.pid, run_id="r1")
    r = tpuctl("simulate", "preempt", "pre", *flags, "--json")
    assert r.code == 0 and r.json()["tpu"]["state"] == "PREEMPTED"
    assert job.wait(timeout=10) == -signal.SIGKILL
    assert provider().get_tpu("us-central1-b", "pre").state.value == "PREEMPTED"
    status = tpuctl("status", "--json").json()["clusters"][0]
    assert status["tpu"]["state"] == "PREEMPTED" and status["hourly_usd"] == 0.067  # the e2-standard-2 host VM still bills
    # up on a preempted cluster recreates the TPU with the same range
    again = tpuctl("up", "pre", "--preemptible", "--json").json()
    assert again["tpu"]["state"] == "READY"


def test_simulate_preempt_gives_the_notice_and_powers_off_once_the_job_has_exited(tpuctl):
    assert tpuctl("up", "pre", "--preemptible").code == 0
    job = subprocess.Popen([sys.executable, "-c",
                            ("import signal,time,sys\n"
                             "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1), sys.exit(42)))\n"
                             "time.sleep(600)")], start_new_session=True)
    time.sleep(0.3)                                  # its handler is in place
    provider().register_job("us-central1-b", "pre", job.pid, run_id="r1")
    started = time.monotonic()
    r = tpuctl("simulate", "preempt", "pre", "--grace", "20", "--json")
    doc = r.json()                                   # one document, after the power-off
    assert r.code == 0 and (doc["notice_s"], doc["outcome"], doc["tpu"]["state"]) == (20, "preempted", "PREEMPTED")
    assert job.wait(timeout=10) == 42                # it got SIGTERM and exited its own way
    assert time.monotonic() - started < 10           # powered off when it had exited, not 20 s later


def test_preempting_an_on_demand_tpu_is_refused_with_the_commands_that_make_it_preemptible(tpuctl):
    """The hint is what a user types next, so following it must work: `up od --preemptible` alone
    is refused while the on-demand TPU exists (its capacity cannot change in place)."""
    assert tpuctl("up", "od").code == 0
    r = tpuctl("simulate", "preempt", "od")
    assert r.code == 2 and r.err.strip().splitlines()[-1] == (
        "tpuctl: error: TPU od is on-demand and cannot be preempted; replace it with a preemptible one "
        "(the host VM, bucket and range stay): tpuctl down od --keep-vm, then tpuctl up od --preemptible "
        "(or --spot)")
    assert tpuctl("down", "od", "--keep-vm").code == 0
    assert tpuctl("up", "od", "--preemptible").code == 0
    assert tpuctl("simulate", "preempt", "od").code == 0
    assert tpuctl("simulate", "preempt", "nosuch").code == 2


def test_recreated_node_gets_its_old_range_back(tpuctl):
    first = tpuctl("up", "keepr", "--arch", "node", "--preemptible", "--json").json()
    tpuctl("up", "other", "--arch", "node", "--json")
    tpuctl("simulate", "preempt", "keepr")
    again = tpuctl("up", "keepr", "--arch", "node", "--preemptible", "--json").json()
    assert again["cidr"] == first["cidr"] == "10.240.0.0/29"


def test_shell_completion_lists_commands_and_clusters(tpuctl):
    env = {"_TPUCTL_COMPLETE": "bash_complete", "COMP_WORDS": "tpuctl st", "COMP_CWORD": "1"}
    r = run_tpuctl_process(env=env)
    assert "status" in r.out and "stage" in r.out
    tpuctl("up", "compl-a")
    env = {"_TPUCTL_COMPLETE": "bash_complete", "COMP_WORDS": "tpuctl down compl", "COMP_CWORD": "2"}
    assert "compl-a" in run_tpuctl_process(env=env).out


def test_many_processes_on_one_state_directory():
    """8 processes at once on one TPUCTL_HOME: ups, downs, statuses and preemptions, no corruption."""
    import random

    rng = random.Random(7)
    names = [f"m{i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        ups = list(pool.map(lambda n: run_tpuctl_process("up", n, "--arch", "node", "--preemptible", "--json"), names))
    assert all(r.code == 0 for r in ups), [r.err for r in ups if r.code]
    assert len({r.json()["cidr"] for r in ups}) == 8

    ops = [("down", n) for n in names[:3]] + [("status",)] * 3 + [("simulate", "preempt", n) for n in names[3:6]]
    ops += [("up", n, "--arch", "node", "--preemptible") for n in names[6:]]
    rng.shuffle(ops)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda args: (args, run_tpuctl_process(*args, "--json")), ops))
    for args, r in results:
        assert r.code == 0, (args, r.err)
        assert r.json()["ok"] is True
    # every record is valid JSON and the survivors are consistent
    for path in (home() / "local").rglob("*.json"):
        json.loads(path.read_text())
    left = {t.name: t for t in provider().list_tpus()}
    assert sorted(left) == names[3:]
    assert all(left[n].state.value == "PREEMPTED" for n in names[3:6])
    assert len({t.cidr_block for t in left.values()}) == len(left)
