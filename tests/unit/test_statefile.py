"""State files: atomic replace and locked read-modify-write across processes."""

import json
import multiprocessing
from pathlib import Path

from provision.basics import statefile


def _bump(path: str, n: int) -> None:
    for _ in range(n):
        statefile.update_json(Path(path), lambda cur: {"count": (cur or {"count": 0})["count"] + 1})


def test_concurrent_processes_lose_no_update(tmp_path):
    path = tmp_path / "counter.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_bump, args=(str(path), 50)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert json.loads(path.read_text())["count"] == 200


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "a" / "rec.json"
    statefile.write_json(path, {"x": 1})
    statefile.write_json(path, {"x": 2})
    assert statefile.read_json(path) == {"x": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["rec.json"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_delete_sentinel_removes_the_record(tmp_path):
    path = tmp_path / "rec.json"
    statefile.write_json(path, {"x": 1})
    statefile.update_json(path, lambda cur: statefile.DELETE)
    assert not path.exists() and statefile.read_json(path, "gone") == "gone"
