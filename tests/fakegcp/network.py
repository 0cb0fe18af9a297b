"""VPC networks, subnetworks, routes, peerings, firewall rules and reserved global address ranges.

This is what makes TPU IP ranges a real problem in the fake: every project starts with an
auto-mode ``default`` network (one /20 per region, a 0.0.0.0/0 route), the admin API adds custom
subnets (with secondary ranges), routes and peerings, and :func:`used_ranges` is the one answer to
"what does a new TPU block or a new reserved range overlap?".
"""

from __future__ import annotations

import ipaddress
import re
import time
from dataclasses import dataclass, field
from typing import Any

from . import catalog
from .errors import ApiError
from .store import Store, compute_time

Net = ipaddress.IPv4Network


@dataclass
class Peering:
    name: str
    peer_network: str
    imported_ranges: list[str] = field(default_factory=list)
    state: str = "ACTIVE"


@dataclass
class Network:
    project: str
    name: str
    id: str
    auto: bool = True
    description: str = ""
    created: float = field(default_factory=time.time)
    peerings: list[Peering] = field(default_factory=list)


@dataclass
class Subnet:
    project: str
    region: str
    name: str
    network: str
    cidr: str                         # "" for an IPv6-only subnet (stackType IPV6_ONLY)
    id: str
    secondary: list[dict[str, str]] = field(default_factory=list)  # [{rangeName, ipCidrRange}]
    created: float = field(default_factory=time.time)
    ipv6: str | None = None           # internalIpv6Prefix (a /64 of the network's ULA range)
    private_google_access: bool = False   # privateIpGoogleAccess (routers.py sets it)

    @property
    def ipv6_only(self) -> bool:
        return not self.cidr


@dataclass
class Route:
    project: str
    name: str
    network: str
    dest_range: str
    id: str
    priority: int = 1000
    next_hop: dict[str, str] = field(default_factory=dict)
    description: str = ""
    created: float = field(default_factory=time.time)


@dataclass
class Address:
    project: str
    name: str
    id: str
    address: str
    prefix_length: int | None = None
    address_type: str = "EXTERNAL"
    purpose: str | None = None
    network: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    description: str = ""
    status: str = "RESERVED"
    created: float = field(default_factory=time.time)

    @property
    def range(self) -> Net | None:
        if self.prefix_length is None or self.address_type != "INTERNAL":
            return None
        return ipaddress.ip_network(f"{self.address}/{self.prefix_length}", strict=False)


@dataclass
class Firewall:
    """A VPC firewall rule, with the fields of Compute's ``Firewall`` (google-cloud-compute 1.57
    ``compute_v1.types.Firewall``: allowed/denied ``[{IPProtocol, ports}]``, direction, priority,
    source/target tags and service accounts, sourceRanges, disabled)."""

    project: str
    name: str
    network: str
    id: str
    direction: str = "INGRESS"
    priority: int = 1000
    source_ranges: list[str] = field(default_factory=list)
    destination_ranges: list[str] = field(default_factory=list)
    source_tags: list[str] = field(default_factory=list)
    target_tags: list[str] = field(default_factory=list)
    source_service_accounts: list[str] = field(default_factory=list)
    target_service_accounts: list[str] = field(default_factory=list)
    allowed: list[dict[str, Any]] = field(default_factory=list)
    denied: list[dict[str, Any]] = field(default_factory=list)
    disabled: bool = False
    description: str = ""
    created: float = field(default_factory=time.time)


# The rules Google creates with a project's auto-mode default network ("Prepopulated rules in the
# default network", https://cloud.google.com/firewall/docs/firewalls#more_rules_default_vpc), as
# firewalls.list returns them (GoogleCloudPlatform/gcpdiag test-data/gce6/json-dumps/
# compute-effective-firewalls-default.json): all at priority 65534, INGRESS, no target tags.
DEFAULT_FIREWALLS = (
    ("default-allow-internal", "Allow internal traffic on the default network", ["10.128.0.0/9"],
     [{"IPProtocol": "tcp", "ports": ["0-65535"]}, {"IPProtocol": "udp", "ports": ["0-65535"]},
      {"IPProtocol": "icmp"}]),
    ("default-allow-ssh", "Allow SSH from anywhere", ["0.0.0.0/0"], [{"IPProtocol": "tcp", "ports": ["22"]}]),
    ("default-allow-rdp", "Allow RDP from anywhere", ["0.0.0.0/0"], [{"IPProtocol": "tcp", "ports": ["3389"]}]),
    ("default-allow-icmp", "Allow ICMP from anywhere", ["0.0.0.0/0"], [{"IPProtocol": "icmp"}]),
)


@dataclass(frozen=True)
class UsedRange:
    cidr: Net
    source: str                       # "projects/p/regions/r/subnetworks/s", ...
    owner_node: str | None = None     # a reserved address labelled tpu-node=<node id>


OWNER_LABEL = "tpu-node"
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def valid_name(name: str) -> bool:
    return bool(_NAME_RE.match(name or ""))


def network_name(ref: str | None) -> str:
    """'default', 'global/networks/x', 'projects/p/global/networks/x' or a URL -> 'x'."""
    if not ref:
        return "default"
    return ref.rstrip("/").rsplit("/", 1)[-1]


def network_path(project: str, name: str) -> str:
    return f"projects/{project}/global/networks/{name}"


def ensure_project(store: Store, project: str) -> None:
    """Seed a project on first sight: the auto-mode default network, its subnets and routes."""
    if project in store.projects:
        return
    store.projects.add(project)
    store.networks[(project, "default")] = Network(project, "default", store.new_id(), auto=True,
                                                   description="Default network for the project")
    for region, (cidr, _) in catalog.REGIONS.items():
        _add_subnet(store, project, region, "default", "default", cidr, [])
    add_route(store, project, "default", "0.0.0.0/0",
              {"nextHopGateway": f"projects/{project}/global/gateways/default-internet-gateway"},
              description="Default route to the Internet.")
    for name, description, sources, allowed in DEFAULT_FIREWALLS:
        store.firewalls[(project, name)] = Firewall(project, name, "default", store.new_id(), priority=65534,
                                                    source_ranges=list(sources), allowed=list(allowed),
                                                    description=description)


def _route_suffix(store: Store) -> str:
    return f"{int(store.new_id()):016x}"[-16:]


def _add_subnet(store: Store, project: str, region: str, name: str, network: str, cidr: str,
                secondary: list[dict[str, str]]) -> Subnet:
    sub = Subnet(project, region, name, network, cidr, store.new_id(), secondary)
    if sub.ipv6_only:
        # an internal (ULA) /64 of fd20::/20, where Google takes a network's internal IPv6 range
        n = int(sub.id) % (1 << 44)
        sub.ipv6 = str(ipaddress.ip_network(((0xfd2 << 116) | (n << 64), 64)))
    store.subnets[(project, region, name)] = sub
    dest = sub.cidr or sub.ipv6 or ""
    add_route(store, project, network, dest,
              {"nextHopNetwork": network_path(project, network)},
              description=f"Default local route to the subnetwork {dest}.", priority=0)
    return sub


def add_route(store: Store, project: str, network: str, dest: str, next_hop: dict[str, str],
              *, name: str | None = None, description: str = "", priority: int = 1000) -> Route:
    name = name or f"default-route-{_route_suffix(store)}"
    route = Route(project, name, network, str(ipaddress.ip_network(dest, strict=False)), store.new_id(),
                  priority, next_hop, description)
    store.routes[(project, name)] = route
    return route


def add_network(store: Store, project: str, name: str, auto: bool) -> Network:
    ensure_project(store, project)
    if (project, name) in store.networks:
        raise ApiError(6, f"The resource '{network_path(project, name)}' already exists",
                       compute_reason="alreadyExists")
    net = Network(project, name, store.new_id(), auto=auto)
    store.networks[(project, name)] = net
    if auto:
        for region, (cidr, _) in catalog.REGIONS.items():
            _add_subnet(store, project, region, name, name, cidr, [])
    return net


def add_subnet(store: Store, project: str, region: str, name: str, network: str, cidr: str,
               secondary: list[dict[str, str]]) -> Subnet:
    ensure_project(store, project)
    get_network(store, project, network)
    if (project, region, name) in store.subnets:
        raise ApiError(6, f"The resource 'projects/{project}/regions/{region}/subnetworks/{name}' "
                          "already exists", compute_reason="alreadyExists")
    return _add_subnet(store, project, region, name, network, cidr, secondary)


def add_peering(store: Store, project: str, network: str, name: str, peer_network: str,
                imported_ranges: list[str]) -> Peering:
    net = get_network(store, project, network)
    peering = Peering(name, peer_network, [str(ipaddress.ip_network(r, strict=False))
                                           for r in imported_ranges])
    net.peerings = [p for p in net.peerings if p.name != name] + [peering]
    return peering


def get_network(store: Store, project: str, name: str) -> Network:
    ensure_project(store, project)
    net = store.networks.get((project, name))
    if net is None:
        raise ApiError(5, f"The resource '{network_path(project, name)}' was not found",
                       compute_reason="notFound")
    return net


def used_ranges(store: Store, project: str, network: str) -> list[UsedRange]:
    """Every range on ``network`` a TPU block must not overlap (TPU nodes are added by tpu.py)."""
    ensure_project(store, project)
    out: list[UsedRange] = []
    for sub in store.subnets.values():
        if sub.project == project and sub.network == network:
            src = f"projects/{project}/regions/{sub.region}/subnetworks/{sub.name}"
            if sub.cidr:        # an IPv6-only subnet holds no IPv4 range
                out.append(UsedRange(ipaddress.ip_network(sub.cidr), src))
            for sec in sub.secondary:
                out.append(UsedRange(ipaddress.ip_network(sec["ipCidrRange"]),
                                     f"{src} (secondary range {sec.get('rangeName', '')})"))
    for route in store.routes.values():
        if route.project == project and route.network == network:
            net = ipaddress.ip_network(route.dest_range)
            if net.version == 4 and net.prefixlen >= 8:  # a default or very wide route claims nothing
                out.append(UsedRange(net, f"projects/{project}/global/routes/{route.name}"))
    net_rec = store.networks.get((project, network))
    for peering in net_rec.peerings if net_rec else []:
        for r in peering.imported_ranges:
            out.append(UsedRange(ipaddress.ip_network(r),
                                 f"{network_path(project, network)} peering {peering.name}"))
    for addr in store.addresses.values():
        rng = addr.range
        if addr.project == project and rng is not None and network_name(addr.network) == network:
            out.append(UsedRange(rng, f"projects/{project}/global/addresses/{addr.name}",
                                 owner_node=addr.labels.get(OWNER_LABEL)))
    return out


def subnet_for(store: Store, project: str, network: str, region: str,
               subnetwork: str | None = None) -> Subnet:
    ensure_project(store, project)
    if subnetwork:
        sub = store.subnets.get((project, region, network_name(subnetwork)))
        if sub is None:
            raise ApiError(3, f"Invalid value for field 'subnetwork': '{subnetwork}'. "
                              "The referenced subnetwork resource cannot be found.")
        return sub
    for sub in store.subnets.values():
        if sub.project == project and sub.network == network and sub.region == region and not sub.ipv6_only:
            return sub
    raise ApiError(3, f"Invalid value for field 'network': '{network_path(project, network)}'. "
                      f"The network has no subnetwork in region {region}.")


def allocate_ip(store: Store, sub: Subnet) -> str:
    if sub.ipv6_only:
        raise ApiError(3, f"Invalid value for field 'subnetwork': '{sub.name}'. IPv6-only subnetworks "
                          "are not implemented by the fake cloud (docs/fakegcp.md).")
    net = ipaddress.ip_network(sub.cidr)
    first, last = int(net.network_address) + 2, int(net.broadcast_address) - 1
    return str(ipaddress.ip_address(store.next_ip(f"{sub.project}/{sub.region}/{sub.name}", first, last)))


# -- Compute Engine JSON ------------------------------------------------------------------------
def network_json(store: Store, net: Network) -> dict[str, Any]:
    subs = [store.link(f"projects/{net.project}/regions/{s.region}/subnetworks/{s.name}")
            for s in store.subnets.values() if s.project == net.project and s.network == net.name]
    out: dict[str, Any] = {
        "kind": "compute#network", "id": net.id, "creationTimestamp": compute_time(net.created),
        "name": net.name, "description": net.description,
        "selfLink": store.link(network_path(net.project, net.name)),
        "selfLinkWithId": store.link(f"projects/{net.project}/global/networks/{net.id}"),
        "autoCreateSubnetworks": net.auto, "subnetworks": subs,
        "routingConfig": {"routingMode": "REGIONAL"}, "mtu": 1460,
        "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
    }
    if net.peerings:
        out["peerings"] = [{
            "name": p.name, "network": p.peer_network if "://" in p.peer_network else store.link(p.peer_network),
            "state": p.state, "stateDetails": "[2024-01-01T00:00:00.000-00:00]: Connected.",
            "autoCreateRoutes": True, "exportCustomRoutes": False, "importCustomRoutes": False,
            "exchangeSubnetRoutes": True, "exportSubnetRoutesWithPublicIp": False,
            "importSubnetRoutesWithPublicIp": False, "stackType": "IPV4_ONLY",
        } for p in net.peerings]
    return out


def subnet_json(store: Store, sub: Subnet) -> dict[str, Any]:
    if sub.ipv6_only:
        # as Compute Engine describes an IPv6-only subnet: no ipCidrRange (the field is IPv4 only,
        # "Only IPv4 is supported"), stackType IPV6_ONLY, the internal /64 in internalIpv6Prefix
        return {
            "kind": "compute#subnetwork", "id": sub.id, "creationTimestamp": compute_time(sub.created),
            "name": sub.name, "network": store.link(network_path(sub.project, sub.network)),
            "region": store.link(f"projects/{sub.project}/regions/{sub.region}"),
            "selfLink": store.link(f"projects/{sub.project}/regions/{sub.region}/subnetworks/{sub.name}"),
            "privateIpGoogleAccess": False, "fingerprint": sub.id[-11:], "stackType": "IPV6_ONLY",
            "ipv6AccessType": "INTERNAL", "internalIpv6Prefix": sub.ipv6, "purpose": "PRIVATE",
        }
    net = ipaddress.ip_network(sub.cidr)
    out: dict[str, Any] = {
        "kind": "compute#subnetwork", "id": sub.id, "creationTimestamp": compute_time(sub.created),
        "name": sub.name, "network": store.link(network_path(sub.project, sub.network)),
        "ipCidrRange": sub.cidr, "gatewayAddress": str(net.network_address + 1),
        "region": store.link(f"projects/{sub.project}/regions/{sub.region}"),
        "selfLink": store.link(f"projects/{sub.project}/regions/{sub.region}/subnetworks/{sub.name}"),
        "privateIpGoogleAccess": sub.private_google_access, "fingerprint": sub.id[-11:], "stackType": "IPV4_ONLY",
        "purpose": "PRIVATE",
    }
    if sub.secondary:
        out["secondaryIpRanges"] = [dict(s) for s in sub.secondary]
    return out


def route_json(store: Store, route: Route) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "compute#route", "id": route.id, "creationTimestamp": compute_time(route.created),
        "name": route.name, "description": route.description,
        "network": store.link(network_path(route.project, route.network)),
        "destRange": route.dest_range, "priority": route.priority,
        "selfLink": store.link(f"projects/{route.project}/global/routes/{route.name}"),
        "routeType": "SUBNET" if "nextHopNetwork" in route.next_hop else "STATIC",
        "routeStatus": "ACTIVE",
    }
    for key, value in route.next_hop.items():
        out[key] = value if "://" in value or key == "nextHopIp" else store.link(value)
    return out


def firewall_json(store: Store, rule: Firewall) -> dict[str, Any]:
    """A rule as firewalls.get/list return it (gcpdiag's dump above): empty lists left out."""
    out: dict[str, Any] = {
        "kind": "compute#firewall", "id": rule.id, "creationTimestamp": compute_time(rule.created),
        "name": rule.name, "description": rule.description,
        "network": store.link(network_path(rule.project, rule.network)), "priority": rule.priority,
        "direction": rule.direction, "logConfig": {"enable": False}, "disabled": rule.disabled,
        "selfLink": store.link(f"projects/{rule.project}/global/firewalls/{rule.name}"),
    }
    for key, value in (("sourceRanges", rule.source_ranges), ("destinationRanges", rule.destination_ranges),
                       ("sourceTags", rule.source_tags), ("targetTags", rule.target_tags),
                       ("sourceServiceAccounts", rule.source_service_accounts),
                       ("targetServiceAccounts", rule.target_service_accounts),
                       ("allowed", rule.allowed), ("denied", rule.denied)):
        if value:
            out[key] = [dict(v) if isinstance(v, dict) else v for v in value]
    return out


def address_json(store: Store, addr: Address) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "compute#address", "id": addr.id, "creationTimestamp": compute_time(addr.created),
        "name": addr.name, "description": addr.description, "address": addr.address,
        "status": addr.status, "addressType": addr.address_type,
        "selfLink": store.link(f"projects/{addr.project}/global/addresses/{addr.name}"),
        "labelFingerprint": "42WmSpB8rSM=", "networkTier": "PREMIUM",
        "ipVersion": "IPV4",
    }
    if addr.prefix_length is not None:
        out["prefixLength"] = addr.prefix_length
    if addr.purpose:
        out["purpose"] = addr.purpose
    if addr.network:
        out["network"] = store.link(network_path(addr.project, network_name(addr.network)))
    if addr.labels:
        out["labels"] = dict(addr.labels)
    return out
