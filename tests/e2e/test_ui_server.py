"""`tpuctl ui`'s server over HTTP, as anything on this machine can reach it: read-only, a strict
Content-Security-Policy, escaped JSON, its own Host name only, loopback only. The page itself is
tested in Chromium (tests/e2e/test_ui_browser.py, `make test-browser`)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.conftest import run_tpuctl_process
from tests.e2e.ui_records import records, ui  # noqa: F401 - fixtures


def test_the_server_is_read_only_strict_and_answers_only_its_own_name(ui):  # noqa: F811 - the fixture imported above
    url, (run_id, _sweep_id, _store) = ui
    with urllib.request.urlopen(url) as resp:
        csp = resp.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    with urllib.request.urlopen(f"{url}api/runs/{run_id}") as resp:
        body = resp.read().decode()
    assert "<img" not in body and "\\u003cimg" in body            # escaped even inside JSON
    for method in ("POST", "PUT", "DELETE"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(f"{url}api/overview", data=b"{}", method=method))
        assert err.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as err:             # DNS rebinding: another name for 127.0.0.1
        urllib.request.urlopen(urllib.request.Request(url, headers={"Host": "evil.example:80"}))
    assert err.value.code == 421


def test_a_non_loopback_address_is_refused_before_anything_listens():
    r = run_tpuctl_process("ui", "--host", "0.0.0.0")
    assert r.code == 2 and r.err.strip().startswith("tpuctl: error: --host 0.0.0.0 is not a loopback address")
    assert len(r.err.strip().splitlines()) == 1
