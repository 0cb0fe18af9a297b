"""templates/host-startup.sh under bash, against a loopback metadata server and bucket.

The stub serves instance metadata and Cloud Storage objects the way Google's endpoints do;
``TPUCTL_METADATA_URL``/``TPUCTL_STORAGE_URL`` point the script at it. A tiny wheel stands in for
tpuctl: its ``tpuctl`` console script records the argv it was started with. A ``curl`` shim on
PATH records every curl command line. Hostile metadata values (a cluster name with ``; touch``,
``$(...)``, backticks, newlines; a bucket with ``$(...)``; a wheel path that escapes its
directory) must never run anything: the script refuses (or, for the bucket, keeps waiting)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "templates" / "host-startup.sh"
TOKEN = "ya29.stubTOKENforTHEbootstrap0123456789"
RUN = "bert-lab-20260101-000000-abcd"
WHEEL_OBJ = f"tpuctl/runs/{RUN}/tpuctl/tpuctl-0.0.1-py3-none-any.whl"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("curl") is None,
                                reason="needs bash and curl")


class Stub:
    """Metadata server + Cloud Storage JSON API on one loopback port."""

    def __init__(self, attributes: dict[str, str], objects: dict[str, bytes], project: str = "my-proj-1"):
        self.attributes, self.objects, self.project = attributes, objects, project
        self.storage_auth: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                path = parts.path
                body, status = b"", 404
                if path.startswith("/computeMetadata/v1/"):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        status = 403
                    else:
                        key = path[len("/computeMetadata/v1/"):]
                        if key == "instance/attributes/":
                            body, status = json.dumps(stub.attributes).encode(), 200
                        elif key.startswith("instance/attributes/") and key[20:] in stub.attributes:
                            body, status = stub.attributes[key[20:]].encode(), 200
                        elif key == "project/project-id":
                            body, status = stub.project.encode(), 200
                        elif key == "instance/service-accounts/default/token":
                            body, status = json.dumps({"access_token": TOKEN, "expires_in": 3599}).encode(), 200
                elif path.startswith("/storage/v1/b/"):
                    stub.storage_auth.append(self.headers.get("Authorization", ""))
                    _, _, rest = path.partition("/storage/v1/b/")
                    bucket, _, obj = rest.partition("/o/")
                    name = f"{unquote(bucket)}/{unquote(obj)}"
                    if name in stub.objects:
                        body, status = stub.objects[name], 200
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _stub_wheel() -> bytes:
    """A wheel whose ``tpuctl`` console script writes its argv to $TPUCTL_STUB_OUT."""
    import io

    files = {
        "tpuctl_stub.py": b"import json, os, sys\n\ndef main():\n"
                          b"    with open(os.environ['TPUCTL_STUB_OUT'], 'w') as f:\n"
                          b"        json.dump(sys.argv[1:], f)\n",
        "tpuctl-0.0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tpuctl\nVersion: 0.0.1\n",
        "tpuctl-0.0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "tpuctl-0.0.1.dist-info/entry_points.txt": b"[console_scripts]\ntpuctl = tpuctl_stub:main\n",
    }
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append("tpuctl-0.0.1.dist-info/RECORD,,")
        zf.writestr("tpuctl-0.0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return buf.getvalue()


def _objects(bucket: str, wheel_obj: str = WHEEL_OBJ, cluster: str = "bert-lab") -> dict[str, bytes]:
    return {f"{bucket}/tpuctl/clusters/{cluster}/agent.json": json.dumps({"wheel_object": wheel_obj,
                                                                          "run_id": RUN}).encode(),
            f"{bucket}/{WHEEL_OBJ}": _stub_wheel()}


def _run(tmp_path: Path, stub: Stub, timeout: float = 60) -> tuple[int | None, str, Path]:
    pwned = tmp_path / "pwned"
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir(exist_ok=True)
    curl_log = tmp_path / "curl-argv.log"
    shim = shim_dir / "curl"
    shim.write_text(f"#!/bin/bash\nprintf '%s\\n' \"$*\" >> {curl_log}\nexec {shutil.which('curl')} \"$@\"\n")
    shim.chmod(0o755)
    # the interpreter itself rather than a version manager's shim script (which costs ~0.2 s a call)
    import sys

    base = getattr(sys, "_base_executable", None) or sys.executable
    if not (shim_dir / "python3").exists():
        (shim_dir / "python3").symlink_to(os.path.realpath(base))
    env = {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}",
           "TPUCTL_METADATA_URL": f"{stub.url}/computeMetadata/v1", "TPUCTL_STORAGE_URL": stub.url,
           "TPUCTL_VENV": str(tmp_path / "venv"), "TPUCTL_AGENT_LOG": str(tmp_path / "agent.log"),
           "TPUCTL_AGENT_ONCE": "1", "TPUCTL_BOOTSTRAP_RETRY_S": "0.2", "TPUCTL_PIP_ARGS": "--no-index --no-deps",
           "TPUCTL_STUB_OUT": str(tmp_path / "argv.json"), "PWNED": str(pwned), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(["bash", str(SCRIPT)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        code = None   # still waiting
    return code, out, curl_log


def _good_attributes(**changes: str) -> dict[str, str]:
    attrs = {"tpuctl-cluster": "bert-lab", "tpuctl-role": "worker", "tpuctl-bucket": "gs://my-runs",
             "agent-worker-number": "0", "startup-script": "#!/bin/bash"}
    attrs.update(changes)
    return {k: v for k, v in attrs.items() if v is not None}


def test_bootstrap_installs_the_wheel_and_starts_the_agent_with_the_metadata_values(tmp_path):
    stub = Stub(_good_attributes(), _objects("my-runs"))
    try:
        code, out, curl_log = _run(tmp_path, stub, timeout=240)
    finally:
        stub.close()
    assert code == 0, out
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == ["agent", "--cluster", "bert-lab", "--bucket", "gs://my-runs", "--project", "my-proj-1",
                    "--worker", "0", "--role", "worker"]
    # the bucket was read with the VM's token, which never appeared on a command line
    assert stub.storage_auth and set(stub.storage_auth) == {f"Bearer {TOKEN}"}
    assert TOKEN not in curl_log.read_text()
    assert (tmp_path / "venv" / "bin" / "python").exists()


HOSTILE = [
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
    stub = Stub(_good_attributes(**attrs), _objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1, out
    assert "not starting the agent" in out
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "argv.json").exists() and not (tmp_path / "venv").exists()


def test_hostile_project_id_is_refused(tmp_path):
    stub = Stub(_good_attributes(), _objects("my-runs"), project="p$(touch $PWNED)roj")
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1 and "project id" in out
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("bucket", ["gs://b$(touch $PWNED)", "gs://my-runs\n`touch $PWNED`"])
def test_a_hostile_bucket_is_ignored_and_the_host_keeps_waiting(tmp_path, bucket):
    stub = Stub(_good_attributes(**{"tpuctl-bucket": bucket}), _objects("my-runs"))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=1.5)
    finally:
        stub.close()
    assert code is None, out          # still waiting for a valid tpuctl-bucket
    assert "ignoring tpuctl-bucket" in out
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "argv.json").exists()
    assert not stub.storage_auth      # no bucket was read


@pytest.mark.parametrize("wheel_obj", ["$(touch $PWNED).whl", f"tpuctl/runs/{RUN}/tpuctl/../../../../x.whl", "-rf"])
def test_a_hostile_wheel_path_in_the_bucket_is_refused(tmp_path, wheel_obj):
    stub = Stub(_good_attributes(), _objects("my-runs", wheel_obj=wheel_obj))
    try:
        code, out, _ = _run(tmp_path, stub, timeout=30)
    finally:
        stub.close()
    assert code == 1 and "wheel_object" in out, out
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "venv").exists()
