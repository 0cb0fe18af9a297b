"""Bucket IAM bindings: the pure part of granting one member object access on one bucket.

ctpu granted the TPU service agent a project-wide storage role; tpuctl binds
:data:`~provision.cloud.storage.base.OBJECT_ROLE` on the one bucket the TPU uses, and does it only
once (re-running ``tpuctl up`` leaves the policy untouched).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...basics.errors import UsageError

MEMBER_RE = re.compile(r"^(serviceAccount|user|group|domain|principal|principalSet):[^\s,]+$")


def check_member(member: str) -> str:
    if not isinstance(member, str) or not MEMBER_RE.match(member):
        raise UsageError(f"invalid IAM member {member!r}",
                         hint="use serviceAccount:NAME@PROJECT.iam.gserviceaccount.com (or user:, group:)")
    return member


def tpu_service_agent(project_number: int | str) -> str:
    """The Cloud TPU service agent of a project, the identity a TPU Node reads buckets as."""
    return f"serviceAccount:service-{project_number}@cloud-tpu.iam.gserviceaccount.com"


def has_member(bindings: Iterable[Mapping[str, Any]], role: str, member: str) -> bool:
    return any(b.get("role") == role and not b.get("condition") and member in set(b.get("members") or ())
               for b in bindings)


def with_member(bindings: Iterable[Mapping[str, Any]], role: str, member: str) -> tuple[list[dict], bool]:
    """Bindings with ``member`` in the unconditional binding for ``role``; and whether that changed them.

    Conditional bindings for the same role are left as they are: they do not grant the role
    unconditionally, so the member is added to (or a new) unconditional binding.
    """
    out = [dict(b, members=set(b.get("members") or ())) for b in bindings]
    if has_member(out, role, member):
        return out, False
    for b in out:
        if b.get("role") == role and not b.get("condition"):
            b["members"].add(member)
            return out, True
    out.append({"role": role, "members": {member}})
    return out, True
