"""templates/host-startup.sh under bash, against a loopback metadata server and bucket.

The stub (tests/integration/bootstrap_stub.py) serves instance metadata and Cloud Storage objects
the way Google's endpoints do and keeps what the script uploads; ``TPUCTL_METADATA_URL`` and
``TPUCTL_STORAGE_URL`` point the script at it. A tiny wheel stands in for tpuctl: its ``tpuctl``
console script records the argv it was started with. Shims on PATH record every curl command line
and stand in for apt-get (the real one never runs here) and, for the python3-venv cases, for a
python3 whose ``-m venv`` fails as Debian's and Ubuntu's do without python3-venv.

Covered: the metadata's bootstrap (templates/host-bootstrap.sh) fetching the script from the bucket
and running it only with the sha256 it pins (a replaced script refused, a missing one given up after
bounded tries); the happy path and the bootstrap status it writes; hostile metadata values (a cluster name
with ``; touch``, ``$(...)``, backticks, newlines; a bucket with ``$(...)``; a wheel path that
escapes its directory) never run anything; python3-venv installed with apt when venv fails,
through a busy apt lock; every failure (apt, pip, the bucket, an agent that keeps dying) stops the
script within bounded time with a ``failed`` status carrying the log's last lines, scrubbed of
secrets. tests/integration/test_bootstrap_debian12.py runs the same script in a real Debian 12."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.cloud import startup
from tests.integration.bootstrap_stub import (
    RUN,
    TOKEN,
    WHEEL_OBJ,
    Stub,
    objects,
    pin_of,
    status_name,
    stub_wheel,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "templates" / "host-startup.sh"
STARTUP = startup.current()       # what tpuctl writes: the bootstrap in metadata, the script in the bucket
STATUS = status_name()

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("curl") is None,
                                reason="needs bash and curl")

APT_SHIM = r"""#!/bin/bash
# apt-get stand-in: records its argv; $APT_MODE says what install does
printf '%s\n' "$*" >> "$APT_LOG"
case "$*" in *" update"*|update*) exit 0 ;; esac
n=$(grep -c ' install ' "$APT_LOG" || true)
case "${APT_MODE:-unexpected}" in
  ok) ;;
  busy:*) if [ "$n" -le "${APT_MODE#busy:}" ]; then
            echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (unattended-upgr)" >&2
            exit 100
          fi ;;
  *) echo "E: Unable to locate package python3-venv" >&2; exit 100 ;;
esac
touch "$VENV_OK"
echo "Setting up python3-venv ..."
"""

NO_ENSUREPIP_PYTHON = r"""#!/bin/bash
# python3 as Debian and Ubuntu ship it without python3-venv: venv leaves a pip-less directory and fails
if [ "${1:-}" = -m ] && [ "${2:-}" = venv ] && [ ! -e "$VENV_OK" ]; then
  "$REAL_PYTHON" -m venv --without-pip "${@:3}"
  echo "The virtual environment was not created successfully because ensurepip is not available." >&2
  exit 1
fi
exec "$REAL_PYTHON" "$@"
"""


def _run(tmp_path: Path, stub: Stub, timeout: float = 60, no_ensurepip: bool = False, script: Path = SCRIPT,
         **env_extra: str) -> tuple[int | None, str, Path]:
    pwned = tmp_path / "pwned"
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir(exist_ok=True)
    curl_log = tmp_path / "curl-argv.log"
    shim = shim_dir / "curl"
    shim.write_text(f"#!/bin/bash\nprintf '%s\\n' \"$*\" >> {curl_log}\nexec {shutil.which('curl')} \"$@\"\n")
    shim.chmod(0o755)
    (shim_dir / "apt-get").write_text(APT_SHIM)
    (shim_dir / "apt-get").chmod(0o755)
    # the interpreter itself rather than a version manager's shim script (which costs ~0.2 s a call)
    base = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    python = shim_dir / "python3"
    if python.exists() or python.is_symlink():
        python.unlink()
    if no_ensurepip:
        python.write_text(NO_ENSUREPIP_PYTHON)
        python.chmod(0o755)
    else:
        python.symlink_to(base)
    env = {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}",
           "TPUCTL_METADATA_URL": f"{stub.url}/computeMetadata/v1", "TPUCTL_STORAGE_URL": stub.url,
           "TPUCTL_VENV": str(tmp_path / "venv"), "TPUCTL_AGENT_LOG": str(tmp_path / "agent.log"),
           "TPUCTL_BOOTSTRAP_LOG": str(tmp_path / "bootstrap.log"),
           "TPUCTL_AGENT_ONCE": "1", "TPUCTL_BOOTSTRAP_RETRY_S": "0.2", "TPUCTL_BOOTSTRAP_TRIES": "3",
           "TPUCTL_BOOTSTRAP_POLL_S": "0.2", "TPUCTL_PIP_ARGS": "--no-index --no-deps",
           "TPUCTL_STUB_OUT": str(tmp_path / "argv.jsonl"), "PWNED": str(pwned), "TMPDIR": str(tmp_path),
           "APT_LOG": str(tmp_path / "apt.log"), "VENV_OK": str(tmp_path / "python3-venv-installed"),
           "REAL_PYTHON": base}
    env.update(env_extra)
    env = {k: v for k, v in env.items() if v is not None}
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        code = None   # still waiting
    return code, out, curl_log


def _agent_argv(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _good_attributes(**changes: str) -> dict[str, str]:
    attrs = {"tpuctl-cluster": "bert-lab", "tpuctl-role": "worker", "tpuctl-bucket": "gs://my-runs",
             "agent-worker-number": "0", "startup-script": "#!/bin/bash", "tpuctl-pin": pin_of(stub_wheel())}
    attrs.update(changes)
    return {k: v for k, v in attrs.items() if v is not None}


def _no_secrets(stub: Stub, *texts: str) -> None:
    for _, body in stub.uploads:
        assert TOKEN.encode() not in body
    for text in texts:
        assert TOKEN not in text


def test_bootstrap_installs_the_wheel_starts_the_agent_and_reports_ok(tmp_path):
    stub = Stub(_good_attributes(), objects("my-runs"))
    try:
        code, out, curl_log = _run(tmp_path, stub, timeout=240)
    finally:
        stub.close()
    assert code == 0, out
    assert _agent_argv(tmp_path) == [["agent", "--cluster", "bert-lab", "--bucket", "gs://my-runs", "--project",
                                      "my-proj-1", "--worker", "0", "--role", "worker"]]
    # the bucket was read and written with the VM's token, which never appeared on a command line
    assert stub.storage_auth and set(stub.storage_auth) == {f"Bearer {TOKEN}"}
    assert TOKEN not in curl_log.read_text()
    assert (tmp_path / "venv" / "bin" / "python").exists()
    assert not (tmp_path / "apt.log").exists()           # venv worked: apt was never needed
    states = stub.statuses(STATUS)
    assert [s["state"] for s in states] == ["installing", "ok"], out
    ok = states[-1]
    assert ok["version"] == 1 and ok["step"] == "check"
    assert (ok["cluster"], ok["role"], ok["worker"], ok["run_id"], ok["wheel_object"]) == (
        "bert-lab", "worker", "0", RUN, WHEEL_OBJ)
    assert ok["host"] and ok["time"].endswith("Z") and ok["started"] <= ok["time"]
    # when it began installing tpuctl, kept in the "ok" status: a run's startup dates the host's install by it
    assert states[0]["installing"] == ok["installing"] and ok["started"] <= ok["installing"] <= ok["time"]
    assert any("installing tpuctl-0.0.1-py3-none-any.whl" in line for line in ok["log_tail"])
    _no_secrets(stub, out, (tmp_path / "bootstrap.log").read_text())


def test_the_logs_are_private_even_where_an_older_tpuctl_left_them_readable(tmp_path):
    """The bootstrap's and the agent's logs quote what pip, the agent and jobs print: like
    TPUCTL_HOME they are the host's root's alone (mode 0600), the one rotated away too, and a log
    an older tpuctl left world-readable (0644) is made private before anything more is added."""
    for name in ("agent.log", "bootstrap.log"):
        (tmp_path / name).write_text(f"{name} of an earlier boot\n")
        (tmp_path / name).chmod(0o644)
    stub = Stub(_good_attributes(), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=240)
    finally:
        stub.close()
    assert code == 0, out
    for name in ("agent.log", "bootstrap.log", "bootstrap.log.1"):
        st = (tmp_path / name).stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, os.geteuid()), (name, oct(st.st_mode))
    assert (tmp_path / "agent.log").read_text().startswith("agent.log of an earlier boot\n")   # appended to
    assert "installing tpuctl-0.0.1-py3-none-any.whl" in (tmp_path / "bootstrap.log").read_text()


def _bootstrap(tmp_path: Path) -> Path:
    """The startup-script metadata value tpuctl writes, as the guest agent would run it."""
    path = tmp_path / "metadata-startup-script"
    path.write_text(STARTUP.bootstrap)
    return path


def _staged(objs: dict[str, bytes], script: bytes | None = None, bucket: str = "my-runs") -> dict[str, bytes]:
    """The bucket with tpuctl's startup script where the bootstrap looks for it (``script``: what
    a bucket writer put there instead)."""
    return {**objs, f"{bucket}/{STARTUP.object_name}": STARTUP.script if script is None else script}


def test_the_metadata_bootstrap_fetches_verifies_and_runs_the_startup_script(tmp_path):
    stub = Stub(_good_attributes(**{"startup-script": STARTUP.bootstrap}), _staged(objects("my-runs")))
    try:
        code, out, curl_log = _run(tmp_path, stub, timeout=240, script=_bootstrap(tmp_path))
    finally:
        stub.close()
    assert code == 0, out
    assert stub.storage_requests[0] == ("GET", f"my-runs/tpuctl/startup/{STARTUP.sha256}.sh")
    assert _agent_argv(tmp_path) == [["agent", "--cluster", "bert-lab", "--bucket", "gs://my-runs", "--project",
                                      "my-proj-1", "--worker", "0", "--role", "worker"]]
    assert [s["state"] for s in stub.statuses(STATUS)] == ["installing", "ok"], out
    # the script was read with the VM's token, which never appeared on a command line
    assert set(stub.storage_auth) == {f"Bearer {TOKEN}"} and TOKEN not in curl_log.read_text()
    _no_secrets(stub, out)


def _bootstrap_once(tmp_path, bucket_objects):
    """The bootstrap run once against a stub whose bucket holds ``bucket_objects``: (code, out, stub)."""
    stub = Stub(_good_attributes(), bucket_objects)
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30, script=_bootstrap(tmp_path))
    finally:
        stub.close()
    return code, out, stub


def test_a_startup_script_a_bucket_writer_replaced_is_refused_and_nothing_runs(tmp_path):
    replaced = b'#!/bin/bash\ntouch "$PWNED"\n'
    code, out, stub = _bootstrap_once(tmp_path, _staged(objects("my-runs"), script=replaced))
    assert code == 1, out
    assert f"not the {STARTUP.sha256} pinned here: not running it" in out
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "argv.jsonl").exists()
    assert not (tmp_path / "venv").exists() and not stub.uploads
    assert stub.storage_requests == [("GET", f"my-runs/tpuctl/startup/{STARTUP.sha256}.sh")]


def test_a_startup_script_missing_from_the_bucket_stops_the_bootstrap_after_bounded_tries(tmp_path):
    code, out, stub = _bootstrap_once(tmp_path, objects("my-runs"))
    assert code == 1, out
    assert f"cannot read gs://my-runs/tpuctl/startup/{STARTUP.sha256}.sh (HTTP 404): not starting" in out
    assert len(stub.storage_requests) == 3 and not (tmp_path / "argv.jsonl").exists()


def test_the_host_vm_is_named_by_its_host_name_and_defaults_to_the_host_role(tmp_path):
    stub = Stub(_good_attributes(**{"tpuctl-role": None, "agent-worker-number": None}), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=240)
    finally:
        stub.close()
    assert code == 0, out
    host = subprocess.run(["hostname"], check=True, capture_output=True, text=True).stdout.strip().split(".")[0]
    argv = _agent_argv(tmp_path)[-1]
    assert argv[argv.index("--role") + 1] == "host" and argv[argv.index("--worker") + 1] == host
    assert stub.statuses(status_name(role="host", worker=host))[-1]["state"] == "ok"


def test_a_compute_engine_tpu_worker_takes_the_number_tpuctl_gave_it(tmp_path):
    """A MIG's VMs carry no agent-worker-number that tpuctl can count on: tpuctl gives each worker
    tpuctl-worker-number (per-instance metadata), and the bootstrap starts its agent as that worker."""
    stub = Stub(_good_attributes(**{"agent-worker-number": None, "tpuctl-worker-number": "3"}), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=240)
    finally:
        stub.close()
    assert code == 0, out
    argv = _agent_argv(tmp_path)[-1]
    assert argv[argv.index("--worker") + 1] == "3" and argv[argv.index("--role") + 1] == "worker"


HOSTILE = [
    ("ce-worker", {"tpuctl-worker-number": "1; touch $PWNED"}),
    ("cluster-semicolon", {"tpuctl-cluster": "x; touch $PWNED"}),
    ("cluster-subshell", {"tpuctl-cluster": "$(touch $PWNED)"}),
    ("cluster-backticks", {"tpuctl-cluster": "`touch $PWNED`"}),
    ("cluster-newline", {"tpuctl-cluster": "bert-lab\ntouch $PWNED"}),
    ("cluster-option", {"tpuctl-cluster": "--help"}),
    ("role", {"tpuctl-role": "worker; touch $PWNED"}),
    ("worker", {"agent-worker-number": "0 $(touch $PWNED)"}),
]


@pytest.mark.parametrize("name, attrs", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_metadata_is_refused_and_never_runs(tmp_path, name, attrs):
    stub = Stub(_good_attributes(**attrs), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1, out
    assert "not starting the agent" in out
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "argv.jsonl").exists() and not (tmp_path / "venv").exists()
    assert not stub.uploads      # no bucket known yet: nothing written anywhere


def test_hostile_project_id_is_refused(tmp_path):
    stub = Stub(_good_attributes(), objects("my-runs"), project="p$(touch $PWNED)roj")
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1 and "project id" in out
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("first", ["bootstrap", "script"])
@pytest.mark.parametrize("bucket", ["gs://b$(touch $PWNED)", "gs://my-runs\n`touch $PWNED`"])
def test_a_hostile_bucket_is_ignored_and_the_host_keeps_waiting(tmp_path, bucket, first):
    stub = Stub(_good_attributes(**{"tpuctl-bucket": bucket}), _staged(objects("my-runs")))
    script = _bootstrap(tmp_path) if first == "bootstrap" else SCRIPT
    try:
        code, out, _ = _run(tmp_path, stub, timeout=1.5, script=script)
    finally:
        stub.close()
    assert code is None, out          # still waiting for a valid tpuctl-bucket
    assert "ignoring tpuctl-bucket" in out
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "argv.jsonl").exists()
    assert not stub.storage_auth      # no bucket was read


@pytest.mark.parametrize("wheel_obj", ["$(touch $PWNED).whl", f"tpuctl/runs/{RUN}/tpuctl/../../../../x.whl", "-rf",
                                       f"{WHEEL_OBJ}\n$(touch $PWNED)"])
def test_a_hostile_wheel_path_in_the_bucket_is_refused(tmp_path, wheel_obj):
    stub = Stub(_good_attributes(), objects("my-runs", wheel_obj=wheel_obj))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1 and "wheel_object" in out, out
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "venv").exists()
    failed = stub.statuses(STATUS)[-1]
    assert (failed["state"], failed["step"]) == ("failed", "agent.json") and "wheel_object" in failed["message"]
    assert failed["wheel_object"] is None


def test_a_wheel_the_metadata_does_not_pin_is_never_installed(tmp_path):
    """A bucket writer can replace the wheel agent.json names (or agent.json itself): the host
    installs a wheel only if its sha256 is one `tpuctl train` pinned in the instance metadata."""
    theirs = stub_wheel(requires=("attacker-package>=1",))
    stub = Stub(_good_attributes(), objects("my-runs", wheel=theirs))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=60)
    finally:
        stub.close()
    assert code == 1, out
    digest = __import__("hashlib").sha256(theirs).hexdigest()
    assert f"has sha256 {digest}, which tpuctl-pin in this VM's metadata does not name: not installing it" in out
    assert not (tmp_path / "venv").exists() and not _agent_argv(tmp_path)
    failed = stub.statuses(STATUS)[-1]
    assert (failed["state"], failed["step"]) == ("failed", "pin") and "does not name" in failed["message"]


def test_a_host_not_pinned_yet_waits_for_the_pin_and_installs_nothing(tmp_path):
    """A TPU VM recreated after a preemption boots before its supervisor pins it: it waits."""
    stub = Stub(_good_attributes(**{"tpuctl-pin": None}), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=10)
    finally:
        stub.close()
    assert code is None, out
    assert "no tpuctl-pin in metadata yet: waiting for tpuctl train" in out
    assert not (tmp_path / "venv").exists() and not stub.statuses(STATUS)


def _staged_wheel_paths() -> dict[str, str]:
    """Every place tpuctl stages its wheel, named by tpuctl's own code: a run's directory
    (train), a sweep's (sweep --detach --host) and a data request's (data --on)."""
    from provision.host import data_requests as dr
    from provision.runs.store import RunStore, wheel_object
    from provision.sweeps.store import SweepStore

    name = "tpuctl-0.1.0+g1a2b3c4d-py3-none-any.whl"
    return {"run": wheel_object(RunStore(None, RUN).prefix, name),
            "sweep": wheel_object(SweepStore(None, "sweep-20260101-000000-abcd").prefix, name),
            "data": wheel_object(dr.request_prefix("0123456789abcdef"), name)}


@pytest.mark.parametrize("kind", ["run", "sweep", "data"])
def test_the_bootstrap_accepts_every_wheel_path_tpuctl_stages(tmp_path, kind):
    """Its wheel_object check passes each of them: the script goes on to download the wheel (here
    absent, so it stops there), instead of stopping at agent.json with "not a tpuctl wheel"."""
    wheel_obj = _staged_wheel_paths()[kind]
    stub = Stub(_good_attributes(), {"my-runs/tpuctl/clusters/bert-lab/agent.json": json.dumps(
        {"wheel_object": wheel_obj, "run_id": RUN}).encode()})
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1, out
    failed = stub.statuses(STATUS)[-1]
    assert (failed["step"], failed["wheel_object"]) == ("wheel", wheel_obj), failed
    assert f"cannot download gs://my-runs/{wheel_obj}" in failed["message"]
    assert "not a tpuctl wheel" not in out


def test_no_run_yet_means_waiting_for_agent_json_not_failing(tmp_path):
    stub = Stub(_good_attributes(), {})
    try:
        code, out, _ = _run(tmp_path, stub, timeout=3)
    finally:
        stub.close()
    assert code is None, out          # waits for tpuctl train, however long
    assert "waiting for tpuctl train" in out
    assert not stub.uploads


def test_a_bucket_that_keeps_failing_stops_the_bootstrap_with_a_failed_status(tmp_path):
    stub = Stub(_good_attributes(), objects("my-runs"))
    stub.fail["my-runs/tpuctl/clusters/bert-lab/agent.json"] = 503
    t0 = time.monotonic()
    try:
        code, out, _ = _run(tmp_path, stub, timeout=60)
    finally:
        stub.close()
    assert code == 1, out
    assert time.monotonic() - t0 < 30
    reads = [r for r in stub.storage_requests if r == ("GET", "my-runs/tpuctl/clusters/bert-lab/agent.json")]
    assert len(reads) == 3            # TPUCTL_BOOTSTRAP_TRIES
    failed = stub.statuses(STATUS)[-1]
    assert (failed["state"], failed["step"]) == ("failed", "agent.json")
    assert any("HTTP 503" in line for line in failed["log_tail"])
    assert not (tmp_path / "venv").exists()


def test_python3_venv_is_installed_with_apt_when_venv_fails_waiting_for_a_busy_apt(tmp_path):
    stub = Stub(_good_attributes(), objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=240, no_ensurepip=True, APT_MODE="busy:1")
    finally:
        stub.close()
    assert code == 0, out
    apt = (tmp_path / "apt.log").read_text().splitlines()
    installs = [line for line in apt if " install " in line]
    assert len(installs) == 2 and all(line.endswith("install --no-install-recommends python3-venv") for line in installs)
    assert all("DPkg::Lock::Timeout=" in line for line in apt)      # waits for unattended-upgrades
    assert any(line.endswith(" update") for line in apt)             # refreshed the lists before retrying
    assert (tmp_path / "venv" / "bin" / "pip").exists()
    assert _agent_argv(tmp_path) and stub.statuses(STATUS)[-1]["state"] == "ok"
    # the venv sees the system's packages (the image's TensorFlow)
    cfg = (tmp_path / "venv" / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = true" in cfg


def test_apt_that_cannot_install_python3_venv_fails_in_bounded_time(tmp_path):
    stub = Stub(_good_attributes(), objects("my-runs"))
    t0 = time.monotonic()
    try:
        code, out, _ = _run(tmp_path, stub, timeout=120, no_ensurepip=True, APT_MODE="broken")
    finally:
        stub.close()
    assert code == 1, out
    assert time.monotonic() - t0 < 60
    installs = [line for line in (tmp_path / "apt.log").read_text().splitlines() if " install " in line]
    assert len(installs) == 3
    failed = stub.statuses(STATUS)[-1]
    assert (failed["state"], failed["step"]) == ("failed", "venv")
    assert any("Unable to locate package python3-venv" in line for line in failed["log_tail"])
    assert not _agent_argv(tmp_path) and not (tmp_path / "venv").exists()


def test_a_wheel_that_cannot_install_fails_with_the_pip_error_and_no_secret(tmp_path):
    wheel = stub_wheel(requires=("tpuctl-no-such-dependency>=99",))
    stub = Stub(_good_attributes(**{"tpuctl-pin": pin_of(wheel)}), objects("my-runs", wheel=wheel))
    # an image's private mirror with a password in its URL: pip's error must not carry it out
    mirror = "http://mirror-user:s3cr3t-Passw0rd@127.0.0.1:9/simple"
    t0 = time.monotonic()
    try:
        code, out, _ = _run(tmp_path, stub, timeout=180, TPUCTL_PIP_TRIES="2",
                            TPUCTL_PIP_ARGS=f"--index-url {mirror} --retries 0 --timeout 2")
    finally:
        stub.close()
    assert code == 1, out
    assert time.monotonic() - t0 < 120
    assert "pip install tpuctl-0.0.1-py3-none-any.whl failed 2 times" in out
    failed = stub.statuses(STATUS)[-1]
    assert (failed["state"], failed["step"]) == ("failed", "pip")
    assert any("tpuctl-no-such-dependency" in line for line in failed["log_tail"]), failed["log_tail"]
    assert "s3cr3t-Passw0rd" not in json.dumps(failed) and "s3cr3t-Passw0rd" not in out
    assert not _agent_argv(tmp_path)
    _no_secrets(stub, out)


def test_an_agent_that_keeps_dying_is_given_up_with_its_log_tail(tmp_path):
    stub = Stub(_good_attributes(), objects("my-runs"))
    t0 = time.monotonic()
    try:
        code, out, _ = _run(tmp_path, stub, timeout=120, TPUCTL_AGENT_ONCE=None, TPUCTL_STUB_EXIT="3",
                            TPUCTL_AGENT_QUICK_DEATHS="3")
    finally:
        stub.close()
    assert code == 1, out
    assert time.monotonic() - t0 < 90
    assert len(_agent_argv(tmp_path)) == 3          # started three times, then given up: no endless loop
    states = stub.statuses(STATUS)
    assert [s["state"] for s in states] == ["installing", "ok", "failed"]
    assert states[-1]["step"] == "agent" and "last exit code 3" in states[-1]["message"]
    assert any("stub agent: failing with exit code 3" in line for line in states[-1]["log_tail"])
