"""What a host is told to run: the environment an attempt carries to the job."""

from __future__ import annotations


def test_a_tpu_node_attempt_names_its_zone_and_project_for_the_resolver():
    """A Node recreated in another zone of the region must still resolve (the job
    looks its TPU up in the TPU's zone, not the host's): the attempt
    carries zone and project, and the host agent passes both on to the job."""
    from provision.cloud.base import Arch, TpuNode, TpuState
    from provision.host.agent import JOB_ENV_KEYS
    from provision.runs.store import RunRecord
    from provision.runs.training import attempt_command

    rec = RunRecord.from_dict({"run_id": "lab-1", "cluster": "lab", "provider": "gcp", "project": "p-1",
                               "zone": "us-central1-b", "bucket": "gs://b", "job": "bert-finetune",
                               "model_dir": "gs://b/m", "num_train_steps": 10, "save_checkpoints_steps": 5})
    node = TpuNode(name="lab", zone="us-central1-c", accelerator_type="v2-8", state=TpuState.READY, arch=Arch.NODE)
    env = attempt_command(rec, 2, node)["env"]
    assert env == {"TPU_NAME": "lab", "TPUCTL_TPU_ZONE": "us-central1-c", "TPUCTL_TPU_PROJECT": "p-1",
                   "TPUCTL_ACCELERATOR_TYPE": "v2-8", "TPUCTL_SLICE_CORES": "8"}
    assert set(env) <= JOB_ENV_KEYS
