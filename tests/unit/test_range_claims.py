"""Per-cluster TPU range claims (provision/cloud/range_claims.py, pure): which claim holds a block
when claims overlap, what a listed resource must look like to count as a claim, and names."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from provision.cloud import range_claims as rc

T0 = datetime(2026, 11, 27, 17, 0, tzinfo=timezone.utc)


def claim(cluster: str, cidr: str, ms: int = 0, network: str = "default") -> rc.Claim:
    return rc.Claim(cluster=cluster, cidr=cidr, network=network, zone="us-central1-b",
                    created=T0 + timedelta(milliseconds=ms), resource=rc.resource_name(cluster))


def listed(c: rc.Claim, **changes) -> dict:
    res = {"name": c.resource, "creationTimestamp": c.created.astimezone(timezone(timedelta(hours=-8)))
           .isoformat(timespec="milliseconds"), "description": rc.description(c.cluster, c.cidr, c.network, c.zone)}
    res.update(changes)
    return res


def test_the_earliest_claim_holds_an_overlapping_block_and_a_tie_goes_to_the_lower_name():
    a, b, c = claim("a", "10.240.0.0/29", 5), claim("b", "10.240.0.0/29", 3), claim("c", "10.240.0.0/28", 3)
    claims = [a, b, c]
    assert rc.holder(b, claims) is None                   # created first (tied with c: "b" < "c")
    assert rc.holder(c, claims) == b and rc.holder(a, claims) == b
    # every pair agrees, whoever reads the claims: exactly one holder per overlapping group
    assert [x.cluster for x in claims if rc.holder(x, claims) is None] == ["b"]


def test_claims_on_other_blocks_or_networks_do_not_contend():
    mine = claim("mine", "10.240.0.8/29", 9)
    others = [claim("early", "10.240.0.0/29", 0), claim("elsewhere", "10.240.0.8/29", 0, network="other")]
    assert rc.holder(mine, [mine, *others]) is None


def test_a_listed_claim_reads_back_in_any_utc_offset():
    c = claim("bert-node", "10.240.0.16/29", 7)
    back = rc.parse(listed(c))
    assert back == c and back.record() == {"cidr": "10.240.0.16/29", "network": "default",
                                           "zone": "us-central1-b", "at": int(T0.timestamp())}


def test_what_is_not_a_well_formed_claim_is_ignored():
    c = claim("bert-node", "10.240.0.16/29")
    bad = [listed(c, description="a template someone made"), listed(c, creationTimestamp=None),
           listed(c, name="tpuctl-range-someone-else"),
           listed(c, description=rc.description("bert-node", "10.240.0.300/29", "default", "z")),
           listed(c, description=rc.description("bert-node", "10.240.0.16/29", "default", "z") + " " * 3000)]
    assert rc.parse_all([*bad, listed(c)]) == [c]


def test_resource_names_fit_compute_and_stay_distinct():
    long_a, long_b = "a" + "b" * 60 + "c", "a" + "b" * 60 + "d"
    assert rc.resource_name("bert-lab") == "tpuctl-range-bert-lab"
    names = {rc.resource_name(n) for n in (long_a, long_b)}
    assert len(names) == 2 and all(len(n) <= 63 and n[-1] != "-" for n in names)


def test_the_old_project_metadata_value_still_holds_its_blocks():
    legacy = {"old": {"cidr": "10.240.0.0/29", "network": "default"}, "bad": "x",
              "other-net": {"cidr": "10.240.0.8/29", "network": "other"}}
    assert rc.legacy_holder("new", "10.240.0.0/28", "default", legacy) == "old"
    assert rc.legacy_holder("old", "10.240.0.0/29", "default", legacy) is None      # its own
    assert rc.legacy_holder("new", "10.240.0.8/29", "default", legacy) is None
