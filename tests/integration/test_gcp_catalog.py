"""`tpuctl up` asks the zone which images and machine types it offers, against the fake's catalogue.

The fake serves per-zone runtime versions and machine types built from public data
(tests/fakegcp/catalog.py names the source of each); these tests run the installed `tpuctl`.
"""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.fakegcp import catalog

PROJECT = "tpuctl-test"


def _created(fake) -> dict:
    res = fake.resources()
    return {"instances": res["instances"], "nodes": res["nodes"]}


@pytest.mark.parametrize(("accelerator", "zone"), [
    ("v2-8", "us-central1-b"), ("v3-8", "europe-west4-a"), ("v4-8", "us-central2-b"),
    ("v5litepod-8", "us-west4-a"), ("v5p-8", "us-east5-a"), ("v6e-8", "us-east5-b"),
])
def test_up_with_default_options_gets_an_image_and_machine_type_the_zone_offers(fakegcp_env, tpuctl_process,
                                                                                accelerator, zone):
    r = tpuctl_process("up", "c1", "--zone", zone, "-a", accelerator, "--json", timeout=180)
    assert r.code == 0, r.err
    doc = r.json()
    generation = accelerator.split("-")[0]
    image = doc["tpu"]["version"]
    assert image in catalog.RUNTIME_VERSIONS_BY_GENERATION[generation], image
    assert image.startswith("tpu-vm-tf-2.18.0-pjrt-"), image        # the newest TF image there is for it
    assert doc["vm"]["machine_type"] in catalog.machine_types_in(zone)
    assert doc["vm"]["machine_type"] == ("n2-standard-8" if zone == "us-central2-b" else "e2-standard-2")
    counts = fakegcp_env.call_counts()
    # asked once per zone: one runtime list, one machine-type list
    assert counts.get("tpu.v2.runtimeVersions.list") == 1 and counts.get("compute.machineTypes.list") == 1


def test_pod_slice_gets_the_pod_image_of_its_family(fakegcp_env, tpuctl_process):
    r = tpuctl_process("up", "pod", "--zone", "us-west4-a", "-a", "v5litepod-16", "--no-vm", "--json", timeout=180)
    assert r.code == 0, r.err
    assert r.json()["tpu"]["version"] == "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6"


def test_an_image_the_zone_does_not_offer_is_one_line_and_nothing_is_created(fakegcp_env, tpuctl_process):
    # the bare name the old table defaulted to: nobody has seen it, and the zone does not list it
    r = tpuctl_process("up", "c1", "--zone", "us-east5-b", "-a", "v6e-8", "--runtime-version",
                       "tpu-vm-tf-2.18.0-pjrt")
    assert r.code == 2, r.err
    lines = [ln for ln in r.err.splitlines() if "error" in ln]
    assert len(lines) == 1 and lines[0] == r.err.strip().splitlines()[-1], r.err
    assert "tpu-vm-tf-2.18.0-pjrt is not offered" in lines[0]
    assert "its TensorFlow images for v6e: tpu-vm-tf-2.18.0-pjrt-v5e-and-v6, tpu-vm-tf-2.16.1-pjrt" in lines[0]
    assert _created(fakegcp_env) == {"instances": [], "nodes": []}
    counts = fakegcp_env.call_counts()
    assert not counts.get("compute.instances.insert") and not counts.get("tpu.v2.nodes.create")


def test_a_machine_type_the_zone_does_not_offer_is_one_line_and_nothing_is_created(fakegcp_env, tpuctl_process):
    # n1 is not offered in us-east5 (skypilot-catalog vms.csv)
    r = tpuctl_process("up", "c1", "--zone", "us-east5-b", "-a", "v6e-8", "--machine-type", "n1-standard-2")
    assert r.code == 2, r.err
    lines = [ln for ln in r.err.splitlines() if "error" in ln]
    assert len(lines) == 1 and lines[0] == r.err.strip().splitlines()[-1], r.err
    assert "machine type n1-standard-2 is not offered there; it offers e2-standard-2, n2-standard-2" in lines[0]
    assert _created(fakegcp_env) == {"instances": [], "nodes": []}


def test_a_zone_without_the_machine_type_is_left_out_of_failover_with_its_reason(fakegcp_env, tpuctl_process):
    r = tpuctl_process("up", "c1", "--zone", "us-south1-a,us-central1-a", "-a", "v5litepod-8",
                       "--machine-type", "n1-standard-2", "--json", timeout=180)
    assert r.code == 0, r.err
    assert "zone us-south1-a is left out: machine type n1-standard-2 is not offered there" in r.err
    doc = r.json()
    assert doc["zone"] == "us-central1-a" and doc["vm"]["machine_type"] == "n1-standard-2"


def test_tf_version_picks_that_tensorflow_image(fakegcp_env, tpuctl_process):
    r = tpuctl_process("up", "c1", "--zone", "us-central1-b", "-a", "v2-8", "--no-vm", "--tf-version", "2.17",
                       "--json", timeout=180)
    assert r.code == 0, r.err
    assert r.json()["tpu"]["version"] == "tpu-vm-tf-2.17.1-pjrt"
    r = tpuctl_process("up", "c2", "--zone", "us-central1-b", "-a", "v2-8", "--no-vm", "--tf-version", "2.21")
    assert r.code == 2 and "no single-host TensorFlow 2.21 image for v2" in r.err
    assert [n["name"] for n in _created(fakegcp_env)["nodes"]] == [f"projects/{PROJECT}/locations/us-central1-b/nodes/c1"]


def test_a_recreated_tpu_keeps_its_image(fakegcp_env, tpuctl_process):
    r = tpuctl_process("up", "keep", "--zone", "us-central1-b", "-a", "v2-8", "--no-vm", "--runtime-version",
                       "tpu-vm-tf-2.16.1-pjrt", "--json", timeout=180)
    assert r.code == 0, r.err
    fakegcp_env.preempt("us-central1-b", "keep")
    r = tpuctl_process("up", "keep", "--zone", "us-central1-b", "-a", "v2-8", "--no-vm", "--json", timeout=180)
    assert r.code == 0, r.err
    assert r.json()["tpu"]["state"] == "READY" and r.json()["tpu"]["version"] == "tpu-vm-tf-2.16.1-pjrt"


def test_the_fake_refuses_what_google_refuses(fakegcp):
    from google.api_core import exceptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1, tpu_v2

    creds = AnonymousCredentials()
    opts = {"api_endpoint": fakegcp.url}
    machine_types = compute_v1.MachineTypesClient(credentials=creds, transport="rest", client_options=opts)
    assert machine_types.get(project=PROJECT, zone="us-east5-b", machine_type="e2-standard-2").guest_cpus == 2
    with pytest.raises(exceptions.NotFound):     # Compute answers 404 for a type the zone does not have
        machine_types.get(project=PROJECT, zone="us-east5-b", machine_type="n1-standard-2")
    tpu = tpu_v2.TpuClient(credentials=creds, transport="rest", client_options=opts)
    listed = [v.version for v in tpu.list_runtime_versions(parent=f"projects/{PROJECT}/locations/us-east5-b")]
    assert "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6" in listed and "tpu-vm-tf-2.18.0-pjrt" not in listed
    with pytest.raises(exceptions.BadRequest, match='The field "RuntimeVersion" cannot be'):   # 400 INVALID_ARGUMENT
        tpu.create_node(parent=f"projects/{PROJECT}/locations/us-east5-b", node_id="n",
                        node=tpu_v2.Node(accelerator_type="v6e-8", runtime_version="tpu-vm-tf-2.18.0-pjrt"))


def test_a_sweep_whose_zones_cannot_host_its_tpus_stops_before_anything_is_written(fakegcp_env, gcs_env, gcs_bucket,
                                                                                  tpuctl_process, tmp_path):
    from provision.basics.config import Target
    from provision.cloud.storage import open_bucket

    bucket = f"gs://{gcs_bucket}"
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"""job: {REPO / 'templates' / 'bert-finetune-tiny.yaml'}
set: {{bert_dir: {bucket}/tiny, train_file: {bucket}/tiny/train.tsv, dev_file: {bucket}/tiny/dev.tsv}}
metric: eval_accuracy
parameters:
  learning_rate: {{values: [3.0e-4, 1.0e-3]}}
""")
    # us-central1-a has no v6e (the sweep's controller would find out only when it makes its pool)
    r = tpuctl_process("sweep", str(spec), "--provider", "gcp", "--zone", "us-central1-a", "-a", "v6e-8",
                       "--bucket", bucket)
    assert r.code == 2 and "v6e-8 is not offered in us-central1-a" in r.err.strip().splitlines()[-1], r.err
    b = open_bucket(bucket, Target(provider="gcp", project=PROJECT, zone=None))
    assert list(b.list("tpuctl/sweeps/")) == [] and _created(fakegcp_env) == {"instances": [], "nodes": []}
    assert fakegcp_env.call_counts().get("tpu.v2.runtimeVersions.list", 0) == 0


def test_dry_run_says_which_image_and_machine_type_it_would_use(fakegcp_env, tpuctl_process):
    r = tpuctl_process("up", "c1", "--zone", "us-east5-b", "-a", "v6e-8", "--dry-run", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["runtime_version"] == "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6" and doc["machine_type"] == "e2-standard-2"
    assert "TPU c1 v6e-8 in us-east5-b, image tpu-vm-tf-2.18.0-pjrt-v5e-and-v6" in doc["planned"]
    assert "VM c1 e2-standard-2 in us-east5-b" in doc["planned"]
    assert _created(fakegcp_env) == {"instances": [], "nodes": []}
