"""The test-input cache (tests/made_once.py): made once across processes, remade when a source
changes, private, and handed out as copies."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.made_once import REPO, made_once, source_key

# A worker process: asks for the entry and records each time it had to make it.
WORKER = """
import sys, time
from pathlib import Path
from tests.made_once import made_once
log = Path(sys.argv[1])
def make(work):
    with open(log, "a") as f:
        f.write("made\\n")
    time.sleep(0.5)                     # long enough for the other worker to be waiting
    (work / "model.txt").write_text(sys.argv[2])
out = made_once("thing", sys.argv[2], make, Path(sys.argv[3]))
print((out / "model.txt").read_text())
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "tpuctl-tests"


def test_workers_asking_at_once_make_it_once_and_each_gets_a_copy(tmp_path, cache):
    log = tmp_path / "made.log"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(log), "k1", str(tmp_path / f"out{i}")],
                              cwd=REPO, stdout=subprocess.PIPE, text=True, env=os.environ) for i in range(3)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outs == ["k1\n"] * 3
    assert log.read_text() == "made\n"
    (tmp_path / "out0" / "model.txt").write_text("changed by a test")
    again = made_once("thing", "k1", lambda work: pytest.fail("made again"), tmp_path / "out3")
    assert (again / "model.txt").read_text() == "k1"
    assert cache.stat().st_mode & 0o777 == 0o700


def test_a_changed_source_or_spec_is_a_new_key(tmp_path):
    (tmp_path / "job.py").write_text("STEPS = 1\n")
    (tmp_path / "notes.txt").write_text("not source")
    first = source_key([tmp_path], "spec: a")
    assert first == source_key([tmp_path], "spec: a")
    assert first != source_key([tmp_path], "spec: b")
    (tmp_path / "notes.txt").write_text("still not source")
    assert first == source_key([tmp_path], "spec: a")
    (tmp_path / "job.py").write_text("STEPS = 2\n")
    assert first != source_key([tmp_path], "spec: a")


def test_a_cache_others_can_write_to_is_refused(cache):
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    with pytest.raises(RuntimeError, match="others cannot write to"):
        made_once("thing", "k", lambda work: None, cache.parent / "out")
