"""One rule for names that match nothing: a cluster, run or sweep name typed on the command line
that does not exist is bad input, exit 2 with one line naming where the names are listed, before
anything is created (docs/cli.md). Exit 1 stays for what the cloud or the job did.

Before, ``status``, ``down``, ``logs``, ``cost``, ``train`` and ``simulate preempt`` exited 1 for an
unknown name and ``sweep status`` 2. Run through the installed ``tpuctl``, as a user runs it."""

from __future__ import annotations

import pytest

from tests.conftest import run_tpuctl_process

SWEEP = "sweep-20260101-000000-abcd"
LOCAL = "(provider=local project=local zone=-)"

CASES = [
    (["status", "nope"], f"no cluster named nope {LOCAL}; run tpuctl status to list clusters"),
    (["down", "nope"], "no cluster named nope; run tpuctl status to list clusters"),
    (["down", "nope", "--dry-run"], "no cluster named nope; run tpuctl status to list clusters"),
    (["logs", "nope"], ("no run or cluster 'nope' is known on this machine; pass a run id printed by tpuctl "
                       "train, or the cluster's name")),
    (["cost", "nope"], (f"no cluster or run named nope {LOCAL}; tpuctl status lists clusters; run ids are printed "
                       "by tpuctl train")),
    (["train", "nope", "--job", "templates/bert-pretrain-tiny.yaml"],
     f"no cluster named nope {LOCAL}; run tpuctl status to list clusters"),
    (["train", "nope", "--attach"], ("no run of cluster nope is known on this machine; start one with tpuctl train "
                                    "nope --job SPEC")),
    (["simulate", "preempt", "nope"], "no cluster named nope; run tpuctl status to list clusters"),
    (["sweep", "status", SWEEP], (f"sweep {SWEEP} not found in gs://tpuctl-local; check the id, or pass "
                                 "--bucket gs://B where it lives")),
    (["sweep", "stop", SWEEP], (f"sweep {SWEEP} not found in gs://tpuctl-local; check the id, or pass "
                               "--bucket gs://B where it lives")),
]


@pytest.mark.parametrize("args, line", CASES, ids=[" ".join(a[:2]) for a, _ in CASES])
def test_an_unknown_name_is_a_usage_error(monkeypatch, args, line):
    monkeypatch.setenv("TPUCTL_PROVIDER", "local")
    r = run_tpuctl_process(*args)
    assert r.code == 2, (r.code, r.err)
    errors = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert errors == [f"tpuctl: error: {line}"], r.err
