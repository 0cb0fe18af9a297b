"""Stage options, checked before anything is listed or sent: pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..basics.errors import UsageError
from ..cloud.storage.parts import MIN_PART_SIZE

DEFAULT_JOBS = 8
MAX_JOBS = 64
DEFAULT_PART_SIZE = 16 << 20
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_LOCATION_RE = re.compile(r"^[a-z]{2}([a-z0-9-]*[a-z0-9])?\Z")


@dataclass(frozen=True)
class StageOptions:
    delete: bool = False
    excludes: tuple[str, ...] = ()
    dry_run: bool = False
    create_bucket: bool = False
    location: str = "US"
    jobs: int = DEFAULT_JOBS
    part_size: int = DEFAULT_PART_SIZE


def parse_size(text: str | int) -> int:
    """``32M``, ``256KiB``, ``1G`` or a number of bytes (binary units)."""
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS or len(m.group(1)) > 20:
        raise UsageError(f"invalid size {str(text)[:40]!r}", hint="use a number with K, M or G, such as 32M")
    size = float(m.group(1)) * _UNITS[unit]
    if not size < 1 << 50:   # a petabyte part is a typo (and an infinite one would not convert)
        raise UsageError(f"invalid size {str(text)[:40]!r}", hint="use a number with K, M or G, such as 32M")
    return int(size)


def part_size(text: str | int) -> int:
    size = parse_size(text)
    if size < MIN_PART_SIZE:
        raise UsageError(f"--part-size {text} is too small", hint="use at least 256K (default 32M)")
    return size


def jobs(value: int) -> int:
    if not 1 <= int(value) <= MAX_JOBS:
        raise UsageError(f"--jobs {value} is out of range", hint=f"use 1 to {MAX_JOBS} (default {DEFAULT_JOBS})")
    return int(value)


def location(value: str | None, zone: str | None) -> str:
    """The bucket location: as given, else the region of the target zone (TPU and data in one
    region: no egress charge, lowest latency), else the US multi-region."""
    if not value:
        return zone.rsplit("-", 1)[0].upper() if zone else "US"
    if not _LOCATION_RE.match(value.lower()):
        raise UsageError(f"invalid bucket location {value!r}",
                         hint="use a region such as us-central1, or a multi-region such as US or EU")
    return value.upper()
