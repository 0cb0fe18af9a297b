"""The digest a run's pin holds of where its attempts run and listen (provision.runs.pins.placement_digest):
every run.json field that decides it changes it; what a supervisor writes as the run goes does not."""

from provision.runs.pins import PLACEMENT_FIELDS, placement_digest
from provision.runs.store import RunRecord

RECORD = {"run_id": "lab-20260101-000000-abcd", "cluster": "lab", "provider": "gcp", "project": "mine",
          "zone": "us-central1-b", "bucket": "gs://mine", "model_dir": "gs://mine/m", "num_train_steps": 10,
          "save_checkpoints_steps": 5, "hosts": None, "backend": "tensorflow", "code": True}
OTHER = {"cluster": "lab2", "provider": "local", "project": "attacker-proj", "bucket": "gs://theirs", "hosts": "all",
         "backend": "jax", "code": False}


def test_each_field_that_decides_where_attempts_run_changes_the_digest_and_progress_does_not():
    pinned = placement_digest(RECORD)
    assert placement_digest(RunRecord.from_dict(RECORD)) == pinned       # the record as the supervisor reads it
    assert sorted(OTHER) == sorted(PLACEMENT_FIELDS)
    for name, value in OTHER.items():
        assert placement_digest({**RECORD, name: value}) != pinned, name
    moved = {**RECORD, "status": "recovering", "attempts": 4, "zone": "us-central1-c", "preemptions": 3,
             "last_progress": {"step": 7}}
    assert placement_digest(moved) == pinned
