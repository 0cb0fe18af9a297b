"""How a large file is cut into parts, and where the parts wait until they are composed.

Pure: sizes in, ranges and names out. At most :data:`MAX_PARTS` parts, so that one compose
request (32 sources at most) publishes the whole object atomically; a larger file gets larger
parts. The layout directory names the file size and the part size, so a re-run of the same file
finds the parts an interrupted run left (and verifies each by CRC32C before reusing it), while
parts of an older version of the file are recognised as stale and removed.
"""

from __future__ import annotations

from .base import PARTS_PREFIX

MAX_PARTS = 32  # sources one compose request accepts
MIN_PART_SIZE = 256 << 10
LAYOUT_MARK = ".tpuctl-"


def effective_part_size(size: int, part_size: int) -> int:
    return max(part_size, -(-size // MAX_PARTS))


def in_parts(size: int, part_size: int) -> bool:
    """Whether a file is large enough to go in parallel parts (at least two full parts)."""
    return size >= 2 * part_size


def ranges(size: int, part_size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of each part, in order, covering ``size`` bytes."""
    step = effective_part_size(size, part_size)
    return [(off, min(step, size - off)) for off in range(0, size, step)]


def object_dir(name: str) -> str:
    """Where every layout of object ``name`` keeps its parts."""
    return f"{PARTS_PREFIX}{name}/{LAYOUT_MARK}"


def layout_dir(name: str, size: int, part_size: int) -> str:
    return f"{object_dir(name)}{size}-{effective_part_size(size, part_size)}/"


def part_name(name: str, size: int, part_size: int, index: int) -> str:
    return f"{layout_dir(name, size, part_size)}{index:05d}"


def prefix_dir(prefix: str) -> str:
    """Where the parts of every object under ``prefix`` live (for cleaning up after a run)."""
    prefix = prefix.strip("/")
    return f"{PARTS_PREFIX}{prefix}/" if prefix else PARTS_PREFIX
