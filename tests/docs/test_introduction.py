"""What introduces tpuctl says what it is now: it rents Cloud TPUs for any training program (the
built-in BERT jobs are one kind of job among several), not "Cloud TPUs for BERT training". A
newcomer reads three places first: the README's opening lines, ``tpuctl --help``'s first line
and the package's description (pip, PyPI). And the README's "Measured" table stays a summary a
reader can check: one figure per row, with the date it was measured and the command that
measures it again; the history lives in docs/contributing.md."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_tpuctl_process
from tests.docs import REPO

TPUS = re.compile(r"\bTPUs?\b")
# a program of one's own, or training of any kind
ANY_TRAINING = re.compile(r"\bany\b[^.;:]{0,30}\b(?:program|training)|\bprograms?\b|\btraining, whatever it is\b",
                          re.IGNORECASE)
BENCHMARKS = {p.stem.removeprefix("bench_") for p in (REPO / "tests" / "benchmarks").glob("bench_*.py")}


def readme_opening() -> str:
    """The README's first three lines of prose, under its title."""
    lines = [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines[0] == "# tpuctl", lines[0]
    return " ".join(lines[1:4])


def help_first_line() -> str:
    """The first line of ``tpuctl --help`` after its usage line, from the installed entry point."""
    r = run_tpuctl_process("--help")
    assert r.code == 0, r.err
    return next(line.strip() for line in r.out.splitlines()[1:] if line.strip())


def description() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["description"]


@pytest.mark.parametrize("where,read", [("README.md's first three lines", readme_opening),
                                        ("tpuctl --help's first line", help_first_line),
                                        ("pyproject.toml's description", description)],
                         ids=["readme", "help", "pyproject"])
def test_tpuctl_is_introduced_as_renting_tpus_for_any_training(where, read):
    text = read()
    assert TPUS.search(text), f"{where} does not say tpuctl rents TPUs: {text!r}"
    assert ANY_TRAINING.search(text), (
        f"{where} introduces tpuctl as a tool for one kind of training; say it runs any training "
        f"program: {text!r}")


def test_bert_only_wording_is_caught():
    assert not ANY_TRAINING.search("Provision preemptible Cloud TPUs for BERT training, keep runs alive")
    assert ANY_TRAINING.search("Rent Cloud TPUs for any training program and keep the bill honest.")


def measured_rows() -> list[dict[str, str]]:
    """The README's "Measured" table, one dict per row keyed by its header."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Measured\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in table[2:]]


def test_each_measured_row_has_one_figure_its_date_and_its_command():
    rows = measured_rows()
    assert len(rows) >= 5 and set(rows[0]) == {"what", "measured", "on", "reproduce"}, rows[0]
    bad = []
    for row in rows:
        figures = re.findall(r"\d+(?:\.\d+)?", row["measured"])
        command = re.fullmatch(r"`python -m tests\.benchmarks (\w+)`", row["reproduce"])
        if len(figures) != 1:
            bad.append(f"{row['what']}: {row['measured']!r} is not one figure (the rest goes to "
                       "docs/contributing.md's history)")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["on"]):
            bad.append(f"{row['what']}: {row['on']!r} is not the date it was measured (YYYY-MM-DD)")
        if not command or command.group(1) not in BENCHMARKS:
            bad.append(f"{row['what']}: {row['reproduce']!r} is not `python -m tests.benchmarks NAME` of "
                       f"one of {sorted(BENCHMARKS)}")
    assert not bad, "README.md's Measured table:\n" + "\n".join(bad)
