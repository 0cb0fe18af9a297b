"""Whether a VPC's firewall lets a pod slice's workers reach each other, and the rule that would.
Pure: the rules and the workers' address ranges come from the provider.

What must pass: the job's one client, on worker 0, connects to every worker's TPU server on the
port of the node's ``networkEndpoints`` (tcp:8470, Cloud TPU v2 API), and the ``-pod`` runtime's
servers talk among themselves on further TCP ports that Google does not list. So tpuctl asks for
what the ``default`` network gives its subnets, ``default-allow-internal``: INGRESS ALLOW of every
TCP port from the workers' own range (its rule allows tcp:0-65535, udp:0-65535 and icmp from
10.128.0.0/9; https://cloud.google.com/firewall/docs/firewalls#more_rules_default_vpc). A network
other than ``default`` starts with no such rule, only the implied deny of all ingress ("No
manually created network has automatically created firewall rules"), and a ``default`` network
may have lost it. The workers carry no network tags, so a rule limited to target tags does not
reach them.

How VPC firewall rules combine (Compute ``Firewall``, google-cloud-compute 1.57): for each
connection the applicable rule with the lowest priority number wins, a DENY beats an ALLOW of
equal priority, the implied deny-all-ingress sits at 65535 (so an ALLOW at 65535 never wins),
sourceRanges OR sourceTags OR sourceServiceAccounts select the sender, targetTags or
targetServiceAccounts the receiver (neither: every instance), and an INGRESS rule with no source
applies to 0.0.0.0/0. Hierarchical and network firewall policies are not read.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..cloud.base import FirewallRule

PORTS = (1, 65535)          # every TCP port a connection can use
IMPLIED_DENY = 65535        # the priority of the implied deny-all-ingress rule
OWNER = "tpuctl-cluster="   # in the description of the rule tpuctl creates: what down deletes


@dataclass(frozen=True)
class Verdict:
    """Whether every TCP port is open between the workers, and if not what blocks it."""

    blocked: tuple[tuple[int, int], ...]   # TCP port ranges no applicable ALLOW opens
    denied_by: tuple[str, ...]             # DENY rules that win over an ALLOW somewhere
    allowed_by: tuple[str, ...]            # ALLOW rules that open some port

    @property
    def ok(self) -> bool:
        return not self.blocked

    def describe(self) -> str:
        ports = ",".join(f"tcp:{a}" if a == b else f"tcp:{a}-{b}" for a, b in self.blocked)
        if self.denied_by:
            return f"{ports} denied by rule {', '.join(self.denied_by)}"
        return f"{ports} not allowed by any rule"


def check(rules: Iterable[FirewallRule], ranges: Sequence[str], service_account: str | None = None) -> Verdict:
    """Whether INGRESS TCP from every address in ``ranges`` (the workers' subnetworks) reaches every
    worker on every port, under ``rules``. ``service_account``: the workers' account (a rule
    naming it as source or target applies; None, the Compute default account, matches none)."""
    nets = [ipaddress.ip_network(r, strict=False) for r in ranges]
    allows: list[tuple[int, int, int, str]] = []     # (priority, lo, hi, rule)
    denies: list[tuple[int, int, int, str]] = []
    for rule in rules:
        if rule.disabled or rule.direction != "INGRESS":
            continue
        if rule.allowed and _reaches_workers(rule, service_account, deny=False) and \
                _from_every_worker(rule, nets, service_account):
            allows += [(rule.priority, lo, hi, rule.name) for lo, hi in _tcp_ports(rule.allowed)]
        if rule.denied and _reaches_workers(rule, service_account, deny=True) and \
                _from_some_worker(rule, nets, service_account):
            denies += [(rule.priority, lo, hi, rule.name) for lo, hi in _tcp_ports(rule.denied)]
    cuts = sorted({PORTS[0], PORTS[1] + 1} | {p for _, lo, hi, _ in allows + denies for p in (lo, hi + 1)
                                              if PORTS[0] <= p <= PORTS[1] + 1})
    blocked: list[tuple[int, int]] = []
    denied_by: set[str] = set()
    allowed_by: set[str] = set()
    for lo, nxt in itertools.pairwise(cuts):
        hi = nxt - 1
        allow = min(((p, n) for p, a, b, n in allows if a <= lo and hi <= b), default=None)
        deny = min(((p, n) for p, a, b, n in denies if a <= lo and hi <= b), default=None)
        if allow is not None and allow[0] < IMPLIED_DENY and (deny is None or allow[0] < deny[0]):
            allowed_by.add(allow[1])
            continue
        if deny is not None and allow is not None:
            denied_by.add(deny[1])
        if blocked and blocked[-1][1] == lo - 1:
            blocked[-1] = (blocked[-1][0], hi)
        else:
            blocked.append((lo, hi))
    return Verdict(tuple(blocked), tuple(sorted(denied_by)), tuple(sorted(allowed_by)))


def rule_name(cluster: str) -> str:
    """The rule tpuctl creates for ``cluster`` (a Compute name: at most 63 characters)."""
    name = f"tpuctl-{cluster}-workers"
    if len(name) <= 63:
        return name
    return f"tpuctl-{cluster[:45]}-{hashlib.sha256(cluster.encode()).hexdigest()[:8]}"


def rule_for(cluster: str, network: str, ranges: Sequence[str], rules: Iterable[FirewallRule] = ()) -> FirewallRule:
    """The rule that lets the workers of ``cluster`` reach each other: what default-allow-internal
    allows, from the workers' own subnetworks only, ahead of any DENY rule that blocks them."""
    deny_priorities = [r.priority for r in rules if r.denied and not r.disabled and r.direction == "INGRESS"]
    priority = min([1000] + [p - 1 for p in deny_priorities if p > 0])
    return FirewallRule(
        name=rule_name(cluster), network=network, direction="INGRESS", priority=priority,
        source_ranges=tuple(sorted(set(ranges))),
        allowed=(("tcp", ("0-65535",)), ("udp", ("0-65535",)), ("icmp", ())),
        description=f"TPU VM pod slice workers reach each other; created by tpuctl up, deleted by "
                    f"tpuctl down ({OWNER}{cluster})")


def gcloud_create(rule: FirewallRule, project: str) -> str:
    """The gcloud command that creates ``rule``: the fix a user can paste."""
    rules = ",".join(f"{proto}:{','.join(ports)}" if ports else proto for proto, ports in rule.allowed)
    return (f"gcloud compute firewall-rules create {rule.name} --project {project} --network {rule.network} "
            f"--direction INGRESS --action ALLOW --rules {rules} --source-ranges {','.join(rule.source_ranges)} "
            f"--priority {rule.priority}")


def owned(rules: Iterable[FirewallRule], cluster: str) -> list[FirewallRule]:
    """The rules tpuctl created for ``cluster`` (its name and the owner mark in the description)."""
    return [r for r in rules if r.name == rule_name(cluster) and f"{OWNER}{cluster})" in r.description]


def _tcp_ports(protocols: Iterable[tuple[str, tuple[str, ...]]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for proto, ports in protocols:
        if proto.lower() not in ("tcp", "all", "6"):
            continue
        if not ports or proto.lower() == "all":
            out.append((0, 65535))
            continue
        for port in ports:
            lo, _, hi = str(port).partition("-")
            try:
                out.append((int(lo), int(hi or lo)))
            except ValueError:
                continue
    return out


def _sources(rule: FirewallRule) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    ranges = list(rule.source_ranges)
    if not ranges and not rule.source_tags and not rule.source_service_accounts:
        ranges = ["0.0.0.0/0"]     # an ingress rule without a source applies to every sender
    out = []
    for r in ranges:
        try:
            out.append(ipaddress.ip_network(r, strict=False))
        except ValueError:
            continue
    return out


def _reaches_workers(rule: FirewallRule, account: str | None, *, deny: bool) -> bool:
    if rule.target_tags:
        return False        # tpuctl's TPU VMs carry no network tags
    if rule.target_service_accounts:
        # the default account's address is not known here: a DENY may reach it, an ALLOW may not
        return account in rule.target_service_accounts if account else deny
    return True


def _from_every_worker(rule: FirewallRule, nets: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
                       account: str | None) -> bool:
    if account and account in rule.source_service_accounts:
        return True
    sources = [s for s in _sources(rule) if s.version == 4]
    return bool(nets) and all(any(n.version == 4 and n.subnet_of(s) for s in sources) for n in nets)


def _from_some_worker(rule: FirewallRule, nets: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
                      account: str | None) -> bool:
    if account and account in rule.source_service_accounts:
        return True
    return any(n.overlaps(s) for n in nets for s in _sources(rule) if s.version == n.version)
