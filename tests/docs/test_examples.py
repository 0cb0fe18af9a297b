"""Every shell example of README.md and docs/*.md runs as written, or says why it cannot
(docs/contributing.md#the-docs-examples-are-tests). One test per block, named FILE:LINE."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import REPO, SHELL_LANGS, Block, all_blocks, holds, shell_blocks, transcript

BLOCKS = shell_blocks()
RUN = [b for b in BLOCKS if not b.skip]
# What a reader has in the repository root, where the docs say to run them: nothing else is made
# for an example (no bucket, no BERT checkpoint); a block makes what it uses, or a `given:` line
# above it says what the reader is assumed to have (docs/contributing.md).
CLONE = ("templates", "tests")
# Why a block may be left out: it needs Google Cloud, or something slow that another test runs.
SKIP_REASON = re.compile(r"^(real GCP|long|not a command): \S.{10,}")


@pytest.fixture
def workdir(tmp_path) -> tuple[Path, dict]:
    """A scratch directory laid out as a clone's root (its templates/ and tests/), and the
    environment the examples run in: the local provider and a fresh, empty TPUCTL_HOME."""
    work = tmp_path / "work"
    work.mkdir()
    for name in CLONE:
        (work / name).symlink_to(REPO / name)
    # examples/ is user code that runs get staged from: a copy, as a user's own directory
    shutil.copytree(REPO / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.update(TPUCTL_PROVIDER="local", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return work, env


def _run(script: str, work: Path, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env, check=False,
                          capture_output=True, text=True, timeout=timeout)


def _given(block: Block, work: Path, env: dict) -> None:
    for command in block.given:
        proc = _run(command, work, env)
        assert proc.returncode == 0, f"{block.where}: its set-up `{command}` failed:\n{proc.stderr[-2000:]}"


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_example_runs_as_written(block: Block, workdir, request):
    work, env = workdir
    if block.fakegcp:  # the GCP provider, against tests/fakegcp (reset for this test)
        env = {**env, **request.getfixturevalue("fakegcp").env()}
    _given(block, work, env)
    if block.lang == "console":
        for command, expected in transcript(block.text):
            proc = _run(command, work, env, timeout=120)
            got = "\n".join(line.rstrip() for line in (proc.stdout + proc.stderr).strip().splitlines())
            assert got == expected, f"{block.where}: `$ {command}` printed\n{got}\ninstead of\n{expected}"
        return
    proc = _run(block.text, work, env)
    assert proc.returncode == 0, (f"{block.where}: the example stopped with exit {proc.returncode}\n"
                                  f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    for text in block.expect:
        assert holds(proc.stdout + proc.stderr, text), (f"{block.where}: the output lacks {text!r}\n"
                                                   f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")


def test_every_fence_says_what_it_holds():
    """An unmarked fence could hide a shell example from the collector: each needs an info string."""
    bare = [b.where for b in all_blocks() if not b.lang]
    assert not bare, f"fences without an info string (bash/console to run, text for synopses): {bare}"


def test_every_skipped_example_says_why():
    bad = [f"{b.where}: {b.skip!r}" for b in BLOCKS if b.skip and not SKIP_REASON.match(b.skip)]
    assert not bad, "a skipped example needs `real GCP: <why>` or `long: <what runs it instead>`: " + "; ".join(bad)


def test_every_doc_opens_with_a_summary():
    """docs/*.md: the title, then a paragraph that says what the doc covers (not a code block)."""
    bad = []
    for path in sorted((REPO / "docs").glob("*.md")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        opening = lines[1] if len(lines) > 1 else ""
        if not lines[0].startswith("# ") or opening.startswith(("```", "~~~", "<!--", "|", "#", "-", "    ")):
            bad.append(path.name)
    assert not bad, f"docs that do not open with a summary paragraph under their title: {bad}"


def test_the_collector_sees_the_readme_tour():
    """The collector itself: the README's tour is a block it runs, and a console transcript parses."""
    tour = [b for b in RUN if b.path.name == "README.md" and "tpuctl simulate preempt" in b.text]
    assert tour and tour[0].lang in SHELL_LANGS
    assert any("finished" in text for text in tour[0].expect)
    # the tour preempts at --at-step 20 to show a run resumed from its checkpoint, not from step 0
    resumed = [text for text in tour[0].expect if "resumed" in text]
    assert resumed and all(holds("12:00:01 resumed preemptions=1 seconds_lost=9.1 step=20 steps_lost=0", text)
                           for text in resumed), resumed
    assert not any(holds("12:00:01 resumed preemptions=1 seconds_lost=9.1 step=0 steps_lost=0", text)
                   for text in resumed), resumed
    assert transcript("$ tpuctl a \\\n    b\nout 1\nout 2\n$ tpuctl c\n") == [("tpuctl a b", "out 1\nout 2"),
                                                                          ("tpuctl c", "")]
