"""What only Compute Engine sells, asked of the local provider (which emulates the Cloud TPU API
only): one line that says so and names the fix, exit 2, nothing created. Through the installed
``tpuctl``, as a user runs it."""

from __future__ import annotations

import pytest

from provision.basics.config import home


@pytest.mark.parametrize(("args", "words"), [
    (("-a", "tpu7x-8"), "tpu7x-8 is sold only through Compute Engine, which the local provider does not emulate"),
    (("-a", "v6e-8", "--api", "compute"), "--api compute asks for Compute Engine, which the local provider"),
    (("-a", "v6e-8", "--flex-start", "2h"), "flex-start can be had only on Compute Engine"),
    (("-a", "v6e-8", "--reservation", "r1"), "reservation can be had only on Compute Engine"),
])
def test_compute_engine_only_asks_are_refused_locally_in_one_line(tpuctl_process, args, words):
    r = tpuctl_process("up", "ce", "--provider", "local", *args)
    assert r.code == 2, (r.out, r.err)
    lines = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.err
    assert not (home() / "local").exists() or not any((home() / "local").rglob("*.json"))
