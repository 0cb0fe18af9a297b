"""The hosts' identity under ``up --least-privilege``: the account's name and marker, and whether
the hosts need external IPs. Pure: the caller reads the account, the subnetworks and the Cloud
Routers; this module decides.

The account: ``tpuctl-CLUSTER`` (IAM's rule for an account id, in iam.v1's discovery document:
6-30 characters matching ``[a-z]([-a-z0-9]*[a-z0-9])``; a long cluster name is cut and given a
short digest of the whole name, so two clusters never share one). Its description is tpuctl's
marker, naming the cluster: ``up`` adopts and ``down`` deletes only an account that carries it.

External IPs: the hosts reach Google's APIs (the bucket, the metadata server needs no route) and,
at boot, PyPI (``pip install`` of tpuctl's wheel resolves its dependencies there) and the image's
apt mirror (python3-venv, where the image lacks it). Private Google Access reaches only Google's
APIs, so only a Cloud NAT that serves the hosts' subnetwork (a PUBLIC NAT for VM endpoints, over
the subnetwork's primary range) lets them go without external IPs. With Private Google Access
alone, the external IPs stay, and the line says why and the two commands that add NAT.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "tpuctl-"
ACCOUNT_ID_RE = re.compile(r"^[a-z](?:[-a-z0-9]*[a-z0-9])$")
MAX_ID = 30
DISPLAY_NAME = "tpuctl {cluster}"
MARKER = "tpuctl: the hosts of cluster {cluster} (tpuctl up --least-privilege); tpuctl down {cluster} deletes it"
_MARKER_RE = re.compile(r"^tpuctl: the hosts of cluster ([a-z0-9-]+) \(tpuctl up --least-privilege\)")

# What a Cloud NAT must say to carry a host's traffic to the internet (compute v1 RouterNat):
ALL_SUBNETS = ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")
PRIMARY = ("ALL_IP_RANGES", "PRIMARY_IP_RANGE")     # sourceIpRangesToNat that cover a VM's own address


def account_id(cluster: str) -> str:
    """``tpuctl-CLUSTER``, or for a name too long ``tpuctl-PART-DIGEST`` (30 characters at most)."""
    whole = PREFIX + cluster              # a cluster name is 1-63 characters: at least 8 here
    if len(whole) <= MAX_ID:
        return whole
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:6]
    part = cluster[:MAX_ID - len(PREFIX) - len(digest) - 1].rstrip("-")
    return f"{PREFIX}{part}-{digest}"


def email(cluster: str, project: str) -> str:
    """The account's address: ``ID@PROJECT.iam.gserviceaccount.com`` (a domain-scoped project
    ``example.com:proj`` becomes ``proj.example.com``, as IAM writes it)."""
    domain, _, name = project.rpartition(":")
    host = f"{name}.{domain}" if domain else project
    return f"{account_id(cluster)}@{host}.iam.gserviceaccount.com"


def marker(cluster: str) -> str:
    return MARKER.format(cluster=cluster)


def display_name(cluster: str) -> str:
    return DISPLAY_NAME.format(cluster=cluster)[:100]


def made_for(account: Mapping[str, Any]) -> str | None:
    """The cluster whose hosts tpuctl made ``account`` for (its description's marker), else None."""
    m = _MARKER_RE.match(str(account.get("description") or ""))
    return m.group(1) if m else None


def ours(account: Mapping[str, Any], cluster: str) -> bool:
    return made_for(account) == cluster


# ---- external IPs -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Subnet:
    name: str
    region: str
    network: str
    private_google_access: bool


@dataclass(frozen=True)
class Nat:
    router: str
    name: str
    region: str
    network: str
    public: bool = True                  # type PUBLIC (the default); a PRIVATE NAT reaches no internet
    for_vms: bool = True                 # endpointTypes includes ENDPOINT_TYPE_VM (the default)
    all_subnets: bool = False            # sourceSubnetworkIpRangesToNat ALL_SUBNETWORKS_*
    subnets: tuple[str, ...] = ()        # LIST_OF_SUBNETWORKS: the names whose primary range it serves

    def serves(self, sub: Subnet) -> bool:
        return (self.public and self.for_vms and self.network == sub.network and self.region == sub.region
                and (self.all_subnets or sub.name in self.subnets))

    @property
    def where(self) -> str:
        return f"Cloud NAT {self.name} on router {self.router}"


def _short(link: Any) -> str:
    return str(link or "").rstrip("/").rsplit("/", 1)[-1]


def nats_of(router: Mapping[str, Any]) -> list[Nat]:
    """The NATs of one compute v1 ``Router`` answer."""
    out = []
    for nat in router.get("nats") or []:
        if not isinstance(nat, dict):
            continue
        ranges = nat.get("sourceSubnetworkIpRangesToNat") or ""
        listed = tuple(_short(s.get("name")) for s in nat.get("subnetworks") or []
                       if isinstance(s, dict) and set(s.get("sourceIpRangesToNat") or ["ALL_IP_RANGES"]) & set(PRIMARY))
        endpoints = nat.get("endpointTypes") or ["ENDPOINT_TYPE_VM"]
        out.append(Nat(router=str(router.get("name") or "?"), name=str(nat.get("name") or "?"),
                       region=_short(router.get("region")), network=_short(router.get("network")),
                       public=(nat.get("type") or "PUBLIC") == "PUBLIC", for_vms="ENDPOINT_TYPE_VM" in endpoints,
                       all_subnets=ranges in ALL_SUBNETS,
                       subnets=listed if ranges == "LIST_OF_SUBNETWORKS" else ()))
    return out


def subnet_of(answer: Mapping[str, Any]) -> Subnet:
    """One compute v1 ``Subnetwork`` answer."""
    return Subnet(name=str(answer.get("name") or "?"), region=_short(answer.get("region")),
                  network=_short(answer.get("network")), private_google_access=bool(answer.get("privateIpGoogleAccess")))


@dataclass(frozen=True)
class Egress:
    external_ips: bool
    line: str                 # what ``up`` prints: "hosts: no external IPs: ..." or "hosts: external IPs kept: ..."


def nat_commands(network: str, region: str) -> str:
    return (f"gcloud compute routers create tpuctl-nat --network {network} --region {region} && "
            f"gcloud compute routers nats create tpuctl-nat --router tpuctl-nat --region {region} "
            f"--auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges")


def egress(network: str, regions: Sequence[str], subnets: Iterable[Subnet], nats: Iterable[Nat]) -> Egress:
    """Whether the hosts keep external IPs, decided for every region ``up`` may put them in, over
    the subnetworks they would take addresses from there (``--subnetwork``, else the network's)."""
    subnets, nats = list(subnets), list(nats)
    served: list[str] = []
    for region in regions:
        here = [s for s in subnets if s.region == region and s.network == network]
        if not here:
            return Egress(True, f"hosts: external IPs kept: network {network} has no subnetwork tpuctl could "
                                f"read in {region}")
        for sub in here:
            nat = next((n for n in nats if n.serves(sub)), None)
            if nat is None:
                why = (f"subnetwork {sub.name} in {region} has Private Google Access but no Cloud NAT, and the hosts' "
                       f"bootstrap installs tpuctl's dependencies from PyPI" if sub.private_google_access else
                       f"no Cloud NAT serves subnetwork {sub.name} in {region}, and the hosts reach PyPI and "
                       f"Google's APIs through them")
                return Egress(True, f"hosts: external IPs kept: {why}; to drop them, add NAT: "
                                    f"{nat_commands(network, region)}")
            google = ("Google's APIs through Private Google Access" if sub.private_google_access else
                      "Google's APIs through the NAT too")
            served.append(f"{nat.where} serves subnetwork {sub.name} in {region} (PyPI and apt through it, {google})")
    return Egress(False, "hosts: no external IPs: " + "; ".join(dict.fromkeys(served)))
