"""`tpuctl simulate preempt` without `--grace` gives a Spot VM's notice: 30 s between the notice
and the power-off, as Compute Engine gives a Spot VM's guest (the ACPI soft-off, then 30 s). On
the local provider the power-off comes as soon as no job process is left, so with no job running
the rehearsal is over at once and still says which notice it gave. Through the installed tpuctl.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_tpuctl_process

pytestmark = [pytest.mark.xdist_group("command-e2e")]


def test_the_default_notice_is_a_spot_vms_30_seconds():
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    r = run_tpuctl_process("simulate", "preempt", "lab", "--json")
    assert r.code == 0, r.err
    assert (r.json()["notice_s"], r.json()["outcome"]) == (30, "preempted"), r.out
    assert run_tpuctl_process("up", "lab").code == 0                 # recreated, then rehearsed in words
    said = run_tpuctl_process("simulate", "preempt", "lab")
    assert said.code == 0, said.err
    assert ("TPU lab in us-central1-b: preemption notice given; its job gets SIGTERM and has 30 s to save before "
            "the power-off") in said.out.splitlines(), said.out
    assert "default: the provider's, 30 s for a Spot VM" in " ".join(
        run_tpuctl_process("simulate", "preempt", "--help").out.split())
