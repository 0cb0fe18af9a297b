"""What the e2e tests of runs on the local provider look at: this test's TPUCTL_HOME, its newest
run, that run's model directory in the local bucket, a JSON file that may be mid-write, and
`tpuctl train` started as a user starts it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.conftest import REPO, TPUCTL_BIN


def home() -> Path:
    return Path(os.environ["TPUCTL_HOME"])


def latest_run_id() -> str | None:
    runs = sorted((home() / "runs").glob("*.json")) if (home() / "runs").is_dir() else []
    return json.loads(runs[-1].read_text())["run_id"] if runs else None


def model_dir(run_id: str) -> Path:
    return home() / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "model"


def read_json(path: Path) -> dict:
    """The file's object, or {} while it is missing or half written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what, timeout: float = 90.0, proc: subprocess.Popen | None = None):
    """``what()`` once it is truthy; an AssertionError at the timeout, or when ``proc`` ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = what()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"tpuctl ended first: {proc.stderr.read()[-3000:] if proc.stderr else ''}")
        time.sleep(0.05)
    raise AssertionError("timed out")


def start_train(*args: str) -> subprocess.Popen:
    """``tpuctl train ARGS --poll 1 --json`` in the background, as a user runs it."""
    return subprocess.Popen([str(TPUCTL_BIN), "train", *args, "--poll", "1", "--json"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
