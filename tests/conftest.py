"""Shared fixtures: every test gets its own TPUCTL_HOME, config and gcloud config directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.made_once import made_once, source_key

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.fakegcp.pytest_plugin", "tests.gcs_fixture"]

_ISOLATED_VARS = (
    "TPUCTL_PROVIDER", "TPUCTL_PROJECT", "TPUCTL_ZONE", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT",
    "CLOUDSDK_COMPUTE_ZONE", "CLOUDSDK_ACTIVE_CONFIG_NAME", "TPUCTL_TPU_API_ENDPOINT",
    "TPUCTL_COMPUTE_API_ENDPOINT", "TPUCTL_TPU_GRPC_ENDPOINT", "STORAGE_EMULATOR_HOST", "TPUCTL_CREDENTIALS",
    "GOOGLE_APPLICATION_CREDENTIALS", "TPUCTL_BILLING_API_ENDPOINT", "TPUCTL_IAM_API_ENDPOINT",
)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("tpuctl-home")
    for var in _ISOLATED_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TPUCTL_HOME", str(root / "home"))
    monkeypatch.setenv("TPUCTL_CONFIG", str(root / "config.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(root / "gcloud"))
    # The local provider's TPU goes READY quickly in tests; tests that need slower ones set it.
    monkeypatch.setenv("TPUCTL_LOCAL_TPU_CREATE_SECONDS", "0.2")
    monkeypatch.setenv("TPUCTL_LOCAL_VM_CREATE_SECONDS", "0.1")
    monkeypatch.setenv("TPUCTL_LOCAL_DELETE_SECONDS", "0.1")
    yield root


@pytest.fixture(autouse=True)
def no_leftover_agents(isolated_env):
    """`tpuctl up --autodown` on the local provider starts a detached agent: stop any a test left."""
    yield
    from provision.host.autodown import stop_agents

    stop_agents(isolated_env / "home")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def tpuctl(capsys):
    """Run tpuctl in this process (fast); returns exit code, stdout and stderr."""
    from provision.cli import main

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


# The console script pip installed next to this interpreter: what a user runs (it calls main() with
# no argv, a path that `main(argv)` in process never takes).
TPUCTL_BIN = Path(sys.executable).with_name("tpuctl")


def run_tpuctl_process(*args: str, env: dict | None = None, timeout: float = 120, **kw) -> Result:
    """Run the installed ``tpuctl`` as a separate process, as a user or a second concurrent tpuctl
    would."""
    assert TPUCTL_BIN.exists(), f"{TPUCTL_BIN} is missing: install tpuctl (make venv) before testing"
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run([str(TPUCTL_BIN), *args], check=False, capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=kw.get("cwd", REPO))
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def tpuctl_process():
    return run_tpuctl_process


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A tiny original-format BERT directory (2 layers) with a corpus and a learnable TSV task."""
    def make(work: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # as a newcomer runs it
        proc = subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(work / "bert")], check=True,
                              capture_output=True, cwd=REPO, env=env)
        # what the newcomer's terminal got (tests/jobs/test_quiet.py reads it)
        (work / "tiny.stderr").write_bytes(proc.stderr)

    # made once per change of the job side (tests/made_once.py), copied for this session
    made = made_once("tiny-bert", source_key([REPO / "jobs"]), make, tmp_path_factory.mktemp("tiny") / "made")
    return made / "bert"


def pytest_terminal_summary(terminalreporter):
    """Report the chaos scenarios (tests/chaos) so a reader of the run sees how many ran and passed."""
    stats = terminalreporter.stats
    passed = [r for r in stats.get("passed", []) if r.nodeid.startswith("tests/chaos/") and r.when == "call"]
    failed = [r for r in stats.get("failed", []) if r.nodeid.startswith("tests/chaos/")]
    if passed or failed:
        terminalreporter.write_line(f"chaos scenarios: {len(passed) + len(failed)} ran, {len(passed)} passed "
                                    f"(python -m tests.chaos --seeds 0-99 runs more)")


@pytest.fixture(autouse=True)
def signal_handlers_restored():
    """Code run in-process must give back the signal handlers it borrowed (a leaked SIGINT handler
    swallows Ctrl-C for everything after it)."""
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    after = {s: signal.getsignal(s) for s in before}
    changed = {signal.Signals(s).name: after[s] for s in before if after[s] is not before[s]}
    for s, handler in before.items():
        if handler is not None:
            signal.signal(s, handler)
    assert not changed, f"this test left signal handlers changed: {changed}"
