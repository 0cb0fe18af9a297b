"""A writer of the bucket cannot change where a run's attempts run or listen by rewriting its run.json.

Over the wire: the fake cloud (Compute, Cloud TPU, each machine's metadata server) and
fake-gcs-server, through the installed ``tpuctl``. The host VM's supervisor (``tpuctl supervise RUN
--where host``, what the host's agent starts for a run named in the bucket) plans each attempt from
the run's record; its service account may write the hosts' metadata, so whatever launch it plans,
it pins. Before the run's placement was pinned, a run.json saying ``provider: local`` gave every
worker ``TPUCTL_DEVICE=cpu`` and a ``TF_CONFIG`` (TensorFlow's gRPC server on every interface), and
``project: attacker-proj`` became ``TPUCTL_TPU_PROJECT``: the job looked its TPU up in the
writer's project. Now each such record is refused in one line, before anything is launched or
pinned; the record as ``tpuctl train`` wrote it launches as planned.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from provision.runs.pins import KEY, Pin, launch_digest
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.integration.test_bucket_writers import PROJECT, ZONE, _train_detached, cloud  # noqa: F401 - the fixture

# what a writer of run.json changes, field by field: each decides where the attempts run or listen
TAMPERED = {
    "provider": {"provider": "local"},
    "project": {"project": "attacker-proj"},
    "hosts": {"hosts": "all"},
    "backend": {"backend": "jax"},
    "bucket": {"bucket": "gs://attacker-bucket"},
}
HINT = "start the run again with tpuctl train lab"


def _supervise_host(fake, bucket: str, run_id: str, get, timeout: float = 60.0) -> tuple[int | None, str, dict | None]:
    """The host VM's supervisor of ``run_id`` (reading the host VM's metadata), until it exits or
    writes attempt 1's command.json: (its exit code or None, its stderr, the command)."""
    env = {**os.environ, "TPUCTL_METADATA_URL": fake.metadata_url(ZONE, "lab")}
    proc = subprocess.Popen([str(TPUCTL_BIN), "supervise", run_id, "--where", "host", "--provider", "gcp",
                             "--project", PROJECT, "--bucket", bucket], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    command = None
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and command is None and time.monotonic() < deadline:
            time.sleep(0.2)
            command = get(f"tpuctl/runs/{run_id}/attempts/1/command.json")
    finally:
        if proc.poll() is None:
            proc.kill()
        _out, err = proc.communicate(timeout=30)
    return proc.returncode if command is None else None, err, command


def _host_pin(run_id: str) -> dict | None:
    from provision.cloud.gcp import GcpProvider

    return Pin.parse(GcpProvider(PROJECT).metadata_of("vm", ZONE, "lab").get(KEY)).entry("run", run_id)


@pytest.mark.slow
def test_a_rewritten_run_json_is_refused_by_the_hosts_supervisor_and_the_pinned_one_launches(cloud, tmp_path):  # noqa: F811
    fake, bucket, put, get = cloud
    code = tmp_path / "code"
    code.mkdir()
    (code / "mymodel.py").write_text("UNITS = 8\n")
    run_id = _train_detached(bucket, code)
    record = get(f"tpuctl/runs/{run_id}/run.json")
    pinned = _host_pin(run_id)
    assert pinned is not None and pinned["placement"] and "launch" not in pinned

    for name, change in TAMPERED.items():
        put(f"tpuctl/runs/{run_id}/run.json", {**record, **change})
        code_, err, command = _supervise_host(fake, bucket, run_id, get)
        assert command is None, f"{name}: a supervisor launched from a rewritten run.json: {command}"
        assert code_ == 2, (name, err)
        last = err.splitlines()[-1]
        assert last.startswith(f"tpuctl: error: run.json of run {run_id} in the bucket does not say where its "
                               f"attempts run as tpuctl train pinned it (its cluster, provider, project, bucket, "
                               f"hosts, backend, code: sha256 "), (name, err)
        assert last.endswith(f"): not supervising it; {HINT}"), (name, err)
        assert "Traceback" not in err and "internal error" not in err
        assert _host_pin(run_id) == pinned, f"{name}: the hosts' pin changed"

    # a zone other than the pinned cluster spec's: the supervisor would look for (and recreate) the TPU there
    put(f"tpuctl/runs/{run_id}/run.json", {**record, "zone": "europe-west4-a"})
    code_, err, command = _supervise_host(fake, bucket, run_id, get)
    assert command is None and code_ == 2, err
    assert err.splitlines()[-1] == (f"tpuctl: error: run.json of run {run_id} in the bucket puts it in zone "
                                    f"europe-west4-a, not one of cluster lab's pinned zones ({ZONE}): not "
                                    f"supervising it; {HINT}")

    # re-attaching from the machine that started it: the same refusal, from the pin kept here
    put(f"tpuctl/runs/{run_id}/run.json", {**record, "provider": "local", "project": "attacker-proj"})
    attach = run_tpuctl_process("train", "lab", "--attach", "--poll", "1", timeout=60)
    assert attach.code == 2, attach.err
    assert attach.err.splitlines()[-1].startswith(f"tpuctl: error: run.json of run {run_id} in the bucket does "
                                                  f"not say where its attempts run"), attach.err
    assert get(f"tpuctl/runs/{run_id}/attempts/1/command.json") is None

    # a run pinned by a tpuctl that did not pin its placement: refused, not trusted
    from provision.cloud.gcp import GcpProvider
    from provision.runs.pins import updated

    put(f"tpuctl/runs/{run_id}/run.json", record)
    old = {k: v for k, v in pinned.items() if k != "placement"}
    GcpProvider(PROJECT).update_host_metadata("lab", KEY, lambda cur: updated(cur, "run", run_id, old))
    code_, err, command = _supervise_host(fake, bucket, run_id, get)
    assert command is None and code_ == 2, err
    assert err.splitlines()[-1] == (f"tpuctl: error: run {run_id} was pinned by an older tpuctl, without where its "
                                    f"attempts run, so its run.json cannot be checked against the pin: not "
                                    f"supervising it; {HINT}")

    # the record as train wrote it, pinned as train pinned it: the supervisor launches the planned attempt
    GcpProvider(PROJECT).update_host_metadata("lab", KEY, lambda cur: updated(cur, "run", run_id, pinned))
    code_, err, command = _supervise_host(fake, bucket, run_id, get)
    assert command is not None, err
    env = command["workers"]["0"]["env"]
    assert env["TPU_NAME"] == "local" and "TF_CONFIG" not in env and "TPUCTL_DEVICE" not in env, command
    assert _host_pin(run_id)["launch"] == launch_digest(command)
