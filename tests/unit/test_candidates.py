"""The multi-type candidate order and failover (provision/cluster/candidates.py), without I/O.

Prices here are arguments chosen to make the order visible; which figures tpuctl really uses is
tested with the price catalogue (tests/unit/test_prices*.py).
"""

from __future__ import annotations

from provision.catalog.accelerators import parse
from provision.cloud.failures import Kind, failure
from provision.cluster.candidates import CandidatePlan, rank

V5E, V6E, V3 = parse("v5litepod-8"), parse("v6e-8"), parse("v3-8")


def price_table(table):
    return lambda acc, zone: table.get((acc.name, zone))


def names(cands):
    return [(c.name, c.zone) for c in cands]


def test_cheapest_per_peak_flop_first_and_per_zone_not_per_type():
    # v6e-8 has 4.66x the peak of v5litepod-8 (918 vs 197 TFLOP/s per chip): at 2x the hourly price
    # it is the cheaper compute; in a region where its spot price is 6x, it is not.
    zones_of = {"v5litepod-8": ["us-west4-a"], "v6e-8": ["us-east5-b", "europe-west4-a"]}
    prices = price_table({("v5litepod-8", "us-west4-a"): 4.0, ("v6e-8", "us-east5-b"): 8.0,
                          ("v6e-8", "europe-west4-a"): 48.0})
    order = rank([V5E, V6E], zones_of, prices)
    assert names(order) == [("v6e-8", "us-east5-b"), ("v5litepod-8", "us-west4-a"), ("v6e-8", "europe-west4-a")]
    assert order[0].usd_per_pflops_hour == 8.0 / (918e12 * 8 / 1e15)


def test_in_order_keeps_the_types_as_given_then_zones_in_failover_order():
    zones_of = {"v5litepod-8": ["us-west4-a", "us-central1-a"], "v6e-8": ["us-east5-b"]}
    prices = price_table({("v5litepod-8", "us-west4-a"): 100.0, ("v6e-8", "us-east5-b"): 1.0})
    assert names(rank([V5E, V6E], zones_of, prices, in_order=True)) == [
        ("v5litepod-8", "us-west4-a"), ("v5litepod-8", "us-central1-a"), ("v6e-8", "us-east5-b")]


def test_unpriced_candidates_go_last_and_ties_keep_the_given_order():
    zones_of = {"v3-8": ["us-central1-a"], "v6e-8": ["us-east5-b", "us-east1-d"]}
    prices = price_table({("v6e-8", "us-east5-b"): 10.0, ("v6e-8", "us-east1-d"): 10.0})
    assert names(rank([V3, V6E], zones_of, prices)) == [
        ("v6e-8", "us-east5-b"), ("v6e-8", "us-east1-d"), ("v3-8", "us-central1-a")]


def test_a_type_no_zone_offers_has_no_candidate():
    assert rank([V5E, V3], {"v3-8": ["us-central1-a"]}, price_table({})) and \
        names(rank([V5E, V3], {"v3-8": ["us-central1-a"]}, price_table({}))) == [("v3-8", "us-central1-a")]


def plan_of(*pairs):
    zones_of: dict[str, list[str]] = {}
    for t, z in pairs:
        zones_of.setdefault(t, []).append(z)
    types = [parse(t) for t in dict.fromkeys(t for t, _ in pairs)]
    return CandidatePlan(tuple(rank(types, zones_of, price_table({}), in_order=True)))


def test_a_stockout_blocks_that_type_in_that_zone_only():
    plan = plan_of(("v6e-8", "us-east5-b"), ("v6e-8", "us-east1-d"), ("v5litepod-8", "us-east5-b"))
    first = plan.next()
    plan.record(first, failure(Kind.STOCKOUT, "There is no more capacity in the zone \"us-east5-b\""))
    assert names([plan.next()]) == [("v6e-8", "us-east1-d")]
    plan.record(plan.next(), failure(Kind.STOCKOUT, "no capacity"))
    # the other generation in the stocked-out zone is still worth asking for
    assert names([plan.next()]) == [("v5litepod-8", "us-east5-b")]


def test_a_regional_quota_blocks_its_generation_in_the_region_not_other_generations():
    plan = plan_of(("v6e-8", "us-east5-b"), ("v6e-8", "us-east5-c"), ("v5litepod-8", "us-east5-a"),
                   ("v6e-8", "us-east1-d"))
    plan.record(plan.next(), failure(Kind.QUOTA, "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' "
                                                 "has been exceeded. Limit: 0 in region us-east5."))
    # us-east5-c is skipped: the quota is the region's
    assert names([plan.next()]) == [("v6e-8", "us-east1-d")]
    plan.record(plan.next(), failure(Kind.STOCKOUT, "no capacity"))
    assert names([plan.next()]) == [("v5litepod-8", "us-east5-a")]


def test_a_zone_that_does_not_offer_a_type_blocks_that_type_only_and_a_cloud_failure_stops():
    plan = plan_of(("v6e-8", "us-east5-b"), ("v5litepod-8", "us-east5-b"), ("v3-8", "europe-west4-a"))
    plan.record(plan.next(), failure(Kind.ZONE_UNAVAILABLE, 'FLEX_START provisioning model is not supported for '
                                                            'accelerator type "v6e-8" in location us-east5-b'))
    assert names([plan.next()]) == [("v5litepod-8", "us-east5-b")]
    plan.record(plan.next(), failure(Kind.PERMISSION, "Permission 'tpu.nodes.create' denied"))
    assert plan.next() is None and plan.stopped is not None
    assert plan.explain() == "v6e-8 in us-east5-b: zone_unavailable; v5litepod-8 in us-east5-b: permission"
    assert names(plan.tried) == [("v6e-8", "us-east5-b"), ("v5litepod-8", "us-east5-b")]
    assert names(plan.untried()) == [("v3-8", "europe-west4-a")]


def test_one_type_reads_as_zone_failover():
    plan = plan_of(("v2-8", "us-central1-b"), ("v2-8", "us-central1-c"), ("v2-8", "europe-west4-a"))
    plan.record(plan.next(), failure(Kind.STOCKOUT, "There is no more capacity in the zone"))
    plan.record(plan.next(), failure(Kind.QUOTA, "Limit 32 in region us-central1"))
    assert plan.explain() == "us-central1-b: stockout; region us-central1: quota"
    assert names([plan.next()]) == [("v2-8", "europe-west4-a")]


def test_capacity_is_the_outer_order_and_a_failure_blocks_only_its_capacity():
    zones_of = {"v6e-8": ["us-east5-a", "us-east5-b"]}
    order = rank([V6E], zones_of, lambda acc, zone: 1.0, capacities=("spot", "flex-start", "on-demand"),
                 allows=lambda acc, zone, cap: cap != "flex-start" or zone == "us-east5-a")
    assert [(c.zone, c.capacity) for c in order] == [
        ("us-east5-a", "spot"), ("us-east5-b", "spot"), ("us-east5-a", "flex-start"),
        ("us-east5-a", "on-demand"), ("us-east5-b", "on-demand")]
    plan = CandidatePlan(tuple(order))
    plan.record(order[0], failure(Kind.STOCKOUT, "no spot capacity"))
    plan.record(order[1], failure(Kind.STOCKOUT, "no spot capacity"))
    nxt = plan.next()
    assert (nxt.zone, nxt.capacity) == ("us-east5-a", "flex-start")
    assert plan.explain() == "us-east5-a (spot): stockout; us-east5-b (spot): stockout"


def test_zones_available_of_a_stockout_go_first_and_the_rest_of_its_region_is_skipped():
    from provision.cloud.failures import Failure, Scope

    zones_of = {"v6e-8": ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"]}
    order = rank([V6E], zones_of, lambda acc, zone: 1.0, capacities=("spot",))
    plan = CandidatePlan(tuple(order))
    plan.record(order[0], Failure(Kind.STOCKOUT, Scope.ZONE, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                                  zones_available=("us-central1-f",)))
    assert plan.next().zone == "us-central1-f"
    assert not plan.available(order[1]) and not plan.available(order[2])
    assert "(not in zonesAvailable of us-central1-a)" in plan.explain()
