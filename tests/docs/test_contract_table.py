"""The environment a ``job: command`` program is given is documented once, in docs/own-code.md's
contract table, and that table is what the code gives (``jobs.command.CONTRACT``): a variable the
program gets but the table lacks is one a user cannot find, and one the table names but the
program never gets is a program that fails on its first attempt."""

from __future__ import annotations

import re

from jobs.command import CONTRACT
from tests.docs import REPO

OWN_CODE = REPO / "docs" / "own-code.md"


def contract_table() -> dict[str, str]:
    """docs/own-code.md's "The contract" table: variable -> what it holds."""
    section = OWN_CODE.read_text(encoding="utf-8").split("\n### The contract\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    table = {}
    for row in rows:
        name, what = (cell.strip() for cell in row.strip("|").split("|", 1))
        table[name.strip("`")] = what
    return table


def test_the_contract_table_names_what_every_program_is_given():
    table = contract_table()
    assert set(table) == set(CONTRACT), (
        f"docs/own-code.md's contract table and jobs.command.CONTRACT differ: only in the table "
        f"{sorted(set(table) - set(CONTRACT))}, only in the code {sorted(set(CONTRACT) - set(table))}")


def test_the_attempt_counts_from_zero_in_the_table():
    """The agent sets TPUCTL_ATTEMPT to the attempt's number less one, for every kind of job."""
    assert re.match(r"0 for the first attempt, then 1, 2", contract_table()["TPUCTL_ATTEMPT"])


def test_the_contract_is_documented_once():
    """docs/jobs.md links to the table rather than describing TPUCTL_RUN and TPUCTL_ATTEMPT again."""
    jobs = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    assert "own-code.md#the-contract" in jobs
    assert "(0 for the first attempt)" not in jobs
