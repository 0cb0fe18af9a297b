"""Which API made a TPU is never a secret: `up` (and `--dry-run`) say it in one line with the reason,
`status` shows it in its API column, and a zone an error suggests is one that sells the type
through the API asked for, never the one that just failed.

The Cloud TPU API gets bug and security fixes only (docs/compute-engine.md), so where `up` takes it
for a type Compute Engine also sells, the line names where Compute Engine sells it: asked of the
cloud (machineTypes.aggregatedList), as the fake sells it (docs/fakegcp.md's per-API table: v6e
through the Cloud TPU API only in us-east5-b, on Compute Engine in us-east5-a and asia-northeast1-b).
The installed tpuctl runs as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, run_tpuctl_process

TPU_LINE = ("API: the Cloud TPU API (Google gives it bug and security fixes only), because us-east5-b lists no "
            "ct6e-standard-8t machine type (--api auto); Compute Engine sells v6e-8 in us-east5-a, asia-northeast1-b "
            "(--zone us-east5-a)")
COMPUTE_LINE = "API: Compute Engine, because us-east5-a lists its machine type ct6e-standard-8t (--api auto)"


@pytest.fixture(autouse=True)
def fast(fakegcp_env):
    fakegcp_env.set_latencies(vm_create=0.1, vm_delete=0.05, address_create=0.02, tpu_create=0.15, tpu_delete=0.1)


def _row(out: str, name: str) -> dict[str, str]:
    import re

    lines = out.splitlines()
    head = next(ln for ln in lines if ln.startswith("CLUSTER "))
    (line,) = [ln for ln in lines if ln.startswith(f"{name} ")]
    return dict(zip(re.split(r"\s{2,}", head.strip()), re.split(r"\s{2,}", line.strip())))


def test_up_and_status_say_which_api_made_the_tpu_and_why(fakegcp_env):
    dry = run_tpuctl_process("up", "lab", "--accelerator-type", "v6e-8", "--zone", "us-east5-b", "--spot", "--no-vm",
                             "--dry-run")
    assert dry.code == 0, dry.err
    assert TPU_LINE in dry.out.splitlines()
    assert fakegcp_env.resources()["nodes"] == []

    made = run_tpuctl_process("up", "lab", "--accelerator-type", "v6e-8", "--zone", "us-east5-b", "--spot", "--no-vm")
    assert made.code == 0, made.err
    assert TPU_LINE in made.out.splitlines()
    ce = run_tpuctl_process("up", "ce", "--accelerator-type", "v6e-8", "--zone", "us-east5-a", "--no-vm")
    assert ce.code == 0, ce.err
    assert COMPUTE_LINE in ce.out.splitlines()

    st = run_tpuctl_process("status")
    assert st.code == 0, st.err
    assert {k: _row(st.out, "lab")[k] for k in ("ZONE", "TPU", "API")} == \
        {"ZONE": "us-east5-b", "TPU": "v6e-8 (vm)", "API": "tpu"}
    assert {k: _row(st.out, "ce")[k] for k in ("ZONE", "TPU", "API")} == \
        {"ZONE": "us-east5-a", "TPU": "v6e-8 (vm)", "API": "compute"}
    for name in ("lab", "ce"):
        assert run_tpuctl_process("down", name).code == 0


def test_a_zone_that_does_not_sell_the_type_through_the_api_asked_for_is_never_the_suggestion(fakegcp_env):
    r = run_tpuctl_process("up", "bad", "--api", "compute", "--zone", "us-east5-b", "-a", "v6e-8", "--no-vm")
    assert r.code == 2, r.err
    assert r.err.strip().splitlines()[-1] == (
        "tpuctl: error: v6e-8 is not offered in us-east5-b; pick a zone that offers it (gcloud compute machine-types "
        "list --filter=name=ct6e-standard-8t for Compute Engine), e.g. --zone us-east5-a")
    # the Cloud TPU API's suggestion is a zone of the bundled table (v4: us-central2-b); Compute
    # Engine's, one the cloud lists the machine type in, of the first zone's region first
    r = run_tpuctl_process("up", "bad", "--api", "tpu", "--zone", "us-central1-b", "-a", "v4-8", "--no-vm")
    assert r.code == 2 and r.err.strip().endswith("e.g. --zone us-central2-b"), r.err
    r = run_tpuctl_process("up", "bad", "--zone", "us-central1-b,us-east1-b", "-a", "tpu7x-8", "--no-vm")
    assert r.code == 2 and r.err.strip().endswith("e.g. --zone us-central1-c"), r.err
    assert not any(k.endswith(("insert", "create", "createInstances")) for k in fakegcp_env.call_counts())


def test_print_env_points_monitoring_at_the_fake_too():
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakegcp", "--port", "0", "--print-env"], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        ready = proc.stdout.readline().split()[1]
        exports = [proc.stdout.readline().strip() for _ in range(9)]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert f"export TPUCTL_MONITORING_API_ENDPOINT={ready}" in exports
