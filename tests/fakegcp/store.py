"""The fake cloud's whole state behind one lock, and the clock that moves it.

Resources change state on a schedule (a TPU is CREATING for ``tpu_create`` seconds, then READY).
Instead of a background thread, every request first runs the scheduled events that are due, under
the lock; so what a client observes is always consistent, and a reset is just a new ``Store``.
Blocking calls (Compute ``operations.wait``) sleep on a condition until the next event is due.
"""

from __future__ import annotations

import fnmatch
import heapq
import itertools
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any


@dataclass
class Latencies:
    """Seconds each simulated action takes, before ``scale`` multiplies them."""

    vm_create: float = 0.4        # PROVISIONING -> STAGING -> RUNNING
    vm_delete: float = 0.3        # STOPPING -> gone
    tpu_create: float = 0.6       # CREATING -> READY (or the operation's error)
    tpu_delete: float = 0.4       # DELETING -> gone
    tpu_stop: float = 0.3
    tpu_start: float = 0.3
    queued_provisioning: float = 0.5  # ACCEPTED -> PROVISIONING, and each retry while waiting
    address_create: float = 0.05  # global address insert/delete
    op_poll: float = 0.0          # server-side delay on every operation get/wait/list
    request: float = 0.0          # server-side delay on every API call
    scale: float = 1.0

    def of(self, action: str) -> float:
        return max(0.0, float(getattr(self, action)) * self.scale)

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if key not in self.__dataclass_fields__:
                raise KeyError(key)
            setattr(self, key, float(value))


@dataclass
class Counted:
    """A fault that fires for the next ``remaining`` matching calls, or until cleared (None)."""

    remaining: int | None = None

    def take(self) -> bool:
        if self.remaining is None:
            return True
        if self.remaining > 0:
            self.remaining -= 1
            return True
        return False

    @property
    def spent(self) -> bool:
        return self.remaining is not None and self.remaining <= 0


@dataclass
class QuotaRule(Counted):
    region: str = ""
    metric: str | None = None
    limit: int = 0
    at: str = "call"             # "call": HTTP 429 on create; "operation": the operation fails
    zone: str | None = None      # a per-zone quota: only creates in this zone, worded "in zone Z"


@dataclass
class DenyRule(Counted):
    permission: str = ""         # glob: "tpu.nodes.create", "compute.instances.*"


@dataclass
class Burst(Counted):
    status: int = 503
    method: str | None = None    # HTTP verb, or "GRPC"
    path: str | None = None      # regex searched in the path (gRPC: "/google.cloud.tpu.v1.Tpu/GetNode")
    message: str | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.method and self.method.upper() != method.upper():
            return False
        return not self.path or re.search(self.path, path) is not None


@dataclass
class Fault(Counted):
    """``POST /_admin/fault``: matching calls fail with ``body`` (``where`` "call"), or succeed and
    their long-running operation ends with ``body``'s error (``where`` "operation")."""

    id: int = 0
    api: str = ""                # "tpu.v2", "tpu.v1" or "compute.v1"
    method: str = "POST"
    path: str = ""               # regex searched in the request path (gRPC: the transcoded REST path)
    where: str = "call"
    status: int | None = None    # the HTTP status of a failed call
    body: dict[str, Any] = field(default_factory=dict)

    def matches(self, api: str, method: str, path: str) -> bool:
        return (self.api == api and self.method.upper() == method.upper()
                and re.search(self.path, path) is not None)


@dataclass
class Faults:
    stockouts: dict[tuple[str, str], Counted] = field(default_factory=dict)  # (kind, zone)
    quotas: list[QuotaRule] = field(default_factory=list)
    denials: list[DenyRule] = field(default_factory=list)
    disabled: set[str] = field(default_factory=set)
    bursts: list[Burst] = field(default_factory=list)
    cidr_conflicts: int = 0
    node_arch_denied: bool = False
    echoes: list[Burst] = field(default_factory=list)   # errors that quote the request's credentials
    token_failures: Counted | None = None              # the OAuth endpoint answers invalid_grant
    generic: list[Fault] = field(default_factory=list)  # POST /_admin/fault

    def take_stockout(self, kind: str, zone: str) -> bool:
        rule = self.stockouts.get((kind, zone))
        if rule is None:
            return False
        hit = rule.take()
        if rule.spent:
            del self.stockouts[(kind, zone)]
        return hit

    def take_quota(self, region: str, at: str, zone: str | None = None) -> QuotaRule | None:
        for rule in self.quotas:
            if rule.zone is not None and rule.zone != zone:
                continue
            if rule.region == region and rule.at == at and rule.take():
                if rule.spent:
                    self.quotas.remove(rule)
                return rule
        return None

    def take_denial(self, permission: str) -> bool:
        for rule in self.denials:
            if fnmatch.fnmatchcase(permission, rule.permission) and rule.take():
                if rule.spent:
                    self.denials.remove(rule)
                return True
        return False

    def take_burst(self, method: str, path: str) -> Burst | None:
        for rule in self.bursts:
            if rule.matches(method, path) and rule.take():
                if rule.spent:
                    self.bursts.remove(rule)
                return rule
        return None

    def take_echo(self, method: str, path: str) -> Burst | None:
        for rule in self.echoes:
            if rule.matches(method, path) and rule.take():
                if rule.spent:
                    self.echoes.remove(rule)
                return rule
        return None

    def find_fault(self, api: str, method: str, path: str) -> Fault | None:
        """The first generic fault for this request that still has matching calls left."""
        for rule in self.generic:
            if rule.matches(api, method, path) and not rule.spent:
                return rule
        return None

    def spend(self, rule: Fault) -> None:
        rule.take()
        if rule.spent and rule in self.generic:
            self.generic.remove(rule)

    def take_cidr_conflict(self) -> bool:
        if self.cidr_conflicts > 0:
            self.cidr_conflicts -= 1
            return True
        return False

    def to_dict(self) -> dict[str, Any]:
        return {
            "stockouts": [{"kind": k, "zone": z, "remaining": r.remaining}
                          for (k, z), r in self.stockouts.items()],
            "quotas": [asdict(q) for q in self.quotas],
            "denials": [asdict(d) for d in self.denials],
            "disabled": sorted(self.disabled),
            "bursts": [asdict(b) for b in self.bursts],
            "cidr_conflicts": self.cidr_conflicts,
            "node_arch_denied": self.node_arch_denied,
            "echoes": [asdict(b) for b in self.echoes],
            "token_failures": None if self.token_failures is None else self.token_failures.remaining,
            "faults": [{"id": f.id, "api": f.api, "method": f.method, "path": f.path, "where": f.where,
                        "status": f.status, "remaining": f.remaining, "body": f.body} for f in self.generic],
        }


@dataclass
class Call:
    seq: int
    time: float
    transport: str    # "rest" or "grpc"
    method: str       # HTTP verb or "GRPC"
    path: str
    call: str         # API method, e.g. "tpu.v2.nodes.create", "compute.instances.insert"
    query: str = ""   # the query string, as sent (REST only)
    status: int = 0   # HTTP status returned (gRPC: the HTTP equivalent)
    auth: str = ""    # the Authorization header the call carried (REST only)
    bytes: int = 0    # the response body's size as sent (REST only): what a client downloaded


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def compute_time(ts: float) -> str:
    """Compute Engine's timestamp form: local offset, milliseconds."""
    dt = datetime.fromtimestamp(ts, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}-00:00"


class Store:
    """All resources of every project, the schedule, the faults and the call log."""

    def __init__(self, latencies: Latencies | None = None, base_url: str = "") -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.latencies = latencies or Latencies()
        self.faults = Faults()
        self.base_url = base_url
        self.closed = False
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count(1)
        self._ids = itertools.count(1_000_000_000_000_000)  # x1000 below: 19 digits, fits int64
        self.calls: list[Call] = []
        self.honour_fields = True     # POST /_admin/fields {"honour": false}: answer whole bodies
        self.call_counts: Counter[str] = Counter()
        # The OAuth token endpoint (POST /token): the access token it issues, and what it was sent.
        self.access_token = "ya29.fake-access-token"
        self.token_requests: list[dict[str, str]] = []
        self.token_scopes: dict[str, frozenset[str]] = {}   # token -> the scopes it was granted for
        # Resources, keyed by (project, scope..., name); owned by tpu.py, compute.py, network.py.
        self.projects: set[str] = set()
        self.nodes: dict[tuple[str, str, str], Any] = {}
        self.queued: dict[tuple[str, str, str], Any] = {}
        self.tpu_ops: dict[str, Any] = {}
        self.instances: dict[tuple[str, str, str], Any] = {}
        # Compute Engine TPU slices (compute_tpu.py): workload policies by (project, region, name),
        # instance templates by (project, name), zonal MIGs by (project, zone, name)
        self.resource_policies: dict[tuple[str, str, str], Any] = {}
        self.instance_templates: dict[tuple[str, str], Any] = {}
        self.migs: dict[tuple[str, str, str], Any] = {}
        self.compute_ops: dict[tuple[str, str, str], Any] = {}
        self.networks: dict[tuple[str, str], Any] = {}
        self.subnets: dict[tuple[str, str, str], Any] = {}
        self.routes: dict[tuple[str, str], Any] = {}
        self.addresses: dict[tuple[str, str], Any] = {}
        self.firewalls: dict[tuple[str, str], Any] = {}     # VPC firewall rules (network.py)
        self.routers: dict[tuple[str, str, str], Any] = {}  # Cloud Routers and their NATs (routers.py)
        self.service_accounts: dict[tuple[str, str], Any] = {}   # IAM, by (project, account id) (iam.py)
        self.monitoring: Any = None   # Cloud Monitoring's time series and create requests (monitoring.py)
        self.project_metadata: dict[str, dict[str, Any]] = {}
        self.extra_tpu_types: dict[str, set[str]] = {}
        # TPU Nodes (v1 creates) are refused unless the project was granted Node access, as Google
        # does since 2025; and the v1 surface can be made to answer 403 or 404 as if it were gone.
        # Owned by tpu.py and tpu_rest.py.
        self.tpu_node_projects: set[str] = set()
        self.tpu_v1_status: int | None = None
        self._ip_next: dict[str, int] = {}
        self._external_next = itertools.count(1)
        # A generic "operation" fault that matched the call being handled: the create handler
        # takes it (take_op_fault) and its operation ends with that error.
        self.pending_op_fault: Any = None
        self.fault_ids = itertools.count(1)

    # -- clock and schedule -------------------------------------------------------------
    @staticmethod
    def now() -> float:
        return time.monotonic()

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now() + max(0.0, delay), next(self._seq), fn))
        self.cond.notify_all()

    def advance(self) -> None:
        """Run every event that is due (in time order); call with the lock held."""
        now = self.now()
        while self._events and self._events[0][0] <= now:
            _, _, fn = heapq.heappop(self._events)
            fn()
        self.cond.notify_all()

    def wait_for(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Block (releasing the lock) until ``ready()`` or ``timeout``; True if ready."""
        deadline = self.now() + timeout
        with self.cond:
            while True:
                self.advance()
                if ready():
                    return True
                remaining = deadline - self.now()
                if remaining <= 0 or self.closed:
                    return False
                if self._events:
                    remaining = min(remaining, max(0.001, self._events[0][0] - self.now()))
                self.cond.wait(remaining)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def take_op_fault(self) -> Any:
        """The ApiError a create's operation must end with (one matching fault spent), or None."""
        rule = self.pending_op_fault
        self.pending_op_fault = None
        if rule is None:
            return None
        self.faults.spend(rule)
        from .errors import from_fault_body

        return from_fault_body(rule.body, rule.status, where="operation")

    # -- identifiers ----------------------------------------------------------------------
    def new_id(self) -> str:
        """Unique, increasing, and not guessable in its last digits (as Google's ids look)."""
        return str(next(self._ids) * 1000 + secrets.randbelow(1000))

    def seq(self) -> int:
        return next(self._seq)

    @staticmethod
    def op_suffix() -> str:
        return f"{int(time.time() * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}-{secrets.token_hex(4)}"

    def next_ip(self, subnet_key: str, first: int, last: int) -> int:
        """Addresses are handed out in order within a subnet (``first``..``last`` as ints)."""
        n = self._ip_next.get(subnet_key, first)
        self._ip_next[subnet_key] = n + 1 if n + 1 <= last else first
        return n

    def link(self, path: str) -> str:
        """A Compute Engine selfLink: the fake's own URL, so a client can follow it."""
        return f"{self.base_url}/compute/v1/{path}"

    def next_external_ip(self) -> str:
        n = next(self._external_next)
        return f"34.{66 + n // 65536 % 100}.{n // 256 % 256}.{n % 256}"

    # -- call log ---------------------------------------------------------------------------
    def record(self, transport: str, method: str, path: str, call: str, query: str = "", auth: str = "") -> Call:
        entry = Call(len(self.calls) + 1, time.time(), transport, method, path, call, query, auth=auth)
        self.calls.append(entry)
        self.call_counts[call] += 1
        return entry
