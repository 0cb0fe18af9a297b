"""A loopback stand-in for what templates/host-startup.sh talks to, and a tiny tpuctl wheel.

:class:`Stub` serves, on one 127.0.0.1 port, the Compute Engine metadata server
(``/computeMetadata/v1/...``, answering only requests with ``Metadata-Flavor: Google``, as Google's
does) and the part of the Cloud Storage JSON API the bootstrap and the agent use: object reads
(``/storage/v1/b/B/o/O`` and ``/download/storage/v1/b/B/o/O``, media with ``alt=media``) and
simple uploads (``POST /upload/storage/v1/b/B/o?uploadType=media&name=O``). It records every
storage request and its ``Authorization`` header, keeps uploads (``uploads`` in order,
``objects`` by name), and can be told to answer an object with an error status (``fail``).

:func:`stub_wheel` is a tpuctl wheel whose ``tpuctl`` console script answers ``--version`` and
otherwise appends its argv (one JSON line) to ``$TPUCTL_STUB_OUT`` and exits with
``$TPUCTL_STUB_EXIT`` (default 0); ``requires`` become its Requires-Dist. :func:`pin_of` is the
``tpuctl-pin`` attribute that lets the bootstrap install given wheels.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "ya29.stubTOKENforTHEbootstrap0123456789"
RUN = "bert-lab-20260101-000000-abcd"
WHEEL_OBJ = f"tpuctl/runs/{RUN}/tpuctl/tpuctl-0.0.1-py3-none-any.whl"


class Stub:
    """Metadata server + Cloud Storage JSON API on one loopback port."""

    def __init__(self, attributes: dict[str, str], objects: dict[str, bytes], project: str = "my-proj-1"):
        self.attributes, self.objects, self.project = attributes, objects, project
        self.storage_auth: list[str] = []
        self.storage_requests: list[tuple[str, str]] = []     # (method, "bucket/object")
        self.uploads: list[tuple[str, bytes]] = []
        self.fail: dict[str, int] = {}                          # "bucket/object" -> HTTP status
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, status: int, body: bytes = b"", ctype: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _metadata(self, key: str):
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._reply(403, b"Missing Metadata-Flavor:Google header.", "text/html")
                if key == "instance/attributes/":
                    return self._reply(200, json.dumps(stub.attributes).encode())
                if key.startswith("instance/attributes/") and key[20:] in stub.attributes:
                    return self._reply(200, stub.attributes[key[20:]].encode(), "application/text")
                if key == "project/project-id":
                    return self._reply(200, stub.project.encode(), "application/text")
                if key == "instance/service-accounts/default/token":
                    return self._reply(200, json.dumps({"access_token": TOKEN, "expires_in": 3599,
                                                        "token_type": "Bearer"}).encode())
                return self._reply(404, b"Not Found", "text/html")

            def _record(self, method: str, name: str):
                with stub.lock:
                    stub.storage_auth.append(self.headers.get("Authorization", ""))
                    stub.storage_requests.append((method, name))

            def do_GET(self):
                parts = urlsplit(self.path)
                path = parts.path
                if path.startswith("/computeMetadata/v1/"):
                    return self._metadata(path[len("/computeMetadata/v1/"):])
                for prefix in ("/storage/v1/b/", "/download/storage/v1/b/"):
                    if path.startswith(prefix):
                        bucket, _, obj = path[len(prefix):].partition("/o/")
                        name = f"{unquote(bucket)}/{unquote(obj)}"
                        self._record("GET", name)
                        if name in stub.fail:
                            return self._reply(stub.fail[name], b'{"error": {"code": %d}}' % stub.fail[name])
                        if name not in stub.objects:
                            return self._reply(404, b'{"error": {"code": 404, "message": "No such object"}}')
                        data = stub.objects[name]
                        if "alt=media" in parts.query or prefix.startswith("/download"):
                            return self._reply(200, data, "application/octet-stream")
                        return self._reply(200, json.dumps({"name": unquote(obj), "bucket": unquote(bucket),
                                                            "size": str(len(data))}).encode())
                return self._reply(404)

            def do_POST(self):
                parts = urlsplit(self.path)
                prefix = "/upload/storage/v1/b/"
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                query = parse_qs(parts.query)
                if not parts.path.startswith(prefix) or query.get("uploadType") != ["media"] or "name" not in query:
                    return self._reply(400, b'{"error": {"code": 400}}')
                bucket = unquote(parts.path[len(prefix):].partition("/")[0])
                name = f"{bucket}/{query['name'][0]}"
                self._record("POST", name)
                if name in stub.fail:
                    return self._reply(stub.fail[name], b'{"error": {"code": %d}}' % stub.fail[name])
                with stub.lock:
                    stub.objects[name] = body
                    stub.uploads.append((name, body))
                return self._reply(200, json.dumps({"name": query["name"][0], "bucket": bucket,
                                                    "size": str(len(body))}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def statuses(self, name: str) -> list[dict]:
        """Every bootstrap status uploaded to ``name`` ("bucket/object"), in order."""
        with self.lock:
            return [json.loads(body) for n, body in self.uploads if n == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def stub_wheel(requires: tuple[str, ...] = ()) -> bytes:
    """A wheel named tpuctl whose console script records its argv (see the module docstring)."""
    script = (b"import json, os, sys\n\n"
              b"def main():\n"
              b"    if sys.argv[1:] == ['--version']:\n"
              b"        print('tpuctl, version 0.0.1')\n"
              b"        return 0\n"
              b"    with open(os.environ['TPUCTL_STUB_OUT'], 'a') as f:\n"
              b"        f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
              b"    code = int(os.environ.get('TPUCTL_STUB_EXIT', '0'))\n"
              b"    if code:\n"
              b"        print(f'stub agent: failing with exit code {code}', file=sys.stderr)\n"
              b"    return code\n")
    metadata = "Metadata-Version: 2.1\nName: tpuctl\nVersion: 0.0.1\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {
        "tpuctl_stub.py": script,
        "tpuctl-0.0.1.dist-info/METADATA": metadata.encode(),
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


def objects(bucket: str, wheel_obj: str = WHEEL_OBJ, cluster: str = "bert-lab", wheel: bytes | None = None,
            run_id: str = RUN) -> dict[str, bytes]:
    """A bucket as `tpuctl train` leaves it for the hosts: agent.json and the run's wheel."""
    return {f"{bucket}/tpuctl/clusters/{cluster}/agent.json": json.dumps({"wheel_object": wheel_obj,
                                                                          "run_id": run_id}).encode(),
            f"{bucket}/{WHEEL_OBJ}": stub_wheel() if wheel is None else wheel}


def pin_of(*wheels: bytes, run_id: str = RUN) -> str:
    """The ``tpuctl-pin`` metadata value `tpuctl train` would write for runs staged with these wheels."""
    from provision.runs.pins import sha256, updated

    text = None
    for i, wheel in enumerate(wheels):
        text = updated(text, "run", run_id if i == 0 else f"{run_id}-{i}", {"wheel": sha256(wheel)})
    return text or ""


def status_name(bucket: str = "my-runs", cluster: str = "bert-lab", role: str = "worker", worker: str = "0") -> str:
    """Where a host's bootstrap status lives ("bucket/object")."""
    return f"{bucket}/tpuctl/clusters/{cluster}/bootstrap/{role}-{worker}.json"
