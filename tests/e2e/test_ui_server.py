"""`tpuctl ui`'s server over HTTP, as anything on this machine can reach it: nothing without the
token it printed (then a cookie), read-only, a strict Content-Security-Policy, escaped JSON, its
own Host name only, loopback only. The page itself is tested in Chromium
(tests/e2e/test_ui_browser.py, `make test-browser`)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

from tests.conftest import run_tpuctl_process
from tests.e2e.ui_records import records, serving, ui  # noqa: F401 - fixtures

PAGE_PATHS = ("/", "/index.html", "/static/app.js", "/static/app.css", "/favicon.ico")


def _get(url: str, path: str, headers: dict | None = None, method: str = "GET", body: bytes | None = None):
    """One request as a script or a browser on this machine sends it: (status, headers, text)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read().decode()
    finally:
        conn.close()


def _sign_in(url: str, token: str) -> str:
    """The cookie a browser keeps from opening the printed URL: ``name=value``."""
    status, headers, _ = _get(url, f"/?token={token}")
    assert status == 303, status
    return headers["Set-Cookie"].split(";")[0]


def test_without_the_token_nothing_is_shown_and_the_refusal_says_how_to_get_in(ui):  # noqa: F811 - the fixture imported above
    url, token, (run_id, sweep_id, _store) = ui
    for path in PAGE_PATHS:
        status, headers, body = _get(url, path)
        assert status == 403, path
        assert headers["Content-Type"].startswith("text/html") and "Set-Cookie" not in headers
        assert "open the URL it printed" in body and f"tpuctl ui: serving {url}?token=..." in body
        assert token not in body and run_id not in body
    for path in ("/api/overview", f"/api/runs/{run_id}", f"/api/sweeps/{sweep_id}", "/api/runs/nope"):
        status, headers, body = _get(url, path)
        assert status == 403, path
        assert headers["Content-Type"] == "application/json"
        assert json.loads(body) == {"error": f"no token: open the URL tpuctl ui printed ({url}?token=...)"}
    assert _get(url, "/api/overview", method="HEAD")[0] == 403
    # a wrong token, in any place it may come, opens nothing either
    port = urlsplit(url).port
    cookie = _sign_in(url, token)
    for path, headers in ((f"/?token={token[:-1]}", {}), (f"/?token={token}x", {}), ("/?token=", {}),
                          ("/?token=%C3%A9t%C3%A9", {}), (f"/api/overview?token={'A' * len(token)}", {}),
                          (f"/api/overview?token={token}&token=nope", {}),
                          ("/api/overview", {"Authorization": f"token {token[::-1]}"}),
                          ("/api/overview", {"Cookie": f"tpuctl-ui-{port}={'0' * 64}"}),
                          ("/api/overview", {"Cookie": f"tpuctl-ui-{port}={token}"}),         # the token is no cookie
                          ("/api/overview", {"Cookie": cookie.replace(f"-{port}=", f"-{port + 1}=")}),
                          ("/api/overview?token=nope", {"Cookie": cookie})):
        status, got, body = _get(url, path, headers)
        assert status == 403, (path, headers)
        assert "Set-Cookie" not in got and run_id not in body


def test_the_printed_url_signs_the_browser_in_with_a_cookie_and_leaves_the_token_behind(ui):  # noqa: F811 - the fixture imported above
    url, token, (run_id, sweep_id, _store) = ui
    assert len(token) >= 43                                        # 32 random bytes
    status, headers, _ = _get(url, f"/?token={token}")
    assert status == 303 and headers["Location"] == "/"          # the same page, the token gone from the address bar
    name_value, *attrs = [a.strip() for a in headers["Set-Cookie"].split(";")]
    assert name_value.startswith(f"tpuctl-ui-{urlsplit(url).port}=") and token not in name_value
    assert {"Path=/", "HttpOnly", "SameSite=Strict"} <= set(attrs)
    assert not [a for a in attrs if a.lower().startswith(("expires", "max-age"))]     # gone when the browser closes
    status, headers, _ = _get(url, f"/index.html?x=1&token={token}")
    assert status == 303 and headers["Location"] == "/index.html?x=1"
    # later requests carry the cookie: the page, its script, the documents
    for path in (*PAGE_PATHS, "/api/overview", f"/api/sweeps/{sweep_id}"):
        assert _get(url, path, {"Cookie": f"other=1; {name_value}"})[0] == 200, path
    status, headers, body = _get(url, f"/api/runs/{run_id}", {"Cookie": name_value})
    assert status == 200 and json.loads(body)["run_id"] == run_id and "Set-Cookie" not in headers
    # a script: the token in a header, or on a document's URL (answered there, not sent on)
    status, _, body = _get(url, f"/api/runs/{run_id}", {"Authorization": f"token {token}"})
    assert status == 200 and run_id in body
    status, headers, body = _get(url, f"/api/runs/{run_id}?token={token}")
    assert status == 200 and run_id in body and "HttpOnly" in headers["Set-Cookie"]
    # a link followed from another site: the browser would withhold the cookie through a redirect,
    # so this server's own page goes on
    status, headers, body = _get(url, f"/?token={token}", {"Sec-Fetch-Site": "cross-site"})
    assert status == 200 and 'content="0; url=/"' in body and token not in body
    assert "SameSite=Strict" in headers["Set-Cookie"]


def test_the_server_is_read_only_strict_and_answers_only_its_own_name(ui):  # noqa: F811 - the fixture imported above
    url, token, (run_id, _sweep_id, _store) = ui
    cookie = {"Cookie": _sign_in(url, token)}
    status, headers, _ = _get(url, "/", cookie)
    csp = headers["Content-Security-Policy"]
    assert status == 200 and "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src 'self'" in _get(url, "/nope")[1]["Content-Security-Policy"]     # the 403 page too
    status, _, body = _get(url, f"/api/runs/{run_id}", cookie)
    assert status == 200 and "<img" not in body and "\\u003cimg" in body           # escaped even inside JSON
    for method in ("POST", "PUT", "DELETE"):
        assert _get(url, "/api/overview", cookie, method=method, body=b"{}")[0] == 405
    port = urlsplit(url).port
    assert _get(url, "/", {**cookie, "Host": f"localhost:{port}"})[0] == 200
    for host in ("evil.example:80", f"evil.example:{port}", "127.0.0.1:1"):       # DNS rebinding: another name for 127.0.0.1
        for headers in ({**cookie, "Host": host}, {"Host": host}):
            status, _, body = _get(url, "/api/overview", headers)
            assert status == 421 and json.loads(body) == {"error": "unknown Host; open the URL tpuctl ui printed"}
    status, _, _ = _get(url, f"/?token={token}", {"Host": "evil.example:80"})
    assert status == 421


def test_the_token_is_printed_once_in_the_url_and_nowhere_else(isolated_env):
    with serving() as first, serving() as second:
        assert first.token != second.token                            # a new one at every start
        _get(first.url, "/?token=wrong")
        _get(first.url, f"/api/overview?token={first.token}")
        _get(first.url, "/api/overview", {"Authorization": f"token {first.token}"})
    out, err = first.proc.stdout.read(), first.proc.stderr.read()
    assert first.token not in out and first.token not in err          # past the one printed line
    assert "read-only" in err


def test_a_token_from_the_environment_must_be_long_and_is_the_one_printed(isolated_env):
    r = run_tpuctl_process("ui", "--port", "0", env={"TPUCTL_UI_TOKEN": "hunter2-hunter2"})
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1
    assert r.err.startswith("tpuctl: error: TPUCTL_UI_TOKEN is 15 characters long; a token must have at least 32")
    assert "hunter2" not in r.err
    r = run_tpuctl_process("ui", "--port", "0", env={"TPUCTL_UI_TOKEN": "x" * 30 + "/?&"})
    assert r.code == 2 and "characters other than letters, digits" in r.err
    fixed = "fixed-" + "k" * 40
    with serving({"TPUCTL_UI_TOKEN": fixed}) as s:
        assert s.token == fixed
        assert _get(s.url, "/api/overview", {"Authorization": f"token {fixed}"})[0] == 200


def test_a_non_loopback_address_is_refused_before_anything_listens():
    r = run_tpuctl_process("ui", "--host", "0.0.0.0")
    assert r.code == 2 and r.err.strip().startswith("tpuctl: error: --host 0.0.0.0 is not a loopback address")
    assert len(r.err.strip().splitlines()) == 1
