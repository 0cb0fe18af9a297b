"""What a newcomer meets: the installed ``tpuctl`` run as a subprocess with the mistakes people
make on their first day. Each one is a single line on stderr that names the fix, exit code 2, and
never a traceback (the console script calls ``main()`` without argv, a path ``main(argv)`` never
took: a NameError there once answered every one of these)."""

from __future__ import annotations

import pytest

from tests.conftest import run_tpuctl_process

# argv, a phrase the one error line must hold (the cause or the fix a person needs)
MALFORMED = [
    (["up"], "missing NAME; usage: tpuctl up [OPTIONS] NAME"),
    (["bogus"], "tpuctl has no command 'bogus'; choose one of: up, status"),
    (["statsu"], "did you mean tpuctl status?"),
    (["status", "--jsn"], "tpuctl status has no option --jsn; did you mean --json?"),
    (["up", "x", "--acelerator-type", "v2-8"], "did you mean --accelerator-type?"),
    (["stage"], "missing SRC; usage: tpuctl stage [OPTIONS] SRC DEST"),
    (["logs"], "missing RUN"),
    (["down", "--idel"], "did you mean --idle?"),
    (["down", "--idle", "--idle-for", "5", "minutes"], "write --idle-for 5m"),
    (["up", "x", "--autodown", "30", "min"], "write --autodown 30m"),
    # a bare number on a command that deletes: 30 read as seconds where minutes were meant
    (["down", "--idle", "--idle-for", "30"], ("tpuctl: error: --idle-for 30 has no unit, on a command that deletes "
     "TPUs; write --idle-for 30m for minutes or --idle-for 30s for seconds (units s, m, h, d, e.g. 1h30m)")),
    (["up", "x", "--autodown", "30"], ("tpuctl: error: --autodown 30 has no unit, on a command that deletes TPUs; "
     "write --autodown 30m for minutes or --autodown 30s for seconds (units s, m, h, d, e.g. 1h30m)")),
    (["down", "x", "--timeout", "90"], ("tpuctl: error: --timeout 90 has no unit, on a command that deletes TPUs; "
     "write --timeout 90m for minutes or --timeout 90s for seconds (units s, m, h, d, e.g. 1h30m)")),
    (["up", "x", "--accelerator-type", "v5e-8"], ("tpuctl: error: unknown accelerator type 'v5e-8'; did you mean "
                                                  "v5litepod-8? (Cloud TPU names v5e v5litepod)")),
    (["up", "x", "-a", "v6e8"], "tpuctl: error: unknown accelerator type 'v6e8'; did you mean v6e-8?"),
    (["up", "x", "--zone"], "option --zone needs a value"),
    (["status", "--provider", "aws"], "'aws' is not one of 'local', 'gcp'"),
    (["status", "a", "b"], "unexpected argument b"),
    (["simulate", "preemt", "x"], "did you mean tpuctl simulate preempt?"),
    (["train", "x"], "missing --job"),
    (["down"], "nothing to delete"),
    (["job", "run"], "missing SPEC"),
    (["cost", "--since"], "option --since needs a value; write --since VALUE"),
    (["cost", "--since", "7"], "tpuctl: error: --since '7' has no unit; write --since 7d for days or --since 7h for hours"),
    (["status", "--until"], "has no option --until"),
]


@pytest.mark.parametrize("argv,phrase", MALFORMED, ids=[" ".join(a) for a, _ in MALFORMED])
def test_a_malformed_command_line_is_one_line_and_exit_2(argv, phrase):
    r = run_tpuctl_process(*argv, timeout=60)
    assert r.code == 2, (argv, r)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tpuctl: error: "), lines
    assert phrase in lines[0], lines[0]
    assert r.out == ""


def test_a_malformed_command_with_json_still_prints_one_json_document():
    r = run_tpuctl_process("status", "--json", "--jsn", timeout=60)
    assert r.code == 2
    assert r.json() == {"ok": False, "exit_code": 2, "error": r.err.strip().removeprefix("tpuctl: error: ")}


@pytest.mark.parametrize("argv", [[], ["job"], ["simulate"]], ids=["tpuctl", "tpuctl job", "tpuctl simulate"])
def test_a_bare_command_group_prints_its_usage(argv):
    r = run_tpuctl_process(*argv, timeout=60)
    assert r.code == 0, r
    assert r.out.startswith("Usage: tpuctl")
    assert "Commands:" in r.out
    assert r.err == ""


def test_nothing_was_created_by_the_mistakes(tmp_path):
    for argv, _ in MALFORMED:
        run_tpuctl_process(*argv, timeout=60)
    r = run_tpuctl_process("status", "--json", "--provider", "local", timeout=60)
    assert r.code == 0, r
    assert r.json()["clusters"] == []


def test_the_specs_the_docs_name_are_found_outside_a_clone(tmp_path, tiny_bert):
    """`--job templates/NAME.yaml`, as every doc writes it, from a directory with no templates/
    folder (a tpuctl installed with pip has none): the spec tpuctl ships under that name."""
    r = run_tpuctl_process("job", "run", "templates/bert-finetune-tiny.yaml", "--dry-run",
                           "--set", f"bert_dir={tiny_bert}", "--set", f"train_file={tiny_bert}/train.tsv",
                           "--set", f"model_dir={tmp_path}/run", cwd=tmp_path, timeout=60)
    assert r.code == 0, r
    assert "templates/bert-finetune-tiny.yaml is valid" in r.err
    r = run_tpuctl_process("train", "lab", "--job", "templates/no-such-spec.yaml", "--provider", "local",
                           cwd=tmp_path, timeout=60)
    assert r.code == 2 and "job spec templates/no-such-spec.yaml not found" in r.err, r


def test_a_dest_that_lost_its_gs_prefix_is_asked_about(tmp_path):
    """``tpuctl stage .demo/tiny my-bucket/x`` copied silently into ./my-bucket/x."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "vocab.txt").write_text("[PAD]\n")
    r = run_tpuctl_process("stage", "tiny", "my-bucket/x", cwd=tmp_path, timeout=60)
    assert r.code == 2, r
    assert r.err.splitlines()[-1] == ("tpuctl: error: DEST my-bucket/x is a local path, and ./my-bucket does not "
                                      "exist; did you mean gs://my-bucket/x? (write ./my-bucket/x to copy into a new "
                                      "local directory)")
    assert not (tmp_path / "my-bucket").exists()
    # said as a local path, it is one
    r = run_tpuctl_process("stage", "tiny", "./my-bucket/x", cwd=tmp_path, timeout=60)
    assert r.code == 0, r
    assert (tmp_path / "my-bucket" / "x" / "vocab.txt").read_text() == "[PAD]\n"


@pytest.mark.parametrize("argv", [["--help"], ["sweep", "--help"], ["job", "--help"], ["simulate", "--help"]],
                         ids=["tpuctl", "sweep", "job", "simulate"])
def test_command_listings_say_whole_phrases_on_an_80_column_terminal(argv):
    """click cut each summary at 45 characters or the terminal's width: "Create the cluster NAME: a
    host VM and a TPU, or adopt what...". Each command now has a summary of its own that fits."""
    r = run_tpuctl_process(*argv, env={"COLUMNS": "80"}, timeout=60)
    assert r.code == 0, r.err
    listing = r.out.split("Commands:\n", 1)[1].splitlines()
    assert listing and all(line.startswith("  ") and not line.rstrip().endswith("...") for line in listing), r.out
    assert all(len(line) <= 80 for line in listing), r.out
    if argv == ["--help"]:
        assert "  up        Create a cluster (host VM + TPU), or adopt what exists" in listing


def test_sweep_help_shows_the_options_of_sweep_spec():
    """``tpuctl sweep SPEC`` is what people type, but ``tpuctl sweep --help`` listed only --help and
    the subcommands: the options were under ``tpuctl sweep start --help``."""
    r = run_tpuctl_process("sweep", "--help", timeout=60)
    assert r.code == 0, r.err
    section = r.out.split("Options of tpuctl sweep SPEC (tpuctl sweep start SPEC):\n", 1)[1].split("Commands:")[0]
    for option in ("--zone", "--accelerator-type", "--max-concurrent", "--budget-usd", "--detach", "--dry-run"):
        assert option in section, r.out
