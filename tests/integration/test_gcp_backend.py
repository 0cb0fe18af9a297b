"""A built-in job on a TPU7x slice on Compute Engine runs on Keras 3's JAX backend: over the wire,
the fake cloud and fake-gcs-server, through the installed ``tpuctl``.

``train`` resolves the backend (``auto``: TPU7x images have no TensorFlow TPU runtime), says so,
pins the run's wheelhouse (jax[tpu] with its libtpu, tensorflow-cpu, keras: never tensorflow-tpu)
and its launch (every worker runs the job, told ``TPUCTL_BACKEND=jax``) in the hosts' metadata,
and writes the attempt's command. No wheel is downloaded: the wheelhouse ``train`` would resolve
with pip for the hosts (Python 3.12, Ubuntu 24.04) is the cache a previous ``train`` left, named
by those requirement lines and that platform, with stand-in wheels; no agent runs the job (the
JAX runner is tested on this CPU in tests/jobs).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

from provision.runs import requirements, wheelhouse
from provision.runs.pins import KEY, Pin, launch_digest
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

ZONE = "us-central1-c"        # tpu7x-standard-4t on Compute Engine (tests/fakegcp/catalog.py)
MLP = ["--job", "examples/mlp/spec.yaml", "--workdir", "examples/mlp"]

# what pip would put in the wheelhouse for those lines on the hosts' platform (cp312, manylinux)
STAND_INS = ("jax-{jax}-py3-none-any.whl", "jaxlib-{jax}-cp312-cp312-manylinux_2_27_x86_64.whl",
             "libtpu-0.0.42-cp312-cp312-manylinux_2_31_x86_64.whl", "keras-{keras}-py3-none-any.whl",
             "tensorflow_cpu-{tf}-cp312-cp312-manylinux_2_27_x86_64.whl",
             "numpy-2.3.5-cp312-cp312-manylinux_2_27_x86_64.whl")


def _cached_wheelhouse(lines: tuple[str, ...], host: tuple[str, str]) -> list[str]:
    from provision.basics.config import home
    from provision.basics.digest import sha256_file

    cache = home() / "wheelhouses" / wheelhouse.cache_key(lines, "gcp", host)
    cache.mkdir(parents=True)
    pins = requirements.JAX_BACKEND
    names = [n.format(jax=pins["jax"], keras=pins["keras"], tf=pins["tensorflow-cpu"]) for n in STAND_INS]
    index = []
    for name in names:
        (cache / name).write_bytes(f"stand-in for {name}\n".encode())
        index.append([name, sha256_file(cache / name)])
    (cache / "wheels.json").write_text(json.dumps(index))
    return names


def _pin(fake, instance: str) -> Pin:
    req = urllib.request.Request(f"{fake.guest_metadata_url(ZONE, instance)}/instance/attributes/{KEY}",
                                 headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return Pin.parse(resp.read())


def test_a_tpu7x_slice_trains_on_jax_with_jax_tpu_and_libtpu_pinned_and_no_tensorflow_tpu(fakegcp_env, gcs_env):
    from provision.basics.config import Target
    from provision.cloud.storage import open_bucket

    fake = fakegcp_env
    fake.set_latencies(vm_create=0.1, vm_delete=0.05, tpu_create=0.15, tpu_delete=0.1)
    bucket = f"gs://{gcs_env.create_bucket()}"
    up = run_tpuctl_process("up", "x7", "--zone", ZONE, "-a", "tpu7x-16", "--spot", "--no-vm", "--json")
    assert up.code == 0, up.err
    assert up.json()["tpu"]["api"] == "compute" and up.json()["tpu"]["hosts"] == 2
    store = open_bucket(bucket, Target(provider="gcp", project="tpuctl-test", zone=None))

    # TensorFlow asked for on TPU7x: one line naming the fix, exit 2, nothing staged
    bad = run_tpuctl_process("train", "x7", *MLP, "--bucket", bucket, "--set", "backend=tensorflow")
    assert bad.code == 2, bad.err
    assert bad.err.splitlines()[-1].startswith("tpuctl: error: backend tensorflow cannot run on tpu7x-16 (TPU7x "
                                               "images have no TensorFlow TPU runtime")
    assert bad.err.splitlines()[-1].endswith("use backend: jax (--set backend=jax) or backend: auto")
    assert not list(store.list("tpuctl/"))

    # auto: jax, said with its reason; the hosts get jax[tpu] (and its libtpu), never tensorflow-tpu
    dry = run_tpuctl_process("train", "x7", *MLP, "--bucket", bucket, "--dry-run", "--json")
    assert dry.code == 0, dry.err
    doc = dry.json()
    assert doc["backend"]["name"] == "jax" and doc["backend"]["reason"].startswith(
        "auto: TPU7x images have no TensorFlow TPU runtime")
    assert "backend: jax (auto: TPU7x images have no TensorFlow TPU runtime" in dry.err
    jax = requirements.JAX_BACKEND["jax"]
    assert doc["requirements"][:2] == [f"--find-links {requirements.JAX_INDEX}", f"jax[tpu]=={jax}"]
    assert f"tensorflow-cpu=={requirements.JAX_BACKEND['tensorflow-cpu']}" in doc["requirements"]
    assert not any("tensorflow-tpu" in line for line in doc["requirements"])
    assert "installing jax[tpu]" in " ".join(doc["frameworks"]) and "Python 3.12 hosts" in doc["frameworks"][0]

    names = _cached_wheelhouse(tuple(doc["requirements"]), requirements.UBUNTU_2404)
    # the run itself, in the foreground, until its first attempt is launched (no agent runs it here)
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "x7", *MLP, "--bucket", bucket, "--poll", "0.5",
                             "--on-interrupt", "stop"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PIP_NO_INDEX": "1", "PIP_RETRIES": "0"})
    try:
        command = None
        deadline = time.time() + 120
        while command is None and time.time() < deadline and proc.poll() is None:
            time.sleep(0.3)
            found = [o.name for o in store.list("tpuctl/runs/") if o.name.endswith("/attempts/1/command.json")]
            command = json.loads(store.read_bytes(found[0])) if found else None
    finally:
        proc.kill()
        _out, err = proc.communicate(timeout=30)
    assert command is not None, err[-3000:]
    assert "backend: jax (auto: TPU7x images have no TensorFlow TPU runtime" in err
    assert f"staged the run's requirements: {len(names)} wheel(s)" in err
    run_id = found[0].split("/")[2]

    # what each TPU VM reads: its pin names the wheelhouse (jax, jaxlib, libtpu; no tensorflow-tpu)
    # and the launch: every worker runs the job on JAX, with worker 0 as the coordinator
    for worker in ("x7-tpu-0", "x7-tpu-1"):
        entry = _pin(fake, worker).entry("run", run_id)
        assert entry is not None and entry["launch"] == launch_digest(command)
        manifest = json.loads(store.read_bytes(wheelhouse.manifest_name(entry["requirements"])))
        staged = [name for name, _sha in manifest["wheels"]]
        assert sorted(staged) == sorted(names)
        assert any(n.startswith(f"jax-{jax}-") for n in staged) and any(n.startswith("libtpu-") for n in staged)
        assert not any(n.startswith(("tensorflow_tpu", "tensorflow-tpu")) for n in staged)
    workers = command["workers"]
    assert sorted(workers) == ["0", "1"] and all(w["run"] for w in workers.values())
    for index, w in workers.items():
        env = w["env"]
        assert env["TPUCTL_BACKEND"] == "jax" and env["TPUCTL_WORKER_INDEX"] == index
        assert env["TPUCTL_NUM_WORKERS"] == "2" and env["TPUCTL_COORDINATOR"].endswith(":8482")
        assert not {"TPU_NAME", "TPU_LOAD_LIBRARY", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"} & set(env)
    record = json.loads(store.read_bytes(f"tpuctl/runs/{run_id}/run.json"))
    assert record["backend"] == "jax"

    assert run_tpuctl_process("down", "x7").code == 0
    assert not fake.resources()["instanceGroupManagers"] and not fake.resources()["instances"]
