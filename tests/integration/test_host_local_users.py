"""Another local user of a host cannot make the agent (root on a GCP host) run their code or write
their files: the agent's work directories and logs are private to it (provision.basics.private).

The attacker's side is played as a second user would play it: as root (CI), files and directories
made and handed to uid 65534 (``nobody``) with os.chown; otherwise, directories anyone may write
(mode 0777), which is what a second user's would be to the agent. The attempt is a real one of a
run pinned on this host (the local provider's pin), whose job (``python -m jobs run``) exits 2 at
once on its spec: enough to see which ``jobs`` package Python imported, and from where.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.host import data_requests as dr
from provision.host.agent import run_attempt, watch_data
from provision.host.trust import HostPin
from provision.runs.pins import KEY, launch_digest, sha256, updated

RUN = "lab-20260101-000000-abcd"
SPEC = b"job: bert-finetune\n"           # the real job refuses it at once (exit 2, no TensorFlow)
OTHER_UID = 65534


def as_other_user(path: Path, mode: int = 0o777) -> None:
    """What a second local user leaves behind: theirs if we can chown (root), else open to anyone."""
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)


def plant_jobs(directory: Path, marker: Path) -> None:
    """A ``jobs`` package that proves it ran: ``python -m jobs`` started in ``directory`` imports it."""
    pkg = directory / "jobs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (pkg / "__main__.py").write_text("")
    for p in (pkg / "__init__.py", pkg / "__main__.py", pkg):
        as_other_user(p)


@pytest.fixture
def pinned_run():
    """A run pinned on this host (the local provider's metadata file), its spec in the bucket."""
    bucket = local_bucket("host-users")
    bucket.create("local")
    bucket.write_bytes(f"tpuctl/runs/{RUN}/spec.yaml", SPEC)
    command = {"env": {"TPUCTL_DEVICE": "cpu"}}
    bucket.write_bytes(f"tpuctl/runs/{RUN}/attempts/1/command.json", json.dumps(command).encode())
    LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur: updated(
        cur, "run", RUN, {"cluster": "lab", "spec": sha256(SPEC), "workdir": None,
                          "launch": launch_digest(command)}))
    return bucket


def _attempt() -> int:
    return run_attempt("gs://host-users", "local", "local", RUN, 1, "0", "lab")


def _exit(bucket) -> dict:
    return json.loads(bucket.read_bytes(f"tpuctl/runs/{RUN}/attempts/1/exit-0.json"))


def test_a_jobs_package_and_a_log_symlink_planted_at_the_shared_temp_path_are_never_used(
        pinned_run, tmp_path, monkeypatch):
    """The agent used ``<tempdir>/tpuctl-work/<run>/<worker>`` (made with exist_ok, then trusted)
    as the job's working directory, first on its ``sys.path``, and appended the log there through
    symlinks: a second user who made it first ran their ``jobs/__init__.py`` as the agent and had
    the log appended to a file of their choice."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)          # gettempdir() reads TMPDIR again
    marker, victim = tmp_path / "pwned", tmp_path / "victim.txt"
    victim.write_text("the victim's file\n")
    planted = shared / "tpuctl-work" / RUN / "0"
    planted.mkdir(parents=True)
    plant_jobs(planted, marker)
    (planted / "attempt-1-0.log").symlink_to(victim)
    for d in (planted, planted.parent, planted.parent.parent):
        as_other_user(d)

    assert _attempt() == 2
    assert not marker.exists(), "the agent ran the other user's jobs/__init__.py"
    assert victim.read_text() == "the victim's file\n", "the agent wrote through the other user's symlink"
    log = pinned_run.read_bytes(f"tpuctl/runs/{RUN}/attempts/1/log-0.txt").decode()
    assert "tpuctl: error" in log and "refused" not in log     # tpuctl's own jobs package ran the spec
    work = home() / "host" / "work" / RUN / "0"
    assert (work / "attempt-1-0.log").is_file() and not (work / "attempt-1-0.log").is_symlink()
    for d in (home() / "host", home() / "host" / "work", work.parent, work):
        assert d.stat().st_mode & 0o777 == 0o700 and d.stat().st_uid == os.geteuid(), d


@pytest.mark.parametrize("planted", ["directory", "symlink"])
def test_a_work_directory_that_is_not_the_agents_own_is_refused_and_nothing_in_it_runs(
        pinned_run, tmp_path, planted):
    marker = tmp_path / "pwned"
    runs = home() / "host" / "work"
    runs.mkdir(parents=True, mode=0o700)
    os.chmod(runs.parent, 0o700)
    if planted == "directory":                 # the run's directory, made first by someone else
        theirs = runs / RUN
    else:                                       # or a symlink to theirs in its place
        theirs = tmp_path / "theirs"
        (runs / RUN).symlink_to(theirs)
    (theirs / "0").mkdir(parents=True)
    plant_jobs(theirs / "0", marker)
    as_other_user(theirs / "0")
    as_other_user(theirs)

    assert _attempt() == 2
    assert not marker.exists()
    ended = _exit(pinned_run)
    expected = ("is not a directory (a symlink" if planted == "symlink"
                else f"owned by uid {OTHER_UID}" if os.geteuid() == 0 else "not private to this user")
    assert ended["code"] == 2 and expected in ended["refused"], ended
    log = pinned_run.read_bytes(f"tpuctl/runs/{RUN}/attempts/1/log-0.txt").decode()
    assert log.startswith("[tpuctl] refused: ") and "tpuctl: error" not in log


def test_a_data_log_symlink_is_not_followed(tmp_path):
    """The host VM's data requests logged to ``<tempdir>/tpuctl-data/<id>.log``, opened following
    symlinks; now under the agent's private directory, opened with O_NOFOLLOW."""
    bucket = local_bucket("host-users")
    bucket.create("local")
    req = dr.DataRequest("0123456789abcdef", ("gs://host-users/in/wiki.txt",), "gs://host-users/in/bert",
                         "gs://host-users/out", ("--seed", "7"))
    LocalProvider(home()).update_host_metadata("lab", KEY, lambda cur: updated(
        cur, "data", req.request_id, {"request": dr.digest(req), "wheel": None}))
    bucket.write_bytes(dr.request_name("lab", req.request_id), json.dumps(dr.to_json(req)).encode())
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's file\n")
    logs = home() / "host" / "data"
    logs.mkdir(parents=True, mode=0o700)
    os.chmod(home() / "host", 0o700)
    (logs / f"{req.request_id}.log").symlink_to(victim)
    runs: dict = {}
    watch_data(bucket, "lab", ["--provider", "local"], runs, trust=HostPin("local", "lab"))
    assert runs == {} and victim.read_text() == "the victim's file\n"
    assert bucket.stat(dr.request_name("lab", req.request_id)) is not None    # kept: tried again next pass
