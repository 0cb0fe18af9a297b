"""Startup, broken down (provision.runs.startup, provision.cluster.timing): a run's first attempt
from ``train`` to its first step and ``up`` from its call to a READY TPU, each by phase, on
hand-built timelines; ``up`` on the local provider records its own; and the host agent dates a
program's steps by when it first saw each line, not by its 5-second beat."""

from __future__ import annotations

import itertools
import time

import pytest

from jobs.command import patterns
from provision.basics.config import home
from provision.cloud.base import ClusterSpec
from provision.cloud.local import LocalProvider
from provision.cluster import timing
from provision.host.progress_sources import Arrivals, OutputLines
from provision.runs import goodput, reports, startup
from tests.unit.test_goodput import BILLED, EVENTS, EXITS, RECORD

# attempt 1 of test_goodput's timeline (seconds from 1000): created 1000, staged 1006 (`created`),
# attempt 1 handed to the hosts 1010; the host's wrapper began 1010.5, fetched the spec and workdir
# by 1011, installed the run's wheels 1011-1012.5, restored its checkpoint directory by 1012.75 and
# started the program at 1012.8 (its progress record says 1013); first step 1020. The host's tpuctl
# install ran 1009-1010.25.
AGENT = {"began": 1010.5, "fetched": 1011.0, "requirements": [1011.0, 1012.5],
         "checkpoint_restore": [1012.5, 1012.75], "program_started": 1012.8}
HOSTS = [{"role": "worker", "worker": "0", "state": "ok", "installing": 1009.0, "time": 1010.25},
         {"role": "host", "worker": "vm", "state": "ok", "installing": 900.0, "time": 950.0}]
EVENTS_STAGED = [{"time": 1006, "event": "created"}, *EVENTS]


def _phases(s):
    return {p["phase"]: p["seconds"] for p in s["phases"]}


def test_a_runs_startup_is_each_phase_from_its_creation_to_its_first_step_and_they_sum_to_it():
    exits = {**EXITS, 1: {"0": {**EXITS[1]["0"], "startup": AGENT}}}
    g = goodput.breakdown(RECORD, EVENTS_STAGED, now=5000.0, exits=exits, billed=BILLED, hosts=HOSTS)
    s = g["startup"]
    assert _phases(s) == {startup.STAGED: 6, startup.HANDED: 4, startup.TAKEN_UP: 0.5,
                          startup.HOST_BOOTSTRAP: 0.25, startup.FETCH: 0.5, startup.WHEELS: 1.5,
                          startup.RESTORED: 0.25, startup.STARTED: 0.05, startup.FIRST_STEP: 7.2}
    # the phases follow one another (the host bootstrap is the part of one it overlapped)
    chain = [p for p in s["phases"] if "part_of" not in p]
    assert all(a["to"] == b["from"] for a, b in itertools.pairwise(chain))
    assert (chain[0]["from"], chain[-1]["to"]) == (1000, 1020)
    assert s["seconds"] == s["to_first_step_s"] == 20 == pytest.approx(sum(p["seconds"] for p in chain))
    assert s["slowest"] == startup.FIRST_STEP and s["hosts"] == 1
    # the wrapper's own record of the program's start moves goodput's program startup to it
    cats = {k: v["seconds"] for k, v in g["categories"].items()}
    assert cats["host_bootstrap"] == pytest.approx(2.8 + 3 + 2) and cats["program_startup"] == pytest.approx(7.2 + 22)
    assert g["wall_s"] == pytest.approx(sum(cats.values()))
    line = goodput.lines(g, duration=lambda x: f"{x:g}s", usd=lambda v: f"${v:.3f}")[2]
    assert line.startswith("  startup 20s to the first step: run created to staged 6s, staged to attempt started 4s, "
                           "attempt started to taken up by the host 0.5s, of which host bootstrap"), line
    assert line.endswith("program start to first step 7.2s; slowest: program start to first step"), line


def test_a_hosts_heartbeat_dates_an_attempt_lost_with_its_host_and_the_slowest_host_sets_each_instant():
    other = {**AGENT, "began": 1010.75, "program_started": 1012.9, "requirements": [1010.9, 1012.6]}
    alive = {1: {"0": {"time": 1070, "startup": AGENT}, "1": {"time": 1070, "startup": other}}}
    marks = startup.marks(alive[1].values())
    assert (marks["began"], marks["program_started"], marks["requirements"], marks["hosts"]) == \
        (1010.75, 1012.9, [1010.9, 1012.6], 2)
    g = goodput.breakdown(RECORD, EVENTS_STAGED, now=5000.0, exits=EXITS, billed=BILLED, alive=alive)
    assert _phases(g["startup"])[startup.TAKEN_UP] == 0.75 and g["startup"]["to_first_step_s"] == 20


def test_without_the_agents_marks_the_host_phases_are_one_and_a_phase_not_recorded_says_so():
    g = goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED)
    s = g["startup"]
    assert _phases(s) == {"run created to attempt started": 10, startup.BOOTSTRAP_ALL: 3, startup.FIRST_STEP: 7}
    assert s["seconds"] == 20
    # a live run whose program has not stepped yet: so far, and no total
    live = {**RECORD, "ended_at": None, "status": "running", "last_progress": {"started_at": 1013}}
    early = goodput.breakdown(live, EVENTS[:1], now=1016.0, exits={}, billed=BILLED)["startup"]
    assert early["to_first_step_s"] is None and early["phases"][-1]["phase"] == startup.SO_FAR
    assert early["phases"][-1]["seconds"] == 3 and early["phases"][-1]["live"] is True
    ended = goodput.breakdown({**live, "ended_at": 1016.0}, EVENTS[:1], now=1016.0, exits={}, billed=BILLED)
    assert ended["startup"]["phases"][-1] == {"phase": startup.FIRST_STEP, "seconds": None, "recorded": False}
    assert "program start to first step not recorded" in timing.line(ended["startup"], duration=str)


def test_ups_time_by_phase_overlaps_the_vm_and_the_tpu_and_counts_failed_tries():
    marks = {"began": 100.0, "vm_asked": 103.0, "tpu_asked": 103.5, "tpu_asked_last": 130.0, "tpu_tries": 3,
             "vm_created": 140.0, "tpu_created": 250.0, "tpu_ready": 262.0, "ended": 262.5, "adopted": []}
    s = timing.up_startup(marks)
    assert _phases(s) == {"look and plan": 3, "host VM asked for to created": 37, "TPU asked for to created": 146.5,
                          "of which failed tries (2: stockout, quota, retries)": 26.5, "TPU created to READY": 12,
                          "ready to done (records)": 0.5}
    assert s["seconds"] == 162.5 and s["slowest"] == "TPU asked for to created"
    text = timing.line(s, duration=lambda x: f"{x:g}s", label="took")
    assert text.startswith("took 162.5s: look and plan 3s, host VM asked for to created 37s (alongside the TPU), "
                           "TPU asked for to created 146.5s (3 tries)"), text
    # everything adopted: only the look, and what it found
    adopted = timing.up_startup({"began": 10.0, "tpu_ready": 11.0, "ended": 11.5, "adopted": ["TPU x (z)"]})
    assert _phases(adopted) == {"look and plan": 1} and "adopted TPU x (z)" in timing.line(adopted, duration=str)
    assert timing.up_startup({}) is None
    assert timing.line({"phases": [{"phase": 3}, "junk"]}, duration=str) is None   # a cache someone edited


def test_up_on_the_local_provider_records_its_phases_in_its_result_and_the_cluster_cache(monkeypatch):
    from provision.cluster import cached_spec, up

    monkeypatch.setenv("TPUCTL_LOCAL_TPU_CREATE_SECONDS", "0.6")
    monkeypatch.setenv("TPUCTL_LOCAL_VM_CREATE_SECONDS", "0.3")
    prov = LocalProvider(home())
    spec = ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-b",), provider="local",
                       project="local", preemptible=True, machine_type="e2-standard-2")
    began = time.time()
    result = up(prov, spec)
    s = result.startup
    phases = _phases(s)
    assert phases["TPU asked for to created"] >= 0.6 and phases["host VM asked for to created"] >= 0.3
    assert s["from"] >= round(began, 3) - 0.001 and s["seconds"] == pytest.approx(s["to"] - s["from"])
    assert all(p["recorded"] for p in s["phases"])
    assert s["slowest"] in ("TPU asked for to created", "host VM asked for to created")     # at once: either
    assert result.to_dict()["startup"] == s and "took " in result.summary()
    assert cached_spec(prov, "lab")["startup"] == s          # what status NAME shows
    again = up(prov, spec).startup                             # all there: adopted
    assert set(_phases(again)) == {"look and plan"} and len(again["adopted"]) == 2


# ---- the agent dates a program's steps ------------------------------------------------------------

def test_a_line_is_dated_by_the_first_look_that_saw_it_not_by_the_read(tmp_path):
    log = tmp_path / "attempt-1-0.log"
    log.write_bytes(b"[tpuctl] attempt 1\n")
    lines = OutputLines(log, patterns.compile_pattern(r"step (?P<step>\d+)"))
    lines.look(100.0)
    with open(log, "ab") as fh:
        fh.write(b"step 1\nstep 2\n")
    lines.look(100.5)
    lines.look(101.0)            # nothing new: no mark
    with open(log, "ab") as fh:
        fh.write(b"step 3\nste")
    lines.look(101.5)
    with open(log, "ab") as fh:
        fh.write(b"p 4\nstep 5\n")   # written after the last look: dated at the read (no _t)
    got = [(i["step"], i.get("_t")) for i in lines.read()]
    assert got == [(1, 100.5), (2, 100.5), (3, 101.5), (4, None), (5, None)]
    lines.look(102.0)
    with open(log, "ab") as fh:
        fh.write(b"step 6")
    lines.look(102.5)
    assert [(i["step"], i.get("_t")) for i in lines.read(final=True)] == [(6, 102.5)]
    assert lines.arrivals.marks == []            # what the reads consumed is forgotten


def test_arrivals_stay_bounded_and_only_ever_date_bytes_later(tmp_path):
    path = tmp_path / "f"
    a = Arrivals(path)
    for i in range(1000):
        path.write_bytes(b"x" * (i + 1))
        a.look(float(i))
    assert len(a.marks) <= 256 and a.at(1000) == 999.0
    assert a.at(1) >= 0.0 and a.at(1) == a.marks[0][1]         # the oldest merged into a later look


def test_a_step_takes_the_time_it_was_first_seen_within_the_attempt():
    rec = reports.start(None, run_id="r", num_train_steps=10, now=50.0, pid=1, host="h")
    rec = reports.fold(rec, [b'{"step": 1}', b'{"step": 2, "_t": 1}', b'{"step": 3}'], 60.0, times=[52.5, 53.0, None])
    assert (rec["first_step_time"], rec["step_time"], rec["time"]) == (52.5, 60.0, 60.0)
    # a TensorBoard event's wall time, kept within the attempt: never before it started, never after now
    rec = reports.fold_items(rec, [{"step": 4, "_t": 61.25}], 62.0)
    assert rec["step_time"] == 61.25
    early = reports.fold_items(reports.start(None, run_id="r", num_train_steps=10, now=50.0, pid=1, host="h"),
                               [{"step": 1, "_t": 10.0}], 55.0)
    assert early["first_step_time"] == 50.0
    assert reports.fold_items(rec, [{"step": 5, "_t": 99.0}], 63.0)["step_time"] == 63.0
