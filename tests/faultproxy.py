"""A seeded, fault-injecting HTTP proxy between tpuctl and fake-gcs-server (stdlib only).

Point ``STORAGE_EMULATOR_HOST`` at :attr:`FaultProxy.url`; every request is forwarded to the
upstream server, except that a seeded share of them meets one fault:

- ``503`` / ``429``: answered by the proxy, not forwarded, with Google's JSON error body and a
  ``Retry-After`` header. Bodies as Cloud Storage sends them: 503 ``backendError`` "We encountered
  an internal error. Please try again." (pasted in googleapis/java-storage#2148); 429
  ``rateLimitExceeded`` "The object ... exceeded the rate limit for object mutation operations"
  (pasted in ThetaTau/CMT#957); shape ``{"error": {"code", "message", "errors": [{"message",
  "domain", "reason"}]}}`` (https://cloud.google.com/storage/docs/json_api/v1/status-codes).
- ``reset_before``: the connection is reset (RST) before the request is forwarded;
- ``reset_after``: the request is forwarded (the server acts on it), then the connection is
  reset before the answer: the client cannot know it succeeded;
- ``truncate``: the answer's headers carry the full ``Content-Length`` but the body stops half
  way and the connection closes;
- ``latency``: the answer is delayed (a fraction of a second), then sent whole;
- ``410`` (scripted only): a resumable session that is gone.

``hot`` names requests faulted at ``hot_rate`` rather than ``rate`` (the campaign gives the
requests of resumable sessions, rare but where a lost answer hurts, a higher rate).
``script`` picks a fault for given requests (say, the last PUT of every resumable session)
ahead of the seeded draw, for tests that need one exact fault.

Bound to 127.0.0.1 only; at most ``max_requests`` requests (then 503s, so a runaway client
ends), and every socket has a timeout, so nothing here can hang a test.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

KINDS = ("503", "429", "reset_before", "reset_after", "truncate", "latency")
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


def google_error(code: int, name: str = "object") -> bytes:
    if code == 410:
        # A resumable session that expired or was cancelled: "start a new session"
        # (https://cloud.google.com/storage/docs/performing-resumable-uploads).
        message, reason, domain = "The requested upload session is no longer valid.", "gone", "global"
    elif code == 429:
        message = (f"The object {name} exceeded the rate limit for object mutation operations "
                   "(create, update, and delete). Please reduce your request rate. "
                   "See https://cloud.google.com/storage/docs/gcs429.")
        reason, domain = "rateLimitExceeded", "usageLimits"
    else:
        message, reason, domain = "We encountered an internal error. Please try again.", "backendError", "global"
    return json.dumps({"error": {"code": code, "message": message,
                                 "errors": [{"message": message, "domain": domain, "reason": reason}]}}).encode()


class FaultProxy:
    """``rate`` is the share of requests that meet a fault, drawn evenly from ``kinds``."""

    def __init__(self, upstream: str, *, seed: int = 0, rate: float = 0.0, kinds: tuple[str, ...] = KINDS,
                 max_requests: int = 50_000, timeout: float = 30.0, max_latency: float = 0.3,
                 script: Callable[[str, str], str | None] | None = None,
                 hot: Callable[[str, str], bool] | None = None, hot_rate: float = 0.0):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.upstream_url = f"{parts.scheme}://{parts.netloc}"
        self.rng = random.Random(seed)
        self.rate, self.kinds = rate, kinds
        self.max_requests, self.timeout, self.max_latency = max_requests, timeout, max_latency
        self.lock = threading.Lock()
        self.requests = 0
        self.exposed = 0  # requests while faults were on
        self.faults: Counter[str] = Counter()
        self.hot_faults: Counter[str] = Counter()  # the share of ``faults`` on ``hot`` requests
        self.enabled = True
        self.script = script  # (method, path) -> a fault kind (or "410"), ahead of the seeded draw
        self.hot, self.hot_rate = hot, hot_rate  # requests faulted at hot_rate instead of rate
        self.server: ThreadingHTTPServer | None = None
        self.url = ""

    def draw(self, method: str, path: str) -> tuple[str | None, float]:
        with self.lock:
            self.requests += 1
            if self.requests > self.max_requests:
                return "503", 0.0
            kind = self.script(method, path) if self.script and self.enabled else None
            if kind is not None:
                self.faults[kind] += 1
                return kind, 0.0
            if self.enabled:
                self.exposed += 1
            hot = self.hot is not None and self.hot(method, path)
            if not self.enabled or self.rng.random() >= (self.hot_rate if hot else self.rate):
                return None, 0.0
            kind = self.rng.choice(self.kinds)
            self.faults[kind] += 1
            if hot:
                self.hot_faults[kind] += 1
            return kind, self.rng.uniform(0.02, self.max_latency)

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="faultproxy", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> FaultProxy:  # noqa: PYI034 - Self needs Python 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        return None  # a client that hangs up mid-request is what this proxy is for


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        return None

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.owner.timeout)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reset(self) -> None:
        """Close with RST, as a dropped connection looks to the client."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    def _handle(self) -> None:
        kind, delay = self.owner.draw(self.command, self.path)
        body = self._body()
        if kind in ("503", "429", "410"):
            data = google_error(int(kind), self.path.split("?")[0].rsplit("/", 1)[-1])
            self.send_response(int(kind))
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if kind == "reset_before":
            self._reset()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS and k.lower() != "host"}
        headers["Host"] = f"{self.owner.upstream[0]}:{self.owner.upstream[1]}"
        headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=self.owner.timeout)
        try:
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered (say 404) before reading the whole body: relay that answer
            resp = conn.getresponse()
            data = resp.read()
            status, reason, out_headers = resp.status, resp.reason, resp.getheaders()
        finally:
            conn.close()
        if kind == "reset_after":
            self._reset()
            return
        if kind == "latency":
            time.sleep(delay)
        self.send_response(status, reason)
        for k, v in out_headers:
            if k.lower() == "location":  # a resumable session's URI: its requests come here too
                v = v.replace(self.owner.upstream_url, self.owner.url)
            if k.lower() not in HOP_HEADERS and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        if kind == "truncate" and len(data) < 2:
            with self.owner.lock:  # nothing to cut short: not a fault after all
                self.owner.faults["truncate"] -= 1
        if kind == "truncate" and len(data) >= 2:
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self._reset()
            return
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _dispatch(self) -> None:
        try:
            self._handle()
        except (OSError, http.client.HTTPException):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch
