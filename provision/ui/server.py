"""The page's server: GET only, on a loopback address, the bundled page and its JSON documents.

What protects the viewer: every response carries a Content-Security-Policy that allows only this
server's own script and style (no inline script, no other origin, no frames, no forms), and the
page writes every value as text, so a record a bucket writer crafted cannot run script in it. A
request whose ``Host`` is not this server's own address is refused (DNS rebinding: a web page
elsewhere cannot read the documents through a name that resolves to 127.0.0.1). Nothing changes
anything: other methods are answered 405.
"""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from .records import Records

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/index.html": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/app.css": ("app.css", "text/css; charset=utf-8"),
          "/favicon.ico": ("favicon.svg", "image/svg+xml")}
ID_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,119}")


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class UiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], records: Records):
        self.records = records
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    def allowed_hosts(self) -> set[str]:
        host, port = self.server_address[:2]
        names = {host, "localhost", f"[{host}]"} if ":" in host else {host, "localhost"}
        return {f"{n}:{port}" for n in names}


class _Handler(BaseHTTPRequestHandler):
    server: UiServer
    server_version = "tpuctl-ui"
    sys_version = ""

    def log_message(self, *args: Any) -> None:      # no access log on the terminal
        return None

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, doc: Any) -> None:
        # ASCII with <, > and & escaped: a JSON document is never read as markup by anything
        body = json.dumps(doc, sort_keys=True, allow_nan=False, default=str).replace("<", "\\u003c") \
            .replace(">", "\\u003e").replace("&", "\\u0026").encode()
        self._send(status, body, "application/json")

    def do_GET(self) -> None:
        if self.headers.get("Host") not in self.server.allowed_hosts():
            self._json(HTTPStatus.MISDIRECTED_REQUEST, {"error": "unknown Host; open the URL tpuctl ui printed"})
            return
        path = urlsplit(self.path).path
        if path in STATIC:
            name, ctype = STATIC[path]
            self._send(HTTPStatus.OK, _static(name), ctype)
            return
        records = self.server.records
        try:
            if path == "/api/overview":
                self._json(HTTPStatus.OK, records.overview())
                return
            m = re.fullmatch(r"/api/(runs|sweeps)/([^/]+)", path)
            if m and ID_RE.fullmatch(m.group(2)):
                doc = records.run(m.group(2)) if m.group(1) == "runs" else records.sweep(m.group(2))
                if doc is not None:
                    self._json(HTTPStatus.OK, doc)
                    return
        except Exception as exc:  # noqa: BLE001 - one failed read is a 500 for that document, not a dead server
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": type(exc).__name__})
            return
        self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})

    do_HEAD = do_GET

    def _refuse(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse
