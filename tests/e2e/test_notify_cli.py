"""`tpuctl notify` as a user runs it (the installed entry point): a test message that arrives, one
that cannot, bad input refused in one line before anything is written, and no secret printed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import TPUCTL_BIN, run_tpuctl_process
from tests.receivers import http_receiver

KEY = "sig-key-0f1e2d3c4b5a6978"


def _add(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([str(TPUCTL_BIN), "notify", "add", *args], input=stdin, text=True, capture_output=True,
                          timeout=60, check=False)


def test_notify_test_delivers_or_says_why_and_never_prints_the_secret():
    hook = http_receiver()
    url = f"{hook.url}/hooks/secret-path-7a6b5c4d3e2f"
    assert _add("ops", "--webhook", stdin=f"{url}\n{KEY}\n").returncode == 0
    ok = run_tpuctl_process("notify", "test", "ops", "--json")
    assert ok.code == 0, ok.err
    assert ok.json()["deliveries"] == [{"sent": True, "channel": "ops", "via": "webhook", "notice": "test",
                                        "subject": "test", "tries": 1}]
    [got] = hook.received
    assert got.json()["kind"] == "test" and got.headers["X-Tpuctl-Signature"].startswith("v1=")
    hook.close()                                   # now nothing listens: every try fails
    Path(os.environ["TPUCTL_CONFIG"]).write_text('[notify]\nretry_after = "0.1s"\nretries = 2\n')
    down = run_tpuctl_process("notify", "test", "ops")
    assert down.code == 1
    assert "ops: failed: connection refused (2 tries)" in down.out
    assert down.err.strip().splitlines()[-1] == ("tpuctl: error: 1 of 1 channel(s) could not be reached; see each "
                                                 "channel's reason above; tpuctl notify list shows where its secret is")
    listed = run_tpuctl_process("notify", "list", "--json")
    assert listed.json()["channels"] == [{"name": "ops", "kind": "webhook", "secret": "local:ops", "default": False}]
    for out in (ok.out + ok.err, down.out + down.err, listed.out):
        assert url not in out and "secret-path-7a6b5c4d3e2f" not in out and KEY not in out
    # the secret is a file only its owner reads
    secret = Path(os.environ["TPUCTL_HOME"]) / "notify" / "secrets" / "ops"
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(secret.read_text())["signing_key"] == KEY


def test_bad_input_is_one_line_exit_2_and_writes_nothing():
    home = Path(os.environ["TPUCTL_HOME"])
    cases = [
        (_add("bad", "--webhook", stdin="http://example.com/hook\n"),
         "channel bad: the URL must be https:// (http:// only to this machine)"),
        (_add("bad", stdin="https://example.com/hook\n"), "say what kind of channel"),
        (_add("Bad!", "--slack", stdin="https://example.com/hook\n"), "invalid channel name 'Bad!'"),
        (_add("bad", "--slack"), "no Slack incoming webhook URL on stdin"),
        (_add("bad", "--email", "--smtp", "smtp.example.com", "--from", "a@example.com", "--to", "b@example.com"),
         "channel bad: smtp must be HOST:PORT"),
        (_add("bad", "--slack", "--secret", "https://hooks.slack.com/services/T/B/X"),
         "channel bad: secret must be a reference, not a URL"),
    ]
    for proc, message in cases:
        assert proc.returncode == 2, (message, proc.stderr)
        assert proc.stderr.strip().startswith(f"tpuctl: error: {message}"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "example.com/hook" not in proc.stderr and "T/B/X" not in proc.stderr
    assert not (home / "notify").exists() or not any((home / "notify").rglob("*bad*"))
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml", "--notify", "nope")
    assert r.code == 2 and r.err.strip().startswith("tpuctl: error: no notification channel named nope; "), r.err
    r = run_tpuctl_process("notify", "test", "--dry-run")
    assert r.code == 2 and "no channel to test" in r.err
    # a webhook URL where a channel name goes: how to save it, and the (secret) URL not repeated
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml", "--notify",
                           "https://hooks.slack.com/services/T0/B0/secret-path-1a2b3c")
    assert r.code == 2 and r.err.strip() == (
        "tpuctl: error: --notify takes channel names, not a webhook URL; save it once as a channel: tpuctl notify "
        "add NAME --slack (it reads the URL from stdin), then --notify NAME"), r.err
