"""The pin of what a cluster's hosts may run (provision.runs.pins): pure decisions, no I/O."""

import json

from provision.runs.pins import KEEP, KEY, Pin, manifest, sha256, updated
from provision.sweeps.spec import Parameter, SweepSpec, outside

RUN = "lab-20260101-000000-abcd"
A, B = sha256(b"a"), sha256(b"b")


def test_a_pinned_run_runs_only_with_its_pinned_digests():
    pin = Pin().with_entry("run", RUN, {"cluster": "lab", "spec": A, "workdir": None})
    assert pin.refusal("run", RUN) is None
    assert pin.refusal("run", RUN, {"spec": A, "workdir": None, "cluster": "lab"}) is None
    swapped = pin.refusal("run", RUN, {"spec": B})
    assert swapped and "spec of run" in swapped and B[:12] in swapped and A[:12] in swapped
    # a run pinned without a workdir gets none, whatever the bucket holds
    assert "workdir of run" in pin.refusal("run", RUN, {"workdir": B})
    assert "cluster of run" in pin.refusal("run", RUN, {"cluster": "other"})
    assert KEY in pin.refusal("run", "lab-20260101-000000-beef")
    assert "not pinned" in pin.refusal("sweep", RUN)        # kinds do not mix


def test_what_cannot_be_read_as_a_pin_allows_nothing():
    for text in (None, "", "{", "[]", json.dumps({"version": 2, "run": {RUN: {}}}), b"\xff\xfe",
                 json.dumps({"version": 1, "run": {"../x": {"spec": A}}}),
                 json.dumps({"version": 1, "run": {RUN: {"spec": "$(touch /x)"}}}),
                 json.dumps({"version": 1, "run": {RUN: "not a mapping"}})):
        assert Pin.parse(text).refusal("run", RUN) is not None, text


def test_a_pin_round_trips_and_keeps_the_newest_entries_of_each_kind():
    text = None
    for i in range(KEEP + 3):
        text = updated(text, "run", f"lab-{i}", {"spec": A})
    text = updated(text, "data", "0123456789abcdef", {"request": B, "wheel": A})
    pin = Pin.parse(text)
    assert list(pin.entries["run"]) == [f"lab-{i}" for i in range(3, KEEP + 3)]
    assert pin.refusal("data", "0123456789abcdef", {"request": B}) is None
    # re-pinning an old entry makes it the newest: it survives the next ones
    pin = Pin.parse(updated(pin.to_text(), "run", "lab-3", {"spec": B}))
    assert list(pin.entries["run"])[-1] == "lab-3" and pin.entry("run", "lab-3") == {"spec": B}
    assert pin.wheels() == {A}
    assert len(pin.to_text()) < 256 * 1024


def test_the_code_digest_covers_every_file_name_and_byte():
    files = [("pkg/model.py", A), ("train.py", B)]
    assert manifest(files) == manifest(list(reversed(files)))
    assert manifest(files) != manifest([*files, ("jobs/__init__.py", A)])
    assert manifest(files) != manifest([("pkg/model.py", B), ("train.py", B)])
    assert manifest(files) != manifest([("pkg/other.py", A), ("train.py", B)])


def test_trial_parameters_read_back_from_the_bucket_must_be_points_of_the_space():
    spec = SweepSpec(job="bert-finetune", metric="eval_accuracy", goal="maximize", method="random", pruner="none",
                     max_trials=4, parameters=(Parameter("learning_rate", low=1e-5, high=1e-3, log=True),
                                               Parameter("train_batch_size", values=(16, 32))))
    assert outside(spec, {"learning_rate": 3e-4, "train_batch_size": 32}) is None
    assert "not a parameter" in outside(spec, {"job": "bert-squad"})
    assert "not a parameter" in outside(spec, {"bert_dir": "gs://elsewhere/bert"})
    assert "not one of its values" in outside(spec, {"train_batch_size": 64})
    assert "not one of its values" in outside(spec, {"train_batch_size": "32"})
    assert "outside its range" in outside(spec, {"learning_rate": 1.0})
    assert "outside its range" in outside(spec, {"learning_rate": float("nan")})
