"""CIDR allocation: the first free block, never overlapping anything in use (property-based)."""

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.basics.errors import UsageError
from provision.cluster import cidr

POOL = ipaddress.ip_network("10.240.0.0/16")


def U(block, kind="subnet"):
    return cidr.Used.of(block, f"test {block}", kind)


def test_first_block_of_an_empty_pool():
    assert str(cidr.first_free(29, [], POOL)) == "10.240.0.0/29"


def test_skips_used_ranges_and_aligns():
    used = [U("10.240.0.0/29", "tpu"), U("10.240.0.10/32", "route")]
    assert str(cidr.first_free(29, used, POOL)) == "10.240.0.16/29"
    assert str(cidr.first_free(28, used, POOL)) == "10.240.0.16/28"


def test_default_routes_are_ignored_but_narrow_routes_count():
    used = [U("0.0.0.0/0", "route"), U("10.0.0.0/7", "route"), U("10.240.0.0/24", "route")]
    assert str(cidr.first_free(29, used, POOL)) == "10.240.1.0/29"


def test_skip_returns_later_candidates():
    assert str(cidr.first_free(29, [], POOL, skip=2)) == "10.240.0.16/29"


def test_exhausted_pool_is_a_clear_error():
    small = ipaddress.ip_network("10.240.0.0/28")
    with pytest.raises(UsageError, match="no free /29 block left .*tpu_cidr_pool"):
        cidr.allocate(29, [U("10.240.0.0/29"), U("10.240.0.8/29")], small)


def test_requested_block_checked_before_anything_is_created():
    used = [U("10.240.1.0/24", "secondary")]
    with pytest.raises(UsageError, match=r"overlaps 10\.240\.1\.0/24 \(test 10\.240\.1\.0/24\)"):
        cidr.check_requested(ipaddress.ip_network("10.240.1.8/29"), 29, used)
    with pytest.raises(UsageError, match="too small .* /28"):
        cidr.check_requested(ipaddress.ip_network("10.240.2.0/29"), 28, used)
    assert str(cidr.check_requested(ipaddress.ip_network("10.240.2.0/29"), 29, used)) == "10.240.2.0/29"


blocks = st.builds(lambda a, p: ipaddress.ip_network((a, p), strict=False),
                   st.integers(int(POOL.network_address) - 2**12, int(POOL.broadcast_address) + 2**12),
                   st.integers(20, 32))


@settings(max_examples=300, deadline=None)
@given(used=st.lists(blocks, max_size=40), prefixes=st.lists(st.sampled_from([29, 28, 27, 26, 24]), min_size=1,
                                                             max_size=12))
def test_allocations_never_overlap_each_other_or_anything_used(used, prefixes):
    in_use = [cidr.Used(n, "random", "subnet") for n in used]
    taken = []
    for prefix in prefixes:
        try:
            block = cidr.first_free(prefix, in_use, POOL)
        except cidr.NoFreeBlock:
            continue
        assert block.prefixlen == prefix and block.subnet_of(POOL)
        assert not any(block.overlaps(u.network) for u in in_use)
        assert not any(block.overlaps(t) for t in taken)
        taken.append(block)
        in_use.append(cidr.Used(block, "allocated", "tpu"))


SMALL = ipaddress.ip_network("10.240.0.0/22")
small_blocks = st.builds(lambda a, p: ipaddress.ip_network((a, p), strict=False),
                         st.integers(int(SMALL.network_address) - 64, int(SMALL.broadcast_address) + 64),
                         st.integers(23, 32))


@settings(max_examples=200, deadline=None)
@given(used=st.lists(small_blocks, max_size=30), prefix=st.sampled_from([29, 28, 26]))
def test_first_free_is_really_the_first(used, prefix):
    in_use = [cidr.Used(n, "random", "subnet") for n in used]
    try:
        block = cidr.first_free(prefix, in_use, SMALL)
    except cidr.NoFreeBlock:
        block = None
    for cand in SMALL.subnets(new_prefix=prefix):
        if block is not None and cand == block:
            break
        assert any(cand.overlaps(u.network) for u in in_use), f"{cand} was free but not chosen"


def test_spread_sends_clusters_that_lost_a_race_to_different_blocks():
    """After a lost race each cluster tries its own pseudo-random one of the first free blocks
    (fixed per cluster and attempt), so 20 losers do not all try the same next one."""
    picks = [cidr.spread(f"conc-{i}", 0) for i in range(20)]
    assert all(0 <= p < 16 for p in picks) and len(set(picks)) >= 8
    assert picks == [cidr.spread(f"conc-{i}", 0) for i in range(20)]
    assert [cidr.spread("conc-0", a) for a in range(8)] != [picks[0]] * 8
