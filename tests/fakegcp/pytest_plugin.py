"""pytest fixtures for the fake cloud. Register with ``pytest_plugins = ["tests.fakegcp.pytest_plugin"]``.

``fakegcp`` is function-scoped but cheap: one server process per test process (per xdist worker)
is started on first use and reset before every test, so each test sees an empty cloud, default
latencies and no faults, without paying for a process start. ``fakegcp_factory`` starts dedicated
servers for tests that need their own (one that stops the server, or another latency scale).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .fixture import FakeGCP

_lock = threading.Lock()
_shared: FakeGCP | None = None


def shared_fakegcp() -> FakeGCP:
    """The process-wide server, started on first use (and again if it died)."""
    global _shared
    with _lock:
        if _shared is None or not _shared.alive:
            _shared = FakeGCP()
            atexit.register(_shared.stop)
        return _shared


@pytest.fixture
def fakegcp() -> FakeGCP:
    """A fake Cloud TPU + Compute Engine API with nothing in it (see docs/fakegcp.md)."""
    server = shared_fakegcp()
    server.reset()
    return server


@pytest.fixture
def fakegcp_env(fakegcp: FakeGCP, monkeypatch: pytest.MonkeyPatch) -> FakeGCP:
    """``fakegcp`` with its ``env()`` (TPUCTL_PROVIDER=gcp, endpoints, ...) set in os.environ."""
    for key, value in fakegcp.env().items():
        monkeypatch.setenv(key, value)
    return fakegcp


@pytest.fixture
def fakegcp_factory() -> Iterator[Callable[..., FakeGCP]]:
    """Start dedicated servers: ``fakegcp_factory(latency_scale=5)``; all stopped after the test."""
    started: list[FakeGCP] = []

    def start(**kwargs: Any) -> FakeGCP:
        server = FakeGCP(**kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
