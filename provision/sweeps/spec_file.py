"""The sweep spec file: read and parse it, the checks that need nothing but the file.

Kept apart from :mod:`provision.sweeps.create` (which imports the cloud's data types, the bucket
store and the job spec loader) so that ``tpuctl sweep start`` answers a missing, oversized or
unparsable file before it imports anything more.
"""

from __future__ import annotations

import os
from typing import Any

from ..basics.errors import UsageError

MAX_SPEC_BYTES = 1 << 16


def read_spec(path: str) -> tuple[Any, bytes]:
    """The sweep spec file's YAML document and its bytes. YAML is read as job specs are
    (``jobs.spec.parse_yaml``: bounded, and ``1e-4`` is a number)."""
    if not os.path.isfile(path):
        raise UsageError(f"sweep spec {path[:200]} not found", hint="pass the path of a sweep spec YAML (docs/sweeps.md)")
    if os.path.getsize(path) > MAX_SPEC_BYTES:
        raise UsageError(f"sweep spec {path[:200]} is too large for a sweep spec", hint="check that this is the right file")
    with open(path, "rb") as fh:
        text = fh.read()
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"sweep spec {path[:200]} is not UTF-8 text", hint="save it as UTF-8 YAML (docs/sweeps.md)") from None
    from jobs import spec as jobspec

    try:
        return jobspec.parse_yaml(decoded, f"sweep spec {path[:200]}"), text
    except jobspec.SpecError as exc:
        raise UsageError(str(exc)) from None
