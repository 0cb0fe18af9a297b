"""The provider interface: what tpuctl needs from a cloud, and nothing more.

Providers only translate between these dataclasses and a cloud's API: create, get, list and
delete host VMs and TPU nodes, read long-running operations, and list the IP ranges in use on a
network. Every decision (which CIDR block, what to do after a preemption, which zone next, what
is idle) lives in the pure core, which is why the local provider and the GCP provider run the
very same control plane.
"""

from __future__ import annotations

import enum
import ipaddress
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..basics import validate
from ..basics.errors import UsageError
from ..catalog.accelerators import AcceleratorType
from ..catalog.accelerators import parse as parse_accelerator
from ..catalog.machines import AUTO as AUTO_MACHINE_TYPE
from ..catalog.prices import PriceBook
from . import capacity as capacities
from .capacity import Capacity

# Where TPU blocks are allocated unless the config's tpu_cidr_pool says otherwise (ctpu's 10.240/16).
IPv4Network = ipaddress.IPv4Network
DEFAULT_POOL = ipaddress.ip_network("10.240.0.0/16")


@dataclass(frozen=True)
class Used:
    """A range in use, with what uses it (for an error message that names the culprit)."""

    network: IPv4Network
    source: str
    kind: str = "other"   # "subnet", "secondary", "route", "peering", "tpu", "reservation", "other"

    @classmethod
    def of(cls, cidr: str, source: str, kind: str = "other") -> Used:
        return cls(ipaddress.ip_network(cidr, strict=False), source, kind)


def parse_pool(value: str | None) -> IPv4Network:
    if not value:
        return DEFAULT_POOL
    from ..basics.validate import cidr as check_cidr

    return check_cidr(value)


class Arch(str, enum.Enum):
    NODE = "node"   # TPU Node: a TPU reached over gRPC from a separate Compute Engine VM (v1 API)
    VM = "vm"       # TPU VM: the TPU hosts run the job themselves (v2 API)


class Reported(str, enum.Enum):
    """A state as the API reports it: an enum member, its name, or a value this version of
    tpuctl does not know yet (UNKNOWN rather than a crash when Google adds a state)."""

    @classmethod
    def of(cls, value: Any) -> Any:
        name = getattr(value, "name", value)
        try:
            return cls(str(name))
        except ValueError:
            return cls.UNKNOWN  # type: ignore[attr-defined]


class TpuState(Reported):
    """The Cloud TPU node states (the same in the v1 and v2 APIs)."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    REIMAGING = "REIMAGING"
    DELETING = "DELETING"
    REPAIRING = "REPAIRING"
    STOPPED = "STOPPED"
    STOPPING = "STOPPING"
    STARTING = "STARTING"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    HIDING = "HIDING"
    HIDDEN = "HIDDEN"
    UNHIDING = "UNHIDING"
    UNKNOWN = "UNKNOWN"


class Health(Reported):
    HEALTH_UNSPECIFIED = "HEALTH_UNSPECIFIED"
    HEALTHY = "HEALTHY"
    TIMEOUT = "TIMEOUT"
    UNHEALTHY_TENSORFLOW = "UNHEALTHY_TENSORFLOW"
    UNHEALTHY_MAINTENANCE = "UNHEALTHY_MAINTENANCE"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, value: Any) -> Health:
        if getattr(value, "name", value) in (None, "", 0):
            return cls.HEALTH_UNSPECIFIED
        return super().of(value)


class VmState(Reported):
    """Compute Engine instance states."""

    PROVISIONING = "PROVISIONING"
    STAGING = "STAGING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    REPAIRING = "REPAIRING"
    TERMINATED = "TERMINATED"
    UNKNOWN = "UNKNOWN"


class QueuedState(Reported):
    """A queued resource's states (google-cloud-tpu ``tpu_v2.QueuedResourceState.State``)."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    ACCEPTED = "ACCEPTED"
    PROVISIONING = "PROVISIONING"
    FAILED = "FAILED"
    DELETING = "DELETING"
    ACTIVE = "ACTIVE"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"
    UNKNOWN = "UNKNOWN"


# A FAILED request "remains in the queue until it is explicitly deleted" and a SUSPENDED one "is no
# longer eligible for further allocation" (cloud.google.com/tpu/docs/queued-resources); both keep
# holding quota until deleted (marin-community/marin#87).
DEAD_QUEUED_STATES = frozenset({QueuedState.FAILED, QueuedState.SUSPENDED})
# Asked for, not yet given: no node, but it holds quota and becomes a billed TPU once capacity frees
# up (WAITING_FOR_RESOURCES replaced ACCEPTED; CREATING is the request being admitted).
WAITING_QUEUED_STATES = frozenset({QueuedState.CREATING, QueuedState.ACCEPTED, QueuedState.WAITING_FOR_RESOURCES,
                                   QueuedState.STATE_UNSPECIFIED})
# States in which a request has (or is making, or is deleting) its nodes: deleting it then needs
# ``force`` (DeleteQueuedResourceRequest.force: without it a request is deleted only once its nodes
# are gone, or in ACCEPTED, FAILED or SUSPENDED).
NODE_QUEUED_STATES = frozenset({QueuedState.PROVISIONING, QueuedState.ACTIVE, QueuedState.SUSPENDING})


# States in which a TPU holds quota or bills but can never train again without being recreated.
DEAD_TPU_STATES = frozenset({TpuState.PREEMPTED, TpuState.TERMINATED})
# States on the way to READY.
PENDING_TPU_STATES = frozenset({TpuState.CREATING, TpuState.STARTING, TpuState.RESTARTING,
                                TpuState.REIMAGING, TpuState.REPAIRING, TpuState.UNHIDING})


# Which API makes a cluster's TPU: "tpu" (the Cloud TPU API: nodes, queued resources), "compute"
# (Compute Engine: instances, and MIGs with a workload policy for multi-host slices), or "auto":
# Compute Engine where the zone lists the generation's machine type, else the Cloud TPU API.
APIS = ("auto", "tpu", "compute")

# The host VM's machine type unless --machine-type names one: the first of
# catalog.machines.PREFERENCE that the zone offers, chosen by ``up`` when it plans.
DEFAULT_MACHINE_TYPE = AUTO_MACHINE_TYPE
DEFAULT_NETWORK = "default"


@dataclass(frozen=True)
class ClusterSpec:
    """Everything ``tpuctl up`` was asked for; validated on construction."""

    name: str
    accelerator_type: str
    zones: tuple[str, ...]
    provider: str = "local"
    project: str | None = None
    arch: Arch = Arch.VM
    preemptible: bool = False
    spot: bool = False
    machine_type: str | None = DEFAULT_MACHINE_TYPE  # host VM ("auto": the zone's first preferred); None: none
    runtime_version: str | None = None               # TPU VM image (arch vm); None: the zone's best (up)
    tensorflow_version: str | None = None            # TPU Node TensorFlow (arch node), or the TF of the image (vm)
    cidr: str | None = None                          # requested block; None: allocate
    network: str = DEFAULT_NETWORK
    subnetwork: str | None = None
    bucket: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    queued: bool = False
    valid_until_seconds: float | None = None
    external_ips: bool = True
    service_account: str | None = None
    autodown_seconds: float | None = None
    # every type that would do (``--accelerator-type v5litepod-8,v6e-8``), ``accelerator_type`` one
    # of them (the one asked for or made); empty: only ``accelerator_type``
    accelerator_types: tuple[str, ...] = ()
    in_order: bool = False                           # try the types as listed, not cheapest first
    api: str = "auto"                                # "auto", "tpu" or "compute" (APIS)
    # how the TPU is paid for, in the order to try (provision.cloud.capacity); empty: from --spot
    # and --preemptible (spot), else on demand
    capacity: tuple[str, ...] = ()
    flex_seconds: float | None = None                # a flex-start run's length (10 min to 7 days)
    reservation: str | None = None                   # the reservation a "reservation" capacity uses

    def __post_init__(self) -> None:
        validate.cluster_name(self.name)
        object.__setattr__(self, "zones", validate.zones(self.zones))
        object.__setattr__(self, "arch", Arch(self.arch))
        acc = parse_accelerator(self.accelerator_type)
        object.__setattr__(self, "accelerator_type", acc.name)
        types = tuple(dict.fromkeys(parse_accelerator(t).name for t in self.accelerator_types or ()))
        if len(types) <= 1:
            types = ()
        elif acc.name not in types:
            raise UsageError(f"{acc.name} is not among the accelerator types {','.join(types)}",
                             hint="list it in --accelerator-type")
        object.__setattr__(self, "accelerator_types", types)
        if types and self.arch == Arch.NODE:
            raise UsageError("several accelerator types are for TPU VMs",
                             hint="use --arch vm, or name one type with --arch node")
        for other in self.candidates:
            if not other.supports(self.arch.value):
                archs = " or ".join(f"--arch {a}" for a in other.generation.architectures)
                raise UsageError(
                    f"{other.name} is not offered as a TPU {'Node' if self.arch == Arch.NODE else 'VM'}",
                    hint=f"use {archs}")
        if self.preemptible and self.spot:
            raise UsageError("--preemptible and --spot both given", hint="choose one of them")
        if self.spot and self.arch == Arch.NODE:
            raise UsageError("spot is not offered for TPU Nodes", hint="use --preemptible with --arch node")
        if self.arch == Arch.NODE and not self.machine_type:
            raise UsageError("a TPU Node needs a host VM to run TensorFlow",
                                      hint="drop --no-vm, or use --arch vm")
        if self.queued and self.arch == Arch.NODE:
            raise UsageError("--queued is for TPU VMs", hint="use --arch vm with --queued")
        if self.valid_until_seconds is not None and not self.queued:
            raise UsageError("--valid-until needs --queued", hint="add --queued")
        self._check_capacity()
        if self.cidr:
            validate.cidr(self.cidr)
        # Every value that ends up in a resource path, a label or instance metadata is checked here,
        # so nothing hostile reaches the cloud (or a host's startup script).
        validate.network(self.network)
        if self.subnetwork:
            validate.network(self.subnetwork, "subnetwork")
        if self.machine_type:
            validate.machine_type(self.machine_type)
        if self.runtime_version:
            validate.software_version(self.runtime_version, "--runtime-version")
        if self.tensorflow_version:
            validate.software_version(self.tensorflow_version, "--tf-version")
        if self.service_account:
            validate.service_account(self.service_account)
        if self.bucket:
            validate.bucket_url(self.bucket)
        if self.project and self.provider == "gcp":
            validate.project(self.project)
        labels = dict(self.labels)
        for key, value in labels.items():
            if not isinstance(key, str) or not validate.LABEL_KEY_RE.match(key) \
                    or not isinstance(value, str) or not validate.LABEL_VALUE_RE.match(value):
                validate.label(f"{key}={value}")   # raises the one-line error for that label
        object.__setattr__(self, "labels", labels)

    def _check_capacity(self) -> None:
        """The API and the capacity order: what cannot be asked for fails here, before anything."""
        if self.api not in APIS:
            raise UsageError(f"unknown --api {self.api!r}", hint="use --api auto, tpu or compute")
        if self.api == "compute" and self.arch == Arch.NODE:
            raise UsageError("--api compute makes TPU VMs", hint="use --arch vm, or --api tpu for a TPU Node")
        order = capacities.parse(self.capacity) if self.capacity else ()
        if order and (self.spot or self.preemptible) and order != (Capacity.SPOT,):
            raise UsageError("--spot/--preemptible and --capacity both given",
                             hint="list spot in --capacity instead, e.g. --capacity spot,on-demand")
        object.__setattr__(self, "capacity", tuple(c.value for c in order))
        if Capacity.FLEX_START in order:
            if self.queued:
                raise UsageError("--queued and flex-start both given",
                                 hint="flex-start is Compute Engine's successor of --queued: choose one")
            object.__setattr__(self, "flex_seconds",
                               capacities.check_flex_seconds(float(self.flex_seconds or capacities.FLEX_DEFAULT_S)))
        if Capacity.RESERVATION in order and not self.reservation:
            raise UsageError("the reservation capacity needs a reservation", hint="add --reservation NAME")
        if self.reservation:
            validate.network(self.reservation, "reservation")
        wanted = order or self.capacities
        if self.api == "tpu" or self.arch == Arch.NODE:
            refused = capacities.refused_on(wanted, "tpu")
            if refused:
                raise UsageError(f"{refused[0].value} is a Compute Engine capacity, not the Cloud TPU API's",
                                 hint="use --api auto or compute" + (" (with --arch vm)" if self.arch == Arch.NODE
                                                                     else "") + ", or --queued on the Cloud TPU API")
        if self.queued and self.api == "compute":
            raise UsageError("--queued is the Cloud TPU API's queued resources",
                             hint="on Compute Engine use --flex-start DURATION (or --api tpu --queued)")

    @property
    def capacities(self) -> tuple[Capacity, ...]:
        """The capacities to try, in order: ``--capacity``, else spot for --spot/--preemptible, else on demand."""
        if self.capacity:
            return tuple(Capacity(c) for c in self.capacity)
        return (Capacity.SPOT,) if self.spot or self.preemptible else (Capacity.ON_DEMAND,)

    def with_capacity(self, cap: Capacity | str) -> ClusterSpec:
        """This spec asking for ``cap`` alone (one attempt of the capacity order)."""
        cap = Capacity(cap)
        spot = cap is Capacity.SPOT
        return _replace(self, capacity=(cap.value,), spot=spot and not self.preemptible,
                        preemptible=spot and self.preemptible)

    def with_api(self, api: str) -> ClusterSpec:
        return _replace(self, api=api)

    @property
    def zone(self) -> str:
        return self.zones[0]

    @property
    def accelerator(self) -> AcceleratorType:
        return parse_accelerator(self.accelerator_type)

    @property
    def interruptible(self) -> bool:
        return self.preemptible or self.spot

    def software_version(self) -> str:
        acc = self.accelerator
        if self.arch == Arch.NODE:
            from ..catalog.accelerators import DEFAULT_TENSORFLOW_VERSION
            return self.tensorflow_version or DEFAULT_TENSORFLOW_VERSION
        if not self.runtime_version:
            # up picks the image from the zone's runtime versions before it creates anything
            raise ValueError(f"no runtime image chosen for {acc.name} (up plans it per zone)")
        return self.runtime_version

    def resource_labels(self, role: str) -> dict[str, str]:
        """Labels on every resource tpuctl creates: the user's plus cluster and role."""
        out = dict(self.labels)
        out[validate.CLUSTER_LABEL] = self.name
        out[validate.ROLE_LABEL] = role
        return out

    @property
    def candidates(self) -> tuple[AcceleratorType, ...]:
        """Every accelerator type that would do, as listed."""
        return tuple(parse_accelerator(t) for t in (self.accelerator_types or (self.accelerator_type,)))

    def with_type(self, accelerator_type: str) -> ClusterSpec:
        """This spec asking for (or having made) ``accelerator_type``, one of its candidates."""
        return _replace(self, accelerator_type=accelerator_type)

    def with_zone(self, zone: str) -> ClusterSpec:
        rest = tuple(z for z in self.zones if z != zone)
        return _replace(self, zones=(zone, *rest))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["arch"] = self.arch.value
        d["zones"] = list(self.zones)
        d["accelerator_types"] = list(self.accelerator_types)
        d["capacity"] = list(self.capacity)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterSpec:
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["zones"] = tuple(kwargs.get("zones") or ())
        kwargs["accelerator_types"] = tuple(kwargs.get("accelerator_types") or ())
        kwargs["capacity"] = tuple(kwargs.get("capacity") or ())
        return cls(**kwargs)


def _replace(spec: ClusterSpec, **changes: Any) -> ClusterSpec:
    import dataclasses
    return dataclasses.replace(spec, **changes)


@dataclass
class Endpoint:
    ip_address: str
    port: int = 8470


@dataclass(frozen=True)
class FirewallRule:
    """A VPC firewall rule as Compute Engine describes it (``compute_v1.types.Firewall``): ports
    per protocol as Google writes them (``{"tcp": ("0-65535",), "icmp": ()}``; no ports: every
    port), the network by its short name."""

    name: str
    network: str
    direction: str = "INGRESS"
    priority: int = 1000
    source_ranges: tuple[str, ...] = ()
    source_tags: tuple[str, ...] = ()
    target_tags: tuple[str, ...] = ()
    source_service_accounts: tuple[str, ...] = ()
    target_service_accounts: tuple[str, ...] = ()
    allowed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    denied: tuple[tuple[str, tuple[str, ...]], ...] = ()
    disabled: bool = False
    description: str = ""


@dataclass
class Vm:
    name: str
    zone: str
    state: VmState
    machine_type: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    internal_ip: str | None = None
    external_ip: str | None = None
    created_at: float | None = None
    # tpuctl's keys of its metadata (``tpuctl-bucket``...) as the list that found it carried
    # them; None: not read (metadata_of reads them)
    metadata: dict[str, str] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        # field by field like TpuNode.to_dict: a fleet's status --json has thousands of VMs
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "metadata"}
        d["labels"] = dict(self.labels)
        d["state"] = self.state.value
        return d


class Labelled:
    """What tpuctl's labels say of a resource: its cluster, and whether the user pinned it."""

    labels: dict[str, str]

    @property
    def cluster(self) -> str | None:
        return self.labels.get(validate.CLUSTER_LABEL)

    @property
    def keep(self) -> bool:
        return self.labels.get(validate.KEEP_LABEL) == "true"


@dataclass
class TpuNode(Labelled):
    name: str
    zone: str
    arch: Arch
    accelerator_type: str
    state: TpuState
    health: Health = Health.HEALTH_UNSPECIFIED
    health_description: str = ""
    cidr_block: str | None = None
    preemptible: bool = False
    spot: bool = False
    version: str | None = None          # runtime_version (vm) or tensorflow_version (node)
    network: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    endpoints: list[Endpoint] = field(default_factory=list)
    created_at: float | None = None
    device: str | None = None           # local provider: what stands in for the TPU ("cpu", "gpu:0")
    api: str = "tpu"                    # "tpu" (Cloud TPU API node) or "compute" (Compute Engine)
    capacity: str = ""                  # "spot", "on-demand", "flex-start", "reservation" ("": from spot)
    machine_type: str | None = None     # Compute Engine: each worker's machine type
    # tpuctl's keys of its metadata as the list that found it carried them; None: not read
    metadata: dict[str, str] | None = field(default=None, repr=False)

    @property
    def interruptible(self) -> bool:
        return self.preemptible or self.spot

    @property
    def paid_as(self) -> Capacity:
        """How it is paid for: its capacity, or for a node that does not say, spot or on demand."""
        if self.capacity:
            return Capacity(self.capacity)
        return Capacity.SPOT if self.interruptible else Capacity.ON_DEMAND

    @property
    def dead(self) -> bool:
        return self.state in DEAD_TPU_STATES

    @property
    def usable(self) -> bool:
        return self.state == TpuState.READY and self.health in (Health.HEALTHY, Health.HEALTH_UNSPECIFIED)

    @property
    def hosts(self) -> int | None:
        """TPU VM hosts of the slice (a Node's are not the user's); None for an unknown type."""
        try:
            return parse_accelerator(self.accelerator_type).hosts if self.arch == Arch.VM else 1
        except UsageError:
            return None

    def to_dict(self) -> dict[str, Any]:
        # asdict's field by field, without its generic recursion (a fleet's status --json has
        # thousands of nodes) and without the metadata
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "metadata"}
        d["labels"] = dict(self.labels)
        d["endpoints"] = [{f.name: getattr(e, f.name) for f in fields(e)} for e in self.endpoints]
        d["arch"] = self.arch.value
        d["state"] = self.state.value
        d["health"] = self.health.value
        d["hosts"] = self.hosts
        d["capacity"] = self.paid_as.value
        return d


@dataclass
class QueuedRequest(Labelled):
    """A queued resource: a request for a TPU VM that the cloud fills when it has capacity.

    It is a resource of its own: without a node (WAITING_FOR_RESOURCES, FAILED, SUSPENDED) it
    bills nothing but holds quota until deleted, and a waiting one later becomes a billed TPU.
    ``labels`` are those of the node it asks for (the request itself carries none).
    """

    name: str
    zone: str
    state: QueuedState
    accelerator_type: str
    spot: bool = False
    created_at: float | None = None
    node_names: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    error: str = ""                     # why it FAILED, as the cloud says

    @property
    def dead(self) -> bool:
        return self.state in DEAD_QUEUED_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_QUEUED_STATES

    @property
    def holds_nodes(self) -> bool:
        return self.state in NODE_QUEUED_STATES

    def owns(self, node: TpuNode) -> bool:
        """Whether ``node`` is the TPU this request asked for (and got)."""
        return node.zone == self.zone and node.name in self.node_names

    def quota(self) -> str:
        """The quota it holds, in the catalogue's words: type, TensorCores, chips, tier."""
        tier = "spot" if self.spot else "on-demand"
        try:
            acc = parse_accelerator(self.accelerator_type)
        except UsageError:
            return f"{self.accelerator_type or 'an unknown TPU type'} ({tier})"
        return f"{acc.name}: {acc.cores} TensorCores, {acc.chips} chips ({tier})"

    def describe(self) -> str:
        return f"queued resource {self.name} ({self.zone}, {self.state.value})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        d["quota"] = self.quota()
        return d


@dataclass(frozen=True)
class Preemption:
    """A TPU VM the cloud deleted when it preempted it (a Spot VM whose termination action is
    DELETE): no resource is left to list, only the cloud's record of the preemption. It says
    which cluster's TPU instance, where and when; what that TPU was (type, capacity) is the
    cluster's spec's to say (provision/cluster/preempted.py)."""

    cluster: str
    zone: str
    instance: str             # the deleted instance's name (NAME-tpu)
    at: float | None          # when it was preempted (the record's insertTime)


@dataclass
class OperationError:
    code: int                 # google.rpc.Code: 3 INVALID_ARGUMENT, 8 RESOURCE_EXHAUSTED, ...
    message: str


@dataclass
class Operation:
    """A long-running operation on one resource."""

    name: str                 # provider-specific id, enough to poll it again
    zone: str
    verb: str                 # "create" or "delete"
    kind: str                 # "vm", "tpu" or "queued-resource"
    target: str               # resource name
    done: bool = False
    error: OperationError | None = None
    started_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.done and self.error is None

    def describe(self) -> str:
        return f"{self.verb} {self.kind} {self.target} in {self.zone}"


@runtime_checkable
class Provider(Protocol):
    """What the control plane needs from a cloud."""

    name: ClassVar[str]
    project: str
    # the bucket a cluster uses when nobody named one (the local provider's directory bucket)
    default_bucket: ClassVar[str | None]
    # whether the cloud has queued resources (Cloud TPU does; the local provider does not)
    offers_queued: ClassVar[bool]
    # whether the cloud sells TPUs as Compute Engine machine types (Google Cloud does; the local
    # provider emulates the Cloud TPU API only)
    offers_compute_tpus: ClassVar[bool]

    # Host VMs
    def create_vm(self, spec: ClusterSpec, zone: str) -> Operation: ...
    def get_vm(self, zone: str, name: str) -> Vm | None: ...
    # tpuctl's host VMs (label tpuctl-role: host) whose labels match; ``metadata``: each Vm
    # (TpuNode) also carries tpuctl's metadata keys, read from the list itself
    def list_vms(self, zone: str | None = None, labels: dict[str, str] | None = None, *,
                 metadata: bool = False) -> list[Vm]: ...
    def delete_vm(self, zone: str, name: str) -> Operation: ...

    # TPU nodes
    def offered(self, zone: str, accelerator_type: str) -> bool: ...
    # what this provider accepted in ``zone`` that Google Cloud may refuse (a rehearsal's caveats;
    # [] where the cloud itself answered)
    def caveats(self, zone: str, accelerator_type: str) -> list[str]: ...
    def create_tpu(self, spec: ClusterSpec, zone: str, cidr: str | None) -> Operation: ...
    def get_tpu(self, zone: str, name: str) -> TpuNode | None: ...
    # ``near``: zones where a named cluster's TPU probably is (the local cache's), looked at first;
    # ``api``: which API the local cache says served it (``compute``: read from its instances first)
    def list_tpus(self, zone: str | None = None, labels: dict[str, str] | None = None, *,
                  metadata: bool = False, near: tuple[str, ...] = (), api: str | None = None) -> list[TpuNode]: ...
    def delete_tpu(self, zone: str, name: str) -> Operation: ...

    # What a zone offers, asked before anything is created: its TPU VM runtime images
    # (runtimeVersions.list), and which of ``names`` are machine types there
    def runtime_versions(self, zone: str) -> list[str]: ...
    def machine_types(self, zone: str, names: tuple[str, ...]) -> list[str]: ...
    # the zones that list machine type ``name`` (where Compute Engine sells a TPU type; [] for none)
    def machine_type_zones(self, name: str) -> list[str]: ...
    # the zones of ``region`` that exist ([] for no such region): a mistyped --zone is "no such
    # zone" (with the region's zones), not "the type is not offered there"
    def region_zones(self, region: str) -> list[str]: ...
    # the OS image a Compute Engine TPU of ``accelerator_type`` boots, resolved from its family
    # (catalog.compute_tpus) in the cloud: the family's newest image
    def compute_tpu_image(self, accelerator_type: str) -> str: ...

    # Operations
    def poll(self, op: Operation) -> Operation: ...

    # Queued resources (requests for a TPU VM filled when capacity frees up); a provider without
    # them (offers_queued False) lists none and creates a --queued TPU directly
    def list_queued(self, zone: str | None = None, labels: dict[str, str] | None = None) -> list[QueuedRequest]: ...
    def get_queued(self, zone: str, name: str) -> QueuedRequest | None: ...
    def delete_queued(self, zone: str, name: str, force: bool = False) -> Operation: ...
    # the create operation of an existing request: done once it is ACTIVE (its node exists) or dead
    def watch_queued(self, zone: str, name: str) -> Operation: ...

    # Network: every range a new TPU block must not overlap, and claims on blocks that every
    # tpuctl in the project sees (so two concurrent ups never pick the same block)
    def used_ranges(self, spec: ClusterSpec) -> list[Used]: ...
    def reserved_range(self, spec: ClusterSpec) -> str | None: ...
    def reserve_range(self, spec: ClusterSpec, block: str) -> bool: ...
    def release_range(self, cluster: str) -> None: ...
    def reservations(self) -> dict[str, dict[str, Any]]: ...

    # Firewall (provision/cluster/firewall.py decides what a pod slice needs): the network's VPC
    # firewall rules, or None where the cloud has no firewall (the local provider); the IPv4
    # ranges a TPU VM's workers take their addresses from in ``zone``; create / delete one rule
    def firewall_rules(self, network: str) -> list[FirewallRule] | None: ...
    def worker_ranges(self, spec: ClusterSpec, zone: str) -> list[str]: ...
    def create_firewall_rule(self, rule: FirewallRule) -> None: ...
    def delete_firewall_rule(self, name: str) -> bool: ...

    # What tpuctl wrote on a host VM (kind "vm") or TPU VM (kind "tpu"): {} when none
    def metadata_of(self, kind: str, zone: str, name: str) -> dict[str, str]: ...
    # Set ``key`` to ``update(its current value or None)`` in the metadata of every host of the
    # cluster (host VM, live TPU VM), where only holders of compute.instances.setMetadata /
    # tpu.nodes.update can write (provision.runs.pins keeps what hosts may run there); returns
    # what was updated
    def update_host_metadata(self, cluster: str, key: str, update: Callable[[str | None], str]) -> list[str]: ...

    # Accelerator duty cycle per node over the last window_s seconds: (table keyed by
    # (node, zone), how it was read), or (None, why not) where the cloud has no such metric
    def duty_cycles(self, window_s: float) -> tuple[dict[tuple[str, str | None], Any] | None, str]: ...

    # Rehearsal: preempt a TPU as the cloud would: the notice to its guests now (their job gets
    # SIGTERM), the power-off (PREEMPTED, or deleted) ``notice_s`` later; 0: the power-off at once.
    # The TPU as it is then; None: deleted at the power-off
    def simulate_preemption(self, zone: str, name: str, notice_s: float = 0.0) -> TpuNode | None: ...
    # TPU VMs deleted by their preemption, as the cloud's own records say (``cluster``: of that
    # cluster only): those the cloud preempted and that nothing made or deleted again since; []
    # where a preempted TPU stays listed (it reads as PREEMPTED there)
    def preempted_tpus(self, cluster: str | None = None) -> list[Preemption]: ...

    # List prices per region and tier: the cloud's catalog where it has one (cached), else the
    # bundled table (provision.catalog.prices); never raises
    def price_book(self) -> PriceBook: ...

    # Write time series (Cloud Monitoring v3 ``TimeSeries`` JSON, one point each: a run's workload
    # metrics, provision.runs.workload_metrics) where the cloud's dashboards read them; returns how
    # many were written. UsageError where the provider has no such service
    def write_time_series(self, series: list[dict[str, Any]]) -> int: ...


def matches(labels: dict[str, str], selector: dict[str, str] | None) -> bool:
    if not selector:
        return True
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class DutyCycle:
    """A TPU's duty cycle from Cloud Monitoring: (sample time, percent busy), the busiest worker and
    chip at each time. Monitoring samples every 60 s and publishes up to 3 minutes late."""

    points: tuple[tuple[float, float], ...]

    def last_busy(self, min_pct: float) -> float | None:
        """The latest sample at or above ``min_pct``."""
        busy = [t for t, v in self.points if v >= min_pct]
        return max(busy) if busy else None

    @property
    def first(self) -> float | None:
        return min((t for t, _ in self.points), default=None)

    @property
    def latest(self) -> tuple[float, float] | None:
        return max(self.points, default=None)
