"""Option parsing, IAM binding merge and the progress bar's text (pure)."""

from __future__ import annotations

import io

import pytest

from provision.basics.errors import UsageError
from provision.cloud.storage import iam
from provision.cloud.storage.base import OBJECT_ROLE
from provision.staging import options
from provision.staging.progress import Progress, human_bytes, render


@pytest.mark.parametrize("text,value", [("32M", 32 << 20), ("256K", 256 << 10), ("1G", 1 << 30),
                                        ("1.5M", 3 << 19), ("4096", 4096), ("8 MiB", 8 << 20)])
def test_parse_size(text, value):
    assert options.parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "M", "12Q", "-1M", "1..2"])
def test_bad_sizes(bad):
    with pytest.raises(UsageError, match="invalid size"):
        options.parse_size(bad)


def test_part_size_minimum_and_jobs_range():
    with pytest.raises(UsageError, match="too small"):
        options.part_size("64K")
    assert options.jobs(1) == 1
    for bad in (0, 65):
        with pytest.raises(UsageError, match="--jobs"):
            options.jobs(bad)


def test_location_defaults_to_the_zone_region():
    assert options.location(None, "us-central1-b") == "US-CENTRAL1"
    assert options.location(None, None) == "US"
    assert options.location("eu", "us-central1-b") == "EU"
    with pytest.raises(UsageError, match="location"):
        options.location("us central", None)


def test_with_member_is_idempotent_and_narrow():
    member = iam.tpu_service_agent(123)
    assert member == "serviceAccount:service-123@cloud-tpu.iam.gserviceaccount.com"
    bindings = [{"role": "roles/storage.admin", "members": {"user:a@x.com"}}]
    once, changed = iam.with_member(bindings, OBJECT_ROLE, member)
    assert changed and {"role": OBJECT_ROLE, "members": {member}} in once
    twice, changed_again = iam.with_member(once, OBJECT_ROLE, member)
    assert not changed_again and twice == once
    assert bindings == [{"role": "roles/storage.admin", "members": {"user:a@x.com"}}]  # input untouched


def test_with_member_joins_the_unconditional_binding_not_a_conditional_one():
    cond = {"role": OBJECT_ROLE, "members": {"user:b@x.com"}, "condition": {"expression": "x"}}
    plain = {"role": OBJECT_ROLE, "members": {"user:c@x.com"}}
    out, changed = iam.with_member([cond, plain], OBJECT_ROLE, "user:d@x.com")
    assert changed and out[0]["members"] == {"user:b@x.com"} and out[1]["members"] == {"user:c@x.com", "user:d@x.com"}
    out2, _ = iam.with_member([cond], OBJECT_ROLE, "user:b@x.com")
    assert len(out2) == 2  # conditional membership is not unconditional access


@pytest.mark.parametrize("bad", ["someone@x.com", "serviceAccount:", "allUsers", "user:a b"])
def test_bad_members(bad):
    with pytest.raises(UsageError, match="IAM member"):
        iam.check_member(bad)


def test_progress_text():
    assert human_bytes(440_000_000) == "440.0 MB" and human_bytes(12) == "12 B"
    line = render(220_000_000, 440_000_000, 10.0)
    assert "50.0%" in line and "22.0 MB/s" in line and "ETA 10s" in line
    assert "ETA ?" in render(0, 10, 0.0)


def test_progress_draws_only_when_enabled():
    quiet, shown = io.StringIO(), io.StringIO()
    with Progress(100, enabled=False, stream=quiet) as p:
        p.add(100)
    with Progress(100, enabled=True, stream=shown, interval=0.01) as p:
        p.add(100)
    assert quiet.getvalue() == "" and "100.0%" in shown.getvalue()
