"""The accelerator table: one place for cores, chips, hosts and range sizes."""

import pytest

from provision.basics.errors import UsageError
from provision.catalog import accelerators, prices
from provision.catalog.accelerators import parse, suggest


@pytest.mark.parametrize("name, cores, chips, hosts, prefix", [
    ("v2-8", 8, 4, 1, 29), ("v3-8", 8, 4, 1, 29), ("v2-32", 32, 16, 4, 29), ("v3-32", 32, 16, 4, 29),
    ("v3-64", 64, 32, 8, 28), ("v3-128", 128, 64, 16, 27), ("v3-256", 256, 128, 32, 26),
    ("v3-512", 512, 256, 64, 25), ("v3-1024", 1024, 512, 128, 24), ("v2-512", 512, 256, 64, 25),
])
def test_node_sizes_match_ctpu(name, cores, chips, hosts, prefix):
    acc = accelerators.parse(name)
    assert (acc.cores, acc.chips, acc.hosts, acc.node_cidr_prefix) == (cores, chips, hosts, prefix)


@pytest.mark.parametrize("name, chips, hosts", [
    ("v4-8", 4, 1), ("v4-32", 16, 4), ("v5p-8", 4, 1), ("v5litepod-1", 1, 1), ("v5litepod-8", 8, 1),
    ("v5litepod-16", 16, 4), ("v6e-8", 8, 1), ("v6e-256", 256, 64),
])
def test_vm_generations_count_chips_and_hosts(name, chips, hosts):
    acc = accelerators.parse(name)
    assert (acc.chips, acc.hosts) == (chips, hosts)
    assert acc.supports("vm") and not acc.supports("node")


@pytest.mark.parametrize("name, fragment", [
    ("v2-16", "not a v2 slice size"), ("v9-8", "unknown accelerator type"), ("tpu", "unknown accelerator type"),
    ("v5litepod-3", "not a v5litepod slice size"), ("", "unknown accelerator type"),
])
def test_unknown_types_name_the_fix(name, fragment):
    with pytest.raises(UsageError) as err:
        accelerators.parse(name)
    assert fragment in err.value.one_line() and "use one of" in err.value.one_line()


def test_every_type_has_a_price():
    for acc in accelerators.all_types():
        spot, on_demand = prices.tpu_hourly(acc, preemptible=True), prices.tpu_hourly(acc, preemptible=False)
        assert on_demand is not None and on_demand > 0, acc.name
        if acc.generation.name in prices.NO_PUBLIC_SPOT:     # no spot rate is public: unknown, not $0
            assert spot is None, acc.name
        else:
            assert spot is not None and spot < on_demand, acc.name


def test_published_anchor_prices():
    assert prices.tpu_hourly(accelerators.parse("v2-8"), preemptible=False) == 4.50
    assert prices.tpu_hourly(accelerators.parse("v2-8"), preemptible=True) == 1.35
    # skypilot-catalog v8 gcp/vms.csv: tpu-v3-8 us-central1 SpotPrice 2.04 (not $0.60/chip)
    assert prices.tpu_hourly(accelerators.parse("v3-8"), preemptible=True) == 2.04
    assert "read 2026-" in prices.describe_source()


@pytest.mark.parametrize("typed, meant", [("v5e-8", "v5litepod-8"), ("V5E-16", "v5litepod-16"), ("v6e8", "v6e-8"),
                                          ("v5litepod8", "v5litepod-8"), ("tpu-v3-8", "v3-8"), ("v5p_8", "v5p-8")])
def test_a_near_miss_gets_the_type_it_most_likely_means(typed, meant):
    assert suggest(typed) == meant
    with pytest.raises(UsageError) as info:
        parse(typed)
    assert f"did you mean {meant}?" in info.value.one_line()


@pytest.mark.parametrize("typed", ["v7-8", "v5e-9", "v2-9x", "gpu-8", ""])
def test_no_suggestion_without_a_valid_type_that_close(typed):
    assert suggest(typed) is None


def test_every_zone_row_names_its_source_and_every_generation_has_a_listed_zone():
    from provision.catalog import zones

    assert set(zones.TPU_ZONES) == set(accelerators.GENERATIONS)
    for gen, rows in zones.TPU_ZONES.items():
        assert rows and all(src in (zones.PAGE, zones.PRICED, zones.EARLIER, zones.TPU7X_ZONE) for _, src in rows), gen
        assert len({z for z, _ in rows}) == len(rows), gen
        assert zones.source_of(gen, zones.suggested_zone(gen)) != zones.EARLIER, gen
    assert not zones.offers("us-central1-b", parse("v4-8")) and zones.offers("us-central2-b", parse("v4-16"))
    assert not zones.offers("europe-west9-z", parse("v2-8"))
    assert zones.unconfirmed("us-central1-b", parse("v2-8")) is None
    assert "earlier editions" in zones.unconfirmed("us-central1-f", parse("v2-8"))
