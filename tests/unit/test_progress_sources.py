"""A ``job: command`` program's progress from its output lines (``progress_pattern:``) and its
TensorBoard event files: the spec check, the matching, the log tail, the event-file reader on
damaged files, and how both fold into ``progress.json`` (the TensorFlow-written files are
tests/jobs/test_tbevents_tf.py's)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs import spec as jobspec
from jobs.command import patterns
from provision.host import tbevents
from provision.host.progress_sources import OutputLines, open_sources
from provision.runs import reports

NANOGPT = r"iter (?P<step>\d+): loss (?P<loss>[\d.]+), time (?P<ms>[\d.]+)ms, mfu (?P<mfu>-?[\d.]+)%"


def _spec(**extra) -> dict:
    return {"job": "command", "command": ["python", "train.py"], "model_dir": "/tmp/m", **extra}


@pytest.mark.parametrize(("pattern", "words"), [
    ("iter (\\d+", "is not a regular expression"),
    ("iter (?P<it>\\d+)", "has no named group step: write (?P<step>\\d+)"),
    ("(?P<step>\\d+)(x\\d+)+", "repeats a group that itself repeats"),
    ("(?P<step>\\d+)(?:ab|a)*", "repeats a group that itself repeats or has alternatives"),
    ("(?P<step>\\d+)" + "x" * 600, "keep it to 500"),
    (["not", "a", "string"], "must be a regular expression"),
])
def test_a_pattern_that_cannot_work_is_refused_in_one_line_that_names_the_fix(pattern, words):
    with pytest.raises(jobspec.SpecError) as exc:
        jobspec.from_dict(_spec(progress_pattern=pattern), source="spec.yaml")
    text = str(exc.value)
    assert words in text and "\n" not in text and "progress_pattern" in text


def test_a_good_pattern_passes_and_its_metric_groups_are_what_a_sweep_may_optimise():
    checked = jobspec.from_dict(_spec(progress_pattern=NANOGPT), source="spec.yaml")
    assert checked.progress_pattern == NANOGPT
    assert checked.reported_metrics() == ("loss", "ms", "mfu")


def test_nanogpts_line_is_a_progress_line_and_other_lines_are_not():
    compiled = patterns.compile_pattern(NANOGPT)
    assert patterns.match(compiled, "iter 100: loss 2.3456, time 12.34ms, mfu 1.23%") == \
        {"step": 100, "loss": 2.3456, "metrics": {"ms": 12.34, "mfu": 1.23}}
    assert patterns.match(compiled, "step 100: train loss 2.3, val loss 2.4") is None
    assert patterns.match(compiled, "iter 100: loss 2.3456, time 12.34ms, mfu 1.23%" + " " * 2000) is None
    named = patterns.compile_pattern(r"(?P<step>\d+)/(?P<num_train_steps>\d+) ckpt (?P<checkpoint_step>\d+)")
    assert patterns.match(named, "120/1000 ckpt 100") == {"step": 120, "num_train_steps": 1000, "checkpoint_step": 100}


@given(step=st.integers(0, 10**12), loss=st.floats(0, 1e6, allow_nan=False), junk=st.text(max_size=200))
def test_any_line_the_program_prints_either_reports_its_step_and_loss_or_nothing(step, loss, junk):
    compiled = patterns.compile_pattern(NANOGPT)
    line = f"iter {step}: loss {loss:.4f}, time 1.00ms, mfu 2.50%"
    assert patterns.match(compiled, line) == {"step": step, "loss": float(f"{loss:.4f}"),
                                              "metrics": {"ms": 1.0, "mfu": 2.5}}
    got = patterns.match(compiled, junk)
    assert got is None or (isinstance(got["step"], int) and got["step"] >= 0)


def test_the_log_is_read_as_it_grows_whole_lines_only_without_tpuctls_own_lines(tmp_path):
    log = tmp_path / "attempt-1-0.log"
    log.write_bytes(b"[tpuctl] attempt 1 of run r: iter 9: loss 9.0, time 1ms, mfu 1%\n"
                    b"iter 1: loss 5.0, time 1.0ms, mfu 1.0%\niter 2: loss 4.")
    lines = OutputLines(log, patterns.compile_pattern(NANOGPT))
    assert [i["step"] for i in lines.read()] == [1]
    with open(log, "ab") as fh:      # the rest of line 2, a progress bar redrawn with \r, an overlong line
        fh.write(b"5, time 1.0ms, mfu 1.0%\r 50%|#####\riter 3: loss 3.0, time 1.0ms, mfu 1.0%\n"
                 + b"x" * 5000 + b"iter 4: loss 2.0, time 1.0ms, mfu 1.0%\niter 5: loss 1.0, time 1.0ms, mfu 1.0%")
    assert [(i["step"], i["loss"]) for i in lines.read()] == [(2, 4.5), (3, 3.0)]
    assert [i["step"] for i in lines.read(final=True)] == [5]      # the last line, unended: the program exited


def test_pattern_matches_fold_into_progress_and_a_resume_names_a_step_one_interval_back():
    first = reports.start(None, run_id="r", num_train_steps=100, now=0.0, pid=1, host="h")
    assert first["progress_reported"] is False
    compiled = patterns.compile_pattern(NANOGPT)
    lines = [patterns.match(compiled, f"iter {s}: loss {1 / s:.4f}, time 1.0ms, mfu 1.0%") for s in (10, 20, 30)]
    rec = reports.fold_items(first, lines, now=5.0)
    assert (rec["step"], rec["loss"], rec["progress_reported"], rec["report_every_steps"]) == (30, 0.0333, True, 10)
    # the next attempt restored a checkpoint the program never named: its first line says iter 30
    again = reports.start(reports.public(reports.end(rec, 42, now=6.0)), run_id="r", num_train_steps=100, now=7.0,
                          pid=2, host="h")
    assert again["progress_reported"] is True
    resumed = reports.fold_items(again, [patterns.match(compiled, "iter 30: loss 0.0333, time 1.0ms, mfu 1.0%")], 8.0)
    assert resumed["resumed_from_step"] == 20 and resumed["first_step_time"] == 8.0
    # a checkpoint the program did name is the step it resumed from
    named = reports.fold_items({**again, "checkpoint_step": 30}, [{"step": 30}], 8.0)
    assert named["resumed_from_step"] == 30 and named["first_step_time"] is None


# ---- event files ---------------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = b""
    n &= (1 << 64) - 1
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    key = _varint(number << 3 | wire)
    if wire == 0:
        return key + _varint(payload)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", tbevents.masked_crc(length)) + data
            + struct.pack("<I", tbevents.masked_crc(data)))


def _event(step: int, **simple: float) -> bytes:
    values = b"".join(_field(1, 2, _field(1, 2, tag.replace("__", "/").encode()) + _field(2, 5, struct.pack("<f", v)))
                      for tag, v in simple.items())
    return _record(_field(1, 1, struct.pack("<d", 1.5)) + _field(2, 0, step) + _field(5, 2, values))


def test_event_files_are_read_as_they_grow_and_a_record_cut_off_is_read_whole_next_time(tmp_path):
    path = tmp_path / "events.out.tfevents.1.host"
    one, two = _event(1, loss=0.5, accuracy=0.25), _event(2, train__loss=0.25)
    path.write_bytes(one + two[:10])
    files = tbevents.EventFiles([tmp_path])
    assert files.read() == [{"step": 1, "loss": 0.5, "metrics": {"accuracy": 0.25}, "_t": 1.5}]   # its wall_time
    with open(path, "ab") as fh:
        fh.write(two[10:])
    assert files.read() == [{"step": 2, "loss": 0.25, "_t": 1.5}]
    assert files.read() == []


def test_damaged_records_are_passed_over_and_a_broken_file_is_read_no_further(tmp_path):
    bad_data = bytearray(_event(2, loss=9.0))
    bad_data[-6] ^= 0xFF                                 # the data fails its checksum: that record only
    (tmp_path / "a.tfevents.1").write_bytes(_event(1, loss=1.0) + bytes(bad_data) + _event(3, loss=3.0))
    bad_length = bytearray(_event(5, loss=5.0))
    bad_length[0] ^= 0xFF                                # a length that fails: nothing after it is trusted
    (tmp_path / "b.tfevents.2").write_bytes(_event(4, loss=4.0) + bytes(bad_length) + _event(6, loss=6.0))
    files = tbevents.EventFiles([tmp_path])
    assert [i["step"] for i in files.read()] == [1, 3, 4]
    assert len(files.problems) == 1 and "b.tfevents.2" in files.problems[0]
    assert files.read() == []


def test_a_huge_record_is_skipped_unread_and_garbage_is_no_progress(tmp_path):
    big = _record(b"\x00" * (tbevents.MAX_RECORD + 1))
    (tmp_path / "events.out.tfevents.9").write_bytes(big + _event(7, loss=0.75))
    (tmp_path / "x.tfevents.garbage").write_bytes(b"\xff" * 64)
    files = tbevents.EventFiles([tmp_path])
    assert files.read() == [{"step": 7, "loss": 0.75, "_t": 1.5}]


def test_an_evaluations_loss_is_a_metric_and_a_new_attempt_reads_only_new_events(tmp_path):
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "events.out.tfevents.1").write_bytes(_event(10, loss=0.875))
    (tmp_path / "events.out.tfevents.1").write_bytes(_event(10, loss=0.5, eval__loss=0.75))
    assert sorted(tbevents.EventFiles([tmp_path]).read(), key=str) == [
        {"step": 10, "loss": 0.5, "metrics": {"eval/loss": 0.75}, "_t": 1.5},
        {"step": 10, "metrics": {"validation/loss": 0.875}, "_t": 1.5}]
    sources = open_sources(pattern=None, log_path=None, event_roots=[tmp_path])
    with open(tmp_path / "events.out.tfevents.1", "ab") as fh:
        fh.write(_event(11, loss=0.25))
    assert sources.read() == [{"step": 11, "loss": 0.25, "_t": 1.5}]


@given(st.binary(max_size=400), st.integers(0, 400))
def test_the_reader_never_fails_on_any_bytes(tmp_path_factory, data, cut):
    root = tmp_path_factory.mktemp("ev")
    path = Path(root) / "events.out.tfevents.0"
    path.write_bytes(_event(1, loss=1.0)[:cut] + data)
    files = tbevents.EventFiles([Path(root)])
    for item in files.read() + files.read():
        assert isinstance(item["step"], int)
