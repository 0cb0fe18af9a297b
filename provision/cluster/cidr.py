"""Pure TPU IP-range allocation: ranges in use in, the first free block out.

A TPU Node needs a private block of its own that overlaps nothing on its VPC network: not a
subnetwork (primary or secondary range), not a route's destination, not a range of a peered
network, not another TPU's block in any zone, and not a block another tpuctl has reserved but
not yet used. ctpu scanned routes and took the first free /29 in 10.240.1-254.x; this module does
the same search over a configurable pool, for every block size, in O(n log n) of the ranges in use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from ..basics.errors import UsageError
from ..cloud.base import DEFAULT_POOL, Used

IPv4Network = ipaddress.IPv4Network

# Routes this wide are default or summary routes (0.0.0.0/0 to the internet gateway), not ranges
# that hold addresses; ctpu skipped them too.
MIN_ROUTE_PREFIX = 8


class NoFreeBlock(Exception):
    pass


def relevant(used: Iterable[Used]) -> list[Used]:
    """Drop default/summary routes and non-IPv4 ranges; keep everything that can hold addresses."""
    out = []
    for u in used:
        if not isinstance(u.network, IPv4Network):
            continue
        if u.kind == "route" and u.network.prefixlen < MIN_ROUTE_PREFIX:
            continue
        out.append(u)
    return out


def _merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def first_free(prefix: int, used: Sequence[Used], pool: IPv4Network = DEFAULT_POOL,
               *, skip: int = 0) -> IPv4Network:
    """The first block of size ``/prefix`` inside ``pool`` that overlaps no used range.

    ``skip`` returns the (skip+1)-th free block instead: after a create fails with the API's
    "conflicts with another subnet or object" error, the caller marks the block used and asks
    again, and under contention it can spread concurrent callers over different candidates.
    """
    if prefix < pool.prefixlen or prefix > 32:
        raise ValueError(f"/{prefix} does not fit in pool {pool}")
    size = 1 << (32 - prefix)
    start = int(pool.network_address)
    end = int(pool.broadcast_address)
    busy = _merged((int(u.network.network_address), int(u.network.broadcast_address))
                   for u in relevant(used) if u.network.overlaps(pool))
    cand = start
    found = 0
    i = 0
    while cand + size - 1 <= end:
        # advance past every busy interval that ends before the candidate
        while i < len(busy) and busy[i][1] < cand:
            i += 1
        if i < len(busy) and busy[i][0] <= cand + size - 1:
            # overlap: jump to the first aligned block after this busy interval
            nxt = busy[i][1] + 1
            cand = (nxt + size - 1) // size * size
            continue
        if found == skip:
            return ipaddress.ip_network((cand, prefix))
        found += 1
        cand += size
    raise NoFreeBlock(f"no free /{prefix} left in {pool}")


def spread(cluster: str, attempt: int, width: int = 16) -> int:
    """Which free block (``skip``) a cluster tries after losing a race for one, the ``attempt``-th
    time: a fixed pseudo-random choice among the first ``width`` free blocks, different for each
    cluster and attempt. Clusters that all lost the same block then try different ones, instead of
    all the next one (one winner per round: n rounds for n concurrent ``up``)."""
    import hashlib

    digest = hashlib.sha256(f"{cluster}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % width


def conflicts(block: IPv4Network, used: Sequence[Used]) -> list[Used]:
    return [u for u in relevant(used) if u.network.overlaps(block)]


def check_requested(block: IPv4Network, prefix: int, used: Sequence[Used]) -> IPv4Network:
    """Validate a user's ``--cidr`` before anything is created."""
    if block.prefixlen > prefix:
        raise UsageError(f"--cidr {block} is too small for this TPU",
                         hint=f"it needs a /{prefix} or larger block, such as {block.supernet(new_prefix=prefix)}")
    clash = conflicts(block, used)
    if clash:
        c = clash[0]
        raise UsageError(f"--cidr {block} overlaps {c.network} ({c.source})",
                         hint="pick a free block, or omit --cidr to let tpuctl choose one")
    return block


def allocate(prefix: int, used: Sequence[Used], pool: IPv4Network = DEFAULT_POOL,
             *, skip: int = 0) -> IPv4Network:
    try:
        return first_free(prefix, used, pool, skip=skip)
    except NoFreeBlock:
        raise UsageError(f"no free /{prefix} block left in the TPU range pool {pool}",
                         hint="set a larger pool with tpu_cidr_pool in the config file, or delete unused TPUs") from None
