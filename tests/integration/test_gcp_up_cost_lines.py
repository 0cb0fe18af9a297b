"""Lines ``up`` and ``cost`` print that must say only what is there, once.

The installed ``tpuctl`` against the fake cloud.
"""

from __future__ import annotations

import re

from tests.conftest import run_tpuctl_process

ACCOUNT_NOTE = ("will run as the Compute Engine default service account, which is often a project Editor; pass "
                "--service-account with an account that has only the roles in docs/reliability.md")


def test_up_name_alone_on_a_cluster_without_a_host_vm_names_only_its_tpu_vm_in_the_account_note(fakegcp_env, tpuctl):
    """``up NAME`` makes the cluster as its up made it (here with --no-vm), so the note about the
    account its machines run as names the TPU VM alone: there is no host VM to run as anything."""
    assert tpuctl("up", "acct", "--zone", "us-central1-b", "--no-vm").code == 0
    r = run_tpuctl_process("up", "acct")
    assert r.code == 0, r.err
    notes = [ln for ln in r.err.splitlines() if ACCOUNT_NOTE in ln]
    assert notes == [f"note: the TPU VM {ACCOUNT_NOTE}"], r.err


def test_cost_lists_one_price_row_per_type_and_region(fakegcp_env, tpuctl):
    """Two v6e-8 clusters in two zones of us-east5 (one on Compute Engine, one on the Cloud TPU
    API) are priced from the same region's row: ``cost`` listed it twice."""
    fakegcp_env.set_latencies(vm_create=0.1, vm_delete=0.05, tpu_create=0.15, tpu_delete=0.1)
    assert tpuctl("up", "a", "--zone", "us-east5-a", "-a", "v6e-8", "--no-vm", "--spot").code == 0
    assert tpuctl("up", "b", "--zone", "us-east5-b", "-a", "v6e-8", "--no-vm", "--spot").code == 0
    r = run_tpuctl_process("cost")
    assert r.code == 0, r.err
    rows = [re.split(r"\s{2,}", ln.strip())[:4] for ln in r.out.splitlines() if ln.startswith("v6e-8 ")]
    assert rows == [["v6e-8", "us-east5", "21.60", "9.72"]], r.out
