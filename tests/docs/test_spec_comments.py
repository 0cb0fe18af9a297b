"""The ``tpuctl`` lines in the comments of the shipped job specs (examples/, templates/) are what a
user copies from the file they are about to run: every option they use must be one the command
has today, not a hidden, deprecated name (examples/mlp/spec.yaml said ``--code`` after it was
renamed ``--workdir``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest

from provision.cli import cli

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted([*REPO.glob("examples/**/*.yaml"), *REPO.glob("templates/*.yaml")])


def _lines(path: Path) -> list[str]:
    """The ``tpuctl ...`` command lines of a spec's comments."""
    out: list[str] = []
    going = False                     # the line before ended in a backslash: this one continues it
    for line in path.read_text().splitlines():
        if not line.strip().startswith("#"):
            going = False
            continue
        text = line.strip().lstrip("#").strip()
        if going:
            out[-1] = out[-1].removesuffix("\\").rstrip() + " " + text
        elif text.startswith("tpuctl "):
            out.append(text)
        going = bool(out) and (going or text.startswith("tpuctl ")) and text.endswith("\\")
    return [cmd.removesuffix("\\").rstrip() for cmd in out]


def _visible_options(cmd: click.Command) -> set[str]:
    return {opt for p in cmd.params if isinstance(p, click.Option) and not p.hidden for opt in p.opts}


@pytest.mark.parametrize("path", SPECS, ids=[str(p.relative_to(REPO)) for p in SPECS])
def test_the_commands_a_spec_names_use_todays_options(path):
    for line in _lines(path):
        words = shlex.split(line)[1:]
        cmd: click.Command = cli
        while isinstance(cmd, click.Group) and words:
            # ``tpuctl sweep SPEC`` is ``tpuctl sweep start SPEC`` (the group's default)
            cmd = cmd.commands[words.pop(0)] if words[0] in cmd.commands else cmd.commands["start"]
        known = _visible_options(cmd)
        unknown = [w.split("=")[0] for w in words if w.startswith("--") and w.split("=")[0] not in known]
        assert not unknown, f"{path.relative_to(REPO)}: `{line}` uses {unknown}, not an option of this command"


def test_the_mlp_example_names_its_workdir():
    assert "tpuctl train lab --job examples/mlp/spec.yaml --workdir examples/mlp" in _lines(
        REPO / "examples" / "mlp" / "spec.yaml")
