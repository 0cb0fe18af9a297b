"""`job: command`'s pure parts: which workers run the program with which environment, how its
progress lines become the run's progress record, and the workdir archive (deterministic, and
unpacked only below its directory)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from provision.cloud.base import Arch, Endpoint
from provision.runs import reports
from provision.runs.launch import plan
from provision.staging import workdir
from provision.staging.selection import select

ENDPOINTS = [Endpoint(ip_address=f"10.0.0.{i + 2}", port=8470) for i in range(4)]


def _plan(hosts: str | None, **kw):
    args = {"provider": "gcp", "arch": Arch.VM, "accelerator_type": "v4-32", "tpu_name": "pod", "zone": "z",
            "project": "p", "endpoints": ENDPOINTS, **kw}
    return plan(program_hosts=hosts, **args).to_command()["workers"]


def test_hosts_all_runs_the_program_on_every_worker_of_a_pod_with_its_index_the_count_and_worker_0_as_coordinator():
    workers = _plan("all")
    assert [w["run"] for w in workers.values()] == [True] * 4
    for i, w in enumerate(workers.values()):
        env = w["env"]
        assert (env["TPUCTL_WORKER_INDEX"], env["TPUCTL_NUM_WORKERS"], env["TPUCTL_COORDINATOR"]) == \
            (str(i), "4", "10.0.0.2:8482")
        assert "TPU_LOAD_LIBRARY" not in env and "TF_CONFIG" not in env    # each worker drives its own chips


def test_hosts_first_is_tensorflows_one_client_on_worker_0():
    workers = _plan("first")
    assert [w["run"] for w in workers.values()] == [True, False, False, False]
    env = workers["0"]["env"]
    assert env["TPU_LOAD_LIBRARY"] == "0" and env["TPU_NAME"].count("grpc://") == 4
    assert (env["TPUCTL_WORKER_INDEX"], env["TPUCTL_NUM_WORKERS"]) == ("0", "1")
    # the runner's own plan: the same one client, each worker told its own place in the slice
    runner = _plan(None)
    assert [w["run"] for w in runner.values()] == [True, False, False, False]
    assert runner["0"]["env"]["TPUCTL_WORKER_INDEX"] == "0"


def test_a_program_reports_steps_loss_checkpoints_and_metrics_and_a_silent_one_still_beats():
    rec = reports.start({"run_id": "r", "step": 40, "checkpoint_step": 30, "evals": [{"step": 30, "metrics": {"a": 1}}]},
                        run_id="r", num_train_steps=100, now=10.0, pid=7, host="h")
    assert (rec["step"], rec["checkpoint_step"], rec["started_at"]) == (40, 30, 10.0)
    silent = reports.fold(rec, [], now=70.0)
    assert silent["time"] == 70.0 and silent["status"] == "running"      # no line, still live
    lines = [b'{"step": 31, "loss": 0.5}', b"not json", b'[1]', b'{"step": 32, "metrics": {"acc": 0.75, "bad": "x"}}',
             b'{"checkpoint_step": 32, "num_train_steps": 120}']
    got = reports.fold(silent, lines, now=80.0)
    assert (got["step"], got["loss"], got["checkpoint_step"], got["num_train_steps"]) == (32, 0.5, 32, 120)
    assert got["resumed_from_step"] == 30 and got["first_step_time"] == 80.0 and got["skipped_lines"] == 2
    assert got["metrics"] == {"acc": 0.75} and got["evals"][-1] == {"step": 32, "metrics": {"acc": 0.75}}
    assert got["evals"][0]["step"] == 30                                     # the curve is kept across attempts
    end = reports.public(reports.end(got, 42, now=90.0))
    assert end["status"] == "preempted" and "skipped_lines" not in end
    assert reports.end(got, 0, now=90.0)["status"] == "finished"
    json.dumps(end)


def test_the_workdir_archive_is_the_same_bytes_for_the_same_files(tmp_path):
    for name in ("a", "b"):
        root = tmp_path / name
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "m.py").write_text("X = 1\n")
        (root / "train.py").write_text("print(1)\n")
    one, two = workdir.pack(select(tmp_path / "a")), workdir.pack(select(tmp_path / "b"))
    assert one.data == two.data and one.digest == two.digest and one.files == 2
    (tmp_path / "b" / "train.py").write_text("print(2)\n")
    assert workdir.pack(select(tmp_path / "b")).digest != one.digest
    out = tmp_path / "out"
    out.mkdir()
    assert workdir.unpack(one.data, out) == 2 and (out / "pkg" / "m.py").read_text() == "X = 1\n"


@pytest.mark.parametrize("member", ["../evil.py", "/etc/evil", "link", "a/../../evil"])
def test_an_archive_with_a_member_outside_its_directory_or_a_link_is_refused_before_anything_is_written(
        tmp_path, member):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("ok.py"), io.BytesIO(b""))
        info = tarfile.TarInfo(member)
        if member == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info, io.BytesIO(b""))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(workdir.UnsafeArchive):
        workdir.unpack(raw.getvalue(), out)
    assert list(out.iterdir()) == []


def test_a_framework_is_installed_only_where_the_spec_asks_for_a_release_the_image_lacks_and_train_says_so():
    from provision.runs.requirements import JAX_INDEX, TF_INDEX, needs, pip_argv

    same = needs(["optax"], tensorflow="2.18.0", jax=None, provider="gcp", runtime="tpu-vm-tf-2.18.0-pjrt")
    assert same.lines == ("optax",)
    assert same.said == ("TensorFlow 2.18.0: the image tpu-vm-tf-2.18.0-pjrt has it, nothing to install",)
    base = needs([], tensorflow="2.18.0", jax="0.4.35", provider="gcp", runtime="tpu-ubuntu2204-base")
    assert base.lines == (f"--find-links {TF_INDEX}", "tensorflow-tpu==2.18.0", f"--find-links {JAX_INDEX}",
                          "jax[tpu]==0.4.35")
    assert "has none; installing tensorflow-tpu==2.18.0 and its libtpu" in base.said[0]
    local = needs(["# a comment", ""], tensorflow="2.16.1", jax=None, provider="local", runtime=None,
                  local_versions={"tensorflow": "2.19.0"})
    assert local.lines == ("tensorflow==2.16.1",) and "this machine has 2.19.0" in local.said[0]
    assert needs([], tensorflow=None, jax=None, provider="gcp", runtime=None) == needs([], tensorflow=None, jax=None,
                                                                                      provider="local", runtime=None)
    # for the hosts, binary wheels of their platform and Python only
    argv = pip_argv("r.txt", "d", provider="gcp")
    assert argv[:1] == ["download"] and "--only-binary=:all:" in argv and argv[argv.index("--python-version") + 1] == \
        "3.10"
