"""`tpuctl --help` and each command's help end with a one-line example (what a user copies
first), and
the examples work: every one parses against the command tree, and the cheap ones (the local
provider, --dry-run) run in order, as the installed `tpuctl`, in the docs' example fixture,
from a clean state: only the README tour's first command runs before them (the tiny BERT in
.demo/tiny, which the examples that need a BERT name)."""

from __future__ import annotations

import shlex
import subprocess

import click
import pytest

from provision.cli import cli
from tests.docs import names
from tests.docs.test_examples import workdir  # noqa: F401 - the docs' example fixture

# Examples that need what a cheap test cannot make: a run's log, a sweep, a training run.
PARSE_ONLY = {
    "tpuctl logs": "needs a run that trained (the README tour runs `tpuctl logs bert-lab --events --follow`)",
    "tpuctl sweep status": "needs a sweep that ran (tests/e2e/test_sweep_local.py)",
    "tpuctl sweep stop": "needs a running sweep",
    "tpuctl sweep resume": "needs a sweep whose controller died (tests/e2e/test_sweep_local.py)",
    "tpuctl ui": "serves until stopped (tests/e2e/test_ui_server.py and test_ui_browser.py run it)",
}
# Examples that train: run with --dry-run added, which checks the spec and every file it names
# (tests/jobs train the tiny fine-tune itself).
DRY_RUN_ADDED = {"tpuctl job", "tpuctl job run"}
# The README tour's first command: the tiny BERT the examples that need one name.
TOUR_FIRST = "python -m jobs.bert.tiny .demo/tiny"


def _commands(cmd: click.Command = cli, path: str = "tpuctl"):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            if not sub.hidden:
                yield from _commands(sub, f"{path} {name}")


COMMANDS = list(_commands())


def example(cmd: click.Command) -> str | None:
    """The line after ``Example:`` in a command's help."""
    lines = (cmd.help or "").splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Example:" and i + 1 < len(lines):
            return lines[i + 1].strip()
    return None


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_help_ends_with_an_example_that_parses(path, cmd):
    line = example(cmd)
    assert line, f"`{path} --help` has no `Example:` line"
    assert line.startswith(path.split(" ")[0] + " ") and line.split()[:len(path.split())] == path.split() or (
        isinstance(cmd, click.Group)), f"`{path} --help`: the example `{line}` is not of this command"
    assert names.check_command(line) is None, (path, names.check_command(line))
    args = shlex.split(line)[1:]
    command: click.Command = cli
    while isinstance(command, click.Group):
        if args and args[0] in command.commands:
            command, args = command.commands[args[0]], args[1:]
        else:
            command = command.commands["start"]  # `tpuctl sweep SPEC` is `tpuctl sweep start SPEC`
    command.make_context(path, list(args))  # raises on a missing argument or a bad value


def test_the_examples_run(workdir):  # noqa: F811 - the fixture imported above
    """Every example not in PARSE_ONLY, in the order of the command tree, on the local provider."""
    work, env = workdir
    subprocess.run(shlex.split(TOUR_FIRST), cwd=work, env=env, capture_output=True, timeout=120, check=True)
    ran, seen = [], set()
    for path, cmd in COMMANDS:
        line = example(cmd)
        if path in PARSE_ONLY or line in seen:
            continue
        seen.add(line)
        argv = shlex.split(line) + (["--dry-run"] if path in DRY_RUN_ADDED else [])
        proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, f"`{path} --help`'s example `{line}` exited {proc.returncode}:\n{proc.stderr[-2000:]}"
        ran.append(path)
    assert "tpuctl up" in ran and "tpuctl simulate" in ran  # its example is `tpuctl simulate preempt`
    assert "tpuctl train" in ran and "tpuctl job" in ran


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_line_in_a_help_exists(path, cmd):
    """The other `tpuctl ...` lines a help shows (the overview, cron lines) name real commands and
    options too."""
    lines = [line.strip() for line in (cmd.help or "").splitlines()]
    shown = [line[line.index("tpuctl "):] for line in lines if line.startswith(("tpuctl ", "*/"))
             and "tpuctl " in line]
    bad = {line: why for line in shown if (why := names.check_command(line.split("  (")[0]))}
    assert not bad, f"`{path} --help`: {bad}"
