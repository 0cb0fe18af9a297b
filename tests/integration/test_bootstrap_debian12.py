"""templates/host-startup.sh for real, in a clean Debian 12 userland without python3-venv, started
as a VM starts it: by the bootstrap its metadata carries (templates/host-bootstrap.sh), which
fetches the script from the stub bucket and checks its sha256.

``make test-bootstrap`` builds (once, cached) a debootstrap minbase of Debian 12 with python3,
curl and CA certificates and nothing more (tests/debian12_rootfs.sh), and runs this module as
root with ``TPUCTL_BOOTSTRAP_ROOTFS`` set; elsewhere it is skipped. Each test runs the script with
``chroot`` in an overlay of that rootfs (a copy where overlayfs is not available), so the cached
rootfs never changes. A chroot keeps the network namespace: the script reaches the loopback
metadata and Cloud Storage stub of tests/integration/bootstrap_stub.py, and its apt-get reaches
the Debian mirror the rootfs came from.

- ok: the script installs python3-venv with apt itself, creates the venv (seeing the system's
  site-packages), installs the tpuctl wheel built from this working tree with its real
  dependencies (pre-downloaded from PyPI into a wheelhouse, passed as an image's pip mirror would
  be: ``TPUCTL_PIP_ARGS``), writes ``bootstrap/worker-0.json`` ``ok`` and starts the real
  ``tpuctl agent``, which reads the cluster's ``current.json`` from the stub bucket.
- failed: with curl purged too, the bootstrap installs curl, the script python3-venv, then a wheel whose
  dependency does not exist fails pip; the script writes ``failed`` with pip's error in the log
  tail and exits 1, in bounded time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.cloud import startup
from tests.integration.bootstrap_stub import Stub, objects, pin_of, status_name, stub_wheel

REPO = Path(__file__).resolve().parents[2]
STARTUP = startup.current()   # the bootstrap in metadata and the script it fetches from the bucket
ROOTFS = os.environ.get("TPUCTL_BOOTSTRAP_ROOTFS", "")
WHEELHOUSE = Path(os.environ.get("TPUCTL_BOOTSTRAP_WHEELS")
                  or Path.home() / ".cache" / "tpuctl" / "bootstrap-wheels")
STATUS = status_name()
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = [
    pytest.mark.skipif(not ROOTFS, reason="needs a Debian 12 rootfs and root: make test-bootstrap"),
    pytest.mark.xdist_group("debian12"),
    pytest.mark.slow,
]


def _sh(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def tpuctl_wheel(tmp_path_factory) -> Path:
    """tpuctl as a wheel, built from this working tree, and its dependencies in the wheelhouse."""
    assert os.geteuid() == 0, "make test-bootstrap needs root (chroot and mount)"
    assert (Path(ROOTFS) / ".tpuctl-rootfs-v1").exists(), f"no rootfs at {ROOTFS}: make bootstrap-rootfs"
    out = tmp_path_factory.mktemp("wheel")
    _sh(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--disable-pip-version-check",
        "-w", str(out), str(REPO))
    wheel = next(out.glob("tpuctl-*.whl"))
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    # for the rootfs's CPython 3.11, whatever this interpreter is; cached across runs
    _sh(sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
        "--python-version", "3.11", "-d", str(WHEELHOUSE), str(wheel))
    for stale in WHEELHOUSE.glob("tpuctl-*.whl"):
        stale.unlink()
    return wheel


@contextlib.contextmanager
def debian12(tmp_path: Path, wheel_dir: Path):
    """A throwaway Debian 12 root: an overlay on the cached rootfs, with /proc, /dev and the wheels."""
    root, upper, work = tmp_path / "root", tmp_path / "upper", tmp_path / "work"
    for d in (root, upper, work):
        d.mkdir()
    mounted: list[Path] = []
    try:
        if _sh("mount", "-t", "overlay", "overlay", "-o", f"lowerdir={ROOTFS},upperdir={upper},workdir={work}",
               str(root), check=False).returncode == 0:
            mounted.append(root)
        else:
            _sh("cp", "-a", f"{ROOTFS}/.", str(root))
        _sh("mount", "-t", "proc", "proc", str(root / "proc"))
        mounted.append(root / "proc")
        _sh("mount", "--bind", "/dev", str(root / "dev"))
        mounted.append(root / "dev")
        (root / "wheels").mkdir()
        _sh("mount", "--bind", str(wheel_dir), str(root / "wheels"))
        mounted.append(root / "wheels")
        resolv = root / "etc" / "resolv.conf"
        if resolv.is_symlink():
            resolv.unlink()
        resolv.write_text(Path("/etc/resolv.conf").read_text())
        # what a VM's metadata carries: the bootstrap, which fetches the script from the bucket
        (root / "tmp" / "host-bootstrap.sh").write_text(STARTUP.bootstrap)
        yield root
    finally:
        for m in reversed(mounted):
            if _sh("umount", str(m), check=False).returncode != 0:
                _sh("umount", "-l", str(m), check=False)


def _start(root: Path, stub: Stub, **env_extra: str) -> subprocess.Popen:
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8",
           "TPUCTL_METADATA_URL": f"{stub.url}/computeMetadata/v1", "TPUCTL_STORAGE_URL": stub.url,
           "TPUCTL_BOOTSTRAP_RETRY_S": "1", "TPUCTL_BOOTSTRAP_TRIES": "3",
           "TPUCTL_PIP_ARGS": "--no-index --find-links /wheels",
           # what the agent talks to once it runs: the same stub bucket
           "STORAGE_EMULATOR_HOST": stub.url, "TPUCTL_CREDENTIALS": "anonymous", **env_extra}
    return subprocess.Popen(["chroot", str(root), "/bin/bash", "/tmp/host-bootstrap.sh"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
    out, _ = proc.communicate(timeout=60)
    return out


def _installed(root: Path, package: str) -> bool:
    r = _sh("chroot", str(root), "dpkg-query", "-W", "-f=${Status}", package, check=False)
    return r.stdout.strip() == "install ok installed"


def test_bare_debian12_installs_python3_venv_and_tpuctl_and_starts_the_agent(tmp_path, tpuctl_wheel):
    bucket = {**objects("my-runs", wheel=tpuctl_wheel.read_bytes()), f"my-runs/{STARTUP.object_name}": STARTUP.script}
    stub = Stub({"tpuctl-cluster": "bert-lab", "tpuctl-role": "worker", "tpuctl-bucket": "gs://my-runs",
                 "agent-worker-number": "0", "tpuctl-pin": pin_of(tpuctl_wheel.read_bytes())}, bucket)
    current = ("GET", "my-runs/tpuctl/clusters/bert-lab/current.json")
    with debian12(tmp_path, WHEELHOUSE) as root:
        assert not _installed(root, "python3-venv")
        t0 = time.monotonic()
        proc = _start(root, stub)
        try:
            while time.monotonic() - t0 < 540 and proc.poll() is None:
                if current in stub.storage_requests:
                    break
                time.sleep(1)
            elapsed = time.monotonic() - t0
        finally:
            out = _stop(proc)
            stub.close()
        assert current in stub.storage_requests, out          # the real agent runs and reads the bucket
        assert _installed(root, "python3-venv"), out           # installed by the script itself
        states = stub.statuses(STATUS)
        assert [s["state"] for s in states] == ["installing", "ok"], out
        assert states[-1]["host"] and states[-1]["worker"] == "0" and states[-1]["step"] == "check"
        version = _sh("chroot", str(root), "/opt/tpuctl/bin/tpuctl", "--version").stdout
        assert "0.1.0" in version
        cfg = (root / "opt" / "tpuctl" / "pyvenv.cfg").read_text()
        assert "include-system-site-packages = true" in cfg
        log = (root / "var" / "log" / "tpuctl-bootstrap.log").read_text()
        assert "installing python3-venv with apt-get" in log and "Successfully installed" in log
        for name in ("tpuctl-bootstrap.log", "tpuctl-agent.log"):      # root's alone: they quote what jobs print
            st = (root / "var" / "log" / name).stat()
            assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o600, 0, 0), (name, oct(st.st_mode))
        print(f"bare Debian 12 to a running agent: {elapsed:.0f} s")


def test_bare_debian12_with_a_wheel_that_cannot_install_reports_failed_and_stops(tmp_path, tpuctl_wheel):
    broken = stub_wheel(requires=("tpuctl-no-such-dependency>=99",))
    stub = Stub({"tpuctl-cluster": "bert-lab", "tpuctl-role": "worker", "tpuctl-bucket": "gs://my-runs",
                 "agent-worker-number": "0", "tpuctl-pin": pin_of(broken)},
                {**objects("my-runs", wheel=broken), f"my-runs/{STARTUP.object_name}": STARTUP.script})
    with debian12(tmp_path, WHEELHOUSE) as root:
        _sh("chroot", str(root), "dpkg", "--purge", "curl")      # an image even barer: no curl either
        assert not (root / "usr" / "bin" / "curl").exists()
        t0 = time.monotonic()
        proc = _start(root, stub, TPUCTL_PIP_TRIES="2")
        try:
            proc.wait(timeout=300)
        finally:
            out = _stop(proc)
            stub.close()
        elapsed = time.monotonic() - t0
        assert proc.returncode == 1, out
        assert elapsed < 300
        assert _installed(root, "curl") and _installed(root, "python3-venv"), out
        failed = stub.statuses(STATUS)[-1]
        assert (failed["state"], failed["step"]) == ("failed", "pip"), json.dumps(failed, indent=1)
        assert any("No matching distribution found for tpuctl-no-such-dependency" in line
                   for line in failed["log_tail"]), failed["log_tail"]
        assert not any(r[1].endswith("current.json") for r in stub.storage_requests)   # no agent
        print(f"bare Debian 12 to a failed status: {elapsed:.0f} s")
