"""`tpuctl up --accelerator-type A,B,...` against the fake cloud: the candidates are tried cheapest
first per peak bf16 FLOP/s in each zone, a stockout moves on exactly as zone failover does, and a
preempted TPU comes back as the type and zone it was.

Prices are the catalogue's (docs/prices.md): spot v6e us-east5 $1.215 per chip-hour, v5e us-west4
$0.48 (skypilot-catalog v8 gcp/vms.csv), peak bf16 918 and 197 TFLOP/s per chip (Google's v6e and
v5e pages), so v6e-8 in us-east5-b costs $1.32 per peak PFLOP/s-hour and v5litepod-8 in us-west4-a
$2.44: v6e-8 is asked for first although its hour costs more. Offerings are the fake's
(tests/fakegcp/catalog.py: v6e in us-east5-b, v5e in us-west4-a).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_tpuctl_process

ZONES = "us-east5-b,us-west4-a"
TYPES = "v5litepod-8,v6e-8"


@pytest.fixture
def fake(fakegcp_env):
    fakegcp_env.set_latencies(tpu_create=0.15, tpu_delete=0.1, vm_create=0.15, vm_delete=0.1)
    return fakegcp_env


def nodes(fake) -> list[tuple[str, str, str]]:
    return sorted((n["zone"], n["name"].rsplit("/", 1)[-1], n["acceleratorType"]) for n in fake.resources()["nodes"])


def up(*extra: str):
    return run_tpuctl_process("up", "mt", "--zone", ZONES, "-a", TYPES, "--spot", *extra, timeout=240)


def test_the_cheapest_per_flop_is_planned_first_and_in_order_keeps_the_order_given(fake):
    r = up("--dry-run", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["accelerator_type"] == "v6e-8" and doc["zone"] == "us-east5-b"
    [order] = [n for n in doc["notes"] if n.startswith("candidates cheapest first")]
    assert order.index("v6e-8 in us-east5-b ($9.72/hour, $1.32 per peak") \
        < order.index("v5litepod-8 in us-west4-a ($3.84/hour, $2.44 per peak")

    r = up("--dry-run", "--json", "--in-order")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["accelerator_type"], doc["zone"]) == ("v5litepod-8", "us-west4-a")
    assert nodes(fake) == [] and fake.resources()["instances"] == []


def test_a_stocked_out_cheapest_type_lands_on_the_next_and_says_why(fake):
    fake.stockout("us-east5-b")
    r = up("--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["accelerator_type"], doc["zone"]) == ("v5litepod-8", "us-west4-a")
    assert "moving on to v5litepod-8 in us-west4-a (v6e-8 in us-east5-b: stockout)" in r.err
    assert any(n.startswith("chose v5litepod-8 in us-west4-a ($3.84/hour") and
               n.endswith("the first that could be had after v6e-8 in us-east5-b: stockout") for n in doc["notes"])
    assert nodes(fake) == [("us-west4-a", "mt", "v5litepod-8")]
    # the price shown is the chosen type's, in its region
    assert doc["price"]["tpu"]["usd_per_hour"] == 3.84 and doc["price"]["tpu"]["region"] == "us-west4"
    st = json.loads(run_tpuctl_process("status", "--json").out)
    assert [c["tpu"]["accelerator_type"] for c in st["clusters"]] == ["v5litepod-8"]

    # preempted, it comes back as the type and zone it was, though v6e-8 can be had again
    fake.clear_stockout()
    fake.preempt("us-west4-a", "mt")
    r = up("--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["accelerator_type"], doc["zone"]) == ("v5litepod-8", "us-west4-a")
    assert nodes(fake) == [("us-west4-a", "mt", "v5litepod-8")]
    assert run_tpuctl_process("down", "mt").code == 0 and nodes(fake) == []


def test_every_candidate_stocked_out_is_one_line_and_nothing_is_left(fake):
    fake.stockout("us-east5-b")
    fake.stockout("us-west4-a")
    r = up()
    assert r.code == 1
    [line] = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert "no zone could create a TPU of any of v6e-8,v5litepod-8" in line
    assert "v6e-8 in us-east5-b: stockout" in line and "v5litepod-8 in us-west4-a: stockout" in line
    assert nodes(fake) == [] and fake.resources()["instances"] == []


@pytest.mark.parametrize("args, words", [
    (("-a", "v5litepod-8,v9-8"), "unknown accelerator type 'v9-8'"),
    (("-a", "v5litepod-8", "--in-order"), "--in-order orders several accelerator types"),
    (("-a", "v2-8,v3-8", "--arch", "node"), "several accelerator types are for TPU VMs"),
])
def test_bad_type_lists_are_one_line_and_exit_2_before_anything_exists(fake, args, words):
    r = run_tpuctl_process("up", "bad", "--zone", ZONES, *args)
    assert r.code == 2 and words in r.err and "Traceback" not in r.err
    assert nodes(fake) == [] and fake.resources()["instances"] == []
