"""Files tpuctl reads that anyone may have written (a sweep spec from elsewhere, a sweep's journal
and a run's or sweep's records in a bucket others can write, a model directory's vocab.txt):
hostile ones are one line naming the file or object, exit 2, through the installed tpuctl; before,
each was an ``internal error`` (RecursionError; JSONDecodeError, TypeError, KeyError or
AssertionError inside Optuna's replay; MemoryError after half a minute)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs.bert.vocab import MAX_VOCAB_BYTES
from tests.conftest import run_tpuctl_process
from tests.e2e import hostile_records as hostile

# what every refusal of a bucket's record adds after naming it (provision.basics.records)
BAD_RECORD_HINT = "tpuctl never writes that: someone who can write the bucket did; restore or delete the object"


def one_line(res, expected: str) -> None:
    assert res.code == 2, (res.code, res.err)
    errors = [line for line in res.err.splitlines() if line.startswith("tpuctl")]
    assert errors[-1] == f"tpuctl: error: {expected}", res.err
    assert "internal error" not in res.err and "Traceback" not in res.err


def test_a_sweep_spec_nested_30000_deep_is_one_line(tmp_path):
    spec = hostile.sweep_spec(tmp_path, "job: job.yaml\nparameters: " + "[" * 30_000 + "]" * 30_000 + "\n")
    res = run_tpuctl_process("sweep", "start", str(spec), "--dry-run", "--provider", "local")
    one_line(res, f"sweep spec {spec} nests deeper than 16 levels; a spec is flat key: value lines")


def test_a_sweep_spec_bomb_is_one_line(tmp_path):
    laughs = ["&a0 [x, x, x, x, x, x, x, x, x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
                                                   for i in range(1, 9)]
    spec = hostile.sweep_spec(tmp_path, "job: job.yaml\nset: {bomb: [" + ", ".join(laughs) + "]}\n")
    res = run_tpuctl_process("sweep", "start", str(spec), "--dry-run", "--provider", "local")
    one_line(res, f"sweep spec {spec} uses the alias *a0 to repeat a list or mapping (or too many aliases); "
                  "write the values out, aliases may only repeat single values")


@pytest.mark.parametrize("batch, why", [
    (b"[{\"op_code\": 0, ", "is not JSON"),
    (b"\xff\xfe[]", "is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply for a list of journal entries"),
    (b'{"op_code": 0}', "is not a list of Optuna journal entries"),
    (b'[{"op_code": "0"}]', "is not a list of Optuna journal entries"),
    (b'[{"op_code": 4, "worker_id": "w"}]', "holds entries Optuna cannot replay (KeyError)"),
    (b'[{"op_code": 99, "worker_id": "w"}]', "holds entries Optuna cannot replay (AssertionError)"),
], ids=["truncated", "not-utf8", "deep", "not-a-list", "op-code-string", "missing-fields", "unknown-op"])
def test_a_garbage_sweep_journal_is_refused_by_sweep_resume_naming_the_object(tmp_path, batch, why):
    sweep_id, journal = hostile.made_sweep(tmp_path)
    journal.mkdir(parents=True)
    (journal / "00000000.json").write_bytes(b'[{"op_code": 0, "worker_id": "w", "study_name": "'
                                            + sweep_id.encode() + b'", "directions": [2]}]')
    (journal / "00000001.json").write_bytes(batch)
    expected = (f"the study journal of sweep {sweep_id} cannot be read: gs://tpuctl-local/tpuctl/sweeps/"
                f"{sweep_id}/study/journal/00000001.json {why}; tpuctl did not write it: restore the object, "
                "or start the sweep again (tpuctl sweep start SPEC)")
    one_line(run_tpuctl_process("sweep", "resume", sweep_id, "--provider", "local"), expected)
    if why == "is not JSON":
        # the controller that refused it released the sweep: the next resume says the same, not
        # "still has a live controller"
        one_line(run_tpuctl_process("sweep", "resume", sweep_id, "--provider", "local"), expected)


@pytest.mark.parametrize("on", [False, True], ids=["here", "on-a-host"])
def test_a_vocab_txt_larger_than_any_vocabulary_is_refused_before_it_is_read(tmp_path, on):
    bert = hostile.bert_dir(tmp_path)
    with open(bert / "vocab.txt", "r+b") as fh:
        fh.truncate(MAX_VOCAB_BYTES + 1)             # sparse: 64 MiB that take no disk
    (tmp_path / "corpus.txt").write_text("a b c.\n\nb c a.\n")
    args = ["data", str(tmp_path / "corpus.txt"), "--bert-dir", str(bert), "--provider", "local"]
    if on:
        assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
        args += ["--out", "gs://tpuctl-local/data", "--on", "lab"]
    else:
        args += ["--out", str(tmp_path / "out")]
    res = run_tpuctl_process(*args, "--dry-run", timeout=60)
    one_line(res, f"{bert}/vocab.txt is {MAX_VOCAB_BYTES + 1} bytes, more than any BERT vocabulary (one token "
                  f"per line, a few hundred kB; at most {MAX_VOCAB_BYTES} bytes); give --bert-dir the model "
                  "directory whose vocab.txt tokenizes the corpus")
    assert not (tmp_path / "out").exists() and not os.path.exists(Path(os.environ["TPUCTL_HOME"]) / "data")


EVENT_NOT_AN_OBJECT = 'is ["not", "an", "event"], not an object'
# What a bucket writer put where a record's field belongs, and the line that names it: run.json,
# an event log line, a sweep's record and a trial's.
RUN_JSON = f"gs://tpuctl-local/tpuctl/runs/{hostile.RUN}/run.json"
MALFORMED = {
    "attempts-many": ("run.json", {"attempts": "many"}, f'{RUN_JSON}: "attempts" is "many", not a whole number'),
    "seconds-by-state-list": ("run.json", {"seconds_by_state": [1, 2]},
                              f'{RUN_JSON}: "seconds_by_state" is [1, 2], not an object of numbers'),
    "loss-words": ("run.json", {"last_progress": {"step": 3, "loss": "low"}},
                   f'{RUN_JSON}: "last_progress.loss" is "low", not a number or null'),
    "event-a-list": ("events.jsonl", b'["not", "an", "event"]\n',
                     f"gs://tpuctl-local/tpuctl/runs/{hostile.RUN}/events.jsonl line 2: " + EVENT_NOT_AN_OBJECT),
    "trial-steps-many": ("trials/0.json", {"steps": "many"},
                         'trials/0.json: "steps" is "many", not a whole number'),
    "sweep-spec-a-list": ("sweep.json", {"spec": ["grid"]}, 'sweep.json: "spec" is ["grid"], not an object'),
}
# which commands read which object
READS = {"run.json": ["status", "status-NAME", "logs", "logs-events", "cost", "cost-RUN", "down-idle-dry-run"],
         "events.jsonl": ["logs-events", "cost", "cost-RUN"],
         "trials/0.json": ["sweep-status"], "sweep.json": ["sweep-status"]}


def _plant(world: hostile.World, obj: str, change) -> None:
    if obj == "run.json":
        world.patch_run(**change)
    elif obj == "events.jsonl":
        with open(world.bucket / f"tpuctl/runs/{world.run}/events.jsonl", "ab") as fh:
            fh.write(change)
    else:
        path = world.bucket / f"tpuctl/sweeps/{world.sweep}/{obj}"
        path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


@pytest.mark.parametrize("command, bad", [(c, m) for m, (obj, _c, _l) in sorted(MALFORMED.items())
                                          for c in READS[obj]])
def test_a_record_of_the_wrong_type_is_one_line_naming_it(tmp_path, command, bad):
    """Every command that reads a record (tests/e2e/hostile_records.py), given one with a value
    of the wrong type: a command about that record ends with one line naming the object and the
    field (exit 2); one that lists many names it and shows the rest (exit 0). Never a traceback
    nor an internal error: before, ``logs RUN`` of a run.json with ``"attempts": "many"`` ended in
    ``internal error: TypeError``, ``cost RUN`` with a list for ``seconds_by_state`` reported the
    run "unreadable (TypeError: ...)" and exited 0, and the rest went on with the bad value."""
    world = hostile.make_world(tmp_path)
    obj, change, line = MALFORMED[bad]
    _plant(world, obj, change)
    if obj in ("trials/0.json", "sweep.json"):
        line = f"gs://tpuctl-local/tpuctl/sweeps/{world.sweep}/{line}"
    res = hostile.run_command(world, command)
    out, err = res.stdout.decode(), res.stderr.decode()
    assert "internal error" not in err and "Traceback" not in err
    assert hostile.controls(res.stdout) == [] and hostile.controls(res.stderr) == []
    if hostile.COMMANDS[command][1] == "one":
        assert res.returncode == 2, err
        assert err.splitlines()[-1] == f"tpuctl: error: {line}; {BAD_RECORD_HINT}"
    else:
        assert res.returncode == 0, err
        assert line in out + err


# What a bucket writer puts in the objects a run's supervisor computes with as it watches the run,
# and the line that names it. Before, each record passed the gate and the supervisor ended in an
# internal error at its first look (the price in _account, the pace's caps, the recovery's dates).
SUPERVISED = {
    "pricing-words": ({"pricing": {"usd_per_hour": "x"}},
                      f'{RUN_JSON}: "pricing.usd_per_hour" is "x", not a number or null'),
    "recovering-words": ({"recovering": {"detected_at": "x"}},
                         f'{RUN_JSON}: "recovering.detected_at" is "x", not a number'),
    "workload-words": ({"workload": {"hosts": "two"}}, f'{RUN_JSON}: "workload.hosts" is "two", not a number or null'),
    "pace-over-words": ({"pace": {"over": "x"}},
                        f'{RUN_JSON}: "pace.over" is "x", not an object of true or false or null'),
}


def test_a_supervisor_given_a_record_of_the_wrong_type_stops_with_one_line_naming_it(tmp_path):
    """``train --attach`` (the supervisor re-attached on the machine that started the run) and the
    host's supervisor (``supervise --where host``), given a live run whose record a writer of the
    bucket has filled with values of the wrong type, or a supervisor lease whose heartbeat is not a
    time: one line naming the object and the field, exit 2, before anything is supervised."""
    world = hostile.make_world(tmp_path)
    record = json.loads(world.run_json().read_text())
    for name, (change, line) in SUPERVISED.items():
        world.run_json().write_text(json.dumps({**record, "status": "running", **change}))
        host = [["supervise", world.run, "--where", "host"]] if name == "pricing-words" else []
        for words in [["train", "lab", "--attach", "--poll", "1"], *host]:
            res = run_tpuctl_process(*words, "--provider", "local", timeout=60)
            assert res.code == 2, (name, words, res.err)
            one_line(res, f"{line}; {BAD_RECORD_HINT}")
    # the record is good, its lease is not: the supervisor that would take it over names the lease
    world.run_json().write_text(json.dumps({**record, "status": "running"}))
    lease = world.bucket / f"tpuctl/runs/{world.run}/supervisor.json"
    lease.write_text(json.dumps({"owner": "someone", "heartbeat_at": "soon"}))
    res = run_tpuctl_process("train", "lab", "--attach", "--poll", "1", "--provider", "local", timeout=60)
    one_line(res, f'gs://tpuctl-local/tpuctl/runs/{world.run}/supervisor.json: "heartbeat_at" is "soon", not a '
                  f"number or null; {BAD_RECORD_HINT}")
