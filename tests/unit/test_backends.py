"""The spec's ``backend:`` (jobs.spec.backends): which Keras 3 backend a built-in job runs on, what
the job side does with it, what a TPU host installs for it and how it reaches the job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib

from jobs.spec import SpecError, load
from jobs.spec.backends import Choice, for_job, generation, resolve, xla_flags
from provision.basics.errors import UsageError
from provision.cloud.base import Arch, Endpoint
from provision.runs import launch, requirements
from tests.conftest import REPO, run_tpuctl_process

MLP = REPO / "examples" / "mlp" / "spec.yaml"


# -- the rule --------------------------------------------------------------------------------------

def test_auto_takes_jax_on_tpu7x_and_tensorflow_on_every_other_tpu():
    choice = resolve("auto", "tpu7x-8")
    assert choice.name == "jax" and choice.reason.startswith("auto: TPU7x images have no TensorFlow TPU runtime")
    assert "TF 2.18 / libtpu 1.12" in choice.reason
    assert resolve(None, "tpu7x-256").name == "jax"        # None is auto
    for tpu in ("v2-8", "v3-32", "v4-16", "v5litepod-8", "v5p-16", "v6e-8"):
        choice = resolve("auto", tpu)
        assert choice == Choice("tensorflow", f"auto: {tpu} runs TensorFlow from its TPU runtime image")


def test_auto_without_a_tpu_takes_tensorflow_where_it_is_installed_else_jax():
    for none in (None, "", "cpu", "gpu"):
        assert resolve("auto", none, tensorflow_importable=True) == \
            Choice("tensorflow", "auto: no TPU here, and TensorFlow is installed")
        assert resolve("auto", none, tensorflow_importable=False) == \
            Choice("jax", "auto: no TPU here, and TensorFlow is not installed")
    assert resolve("auto", None).name == "tensorflow"      # this venv has TensorFlow (the train extra)


def test_a_backend_the_spec_names_is_taken_where_it_can_run():
    assert resolve("jax", "v6e-8") == Choice("jax", "set in the spec")
    assert resolve("jax", None, tensorflow_importable=True).name == "jax"
    assert resolve("tensorflow", "v5p-8") == Choice("tensorflow", "set in the spec")
    assert resolve("tensorflow", None, tensorflow_importable=False).name == "tensorflow"


def test_tensorflow_on_tpu7x_is_refused_in_one_line_naming_the_fix():
    with pytest.raises(SpecError) as info:
        resolve("tensorflow", "tpu7x-16")
    text = str(info.value)
    assert "\n" not in text and text.startswith("backend tensorflow cannot run on tpu7x-16 (TPU7x images have no "
                                                "TensorFlow TPU runtime")
    assert text.endswith("use backend: jax (--set backend=jax) or backend: auto")
    with pytest.raises(SpecError, match="is not one of auto, jax, tensorflow"):
        resolve("pytorch", "v6e-8")


def test_generations():
    assert generation("tpu7x-8") == "tpu7x" and generation("v5litepod-16") == "v5litepod"
    assert generation(None) is None and generation("cpu") is None and generation(" ") is None


def test_the_key_is_on_every_built_in_job_and_not_on_command(tmp_path):
    spec = load(str(MLP), [("model_dir", str(tmp_path)), ("backend", "jax")])
    assert spec.backend == "jax"
    assert load(str(MLP), [("model_dir", str(tmp_path))]).backend == "auto"
    with pytest.raises(SpecError, match=r"^backend 'JAX' is not one of auto, jax, tensorflow; use --set backend=auto"):
        load(str(MLP), [("model_dir", str(tmp_path)), ("backend", "JAX")])
    command = tmp_path / "command.yaml"
    command.write_text("job: command\ncommand: [python, train.py]\nmodel_dir: /tmp/m\n")
    assert not hasattr(load(str(command), []), "backend")
    with pytest.raises(SpecError, match="backend"):
        load(str(command), [("backend", "jax")])


# -- on the job side -------------------------------------------------------------------------------

def test_the_job_takes_what_train_resolved_over_auto_and_the_spec_over_both():
    env = {"TPUCTL_BACKEND": "jax", "TPUCTL_ACCELERATOR_TYPE": "v6e-8"}
    assert for_job("auto", env) == Choice("jax", "auto, as tpuctl train resolved it (TPUCTL_BACKEND)")
    assert for_job("tensorflow", env) == Choice("tensorflow", "set in the spec")
    assert for_job("auto", {"TPUCTL_ACCELERATOR_TYPE": "tpu7x-8"}).name == "jax"
    # the local provider's emulated tpu7x is this machine's CPU: no TPU, so TensorFlow may run
    assert for_job("tensorflow", {"TPUCTL_ACCELERATOR_TYPE": "tpu7x-8", "TPUCTL_DEVICE": "cpu"}).name == "tensorflow"
    with pytest.raises(SpecError, match="backend tensorflow cannot run on tpu7x-8"):
        for_job("auto", {"TPUCTL_BACKEND": "tensorflow", "TPUCTL_ACCELERATOR_TYPE": "tpu7x-8"})
    with pytest.raises(SpecError, match=r"^TPUCTL_BACKEND='torch' is not jax or tensorflow"):
        for_job("auto", {"TPUCTL_BACKEND": "torch"})


def test_cpu_replicas_become_virtual_jax_devices_beside_the_flags_already_set():
    assert xla_flags(None, None) is None and xla_flags("--xla_dump_to=/tmp/d", "") is None
    assert xla_flags(None, "4") == "--xla_force_host_platform_device_count=4"
    assert xla_flags("--xla_dump_to=/tmp/d --xla_force_host_platform_device_count=2", "8") == \
        "--xla_dump_to=/tmp/d --xla_force_host_platform_device_count=8"
    for bad in ("0", "-1", "two"):
        with pytest.raises(SpecError, match="is not a positive integer; use e.g. TPUCTL_CPU_REPLICAS=2"):
            xla_flags(None, bad)


def test_the_refusal_is_exit_2_in_one_line_before_anything_runs(tmp_path):
    """Through the installed entry point: `tpuctl job run` on a TPU7x host (as the launch tells a
    job), and `tpuctl train` on the local provider for a backend this machine cannot run."""
    env = {"TPUCTL_ACCELERATOR_TYPE": "tpu7x-8"}
    r = run_tpuctl_process("job", "run", str(MLP), "--set", f"model_dir={tmp_path / 'm'}", "--set",
                           "backend=tensorflow", env=env)
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("tpuctl: error: backend tensorflow cannot run on tpu7x-8 (")
    assert "use backend: jax (--set backend=jax)" in r.err
    assert not (tmp_path / "m").exists()
    r = run_tpuctl_process("job", "run", str(MLP), "--set", f"model_dir={tmp_path / 'm'}", "--dry-run", env=env)
    assert r.code == 0 and "backend: jax (auto: TPU7x images have no TensorFlow TPU runtime" in r.err
    r = run_tpuctl_process("job", "run", str(MLP), "--set", f"model_dir={tmp_path / 'm'}", "--set", "backend=tpu")
    assert r.code == 2 and r.err.count("\n") == 1 and "backend 'tpu' is not one of auto, jax, tensorflow" in r.err


# -- what a TPU host installs ----------------------------------------------------------------------

def _extra(name: str, package: str) -> str:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    (spec,) = [d for d in data["project"]["optional-dependencies"][name] if re.match(rf"{package}\b", d)]
    return spec


def test_the_jax_backends_releases_are_those_the_job_side_declares():
    from packaging.specifiers import SpecifierSet

    from provision.catalog.images import SUPPORTED_TF

    pins = requirements.JAX_BACKEND
    assert pins["jax"] in SpecifierSet(_extra("jax", "jax").removeprefix("jax"))
    assert pins["keras"] in SpecifierSet(_extra("jax", "keras").removeprefix("keras"))
    assert pins["tensorflow-cpu"] in SpecifierSet(_extra("train", "tensorflow").removeprefix("tensorflow"))
    lo, hi = SUPPORTED_TF
    assert lo <= tuple(int(p) for p in pins["tensorflow-cpu"].split(".")[:2]) < hi


def test_a_tpu_host_on_jax_gets_jax_tpu_with_libtpu_tensorflow_cpu_and_keras_never_tensorflow_tpu():
    host = requirements.host_target("compute", "tpu7x-16")
    assert host == ("3.12", "manylinux_2_39_x86_64")
    needs = requirements.jax_backend("gcp", host)
    jax, keras, tf = (requirements.JAX_BACKEND[k] for k in ("jax", "keras", "tensorflow-cpu"))
    assert needs.lines == (f"--find-links {requirements.JAX_INDEX}", f"jax[tpu]=={jax}", f"tensorflow-cpu=={tf}",
                           f"keras=={keras}")
    assert not any("tensorflow-tpu" in line for line in needs.lines)
    assert needs.host == host and "with its libtpu" in needs.said[0]
    assert requirements.jax_backend("local") == requirements.Needs((), (), requirements.UBUNTU_2204)
    argv = requirements.pip_argv("r.txt", "d", provider="gcp", host=host)
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert argv[argv.index("--platform") + 1] == "manylinux_2_39_x86_64"


def test_hosts_on_ubuntu_22_04_cannot_take_the_jax_backend():
    for api, tpu in (("tpu", "v6e-8"), ("compute", "v6e-8"), ("compute", "v5p-16"), ("tpu", "v4-8")):
        host = requirements.host_target(api, tpu)
        assert host == requirements.UBUNTU_2204
        problem = requirements.jax_backend_problem(host, f"a {tpu} host")
        assert problem and "needs Python 3.11 or newer" in problem and "Python 3.10" in problem
    assert requirements.jax_backend_problem(requirements.UBUNTU_2404, "a tpu7x-8 host") is None


def test_the_wheelhouse_of_one_text_differs_by_the_hosts_python():
    from provision.runs import wheelhouse

    lines = ("jax[tpu]==1",)
    assert wheelhouse.cache_key(lines, "gcp", requirements.UBUNTU_2404) != \
        wheelhouse.cache_key(lines, "gcp", requirements.UBUNTU_2204)
    assert wheelhouse.cache_key(lines, "gcp") == wheelhouse.cache_key(lines, "gcp", requirements.UBUNTU_2204)


# -- how it reaches the job ------------------------------------------------------------------------

ENDPOINTS = (Endpoint("10.0.0.2", 8470), Endpoint("10.0.0.3", 8470))


def _plan(backend, **kw):
    args = {"provider": "gcp", "arch": Arch.VM, "accelerator_type": "tpu7x-16", "tpu_name": "x7", "zone": "z",
            "project": "p", "runtime": None, "endpoints": ENDPOINTS, **kw}
    return launch.plan(backend=backend, **args)


def test_jax_on_a_tpu_vm_slice_runs_on_every_worker_with_the_coordinator_and_no_tensorflow_tpu_client():
    p = _plan("jax")
    assert p.job_workers == (0, 1) and p.resolver == "jax"
    for w in p.workers:
        assert w.env["TPUCTL_BACKEND"] == "jax" and w.env["TPUCTL_WORKER_INDEX"] == str(w.worker)
        assert w.env["TPUCTL_NUM_WORKERS"] == "2" and w.env["TPUCTL_COORDINATOR"] == "10.0.0.2:8482"
        assert not set(w.env) & set(launch.TENSORFLOW_TPU_ENV)
    one = _plan("jax", accelerator_type="tpu7x-8", endpoints=ENDPOINTS[:1])
    assert one.job_workers == (0,) and "TF_PLUGGABLE_DEVICE_LIBRARY_PATH" not in one.workers[0].env
    assert one.workers[0].env["TPUCTL_BACKEND"] == "jax"


def test_tensorflow_keeps_its_plan_and_a_run_without_a_backend_launches_as_before():
    before = _plan(None, accelerator_type="v6e-16")
    tf = _plan("tensorflow", accelerator_type="v6e-16")
    assert tf.job_workers == before.job_workers == (0,) and tf.resolver == before.resolver
    assert tf.workers[0].env == {**before.workers[0].env, "TPUCTL_BACKEND": "tensorflow"}
    assert tf.workers[1].env == {}
    # the local provider's emulated slice: every worker, TF_CONFIG naming them, on either backend
    local = launch.plan(provider="local", arch=Arch.VM, accelerator_type="v2-32", tpu_name="lab", zone="local",
                        project="", device="cpu", ports=(5001, 5002, 5003, 5004), backend="jax")
    assert local.job_workers == (0, 1, 2, 3)
    assert all("TF_CONFIG" in w.env and w.env["TPUCTL_BACKEND"] == "jax" for w in local.workers)
    with pytest.raises(UsageError, match="backend jax cannot run on a TPU Node"):
        _plan("jax", arch=Arch.NODE, accelerator_type="v3-8")


def test_the_backend_is_part_of_the_pinned_launch_and_the_agent_passes_only_its_two_values():
    from provision.host.agent import CHOSEN_ENV_VALUES, JOB_ENV_KEYS
    from provision.runs.pins import launch_digest

    jax = {"env": {}, "workers": {"0": {"run": True, "env": {"TPUCTL_BACKEND": "jax"}}}}
    tf = json.loads(json.dumps(jax))
    tf["workers"]["0"]["env"]["TPUCTL_BACKEND"] = "tensorflow"
    assert launch_digest(jax) != launch_digest(tf)
    assert "TPUCTL_BACKEND" in JOB_ENV_KEYS and CHOSEN_ENV_VALUES["TPUCTL_BACKEND"] == ("jax", "tensorflow")


def test_a_built_in_jobs_pinned_wheels_come_first_on_its_path_and_its_backend_reaches_it(tmp_path):
    """The agent installs a run's pinned wheelhouse for the runner's jobs too (the JAX backend's
    jax[tpu]) and puts it first on PYTHONPATH; TPUCTL_BACKEND reaches the job, a value other than
    jax or tensorflow does not. A probe wheel's sitecustomize (run by Python at start-up, from the
    site) records what the job's Python saw."""
    import zipfile

    from provision.basics.config import home
    from provision.basics.digest import sha256_file
    from provision.cloud.local import LocalProvider
    from provision.cloud.storage import local_bucket
    from provision.host.agent import run_attempt
    from provision.runs import wheelhouse
    from provision.runs.pins import KEY, launch_digest, sha256, updated

    probe = tmp_path / "index" / "tpuctlprobe-1.0-py3-none-any.whl"
    probe.parent.mkdir()
    files = {"sitecustomize.py": "import json, os, sys\n"
                                 "json.dump({'backend': os.environ.get('TPUCTL_BACKEND'), 'path': sys.path},"
                                 " open(os.path.join(os.getcwd(), 'probe.json'), 'w'))\n",
             "tpuctlprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tpuctlprobe\nVersion: 1.0\n",
             "tpuctlprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                "Tag: py3-none-any\n"}
    record = "tpuctlprobe-1.0.dist-info/RECORD"
    files[record] = "".join(f"{n},,\n" for n in files) + f"{record},,\n"
    with zipfile.ZipFile(probe, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    run, prefix, spec = "r1-20260101-000000-abcd", "tpuctl/runs/r1-20260101-000000-abcd", b"job: bert-finetune\n"
    bucket = local_bucket("backend-test")
    bucket.create("local")
    digest = wheelhouse.stage(bucket, [(probe.name, probe, sha256_file(probe))])
    bucket.write_bytes(f"{prefix}/spec.yaml", spec)
    for value, seen in (("jax", "jax"), ("torch", None)):
        command = {"code": False, "env": {}, "workers": {"0": {"run": True, "env": {"TPUCTL_BACKEND": value}}}}
        LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur, c=command: updated(
            cur, "run", run, {"cluster": "lab", "spec": sha256(spec), "workdir": None, "requirements": digest,
                              "launch": launch_digest(c)}))
        bucket.write_bytes(f"{prefix}/attempts/1/command.json", json.dumps(command).encode())
        work = tmp_path / f"work-{value}"
        assert run_attempt("gs://backend-test", "local", "local", run, 1, "0", "lab", workdir=work) == 2
        seen_by_job = json.loads((work / "probe.json").read_text())
        assert seen_by_job["backend"] == seen
        site = home() / "host" / "envs" / digest / "0" / "site"
        assert seen_by_job["path"].index(str(site)) < min(i for i, p in enumerate(seen_by_job["path"])
                                                           if "site-packages" in p)
        if value == "jax":         # installed once per manifest, kept for later attempts
            log = bucket.read_bytes(f"{prefix}/attempts/1/log-0.txt").decode()
            assert "installing 1 pinned wheel(s) of the run's requirements from the bucket" in log


def test_docs_name_the_rule_and_its_source():
    for doc in ("jobs.md", "own-code.md"):
        text = (REPO / "docs" / doc).read_text()
        assert "## Backends" in text and "cloud.google.com/tpu/docs/runtimes" in text, doc


def test_the_rule_cites_googles_pages():
    source = Path(__import__("jobs.spec.backends", fromlist=["x"]).__file__).read_text()
    for page in ("docs.cloud.google.com/tpu/docs/runtimes", "docs.cloud.google.com/tpu/docs/tpu7x-training",
                 "docs.cloud.google.com/tpu/docs/tpu7x"):
        assert page in source


@pytest.mark.tf
@pytest.mark.slow       # Keras and JAX load in the job's process (~15 s on 2 cores)
def test_python_m_jobs_sets_keras_backend_and_reaches_the_jax_runner(tmp_path):
    """``python -m jobs run SPEC --set backend=jax``: one line says so, KERAS_BACKEND and the CPU
    replicas' XLA_FLAGS are set before Keras is imported, and run_spec hands the job to JaxRunner
    (a stand-in here: the runner itself is tests/jobs/test_jax_runner.py's)."""
    import os
    import subprocess
    import sys

    probe = (
        "import os, sys, types\n"
        "stub = types.ModuleType('jobs.runner.jax.runner')\n"
        "class JaxRunner:\n"
        "    def __init__(self, spec, job, verbose=False):\n"
        "        import keras\n"
        "        print('runner', type(self).__name__, type(job).__name__, keras.backend.backend(),"
        " os.environ['XLA_FLAGS'], flush=True)\n"
        "    def run(self):\n"
        "        return 7\n"
        "stub.JaxRunner = JaxRunner\n"
        "sys.modules['jobs.runner.jax.runner'] = stub\n"
        "from jobs.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "TPUCTL_BACKEND")}
    env.update(TPUCTL_CPU_REPLICAS="2", XLA_FLAGS="--xla_dump_to=/nonexistent", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", probe, "run", str(MLP), "--set", f"model_dir={tmp_path / 'm'}",
                           "--set", "backend=jax"], check=False, capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 7, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "jobs: backend jax (set in the spec)"
    assert lines[-1] == ("runner JaxRunner KerasJob jax --xla_dump_to=/nonexistent "
                         "--xla_force_host_platform_device_count=2")
    # a launch environment naming no backend tpuctl knows: one line, exit 2, before Keras loads
    env["TPUCTL_BACKEND"] = "torch"
    proc = subprocess.run([sys.executable, "-m", "jobs", "run", str(MLP), "--set", f"model_dir={tmp_path / 'm'}"],
                          check=False, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [("tpuctl: error: TPUCTL_BACKEND='torch' is not jax or tensorflow; unset it "
                                         "(tpuctl train sets it) or set the spec's backend")]


def test_train_resolves_one_backend_for_every_type_a_recreate_may_land_on():
    from types import SimpleNamespace as NS

    from provision.runs.training import choose_backend

    def choose(requested, tpu, *also, api="compute", arch=Arch.VM):
        cluster = NS(name="lab", accelerator_types=(tpu, *also))
        return choose_backend({"backend": requested}, "gcp", cluster, NS(accelerator_type=tpu, api=api, arch=arch))

    assert choose("auto", "tpu7x-8").name == "jax"
    assert choose("auto", "v6e-8", api="tpu").name == "tensorflow"
    assert choose("auto", "tpu7x-8", "tpu7x-16").name == "jax"
    with pytest.raises(UsageError, match=r"backend tensorflow cannot run on tpu7x-16 .* \(cluster lab may be "
                                         r"recreated as a tpu7x-16: its --accelerator-type lists v6e-8,tpu7x-16\)$"):
        choose("tensorflow", "v6e-8", "tpu7x-16", api="tpu")
    # JAX on an Ubuntu 22.04 host (every TPU but TPU7x): its releases do not install there
    with pytest.raises(UsageError, match=r"needs Python 3\.11 or newer, and a v6e-8 host runs Ubuntu 22\.04"):
        choose("jax", "v6e-8")
    with pytest.raises(UsageError, match="a v5p-8 host runs Ubuntu 22.04"):     # auto on TPU7x, v5p a fallback
        choose("auto", "tpu7x-8", "v5p-8")
    with pytest.raises(UsageError, match="backend jax cannot run on a TPU Node"):
        choose("jax", "v3-8", api="tpu", arch=Arch.NODE)
    assert choose_backend({"backend": "auto"}, "local", NS(name="lab", accelerator_types=("v2-8",)),
                          NS(accelerator_type="v2-8", api="tpu", arch=Arch.VM)).reason == \
        "auto: no TPU here, and TensorFlow is installed"


def test_with_neither_framework_installed_auto_stays_on_tensorflow(monkeypatch):
    """A laptop that only provisions (the package without its train extra): a dry run of a
    built-in job still plans the TensorFlow job it always did, and says what the job needs."""
    from jobs.spec import backends

    monkeypatch.setattr(backends, "jax_installed", lambda: False)
    choice = backends.resolve("auto", None, tensorflow_importable=False)
    assert choice.name == "tensorflow" and "pip install 'tpuctl[train]'" in choice.reason
