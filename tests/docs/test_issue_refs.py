"""The docs users read name no issue numbers (``tests/docs/issue_refs.py`` says why); the sources
they cite from other projects are left alone. A failure names the file, line and reference."""

from __future__ import annotations

import pytest

from tests.docs import issue_refs


def test_readme_docs_templates_and_examples_name_no_issue():
    found = issue_refs.find(issue_refs.user_docs())
    assert not found, "issue references in the docs (state the fact instead):\n" + "\n".join(
        f"  {r.where}: {r.text!r}" for r in found)


def test_docstrings_of_the_code_and_the_tests_name_no_issue():
    """A docstring says why; a tracker number in its place sends the reader elsewhere for the reason."""
    found = issue_refs.docstrings()
    assert not found, "issue references in docstrings (state the reason instead):\n" + "\n".join(
        f"  {r.where}: {r.text!r}" for r in found)


def test_the_docstrings_of_tests_are_read(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_x.py").write_text(
        '"""Fine."""\n\n\ndef test_a():\n    """Issue 43, 4: spot stocked out."""\n')
    assert [(r.where, r.text) for r in issue_refs.docstrings(tmp_path)] == [("tests/unit/test_x.py:5", "Issue 43")]


def test_the_docs_are_all_read():
    names = {p.name for p in issue_refs.user_docs()}
    assert {"README.md", "jobs.md", "reliability.md", "bert-finetune.yaml", "spec.yaml"} <= names


@pytest.mark.parametrize("line", [
    'Issue #24, still open: predictions are not exported.',
    "see issue 14 for why",
    "as issues #3 and #4 showed",
    "So by the issue's rule `local` stays the default.",
    "fixed in the last wave",
    "a cached table (#21 item 3)",
    "#26: the names",
    "merged in PR #12",
    '"""Issue 43, 12a: ``--zone us-central1-z`` said v2-8',
])
def test_an_issue_reference_is_caught(line):
    assert issue_refs.in_line(line), line


@pytest.mark.parametrize("line", [
    'the v1 wording of tensorflow/tpu#877 with the v2 field',
    "output pasted in skypilot-org/skypilot#5593), unless",
    "one that does not restore (truncated, tensorflow#61552) is renamed",
    "see https://github.com/tensorflow/tensorflow/issues/61552#issuecomment-1 for it",
    "[IP ranges](docs/cli.md#tpu-ip-ranges) and [step 1](docs/x.md#1-install)",
    "the access token `POST /token` issues; `fail: N` makes the next N grants fail",
    "## Not done here",
    "python -m jobs run SPEC   # the same, without tpuctl",
    "compute.googleapis.com/reservation-name, values: [NAME]}`` (cluster-toolkit PR #6351); on demand",
    "as tensorflow/tpu issue 877 reports",
])
def test_a_source_or_an_anchor_is_not_an_issue_reference(line):
    assert issue_refs.in_line(line) == [], line
