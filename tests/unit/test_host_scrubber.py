"""The host's scrubber (templates/host-startup.sh) removes what tpuctl's own redaction removes.

Before tpuctl is installed on a host, the startup script itself sends log lines out: into the
bootstrap status in the bucket, and onto the serial console when it fails. Its scrubber lagged
behind provision/basics/redact.py (a Slack webhook, a GitHub or Slack token, an AWS key id went out
as they were). Its pattern list is now written from redact.py's; these tests fail when the two
differ, and run the host's scrubber, as the script writes it, on redact.py's own test corpus."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from provision.basics import redact
from tests.unit.test_redact import test_ordinary_messages_are_left_alone as _ordinary
from tests.unit.test_redact import test_secrets_are_scrubbed_in_every_form as _every_form

SCRIPT = Path(__file__).resolve().parents[2] / "templates" / "host-startup.sh"


def _corpus(test) -> list:
    return list(next(m for m in test.pytestmark if m.name == "parametrize").args[1])


def _scrub_py() -> str:
    """scrub.py as the startup script writes it on the host."""
    found = re.search(r"cat >\"\$WORK/scrub\.py\" <<'PY'\n(.*?)\nPY\n", SCRIPT.read_text(), re.DOTALL)
    assert found, "templates/host-startup.sh no longer writes $WORK/scrub.py"
    return found.group(1)


def test_the_hosts_patterns_are_tpuctls_patterns():
    assert redact.host_patterns() in SCRIPT.read_text(), (
        "templates/host-startup.sh's SECRETS differ from provision/basics/redact.py's patterns: "
        "run .venv/bin/python -m provision.basics.redact")


def test_the_host_scrubs_every_secret_tpuctl_scrubs_and_leaves_ordinary_lines(tmp_path):
    secrets = _corpus(_every_form)
    ordinary = _corpus(_ordinary)
    (tmp_path / "scrub.py").write_text(_scrub_py())
    texts = [text for text, _ in secrets] + ordinary
    driver = ("import json, runpy, sys\ntail = runpy.run_path(sys.argv[1])['tail']\n"
              "print(json.dumps([tail(x.encode(), 40) for x in json.load(sys.stdin)]))\n")
    got = json.loads(subprocess.run([sys.executable, "-c", driver, str(tmp_path / "scrub.py")], input=json.dumps(texts),
                                    capture_output=True, text=True, check=True, timeout=60).stdout)
    tails = dict(zip(texts, got))
    for text, secret in secrets:
        assert secret not in "\n".join(tails[text]), tails[text]
    for text in ordinary:
        assert tails[text] == [text]
    # the host's lines are tpuctl's, text by text
    assert got == [redact._redact_with(text, []).splitlines() for text in texts]
