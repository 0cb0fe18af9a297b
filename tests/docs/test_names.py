"""What the docs name exists, so a rename leaves no doc stale: paths against the tree,
`provision.x.y` and `jobs.x.y` against the modules, `make X` against the Makefile, `tpuctl CMD
--opt` against the click command tree, job spec keys against the spec dataclasses, TPUCTL_*
against the code. A failure names the file, line and name."""

from __future__ import annotations

import pytest

from tests.docs import names

MENTIONS = names.mentions()


def _by(kind):
    return [m for m in MENTIONS if m.kind == kind]


def _report(bad):
    return "names in the docs that do not exist:\n" + "\n".join(f"  {m.where}: {m.kind} {m.name!r}" + (f" ({why})" if why else "")
                                                               for m, why in bad)


def test_paths_exist():
    files = names.repo_files()
    bad = [(m, None) for m in _by("path") if not names.path_exists(m.name, files)]
    bad += [(m, "no such file or heading") for m in _by("link") if not names.link_exists(m.name)]
    assert not bad, _report(bad)


def test_modules_exist():
    bad = [(m, None) for m in _by("module") if not names.module_exists(m.name)]
    assert not bad, _report(bad)


def test_make_targets_exist():
    targets = names.make_targets()
    bad = [(m, None) for m in _by("make") if m.name not in targets]
    assert not bad, _report(bad)


def test_tpuctl_commands_and_options_exist():
    bad = [(m, why) for m in _by("command") if (why := names.check_command(m.name))]
    assert not bad, _report(bad)


def test_spec_keys_exist():
    keys = names.spec_keys()
    bad = [(m, None) for m in _by("spec-key") if m.name not in keys]
    bad += [(m, f"--set {k}") for m in _by("command") for k in names.set_keys(m.name) if k not in keys
            and " sweep" not in m.name]
    assert not bad, _report(bad)


def test_environment_variables_exist():
    known = names.env_vars_in_code()
    bad = [(m, None) for m in _by("env") if m.name not in known]
    assert not bad, _report(bad)


@pytest.mark.parametrize("text,expected", [
    ("`provision/policy.py`", ("path", False)),
    ("`provision/runs/policy.py`", ("path", True)),
    ("`tpuctl up lab --acelerator-type v2-8`", ("command", False)),
    ("`tpuctl down --idle --idle-for 30m`", ("command", True)),
    ("`provision.prices`", ("module", False)),
    ("`jobs.bert.load_encoder(bert_dir)`", ("module", True)),
    ("`TPUCTL_NO_SUCH_THING`", ("env", False)),
    ("`make tests`", ("make", False)),
])
def test_a_stale_name_is_caught(tmp_path, text, expected):
    """The checks can fail: stale names the README once carried (and typos) are reported."""
    doc = tmp_path / "x.md"
    doc.write_text(f"see {text}\n")
    kind, exists = expected
    mention = next(m for m in names.mentions([doc]) if m.kind == kind)
    assert mention.where == "x.md:1"
    ok = {"path": lambda n: names.path_exists(n, names.repo_files()), "module": names.module_exists,
          "command": lambda n: names.check_command(n) is None, "env": lambda n: n in names.env_vars_in_code(),
          "make": lambda n: n in names.make_targets()}[kind](mention.name)
    assert ok is exists, (text, mention)


def test_the_spec_key_tables_are_read():
    """docs/jobs.md's key tables are checked too (a renamed key there fails test_spec_keys_exist)."""
    keys = {m.name for m in _by("spec-key")}
    assert {"train_batch_size", "doc_stride", "classifier_dropout", "corpus_files"} <= keys


def test_a_link_to_a_missing_heading_is_caught():
    cli_md = str(names.REPO / "docs" / "cli.md")
    assert names.link_exists(cli_md + "#install") and names.link_exists(cli_md + "#tpuctl-up")
    assert not names.link_exists(cli_md + "#layout") and not names.link_exists(cli_md[:-3] + "s.md")
