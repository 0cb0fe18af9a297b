"""The page's server: GET only, on a loopback address, for whoever holds its token: the bundled page
and its JSON documents.

Who may read it: loopback alone is not enough, since every local user reaches 127.0.0.1, and the
page shows runs, costs and host addresses that tpuctl otherwise keeps in 0700 directories. So, as
Jupyter does, the server makes a random token when it starts and prints it only in its URL
(``http://127.0.0.1:PORT/?token=TOKEN``), on the terminal of the user who started it. A request
with the token (``?token=`` or an ``Authorization: token TOKEN`` header) gets a cookie (HttpOnly,
SameSite=Strict), and the page is sent on to its URL without the token, so that the token stays
out of the address bar and the history; later requests carry the cookie. Anything else is 403:
the page, its script, style and icon and the documents alike, one rule for every path.

What protects the viewer: every response carries a Content-Security-Policy that allows only this
server's own script and style (no inline script, no other origin, no frames, no forms), and the
page writes every value as text, so a record a bucket writer crafted cannot run script in it. A
request whose ``Host`` is not this server's own address is refused (DNS rebinding: a web page
elsewhere cannot read the documents through a name that resolves to 127.0.0.1). Nothing changes
anything: other methods are answered 405.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import secrets
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from .records import Records

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/index.html": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/app.css": ("app.css", "text/css; charset=utf-8"),
          "/favicon.ico": ("favicon.svg", "image/svg+xml")}
PAGES = ("/", "/index.html")           # what a person opens: sent on without the token
ID_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,119}")

TOKEN_BYTES = 32                       # secrets.token_urlsafe(32): 43 characters, 256 random bits
TOKEN_ENV = "TPUCTL_UI_TOKEN"          # a fixed token instead, as JUPYTER_TOKEN is for Jupyter
MIN_TOKEN_CHARS = 32
TOKEN_RE = re.compile(r"[A-Za-z0-9._~-]+")   # unreserved in a URL: printed as it is, never escaped

FORBIDDEN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<title>tpuctl ui: open the URL it printed</title></head>
<body><h1>tpuctl ui: open the URL it printed</h1>
<p>This page shows only to the browser of whoever started <code>tpuctl ui</code>. Open the URL it
printed when it started, token included:</p>
<pre>tpuctl ui: serving {url}?token=...</pre>
<p>That browser then keeps a cookie until it closes or <code>tpuctl ui</code> stops. Lost the
line? Stop <code>tpuctl ui</code> (Ctrl-C) and start it again: it prints a new one.</p>
</body></html>
"""

# A link followed from another site: a browser withholds a SameSite=Strict cookie from every
# request of that navigation, the redirect included, so the sign-in goes on from this server's own page.
CONTINUE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0; url={location}">
<title>tpuctl ui</title></head>
<body><p>Signed in. <a href="{location}">Open the page</a>.</p></body></html>
"""


def token_problem(token: str) -> str | None:
    """Why a token the user chose (``TPUCTL_UI_TOKEN``) cannot guard the page, or None: a short
    one can be guessed by every local user, and one that needs escaping would not survive being
    pasted from the printed URL."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"{TOKEN_ENV} is {len(token)} characters long; a token must have at least {MIN_TOKEN_CHARS}"
    if not TOKEN_RE.fullmatch(token):
        return f"{TOKEN_ENV} has characters other than letters, digits and - _ . ~"
    return None


def _same(given: str, expected: str) -> bool:
    # bytes, not str: compare_digest refuses non-ASCII text, and a query can hold any
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class UiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], records: Records, token: str | None = None):
        self.records = records
        self.token = token or secrets.token_urlsafe(TOKEN_BYTES)
        super().__init__(address, _Handler)
        # a browser keeps cookies per host, not per port: one name per port, so that two servers
        # on this machine do not sign each other's browser out
        self.cookie_name = f"tpuctl-ui-{self.server_address[1]}"
        # made from the token: the same TPUCTL_UI_TOKEN keeps a browser signed in across restarts,
        # a new random token signs every browser out
        self.cookie_value = hmac.new(self.token.encode(), b"tpuctl ui cookie", hashlib.sha256).hexdigest()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    @property
    def signin_url(self) -> str:
        """The URL to print, and the only place the token is shown."""
        return f"{self.url}?token={self.token}"

    def allowed_hosts(self) -> set[str]:
        host, port = self.server_address[:2]
        names = {host, "localhost", f"[{host}]"} if ":" in host else {host, "localhost"}
        return {f"{n}:{port}" for n in names}


class _Handler(BaseHTTPRequestHandler):
    server: UiServer
    server_version = "tpuctl-ui"
    sys_version = ""
    _cookie = False                     # whether this response signs the browser in

    def log_message(self, *args: Any) -> None:      # no access log on the terminal (nor the token in it)
        return None

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self._cookie:
            self.send_header("Set-Cookie", f"{self.server.cookie_name}={self.server.cookie_value}; "
                                           "Path=/; HttpOnly; SameSite=Strict")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, doc: Any) -> None:
        # ASCII with <, > and & escaped: a JSON document is never read as markup by anything
        body = json.dumps(doc, sort_keys=True, allow_nan=False, default=str).replace("<", "\\u003c") \
            .replace(">", "\\u003e").replace("&", "\\u0026").encode()
        self._send(status, body, "application/json")

    def _access(self, params: list[tuple[str, str]]) -> str:
        """``"token"`` when the request carries the right token (every token it carries is the
        right one), ``"cookie"`` when it carries none but the cookie, ``""`` otherwise."""
        given = [v for k, v in params if k == "token"]
        scheme, _, value = (self.headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() in ("token", "bearer"):
            given.append(value.strip())
        if given:
            return "token" if all(_same(v, self.server.token) for v in given) else ""
        for header in self.headers.get_all("Cookie") or []:
            for pair in header.split(";"):
                name, _, value = pair.strip().partition("=")
                if name == self.server.cookie_name and _same(value, self.server.cookie_value):
                    return "cookie"
        return ""

    def _forbidden(self, path: str) -> None:
        if path.startswith("/api/"):
            self._json(HTTPStatus.FORBIDDEN, {"error": f"no token: open the URL tpuctl ui printed "
                                                       f"({self.server.url}?token=...)"})
        else:
            self._send(HTTPStatus.FORBIDDEN, FORBIDDEN_PAGE.format(url=self.server.url).encode(),
                       "text/html; charset=utf-8")

    def do_GET(self) -> None:
        if self.headers.get("Host") not in self.server.allowed_hosts():
            self._json(HTTPStatus.MISDIRECTED_REQUEST, {"error": "unknown Host; open the URL tpuctl ui printed"})
            return
        parts = urlsplit(self.path)
        path, params = parts.path, parse_qsl(parts.query, keep_blank_values=True)
        access = self._access(params)
        if not access:
            self._forbidden(path)
            return
        self._cookie = access == "token"
        if path in PAGES and any(k == "token" for k, _ in params):
            # the same page without the token: out of the address bar, the history and bookmarks
            rest = urlencode([(k, v) for k, v in params if k != "token"])
            location = path + ("?" + rest if rest else "")
            if self.headers.get("Sec-Fetch-Site") == "cross-site":
                page = CONTINUE_PAGE.format(location=html.escape(location))
                self._send(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8")
            else:
                self._send(HTTPStatus.SEE_OTHER, b"", "text/plain; charset=utf-8", {"Location": location})
            return
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
