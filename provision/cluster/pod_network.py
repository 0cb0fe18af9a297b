"""Before ``up`` creates anything: the network's firewall lets a multi-host TPU VM slice's workers
reach each other (provision/cluster/firewall.py decides), or ``--create-firewall-rule`` adds the
rule that does; ``down`` removes the rule it added. A single-host slice, a TPU Node and the local
provider (no firewall) need nothing."""

from __future__ import annotations

from collections.abc import Callable

from ..basics.errors import TpuctlError, UsageError
from ..cloud.base import Arch, ClusterSpec, Provider
from . import firewall

Log = Callable[[str], None]


def needs_check(spec: ClusterSpec) -> bool:
    return spec.arch == Arch.VM and spec.accelerator.multi_host


def ensure(provider: Provider, spec: ClusterSpec, *, create: bool, dry_run: bool, log: Log) -> str | None:
    """Check (or create) the rule for ``spec``; returns a note for the summary, or None. Raises a
    UsageError (exit 2) naming the rule and the gcloud command when the workers are cut off."""
    if not needs_check(spec):
        return None
    rules = provider.firewall_rules(spec.network)
    if rules is None:
        return None
    ranges = sorted({r for zone in spec.zones for r in provider.worker_ranges(spec, zone)})
    if not ranges:
        raise UsageError(f"network {spec.network} has no IPv4 subnetwork in the region of "
                         f"{', '.join(spec.zones)} for the TPU VM workers",
                         hint="add one, or pass --subnetwork / --network with one")
    verdict = firewall.check(rules, ranges, spec.service_account)
    if verdict.ok:
        return None
    rule = firewall.rule_for(spec.name, spec.network, ranges, rules)
    what = (f"the firewall of network {spec.network} keeps the workers of a {spec.accelerator_type} from "
            f"reaching each other ({verdict.describe()}, from {', '.join(ranges)})")
    if not create:
        raise UsageError(what, hint=f"create the rule: {firewall.gcloud_create(rule, spec.project or 'PROJECT')}"
                                    " (or re-run with --create-firewall-rule)")
    if dry_run:
        return f"would create firewall rule {rule.name} on network {spec.network}"
    log(f"creating firewall rule {rule.name} on network {spec.network} (tcp, udp, icmp from "
        f"{', '.join(ranges)})")
    provider.create_firewall_rule(rule)
    after = firewall.check(provider.firewall_rules(spec.network) or [], ranges, spec.service_account)
    if not after.ok:
        remove(provider, spec)
        raise UsageError(f"{what}; rule {rule.name} does not help ({after.describe()}), deleted it again",
                         hint="remove or narrow the DENY rule named, then re-run")
    return f"firewall rule {rule.name} lets the workers reach each other; tpuctl down {spec.name} deletes it"


def owned(provider: Provider, spec: ClusterSpec) -> list[str]:
    """The rules ``ensure`` created for ``spec``'s cluster that are still there."""
    if not needs_check(spec):
        return []
    try:
        rules = provider.firewall_rules(spec.network)
    except TpuctlError:
        return []
    return [rule.name for rule in firewall.owned(rules or [], spec.name)]


def remove(provider: Provider, spec: ClusterSpec) -> list[str]:
    """Delete the rule ``ensure`` created for ``spec``'s cluster; returns what was deleted."""
    return [f"firewall rule {name}" for name in owned(provider, spec) if provider.delete_firewall_rule(name)]
