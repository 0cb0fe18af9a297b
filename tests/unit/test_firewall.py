"""Whether a VPC firewall lets a pod slice's workers reach each other (provision.cluster.firewall).

The rules are written as Compute Engine returns them. The default network's prepopulated rules
(https://cloud.google.com/firewall/docs/firewalls#more_rules_default_vpc; as listed in
GoogleCloudPlatform/gcpdiag test-data/gce6/json-dumps/compute-effective-firewalls-default.json):
default-allow-internal (tcp:0-65535, udp:0-65535, icmp from 10.128.0.0/9), -ssh (tcp:22), -rdp
(tcp:3389), -icmp, all at priority 65534. How rules combine is Compute's ``Firewall`` type
(google-cloud-compute 1.57): the lowest priority number wins, DENY beats ALLOW at equal priority,
implied rules sit at 65535.
"""

from __future__ import annotations

import pytest

from provision.cloud.base import FirewallRule
from provision.cluster import firewall

SUBNET = "10.130.0.0/20"     # the default network's us-central2 subnetwork


def rule(name: str, *, allowed=(), denied=(), sources=("10.128.0.0/9",), priority=1000, network="lab-net",
         **kw) -> FirewallRule:
    return FirewallRule(name=name, network=network, priority=priority, source_ranges=tuple(sources),
                        allowed=tuple(allowed), denied=tuple(denied), **kw)


TCP_ALL = ("tcp", ("0-65535",))
DEFAULT_RULES = [
    rule("default-allow-internal", allowed=[TCP_ALL, ("udp", ("0-65535",)), ("icmp", ())], priority=65534,
         network="default"),
    rule("default-allow-ssh", allowed=[("tcp", ("22",))], sources=["0.0.0.0/0"], priority=65534, network="default"),
    rule("default-allow-rdp", allowed=[("tcp", ("3389",))], sources=["0.0.0.0/0"], priority=65534,
         network="default"),
    rule("default-allow-icmp", allowed=[("icmp", ())], sources=["0.0.0.0/0"], priority=65534, network="default"),
]


def test_the_default_networks_internal_rule_lets_the_workers_reach_each_other():
    v = firewall.check(DEFAULT_RULES, [SUBNET])
    assert v.ok and v.allowed_by == ("default-allow-internal",)


def test_a_network_without_rules_blocks_every_port_and_says_so():
    v = firewall.check([], ["10.10.0.0/24"])
    assert not v.ok and v.blocked == ((1, 65535),)
    assert v.describe() == "tcp:1-65535 not allowed by any rule"
    # the default network without its internal rule: ssh alone does not do
    assert not firewall.check(DEFAULT_RULES[1:], [SUBNET]).ok


def test_a_rule_for_the_tpu_port_alone_leaves_the_other_ports_closed():
    v = firewall.check([rule("tpu-only", allowed=[("tcp", ("8470",))])], [SUBNET])
    assert v.blocked == ((1, 8469), (8471, 65535))
    assert v.describe() == "tcp:1-8469,tcp:8471-65535 not allowed by any rule"


@pytest.mark.parametrize("allowed", [[TCP_ALL], [("tcp", ())], [("all", ())], [("tcp", ("1-65535",))],
                                     [("tcp", ("1-8470",)), ("tcp", ("8471-65535",))]])
def test_every_way_of_writing_all_tcp_ports_counts(allowed):
    assert firewall.check([rule("r", allowed=allowed)], [SUBNET]).ok


def test_the_source_must_hold_every_worker_range():
    allow = [TCP_ALL]
    assert not firewall.check([rule("r", allowed=allow, sources=["10.130.0.0/24"])], [SUBNET]).ok
    assert firewall.check([rule("r", allowed=allow, sources=["10.0.0.0/8"])], [SUBNET, "10.140.0.0/20"]).ok
    assert not firewall.check([rule("r", allowed=allow, sources=["10.130.0.0/20"])],
                              [SUBNET, "10.140.0.0/20"]).ok
    # an ingress rule with no source applies to 0.0.0.0/0
    assert firewall.check([rule("r", allowed=allow, sources=())], [SUBNET]).ok
    # source tags match tagged instances, and tpuctl's TPU VMs carry no tags
    assert not firewall.check([rule("r", allowed=allow, sources=(), source_tags=("tpu",))], [SUBNET]).ok


def test_rules_that_do_not_apply_to_the_workers_are_ignored():
    allow = [TCP_ALL]
    assert not firewall.check([rule("r", allowed=allow, target_tags=("web",))], [SUBNET]).ok
    assert not firewall.check([rule("r", allowed=allow, disabled=True)], [SUBNET]).ok
    assert not firewall.check([rule("r", allowed=allow, direction="EGRESS")], [SUBNET]).ok
    # the implied deny-all-ingress is at 65535 and wins an ALLOW of equal priority
    assert not firewall.check([rule("r", allowed=allow, priority=65535)], [SUBNET]).ok


def test_service_accounts_select_the_workers_only_when_they_are_the_workers_account():
    sa = "tpuctl-runs@p.iam.gserviceaccount.com"
    by_target = rule("r", allowed=[TCP_ALL], target_service_accounts=(sa,))
    assert firewall.check([by_target], [SUBNET], sa).ok
    assert not firewall.check([by_target], [SUBNET], None).ok      # the default account: unknown here
    by_source = rule("r", allowed=[TCP_ALL], sources=(), source_service_accounts=(sa,))
    assert firewall.check([by_source], [SUBNET], sa).ok
    assert not firewall.check([by_source], [SUBNET], "other@p.iam.gserviceaccount.com").ok


def test_a_deny_rule_of_higher_or_equal_priority_wins_and_is_named():
    deny = rule("no-grpc", denied=[("tcp", ("8470-8479",))], sources=["0.0.0.0/0"], priority=900)
    v = firewall.check([rule("allow-internal", allowed=[TCP_ALL]), deny], [SUBNET])
    assert v.blocked == ((8470, 8479),) and v.denied_by == ("no-grpc",)
    assert v.describe() == "tcp:8470-8479 denied by rule no-grpc"
    tie = rule("tie", denied=[("tcp", ())], sources=["10.130.0.0/28"], priority=1000)
    assert firewall.check([rule("allow-internal", allowed=[TCP_ALL]), tie], [SUBNET]).denied_by == ("tie",)
    # an allow ahead of the deny wins; a deny from elsewhere does not touch the workers
    assert firewall.check([rule("first", allowed=[TCP_ALL], priority=800), deny], [SUBNET]).ok
    elsewhere = rule("elsewhere", denied=[("tcp", ())], sources=["192.168.0.0/16"], priority=0)
    assert firewall.check(DEFAULT_RULES + [elsewhere], [SUBNET]).ok


def test_the_rule_tpuctl_offers_opens_what_default_allow_internal_does_from_the_workers_only():
    deny = rule("no-grpc", denied=[("tcp", ("8470",))], sources=["0.0.0.0/0"], priority=900)
    made = firewall.rule_for("pod", "lab-net", ["10.10.0.0/24"], [deny])
    assert made.name == "tpuctl-pod-workers" and made.network == "lab-net" and made.priority == 899
    assert made.source_ranges == ("10.10.0.0/24",) and made.direction == "INGRESS"
    assert dict(made.allowed) == {"tcp": ("0-65535",), "udp": ("0-65535",), "icmp": ()}
    assert firewall.check([made, deny], ["10.10.0.0/24"]).ok
    assert firewall.gcloud_create(made, "p-1") == (
        "gcloud compute firewall-rules create tpuctl-pod-workers --project p-1 --network lab-net "
        "--direction INGRESS --action ALLOW --rules tcp:0-65535,udp:0-65535,icmp --source-ranges 10.10.0.0/24 "
        "--priority 899")
    assert firewall.rule_for("pod", "lab-net", ["10.10.0.0/24"]).priority == 1000


def test_down_finds_only_the_rule_tpuctl_made_for_that_cluster():
    made = firewall.rule_for("pod", "lab-net", ["10.10.0.0/24"])
    imposter = rule(made.name, allowed=[TCP_ALL], description="someone else's")
    other = firewall.rule_for("pod-2", "lab-net", ["10.10.0.0/24"])
    assert firewall.owned([made, imposter, other], "pod") == [made]
    long = "a" * 63
    assert len(firewall.rule_name(long)) <= 63 and firewall.rule_name(long) != firewall.rule_name("a" * 62)
