"""The local rehearsal refuses what Google refuses: a type in a zone that does not offer it
(``v4-8`` in us-central1-b), a zone where no TPU is offered (``europe-west9-z``), with the very
line ``up`` prints against the fake cloud, which serves the same bundled zone table
(provision/catalog/zones.py). Before, the local provider offered every type in every zone, so the
rehearsal passed and the real ``up`` failed. Where the table has a zone only from earlier editions
of Google's list, the rehearsal says Google Cloud may refuse what it accepted."""

from __future__ import annotations

import pytest

from tests.conftest import run_tpuctl_process

REFUSED = [
    (["--zone", "us-central1-b", "-a", "v4-8"],
     ("tpuctl: error: v4-8 is not offered in us-central1-b; pick a zone that offers it (gcloud compute tpus "
     "accelerator-types list --zone ZONE), e.g. --zone us-central2-b")),
    (["--zone", "europe-west9-z"],
     ("tpuctl: error: v2-8 is not offered in europe-west9-z; pick a zone that offers it (gcloud compute tpus "
     "accelerator-types list --zone ZONE), e.g. --zone us-central1-b")),
]


def _error(r) -> str:
    assert r.code == 2, (r.code, r.err)
    [line] = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    return line


@pytest.mark.parametrize("args, line", REFUSED, ids=["v4-8 in us-central1-b", "europe-west9-z"])
def test_the_rehearsal_refuses_what_google_refuses_in_the_same_words(fakegcp_env, monkeypatch, args, line):
    gcp = run_tpuctl_process("up", "lab", *args)
    assert _error(gcp) == line
    assert not fakegcp_env.call_counts().get("tpu.v2.nodes.create")
    monkeypatch.setenv("TPUCTL_PROVIDER", "local")
    local = run_tpuctl_process("up", "lab", *args)
    assert _error(local) == line
    assert run_tpuctl_process("status").out.strip() == "no clusters"


def test_a_zone_only_earlier_lists_named_is_accepted_with_a_caveat(monkeypatch):
    monkeypatch.setenv("TPUCTL_PROVIDER", "local")
    r = run_tpuctl_process("up", "lab", "--zone", "us-central1-f", "--no-vm", "--dry-run")
    assert r.code == 0, r.err
    assert ("rehearsal: us-central1-f offers v2 only by earlier editions of Google's TPU zone list (the 2026-11 "
            "one does not name it): Google Cloud may refuse what this rehearsal accepted; us-central1-b, "
            "us-central1-c, europe-west4-a, asia-east1-c are listed today") in r.out.splitlines()
    listed = run_tpuctl_process("up", "lab", "--zone", "us-central1-b", "--no-vm", "--dry-run")
    assert listed.code == 0 and "rehearsal:" not in listed.out
