"""Google Cloud: host VMs on Compute Engine, TPU VMs (Cloud TPU v2) and TPU Nodes (v1).

Translation only: every decision lives in the pure core. Every call goes over the APIs' REST
surfaces through :class:`provision.cloud.gcp_rest.Rest` (google-auth's ``AuthorizedSession``) and
through :meth:`GcpProvider._call`, the one place that retries (random exponential backoff with
jitter) the errors :mod:`provision.cloud.failures` calls transient and turns every other error
into a :class:`CloudError` of a known kind.

TPU VMs are the architecture. The v2 API lists and gets every node of a project, TPU Nodes
included (``apiVersion`` says which API created a node: ``V1``/``V1_ALPHA1`` for a Node), so a
TPU VM cluster's ``up``, ``status`` and ``down`` never call v1: the v1 API is called only to
create a ``--arch node`` cluster, to delete a Node, and to read a Node's own view (its TensorFlow
version) when one exists, and a v1 that answers 403 or 404 or is gone costs a TPU VM nothing.
Google refuses new TPU Nodes to projects without Node access (FAILED_PRECONDITION, since 2025);
that refusal is reported in one line that names ``--arch vm``.

``TPUCTL_CREDENTIALS=anonymous`` skips Application Default Credentials; the endpoint variables
are described in :mod:`provision.cloud.gcp_rest`.

TPU range reservations are a JSON map in the project's common instance metadata, written with
its fingerprint: the Compute API rejects a write based on a stale fingerprint, which makes the
claim a compare-and-swap that every tpuctl in the project sees, with no effect on the network.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, ClassVar
from urllib.parse import urlparse

from ..basics.errors import CloudError, NotAvailable, NotFound, TpuctlError, UsageError
from ..basics.redact import redact
from ..basics.validate import CLUSTER_LABEL, HOST_ROLE, ROLE_LABEL
from ..catalog.prices import PriceBook
from . import gce_tpu, range_claims, startup
from . import gcp_fields as fields
from .base import (
    Arch,
    ClusterSpec,
    Endpoint,
    FirewallRule,
    Health,
    Operation,
    OperationError,
    Preemption,
    QueuedRequest,
    QueuedState,
    TpuNode,
    TpuState,
    Used,
    Vm,
    VmState,
    matches,
    parse_pool,
)
from .failures import Kind
from .gcp_cluster_reads import ClusterInstances
from .gcp_compute_tpu import ComputeTpus
from .gcp_errors import compute_operation_failure, failure_of, queued_failure
from .gcp_rest import SCOPES, Rest, compute_base, tpu_base

Json = dict[str, Any]

RANGES_METADATA_KEY = "tpuctl-tpu-ranges"
HOST_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
NODE_HOST_IMAGE = "projects/deeplearning-platform-release/global/images/family/tf-latest-cpu"
CALL_TIMEOUT = 60.0
WAIT_TIMEOUT = 150.0        # Compute's operations.wait answers within two minutes
RETRY_ATTEMPTS = 7
RETRY_INITIAL = 0.5
RETRY_MAX_WAIT = 8.0
RETRY_BUDGET_S = 120.0

# Google's refusal of a new TPU Node to a project without Node access (since 2025), e.g.
# "Your request to provision TPU Node has been denied. Please migrate to TPU VM Architecture or
# contact Cloud TPU team to gain TPU Node access." (skypilot-org/skypilot#5593)
_NODE_DENIED = re.compile(r"provision TPU Node has been denied|gain TPU Node access", re.IGNORECASE)


def _short(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]


def _zone_of(resource_name: str) -> str:
    parts = resource_name.split("/")
    return parts[parts.index("locations") + 1] if "locations" in parts else parts[parts.index("zones") + 1]


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$")


def _timestamp(value: Any) -> float | None:
    """RFC 3339 as Google writes it: ``...Z`` with up to nanoseconds (TPU), ``.000-07:00`` (Compute)."""
    if not isinstance(value, str) or not value:
        return None
    m = _TIME.match(value.strip())
    if not m:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    offset = m.group(3) or "Z"
    try:
        dt = datetime.fromisoformat(f"{m.group(1)}.{frac}{'+00:00' if offset == 'Z' else offset}")
    except ValueError:
        return None
    return dt.astimezone(timezone.utc).timestamp()


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _api_arch(node: Json, default: Arch) -> Arch:
    """Which architecture a node is: ``apiVersion`` names the API that created it."""
    version = str(node.get("apiVersion") or "")
    if version.startswith("V1"):
        return Arch.NODE
    if version.startswith("V2"):
        return Arch.VM
    return default


def _firewall(f: Json) -> FirewallRule:
    def protocols(key: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple((str(a.get("IPProtocol") or "").lower(), tuple(str(p) for p in a.get("ports") or ()))
                     for a in f.get(key) or [] if isinstance(a, dict))

    return FirewallRule(
        name=str(f.get("name") or ""), network=_short(str(f.get("network") or "")),
        direction=str(f.get("direction") or "INGRESS"), priority=int(f.get("priority", 1000)),
        source_ranges=tuple(f.get("sourceRanges") or ()), source_tags=tuple(f.get("sourceTags") or ()),
        target_tags=tuple(f.get("targetTags") or ()),
        source_service_accounts=tuple(f.get("sourceServiceAccounts") or ()),
        target_service_accounts=tuple(f.get("targetServiceAccounts") or ()),
        allowed=protocols("allowed"), denied=protocols("denied"), disabled=bool(f.get("disabled")),
        description=str(f.get("description") or ""))


def _items(meta: Json | None) -> list[Json]:
    return [i for i in ((meta or {}).get("items") or []) if isinstance(i, dict)]


class GcpProvider:
    name: ClassVar[str] = "gcp"
    default_bucket: ClassVar[str | None] = None
    offers_queued: ClassVar[bool] = True
    offers_compute_tpus: ClassVar[bool] = True

    def __init__(self, project: str, settings: dict[str, Any] | None = None):
        self.project = project
        settings = settings or {}
        self.cidr_pool = parse_pool(settings.get("tpu_cidr_pool"))
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._rest: Rest | None = None
        self._creds: Any = None
        self._prices: PriceBook | None = None
        self._tpu = tpu_base()
        self._gce = f"{compute_base()}/projects/{project}"
        self._images: dict[str, str] = {}
        self._staged: set[str] = set()     # buckets that hold this tpuctl's startup script
        # TPUs on Compute Engine (instances, and MIGs with a workload policy): provision/cloud/gcp_compute_tpu.py
        self._cluster_instances = ClusterInstances(self._read_cluster_instances)
        self._compute = ComputeTpus(project, self._gce, call=self._call, pages=self._pages,
                                    aggregated=self._aggregated, wait=self._wait_compute,
                                    cluster_instances=self._cluster_instances.of)

    # ---- credentials and the session ----------------------------------------------------------
    def _credentials(self) -> Any:
        if self._creds is not None:
            return self._creds
        if os.environ.get("TPUCTL_CREDENTIALS", "").lower() == "anonymous":
            from google.auth.credentials import AnonymousCredentials

            creds = AnonymousCredentials()
        else:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:
                creds, _ = google.auth.default(scopes=list(SCOPES))
            except DefaultCredentialsError as exc:
                from .gcp_errors import credentials_error

                raise credentials_error(exc) from None
        from ..basics.redact import remember_credentials

        remember_credentials(creds)
        self._creds = creds
        return creds

    def _session(self) -> Rest:
        with self._lock:
            if self._rest is None:
                anonymous = os.environ.get("TPUCTL_CREDENTIALS", "").lower() == "anonymous"
                self._rest = Rest(None if anonymous else self._credentials())
            return self._rest

    # ---- the one place calls are retried and errors classified ---------------------------------
    def _call(self, what: str, method: str, url: str, *, params: dict[str, Any] | None = None,
              body: Json | None = None, timeout: float = CALL_TIMEOUT) -> Json:
        """One API call (``what`` names it, e.g. ``tpu.v2.nodes.get``), retried while transient."""
        session = self._session()
        if method != "GET":
            self._cluster_instances.forget()    # what was read of a cluster may change now
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            self.calls[what] += 1
            try:
                return session.call(method, url, params=params, body=body, timeout=timeout)
            except (TypeError, AttributeError, KeyError):
                raise       # a bug in tpuctl, not a cloud failure: reported as an internal error
            except Exception as exc:  # noqa: BLE001 - every failure leaves here classified
                f = failure_of(exc)
                wait = random.uniform(0, min(RETRY_MAX_WAIT, RETRY_INITIAL * 2 ** attempt))
                if (f.retriable and attempt < RETRY_ATTEMPTS
                        and time.monotonic() - started + wait < RETRY_BUDGET_S):
                    time.sleep(wait)
                    continue
                if f.kind == Kind.NOT_FOUND:
                    raise NotFound(f"{what}: {f.message}") from None
                raise CloudError(f"{what} failed: {f.message}", kind=f.kind.value, hint=f.hint) from None

    def _pages(self, what: str, url: str, key: str, params: dict[str, Any] | None = None) -> Iterator[Json]:
        """Every item of a paged list (``nextPageToken``), each page one retried call."""
        params = dict(params or {})
        while True:
            page = self._call(what, "GET", url, params=params)
            yield from (i for i in page.get(key) or [] if isinstance(i, dict))
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = token

    def _aggregated(self, what: str, collection: str, key: str, params: dict[str, Any] | None = None
                    ) -> Iterator[Json]:
        """Every item of a Compute aggregatedList, whatever its scope (zones/..., regions/...)."""
        params = dict(params or {})
        while True:
            page = self._call(what, "GET", f"{self._gce}/aggregated/{collection}", params=params)
            for scoped in (page.get("items") or {}).values():
                yield from (i for i in (scoped or {}).get(key) or [] if isinstance(i, dict))
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = token

    def _loc(self, zone: str | None, version: str = "v2") -> str:
        return f"{self._tpu}/{version}/projects/{self.project}/locations/{zone or '-'}"

    # ---- host VMs ------------------------------------------------------------------------------
    def create_vm(self, spec: ClusterSpec, zone: str) -> Operation:
        image = NODE_HOST_IMAGE if spec.arch == Arch.NODE else HOST_IMAGE
        iface: Json = {"network": f"global/networks/{spec.network}"}
        if spec.subnetwork:
            iface["subnetwork"] = f"regions/{_region(zone)}/subnetworks/{spec.subnetwork}"
        if spec.external_ips:
            iface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
        instance = {
            "name": spec.name,
            "machineType": f"zones/{zone}/machineTypes/{spec.machine_type}",
            "labels": spec.resource_labels(HOST_ROLE),
            "disks": [{"boot": True, "autoDelete": True,
                       "initializeParams": {"sourceImage": image, "diskSizeGb": "50"}}],
            "networkInterfaces": [iface],
            "serviceAccounts": [{"email": spec.service_account or "default", "scopes": list(SCOPES)}],
            "metadata": {"items": [{"key": k, "value": v} for k, v in self.host_metadata(spec).items()]},
        }
        op = self._call("compute.instances.insert", "POST", f"{self._gce}/zones/{zone}/instances", body=instance)
        return Operation(name=f"zone:{op['name']}", zone=zone, verb="create", kind="vm", target=spec.name)

    def host_metadata(self, spec: ClusterSpec) -> dict[str, str]:
        """The host's startup script pulls tpuctl from the bucket and runs the agent (no inbound ssh)."""
        self.stage_startup(spec.bucket)
        return _agent_metadata(spec, role="host")

    @staticmethod
    def _vm(inst: Json, with_metadata: bool = False) -> Vm:
        """A VM as an instance's answer has it; ``with_metadata``: the answer carries its metadata,
        whose tpuctl keys the Vm keeps (never the startup script)."""
        internal = external = None
        for iface in inst.get("networkInterfaces") or []:
            internal = internal or iface.get("networkIP") or None
            for ac in iface.get("accessConfigs") or []:
                external = external or ac.get("natIP") or None
        machine = inst.get("machineType")
        return Vm(name=inst["name"], zone=_short(inst.get("zone") or ""), state=VmState.of(inst.get("status")),
                  machine_type=_short(machine) if machine else None, labels=dict(inst.get("labels") or {}),
                  internal_ip=internal, external_ip=external, created_at=_timestamp(inst.get("creationTimestamp")),
                  metadata=_tpuctl_metadata(inst) if with_metadata else None)

    def _instance(self, zone: str, name: str) -> Json:
        return self._call("compute.instances.get", "GET", f"{self._gce}/zones/{zone}/instances/{name}")

    def get_vm(self, zone: str, name: str) -> Vm | None:
        try:
            return self._vm(self._instance(zone, name))
        except NotFound:
            return None

    def list_vms(self, zone: str | None = None, labels: dict[str, str] | None = None, *,
                 metadata: bool = False) -> list[Vm]:
        """tpuctl's host VMs (label ``tpuctl-role: host``) whose labels match, each with only what a
        Vm reads. The role is a server-side filter: on a project whose TPUs are Compute Engine
        instances too, the TPU workers' pages are not sent (half of a fleet's instances)."""
        wanted = {**(labels or {}), ROLE_LABEL: HOST_ROLE}
        flt = " AND ".join(f'labels.{k} = "{v}"' for k, v in sorted(wanted.items()))
        what = fields.VM_WITH_METADATA if metadata else fields.VM
        params = {"filter": flt}
        if zone is None and labels and set(labels) == {CLUSTER_LABEL}:
            items = iter(self._cluster_instances.of(labels[CLUSTER_LABEL]))    # one list for status NAME's readers
        elif zone:
            params["fields"] = fields.listed("items", what)
            items = self._pages("compute.instances.list", f"{self._gce}/zones/{zone}/instances", "items", params)
        else:
            params["fields"] = fields.aggregated("instances", what)
            items = self._aggregated("compute.instances.aggregatedList", "instances", "instances", params)
        # a TPU VM on Compute Engine is an instance too (role tpu): list_tpus reads it as a TPU
        return [v for v in (self._vm(i, metadata) for i in items) if matches(v.labels, wanted)]

    def delete_vm(self, zone: str, name: str) -> Operation:
        op = self._call("compute.instances.delete", "DELETE", f"{self._gce}/zones/{zone}/instances/{name}")
        return Operation(name=f"zone:{op['name']}", zone=zone, verb="delete", kind="vm", target=name)

    # ---- TPUs ------------------------------------------------------------------------------------
    def offered(self, zone: str, accelerator_type: str) -> bool:
        """Whether the zone offers the type (one call; checked before anything is created)."""
        try:
            self._call("tpu.v2.acceleratorTypes.get", "GET", f"{self._loc(zone)}/acceleratorTypes/{accelerator_type}")
        except NotFound:
            return False
        except CloudError as exc:
            if exc.kind in ("invalid",):
                return False
            raise
        return True

    def caveats(self, zone: str, accelerator_type: str) -> list[str]:
        """None: the zone itself answered whether it offers the type."""
        return []

    def runtime_versions(self, zone: str) -> list[str]:
        """The TPU VM images the zone offers (``runtimeVersions.list``, every page)."""
        items = self._pages("tpu.v2.runtimeVersions.list", f"{self._loc(zone)}/runtimeVersions", "runtimeVersions")
        return [str(i.get("version") or _short(str(i.get("name") or ""))) for i in items]

    def machine_types(self, zone: str, names: tuple[str, ...]) -> list[str]:
        """Which of ``names`` the zone offers: one ``machineTypes.list`` with a name filter (a zone
        lists hundreds of types; the filter keeps the answer to the few tpuctl asks about)."""
        from ..basics.validate import machine_type

        wanted = [machine_type(n) for n in names]        # validated: they go into the filter as they are
        params = {"filter": f"name eq '({'|'.join(wanted)})'"}
        items = self._pages("compute.machineTypes.list", f"{self._gce}/zones/{zone}/machineTypes", "items", params)
        return [str(i["name"]) for i in items if i.get("name") in wanted]

    def machine_type_zones(self, name: str) -> list[str]:
        """The zones that list machine type ``name``: one ``machineTypes.aggregatedList`` filtered to
        it (``gcloud compute machine-types list --filter=name=NAME`` asks the same), sorted."""
        from ..basics.validate import machine_type

        params = {"filter": f"name eq '{machine_type(name)}'"}
        items = self._aggregated("compute.machineTypes.aggregatedList", "machineTypes", "machineTypes", params)
        return sorted({_short(str(i.get("zone") or "")) for i in items if i.get("name") == name} - {""})

    def region_zones(self, region: str) -> list[str]:
        """The zones of ``region`` (``zones.list``, asked only once ``up`` found a zone offering
        nothing), sorted; [] for no such region."""
        params = {"fields": "items(name,region),nextPageToken"}
        items = self._pages("compute.zones.list", f"{self._gce}/zones", "items", params)
        return sorted(str(i.get("name")) for i in items if _short(str(i.get("region") or "")) == region)

    def compute_tpu_image(self, accelerator_type: str) -> str:
        """The newest image of the generation's TPU image family (``images.getFromFamily``), once per family."""
        from ..catalog import compute_tpus
        from ..catalog.accelerators import parse

        shape = compute_tpus.shape(parse(accelerator_type))
        if shape is None:
            raise UsageError(f"{accelerator_type} is not sold on Compute Engine", hint="use --api tpu")
        family = shape.image_family
        if family not in self._images:
            try:
                image = self._call("compute.images.getFromFamily", "GET",
                                   f"{compute_base()}/projects/{compute_tpus.IMAGE_PROJECT}/global/images/family/{family}")
            except NotFound:
                raise CloudError(f"the TPU image family {compute_tpus.IMAGE_PROJECT}/{family} has no image",
                                 kind="not_found", hint="name an image with --runtime-version") from None
            self._images[family] = str(image.get("name") or "")
        return self._images[family]

    def create_tpu(self, spec: ClusterSpec, zone: str, cidr: str | None) -> Operation:
        if spec.api == "compute":
            req = gce_tpu.Request(spec=spec, zone=zone, project=self.project,
                                  image=spec.runtime_version or self.compute_tpu_image(spec.accelerator_type),
                                  metadata=self.tpu_metadata(spec), scopes=SCOPES)
            return self._compute.create(req)
        if spec.arch == Arch.NODE:
            return self._create_node_v1(spec, zone, cidr)
        if spec.queued:
            return self._create_queued(spec, zone)
        op = self._call("tpu.v2.nodes.create", "POST", f"{self._loc(zone)}/nodes", params={"nodeId": spec.name},
                        body=self._v2_node(spec))
        return Operation(name=f"tpu2:{op['name']}", zone=zone, verb="create", kind="tpu", target=spec.name)

    def tpu_metadata(self, spec: ClusterSpec) -> dict[str, str]:
        """Every TPU VM worker runs the same bootstrap, as a worker: it only runs attempts."""
        self.stage_startup(spec.bucket)
        return _agent_metadata(spec, role="worker")

    def _v2_node(self, spec: ClusterSpec) -> Json:
        net: Json = {"network": f"projects/{self.project}/global/networks/{spec.network}",
                     "enableExternalIps": spec.external_ips}
        if spec.subnetwork:
            net["subnetwork"] = f"projects/{self.project}/regions/{_region(spec.zone)}/subnetworks/{spec.subnetwork}"
        node: Json = {
            "acceleratorType": spec.accelerator_type, "runtimeVersion": spec.software_version(),
            "networkConfig": net, "schedulingConfig": {"preemptible": spec.preemptible, "spot": spec.spot},
            "labels": spec.resource_labels("tpu"), "metadata": self.tpu_metadata(spec),
        }
        if spec.service_account:
            node["serviceAccount"] = {"email": spec.service_account, "scope": list(SCOPES)}
        return node

    def _create_node_v1(self, spec: ClusterSpec, zone: str, cidr: str | None) -> Operation:
        node: Json = {
            "acceleratorType": spec.accelerator_type, "tensorflowVersion": spec.software_version(),
            "network": f"projects/{self.project}/global/networks/{spec.network}",
            "schedulingConfig": {"preemptible": spec.preemptible}, "labels": spec.resource_labels("tpu"),
        }
        if cidr:
            node["cidrBlock"] = cidr
        try:
            op = self._call("tpu.v1.nodes.create", "POST", f"{self._loc(zone, 'v1')}/nodes",
                            params={"nodeId": spec.name}, body=node)
        except NotFound:
            raise CloudError(f"the Cloud TPU v1 API, the only one that creates TPU Nodes, is not served to "
                             f"project {self.project} (HTTP 404)", kind="invalid", zone=zone,
                             hint="use --arch vm (a TPU VM)") from None
        except CloudError as exc:
            if _NODE_DENIED.search(exc.message):
                raise CloudError(f"project {self.project} may not create TPU Nodes: Google refuses new TPU "
                                 "Nodes to projects without Node access (FAILED_PRECONDITION)", kind="invalid",
                                 hint="use --arch vm (a TPU VM), or ask the Cloud TPU team for TPU Node access",
                                 zone=zone) from None
            raise
        return Operation(name=f"tpu1:{op['name']}", zone=zone, verb="create", kind="tpu", target=spec.name)

    def _create_queued(self, spec: ClusterSpec, zone: str) -> Operation:
        """A queued resource as gcloud asks for one: ``gcloud compute tpus queued-resources create
        --spot`` sets the spot tier (``spot: {}``) on the request and no ``schedulingConfig`` in its
        node spec (gcloud 528, command_lib/compute/tpus/queued_resources/util.py: CreateNodeSpec,
        SetSpot). A queued resource has no preemptible tier: --preemptible asks for spot too."""
        parent = f"projects/{self.project}/locations/{zone}"
        node = self._v2_node(spec)
        node.pop("schedulingConfig", None)
        qr: Json = {"tpu": {"nodeSpec": [{"parent": parent, "nodeId": spec.name, "node": node}]}}
        if spec.spot or spec.preemptible:
            qr["spot"] = {}
        if spec.valid_until_seconds:
            qr["queueingPolicy"] = {"validUntilTime": _rfc3339(int(time.time() + spec.valid_until_seconds))}
        self._call("tpu.v2.queuedResources.create", "POST", f"{self._loc(zone)}/queuedResources",
                   params={"queuedResourceId": spec.name}, body=qr)
        return self.watch_queued(zone, spec.name)

    # ---- queued resources ------------------------------------------------------------------------
    def watch_queued(self, zone: str, name: str) -> Operation:
        """Done when the queued resource is ACTIVE (its node exists), FAILED or SUSPENDED: see poll()."""
        return Operation(name=f"queued:projects/{self.project}/locations/{zone}/queuedResources/{name}",
                         zone=zone, verb="create", kind="queued-resource", target=name)

    @staticmethod
    def _queued(qr: Json) -> QueuedRequest:
        name = str(qr.get("name") or "")
        specs = [s for s in ((qr.get("tpu") or {}).get("nodeSpec") or []) if isinstance(s, dict)]
        node = (specs[0].get("node") or {}) if specs else {}
        state = qr.get("state") or {}
        failed = ((state.get("failedData") or {}).get("error")) or {}
        return QueuedRequest(name=_short(name), zone=_zone_of(name), state=QueuedState.of(state.get("state")),
                             accelerator_type=str(node.get("acceleratorType") or ""), spot="spot" in qr,
                             created_at=_timestamp(qr.get("createTime")),
                             node_names=[str(s["nodeId"]) for s in specs if s.get("nodeId")],
                             labels=dict(node.get("labels") or {}),
                             error=redact(str(failed.get("message") or "")))

    def list_queued(self, zone: str | None = None, labels: dict[str, str] | None = None) -> list[QueuedRequest]:
        """Every queued resource (zone ``-``: of every zone, as ``gcloud compute tpus queued-resources
        list --zone=-`` lists them) whose node spec carries ``labels``."""
        items = self._pages("tpu.v2.queuedResources.list", f"{self._loc(zone)}/queuedResources", "queuedResources",
                            {"fields": fields.tpu_listed("queuedResources", fields.QUEUED)})
        return [q for q in (self._queued(i) for i in items) if matches(q.labels, labels)]

    def get_queued(self, zone: str, name: str) -> QueuedRequest | None:
        try:
            return self._queued(self._call("tpu.v2.queuedResources.get", "GET",
                                           f"{self._loc(zone)}/queuedResources/{name}"))
        except NotFound:
            return None

    def delete_queued(self, zone: str, name: str, force: bool = False) -> Operation:
        """``force`` deletes its nodes first; without it Google deletes only a request that has none."""
        op = self._call("tpu.v2.queuedResources.delete", "DELETE", f"{self._loc(zone)}/queuedResources/{name}",
                        params={"force": "true"} if force else None)
        return Operation(name=f"tpu2:{op['name']}", zone=zone, verb="delete", kind="queued-resource", target=name)

    @staticmethod
    def _node(n: Json, arch: Arch, with_metadata: bool = False) -> TpuNode:
        """A node from its v2 view or, for a TPU Node, its v1 view (``tensorflowVersion``, ``network``)."""
        sched = n.get("schedulingConfig") or {}
        endpoints = [Endpoint(e.get("ipAddress") or "", int(e.get("port") or 8470))
                     for e in n.get("networkEndpoints") or [] if isinstance(e, dict)]
        version = n.get("tensorflowVersion") or n.get("runtimeVersion") or None
        network = n.get("network") or (n.get("networkConfig") or {}).get("network")
        name = n.get("name") or ""
        return TpuNode(name=_short(name), zone=_zone_of(name), arch=arch,
                       accelerator_type=n.get("acceleratorType") or "", state=TpuState.of(n.get("state")),
                       health=Health.of(n.get("health")), health_description=n.get("healthDescription") or "",
                       cidr_block=n.get("cidrBlock") or None, preemptible=bool(sched.get("preemptible")),
                       spot=bool(sched.get("spot")), version=version, network=_short(network) if network else None,
                       labels=dict(n.get("labels") or {}), endpoints=endpoints,
                       created_at=_timestamp(n.get("createTime")),
                       metadata=fields.tpuctl_keys(dict(n.get("metadata") or {})) if with_metadata else None)

    def _from_v2(self, n: Json, with_metadata: bool = False) -> TpuNode:
        """A node from the v2 API; a TPU Node is read again from v1, its own API, when v1 answers."""
        arch = _api_arch(n, Arch.VM)
        if arch == Arch.NODE:
            try:
                n = self._call("tpu.v1.nodes.get", "GET", f"{self._tpu}/v1/{n['name']}")
            except (NotFound, CloudError):
                pass    # v1 unavailable (403, 404, gone): the v2 view says what matters
        return self._node(n, arch, with_metadata)

    def _get_v2(self, zone: str, name: str, what: str | None = None) -> Json | None:
        """The node's v2 view (``what``: only those fields), None when there is none."""
        try:
            return self._call("tpu.v2.nodes.get", "GET", f"{self._loc(zone)}/nodes/{name}",
                              params={"fields": what} if what else None)
        except NotFound:
            return None

    def get_tpu(self, zone: str, name: str) -> TpuNode | None:
        """The cluster's TPU in ``zone``: a Cloud TPU API node, else a Compute Engine TPU VM or slice."""
        n = self._tpu_api_view(lambda: self._get_v2(zone, name), None)
        return self._from_v2(n) if n is not None else self._compute.get(zone, name)

    @staticmethod
    def _tpu_api_view(read: Callable[[], Any], none: Any) -> Any:
        """A read of the Cloud TPU API; a project with that API disabled has no TPU there (its TPUs
        are on Compute Engine), so SERVICE_DISABLED reads as none."""
        try:
            return read()
        except CloudError as exc:
            if exc.kind == "api_disabled":
                return none
            raise

    def _list_v2(self, zone: str | None = None, what: str = fields.NODE) -> list[Json]:
        """Every node (of ``zone``, or all), each with only the fields ``what`` names."""
        return list(self._pages("tpu.v2.nodes.list", f"{self._loc(zone)}/nodes", "nodes",
                                {"fields": fields.tpu_listed("nodes", what)}))

    def list_tpus(self, zone: str | None = None, labels: dict[str, str] | None = None, *,
                  metadata: bool = False, near: tuple[str, ...] = (), api: str | None = None) -> list[TpuNode]:
        """Both kinds side by side: Cloud TPU API nodes and Compute Engine TPUs (read concurrently).

        The Cloud TPU API has no label filter: a named cluster's node is read where it is
        (:meth:`_cluster_v2`), so ``status NAME`` costs the same whatever the project holds; a
        named cluster's Compute Engine TPU is read from its instances (``ComputeTpus.of_cluster``)."""
        cluster = (labels or {}).get(CLUSTER_LABEL)
        what = fields.NODE_WITH_METADATA if metadata else fields.NODE
        if cluster and near and not zone:
            # where the cache says its node is, it is the cluster's one TPU: the Compute Engine
            # TPU lists (MIGs, templates, policies: three requests) could add nothing to it
            found = self._tpu_api_view(lambda: self._cluster_v2(cluster, None, what, near, only_near=True), [])
            if found:
                return [self._from_v2(n, metadata) for n in found]
        elif cluster and not zone and api == "compute" and set(labels or {}) == {CLUSTER_LABEL}:
            # a Compute Engine cluster (this machine's cache says so): the cluster's instances,
            # which its host VM's read lists anyway, show its TPU, and then the TPU API and the
            # slice and remnant lists are not asked. Without that word (a cluster not made here, a
            # new one) the reads below go at once, as before: guessing would add a request in turn
            on_compute = self._compute.of_cluster(cluster)
            if on_compute is not None:
                return on_compute
        with ThreadPoolExecutor(2) as reads:
            compute_f = reads.submit(self._compute.list, zone, labels)
            if cluster:
                v2 = self._tpu_api_view(lambda: self._cluster_v2(cluster, zone, what, () if zone else near,
                                                                 on_compute=lambda: bool(compute_f.result()),
                                                                 tried=near), [])
            else:
                v2 = self._tpu_api_view(lambda: self._list_v2(zone, what), [])
            wanted = [n for n in v2 if matches(dict(n.get("labels") or {}), labels)]
            if sum(_api_arch(n, Arch.VM) == Arch.NODE for n in wanted) > 1:
                with ThreadPoolExecutor(4) as pool:
                    nodes = list(pool.map(lambda n: self._from_v2(n, metadata), wanted))
            else:
                nodes = [self._from_v2(n, metadata) for n in wanted]
            return nodes + compute_f.result()

    def _cluster_v2(self, cluster: str, zone: str | None, what: str, near: tuple[str, ...],
                    on_compute: Callable[[], bool] = lambda: False, *, only_near: bool = False,
                    tried: tuple[str, ...] = ()) -> list[Json]:
        """The v2 nodes labelled ``cluster``, without listing the project's: its node is named for
        it, so it is read (``nodes.get``) in ``zone``, else in the zones ``near`` names (the local
        cache's), else in the zones of the cluster's instances (its host VM: one label-filtered
        Compute list). A node in none of those (moved by zone failover, a cluster without a host
        VM) is found in a list of names and labels alone, unless the cluster's TPU is on Compute
        Engine (``on_compute``: read at the same time), where a cluster has only the one.
        ``only_near``: the zones ``near`` names and no further (``list_tpus`` looks there first);
        ``tried``: zones looked in already, not read again."""
        def where() -> Iterator[str]:
            if zone:
                yield zone
                return
            yield from (z for z in near if z not in tried)
            if not only_near:
                yield from (z for z in self._instance_zones(cluster) if z not in near and z not in tried)

        for z in where():
            node = self._get_v2(z, cluster, what)
            if node is not None and dict(node.get("labels") or {}).get(CLUSTER_LABEL) == cluster:
                return [node]
        if only_near or on_compute():
            return []
        listed = self._pages("tpu.v2.nodes.list", f"{self._loc(zone)}/nodes", "nodes",
                             {"fields": fields.tpu_listed("nodes", "name,labels")})
        names = [str(n.get("name") or "") for n in listed
                 if dict(n.get("labels") or {}).get(CLUSTER_LABEL) == cluster]
        found = (self._get_v2(_zone_of(name), _short(name), what) for name in names)
        return [n for n in found if n is not None]

    def _instance_zones(self, cluster: str) -> list[str]:
        """The zones of the cluster's Compute Engine instances."""
        items = self._cluster_instances.of(cluster)
        return list(dict.fromkeys(_short(str(i.get("zone") or "")) for i in items if i.get("zone")))

    def _read_cluster_instances(self, cluster: str) -> list[Json]:
        """Every instance labelled ``cluster`` (a server-side label filter), with what each of
        its readers reads: a host VM's fields and metadata, a TPU worker's (gcp_cluster_reads)."""
        return list(self._aggregated("compute.instances.aggregatedList", "instances", "instances",
                                     {"filter": f'labels.{CLUSTER_LABEL} = "{cluster}"',
                                      "fields": fields.aggregated("instances", fields.TPU_INSTANCE)}))

    def delete_tpu(self, zone: str, name: str) -> Operation:
        n = self._tpu_api_view(lambda: self._get_v2(zone, name), None)
        if n is None:
            return self._compute.delete(zone, name)     # NotFound when there is none there either
        path = f"projects/{self.project}/locations/{zone}/nodes/{name}"
        if n.get("queuedResource"):
            # the node is its queued resource's: deleting the request with force deletes both
            # (DeleteQueuedResourceRequest.force; without it a request holding a node is refused)
            op = self._call("tpu.v2.queuedResources.delete", "DELETE", f"{self._tpu}/v2/{n['queuedResource']}",
                            params={"force": "true"})
            return Operation(name=f"tpu2:{op['name']}", zone=zone, verb="delete", kind="tpu", target=name)
        if _api_arch(n, Arch.VM) == Arch.NODE:
            try:
                op = self._call("tpu.v1.nodes.delete", "DELETE", f"{self._tpu}/v1/{path}")
                return Operation(name=f"tpu1:{op['name']}", zone=zone, verb="delete", kind="tpu", target=name)
            except NotFound:
                pass    # v1 is gone, yet v2 lists the Node: v2 deletes any node
            except CloudError as exc:
                if exc.kind not in ("permission", "api_disabled"):
                    raise
        op = self._call("tpu.v2.nodes.delete", "DELETE", f"{self._tpu}/v2/{path}")
        return Operation(name=f"tpu2:{op['name']}", zone=zone, verb="delete", kind="tpu", target=name)

    # ---- operations ------------------------------------------------------------------------------
    def poll(self, op: Operation) -> Operation:
        if op.done:
            return op
        scheme, _, ref = op.name.partition(":")
        if scheme in ("tpu1", "tpu2"):
            version = "v1" if scheme == "tpu1" else "v2"
            res = self._call(f"tpu.{version}.operations.get", "GET", f"{self._tpu}/{version}/{ref}")
            if res.get("done"):
                op.done = True
                error = res.get("error") or {}
                if error.get("code"):
                    op.error = OperationError(int(error["code"]), redact(str(error.get("message") or "")))
        elif scheme == "zone":
            res = self._call("compute.zoneOperations.get", "GET", f"{self._gce}/zones/{op.zone}/operations/{ref}")
            if res.get("status") == "DONE":
                op.done = True
                if res.get("error") or res.get("httpErrorStatusCode"):
                    op.error = OperationError(*compute_operation_failure(res))
        elif scheme == "queued":
            self._poll_queued(op, ref)
        elif scheme in ("ceslice", "cedel"):
            self._compute.poll(op, scheme, ref)
        else:  # pragma: no cover - operations are only made here
            raise ValueError(op.name)
        return op

    def _poll_queued(self, op: Operation, name: str) -> None:
        try:
            qr = self._call("tpu.v2.queuedResources.get", "GET", f"{self._tpu}/v2/{name}")
        except NotFound:
            op.done, op.error = True, OperationError(5, f"queued resource {op.target} disappeared")
            return
        status = qr.get("state") or {}
        state = str(status.get("state") or "")
        if state == "ACTIVE":
            op.done = True
        elif state in ("FAILED", "SUSPENDED"):
            op.done = True
            op.error = OperationError(*queued_failure(op.target, status))

    def _wait_compute(self, scope: str, name: str) -> Json:
        """Compute's ``operations.wait`` until DONE (each call answers within two minutes)."""
        what = {"global": "compute.globalOperations.wait", "regions": "compute.regionOperations.wait"}.get(
            scope.split("/")[0], "compute.zoneOperations.wait")
        deadline = time.monotonic() + 600
        while True:
            res = self._call(what, "POST", f"{self._gce}/{scope}/operations/{name}/wait", timeout=WAIT_TIMEOUT)
            if res.get("status") == "DONE" or time.monotonic() > deadline:
                return res

    # ---- network: ranges in use and the reservations every tpuctl sees -----------------------------
    def used_ranges(self, spec: ClusterSpec) -> list[Used]:
        """Every range on the network a TPU block must avoid; the reads run concurrently."""
        with ThreadPoolExecutor(7) as pool:
            network_f = pool.submit(self._network, spec.network)
            subnets_f = pool.submit(lambda: list(self._aggregated(
                "compute.subnetworks.aggregatedList", "subnetworks", "subnetworks",
                {"fields": fields.aggregated("subnetworks", fields.SUBNET)})))
            routes_f = pool.submit(lambda: list(self._pages("compute.routes.list", f"{self._gce}/global/routes",
                                                            "items", {"fields": fields.listed("items", fields.ROUTE)})))
            addresses_f = pool.submit(lambda: list(self._pages(
                "compute.globalAddresses.list", f"{self._gce}/global/addresses", "items",
                {"fields": fields.listed("items", fields.ADDRESS)})))
            # the other nodes' blocks: names and ranges only, whatever else each node carries
            tpus_f = pool.submit(self._list_v2, None, "name,cidrBlock")
            ranges_f = pool.submit(self._read_ranges)
            claims_f = pool.submit(self._claims)
            network = network_f.result()
            used = self._network_ranges(spec, network, subnets_f.result(), routes_f.result(),
                                        addresses_f.result())
            for node in tpus_f.result():
                block, name = node.get("cidrBlock"), _short(node.get("name") or "")
                if block and name != spec.name:
                    _add(used, block, f"TPU {name} in {_zone_of(node['name'])}", "tpu")
            for cluster, rec in ranges_f.result()[0].items():
                if cluster != spec.name and isinstance(rec, dict) and rec.get("network") == spec.network:
                    _add(used, rec.get("cidr"), f"range reserved by tpuctl cluster {cluster}", "reservation")
            for claim in claims_f.result():
                if claim.cluster != spec.name and claim.network == spec.network:
                    _add(used, claim.cidr, f"range reserved by tpuctl cluster {claim.cluster}", "reservation")
        return used

    def _network(self, name: str) -> Json:
        try:
            return self._call("compute.networks.get", "GET", f"{self._gce}/global/networks/{name}")
        except NotFound:
            raise UsageError(f"network {name} not found in project {self.project}",
                             hint="pass --network with an existing VPC network") from None

    def _network_ranges(self, spec: ClusterSpec, network: Json, subnets: list[Json], routes: list[Json],
                        addresses: list[Json]) -> list[Used]:
        net_tail = f"/global/networks/{spec.network}"
        used: list[Used] = []
        _add(used, network.get("IPv4Range"), f"legacy network {spec.network}", "subnet")
        for sn in subnets:
            if not str(sn.get("network") or "").endswith(net_tail):
                continue
            where = f"subnetwork {sn.get('name')} in {_short(sn.get('region') or '')}"
            # an IPv6-only subnet (stackType IPV6_ONLY) has no ipCidrRange: nothing IPv4 to avoid
            _add(used, sn.get("ipCidrRange"), where, "subnet")
            for sec in sn.get("secondaryIpRanges") or []:
                _add(used, sec.get("ipCidrRange"), f"secondary range {sec.get('rangeName')} of {where}", "secondary")
        for route in routes:
            if str(route.get("network") or "").endswith(net_tail):
                _add(used, route.get("destRange"), f"route {route.get('name')}", "route")
        for addr in addresses:
            # internal global addresses on this network: private services access allocations
            # (purpose VPC_PEERING, address + prefixLength), which peered producers may fill at any
            # time, and single internal addresses (Private Service Connect)
            if addr.get("addressType") != "INTERNAL" or not str(addr.get("network") or "").endswith(net_tail):
                continue
            if not addr.get("address"):
                continue
            prefix = addr.get("prefixLength")
            purpose = addr.get("purpose") or "internal"
            what = ("private services access range" if purpose == "VPC_PEERING"
                    else f"{purpose} address")
            _add(used, f"{addr['address']}/{prefix if prefix is not None else 32}",
                 f"{what} {addr.get('name')} (global address)", "peering" if purpose == "VPC_PEERING" else "other")
        regions = sorted({_region(z) for z in spec.zones})
        for peering in network.get("peerings") or []:
            for region in regions:
                params = {"peeringName": peering.get("name"), "direction": "INCOMING", "region": region}
                for pr in self._pages("compute.networks.listPeeringRoutes",
                                      f"{self._gce}/global/networks/{spec.network}/listPeeringRoutes", "items",
                                      params):
                    _add(used, pr.get("destRange"), f"peered network {peering.get('name')}", "peering")
        return used

    def _project_metadata(self) -> Json:
        proj = self._call("compute.projects.get", "GET", self._gce, params={"fields": "commonInstanceMetadata"})
        return proj.get("commonInstanceMetadata") or {}

    def _read_ranges(self) -> tuple[dict[str, Any], str | None]:
        meta = self._project_metadata()
        return _ranges_in(meta), meta.get("fingerprint")

    def _write_ranges(self, update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
        """Compare-and-swap the reservation map; returns False if ``update`` refused (returned None)."""
        for attempt in range(20):
            meta = self._project_metadata()
            current = _ranges_in(meta)
            new = update(dict(current))
            if new is None:
                return False
            if new == current:
                return True
            items = [{"key": i.get("key"), "value": i.get("value", "")} for i in _items(meta)
                     if i.get("key") != RANGES_METADATA_KEY]
            if new:
                items.append({"key": RANGES_METADATA_KEY, "value": json.dumps(new, sort_keys=True)})
            body: Json = {"items": items}
            if meta.get("fingerprint"):
                body["fingerprint"] = meta["fingerprint"]
            try:
                op = self._call("compute.projects.setCommonInstanceMetadata", "POST",
                                f"{self._gce}/setCommonInstanceMetadata", body=body)
            except CloudError as exc:
                if "fingerprint" in exc.message.lower():
                    # another tpuctl wrote in between: read again and retry the swap
                    time.sleep(random.uniform(0.02, 0.1 * (1 + attempt)))
                    continue
                raise
            res = op if op.get("status") == "DONE" else self._wait_compute("global", op["name"])
            if res.get("status") == "DONE" and not res.get("error"):
                return True
            time.sleep(0.05 + 0.1 * attempt)
        raise CloudError("could not update the TPU range reservations: too much contention", kind="transient",
                         hint="retry in a minute")

    # A TPU range reservation is a claim of the cluster's own (range_claims.py): created once,
    # read back with every other claim in one filtered list, the earliest holding an overlap.
    def _claims(self) -> list[range_claims.Claim]:
        items = self._pages("compute.instanceTemplates.list", f"{self._gce}/global/instanceTemplates", "items",
                            {"filter": range_claims.LIST_FILTER})
        return range_claims.parse_all(list(items))

    def _claim_of(self, cluster: str) -> range_claims.Claim | None:
        try:
            res = self._call("compute.instanceTemplates.get", "GET",
                             f"{self._gce}/global/instanceTemplates/{range_claims.resource_name(cluster)}")
        except NotFound:
            return None
        claim = range_claims.parse(res)
        return claim if claim is not None and claim.cluster == cluster else None

    def _create_claim(self, spec: ClusterSpec, block: str) -> bool:
        """Create the cluster's claim; False if a claim of that name exists already (a concurrent
        ``up`` of the same cluster, or a claim being deleted)."""
        body: Json = {
            "name": range_claims.resource_name(spec.name),
            "description": range_claims.description(spec.name, block, spec.network, spec.zone),
            "properties": {
                "machineType": range_claims.MACHINE_TYPE,
                "labels": {"tpuctl-range-of": spec.name},
                "networkInterfaces": [{"network": f"projects/{self.project}/global/networks/{spec.network}"}],
                "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
                    "sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}],
            },
        }
        try:
            op = self._call("compute.instanceTemplates.insert", "POST", f"{self._gce}/global/instanceTemplates",
                            body=body)
        except CloudError as exc:
            if exc.kind == "conflict" or "already exists" in exc.message:
                return False
            raise
        res = op if op.get("status") == "DONE" else self._wait_compute("global", op["name"])
        if res.get("error") or res.get("httpErrorStatusCode"):
            code, message = compute_operation_failure(res)
            if code == 6 or "already exists" in message:       # ALREADY_EXISTS
                return False
            raise CloudError(f"could not reserve TPU range {block}: {message}", kind="transient",
                             hint="retry in a minute")
        return True

    def _delete_claim(self, cluster: str) -> None:
        try:
            op = self._call("compute.instanceTemplates.delete", "DELETE",
                            f"{self._gce}/global/instanceTemplates/{range_claims.resource_name(cluster)}")
        except NotFound:
            return
        if op.get("status") != "DONE":
            self._wait_compute("global", op["name"])

    def reserved_range(self, spec: ClusterSpec) -> str | None:
        claim = self._claim_of(spec.name)
        if claim is not None:
            return claim.cidr
        rec = self._read_ranges()[0].get(spec.name)     # a reservation made before claims
        return rec["cidr"] if isinstance(rec, dict) and rec.get("cidr") else None

    def reserve_range(self, spec: ClusterSpec, block: str) -> bool:
        """Claim ``block`` for the cluster; False if another cluster holds an overlapping block
        (a reservation in the old project-metadata value, or an earlier claim)."""
        block = str(ipaddress.ip_network(block))
        legacy = self._read_ranges()[0]
        if range_claims.legacy_holder(spec.name, block, spec.network, legacy):
            return False
        mine = self._claim_of(spec.name)
        if mine is not None and (mine.cidr != block or mine.network != spec.network):
            self._delete_claim(spec.name)          # the cluster moves to another block
            mine = None
        if mine is None and not self._create_claim(spec, block):
            mine = self._claim_of(spec.name)           # made at the same moment by another tpuctl
            if mine is None or mine.cidr != block or mine.network != spec.network:
                return False
        claims = self._claims()
        mine = next((c for c in claims if c.cluster == spec.name), None) or self._claim_of(spec.name)
        if mine is None:
            return False
        if range_claims.holder(mine, claims) is not None:
            self._delete_claim(spec.name)          # an earlier claim holds it: pick again
            return False
        if spec.name in legacy:
            self._write_ranges(lambda cur: {k: v for k, v in cur.items() if k != spec.name})
        return True

    def release_range(self, cluster: str) -> None:
        self._delete_claim(cluster)
        if cluster in self._read_ranges()[0]:
            self._write_ranges(lambda cur: {k: v for k, v in cur.items() if k != cluster})

    # ---- telling hosts where their work is, and what they may run ------------------------------
    def point_hosts_at(self, spec: ClusterSpec, bucket: str) -> list[str]:
        """Set ``tpuctl-bucket`` in the metadata of the cluster's host VM and TPU VM, if it differs.

        The hosts' bootstrap waits on that key (templates/host-startup.sh); a cluster created without
        --bucket learns it when its first run starts. Returns what was updated.
        """
        self.stage_startup(bucket)
        return self.update_host_metadata(spec.name, "tpuctl-bucket", lambda _current: bucket)

    def stage_startup(self, bucket: str | None) -> None:
        """Put the startup script the bootstrap pins into ``bucket`` before any metadata names it
        (once per bucket and process: `up` stages before it creates anything, and each create,
        a recreated TPU's too, makes sure again)."""
        if not bucket:
            return
        with self._lock:
            if bucket in self._staged:
                return
        from ..basics.config import Target
        from .storage import open_bucket

        startup.stage(open_bucket(bucket, Target(provider="gcp", project=self.project, zone=None)))
        with self._lock:
            self._staged.add(bucket)

    def update_host_metadata(self, cluster: str, key: str, update: Callable[[str | None], str]) -> list[str]:
        """Set ``key`` to ``update(its value)`` in the metadata of the cluster's host VM and of its
        live TPU VM (a TPU Node has no metadata: its host VM runs the job). The VM's write is a
        compare-and-swap (``instances.setMetadata`` with the fingerprint read); the TPU VM's is
        ``nodes.patch`` of the whole map (the Cloud TPU API has no fingerprint). Writes only what
        differs; returns what was updated."""
        updated = []
        for vm in self.list_vms(None, {CLUSTER_LABEL: cluster}):
            if self._update_vm_metadata(vm.zone, vm.name, key, update):
                updated.append(f"VM {vm.name}")
        for node in self.list_tpus(None, {CLUSTER_LABEL: cluster}):
            if node.dead:
                continue
            if node.api == "compute":
                # a Compute Engine TPU's workers are instances: each has a fingerprinted map
                for worker in self._compute.worker_instances(node.zone, node.name):
                    if self._update_vm_metadata(node.zone, str(worker["name"]), key, update):
                        updated.append(f"TPU {node.name} worker {worker['name']}")
            elif node.arch == Arch.VM and self._update_tpu_metadata(node.zone, node.name, key, update):
                updated.append(f"TPU {node.name}")
        return updated

    def _update_vm_metadata(self, zone: str, name: str, key: str, update: Callable[[str | None], str]) -> bool:
        for attempt in range(10):
            meta = self._instance(zone, name).get("metadata") or {}
            items = {i.get("key"): i.get("value", "") for i in _items(meta)}
            value = update(items.get(key))
            if items.get(key) == value:
                return False
            items[key] = value
            body = {"fingerprint": meta.get("fingerprint"), "items": [{"key": k, "value": v} for k, v in items.items()]}
            try:
                op = self._call("compute.instances.setMetadata", "POST",
                                f"{self._gce}/zones/{zone}/instances/{name}/setMetadata", body=body)
            except CloudError as exc:
                if "fingerprint" in exc.message.lower():
                    time.sleep(random.uniform(0.02, 0.1 * (1 + attempt)))
                    continue
                raise
            if op.get("status") != "DONE":
                op = self._wait_compute(f"zones/{zone}", op["name"])
            if op.get("error"):
                _code, message = compute_operation_failure(op)
                raise CloudError(f"updating the metadata of VM {name} failed: {message}", kind="unknown")
            return True
        raise CloudError(f"could not update the metadata of VM {name}: it keeps changing", kind="transient")

    def _update_tpu_metadata(self, zone: str, name: str, key: str, update: Callable[[str | None], str]) -> bool:
        node = self._call("tpu.v2.nodes.get", "GET", f"{self._loc(zone)}/nodes/{name}")
        meta = dict(node.get("metadata") or {})
        value = update(meta.get(key))
        if meta.get(key) == value:
            return False
        meta[key] = value
        op = self._call("tpu.v2.nodes.patch", "PATCH", f"{self._tpu}/v2/{node['name']}",
                        params={"updateMask": "metadata"}, body={"metadata": meta})
        from .operations import wait_all

        wait_all(self, [Operation(name=f"tpu2:{op['name']}", zone=zone, verb="update", kind="tpu",
                                  target=name)], timeout=300)
        return True

    def reservations(self) -> dict[str, dict[str, Any]]:
        """Every cluster's range reservation: {cluster: {cidr, network, zone, at}} (its claim, or
        its entry in the old project-metadata value)."""
        out = {k: v for k, v in self._read_ranges()[0].items() if isinstance(v, dict)}
        out.update({c.cluster: c.record() for c in self._claims()})
        return out

    # ---- firewall: what lets a pod slice's workers reach each other ------------------------------
    def firewall_rules(self, network: str) -> list[FirewallRule]:
        """The VPC firewall rules of ``network`` (Compute ``firewalls.list``, kept by network)."""
        self._network(network)     # a network that does not exist: one line naming --network
        items = self._pages("compute.firewalls.list", f"{self._gce}/global/firewalls", "items")
        return [_firewall(f) for f in items if _short(str(f.get("network") or "")) == network]

    def worker_ranges(self, spec: ClusterSpec, zone: str) -> list[str]:
        """The subnetwork a TPU VM's workers take addresses from: ``--subnetwork``, else every
        IPv4 subnetwork of the network in the zone's region (Google picks one of them)."""
        region = _region(zone)
        if spec.subnetwork:
            try:
                sub = self._call("compute.subnetworks.get", "GET",
                                 f"{self._gce}/regions/{region}/subnetworks/{spec.subnetwork}")
            except NotFound:
                raise UsageError(f"subnetwork {spec.subnetwork} not found in region {region}",
                                 hint="pass --subnetwork with a subnetwork of --network in the TPU's region") from None
            return [sub["ipCidrRange"]] if sub.get("ipCidrRange") else []
        subs = self._pages("compute.subnetworks.list", f"{self._gce}/regions/{region}/subnetworks", "items")
        return [sn["ipCidrRange"] for sn in subs
                if _short(str(sn.get("network") or "")) == spec.network and sn.get("ipCidrRange")]

    def create_firewall_rule(self, rule: FirewallRule) -> None:
        body: Json = {"name": rule.name, "network": f"projects/{self.project}/global/networks/{rule.network}",
                      "direction": rule.direction, "priority": rule.priority, "description": rule.description,
                      "allowed": [{"IPProtocol": proto, **({"ports": list(ports)} if ports else {})}
                                  for proto, ports in rule.allowed]}
        for key, value in (("sourceRanges", rule.source_ranges), ("sourceTags", rule.source_tags),
                           ("targetTags", rule.target_tags)):
            if value:
                body[key] = list(value)
        op = self._call("compute.firewalls.insert", "POST", f"{self._gce}/global/firewalls", body=body)
        if op.get("status") != "DONE":
            op = self._wait_compute("global", op["name"])
        if op.get("error"):
            _code, message = compute_operation_failure(op)
            raise CloudError(f"creating firewall rule {rule.name} failed: {message}", kind="unknown")

    def delete_firewall_rule(self, name: str) -> bool:
        try:
            op = self._call("compute.firewalls.delete", "DELETE", f"{self._gce}/global/firewalls/{name}")
        except NotFound:
            return False
        if op.get("status") != "DONE":
            op = self._wait_compute("global", op["name"])
        if op.get("error"):
            _code, message = compute_operation_failure(op)
            raise CloudError(f"deleting firewall rule {name} failed: {message}", kind="unknown")
        return True

    def metadata_of(self, kind: str, zone: str, name: str) -> dict[str, str]:
        """The instance metadata of a host VM (``kind`` vm) or TPU VM (``kind`` tpu); {} if none."""
        try:
            if kind == "vm":
                return {i.get("key"): i.get("value", "") for i in _items(self._instance(zone, name).get("metadata"))}
            node = self._tpu_api_view(lambda: self._call("tpu.v2.nodes.get", "GET", f"{self._loc(zone)}/nodes/{name}"),
                                      None)
        except NotFound:
            node = None
        if node is not None:
            return dict(node.get("metadata") or {})
        for worker in self._compute.worker_instances(zone, name)[:1]:     # a Compute Engine TPU: worker 0's
            return {i.get("key"): i.get("value", "") for i in _items(worker.get("metadata"))}
        return {}

    def duty_cycles(self, window_s: float) -> tuple[dict[tuple[str, str | None], Any] | None, str]:
        from . import dutycycle

        try:
            try:
                creds = self._credentials()       # cloud-platform: Monitoring and the TPU API alike
            except TpuctlError as exc:
                raise dutycycle.Unavailable(exc.one_line()) from None
            table = dutycycle.fetch(self.project, window_s=window_s, credentials=creds)
        except dutycycle.Unavailable as exc:
            return None, f"unavailable ({exc}): the progress record decides"
        return table, f"read from Cloud Monitoring ({dutycycle.METRIC}) for {len(table)} node(s)"

    def price_book(self) -> PriceBook:
        """List prices from the Cloud Billing Catalog API, cached for a day (provision.cloud.gcp_billing)."""
        if self._prices is None:
            import sys

            from . import gcp_billing

            self._prices = gcp_billing.load(lambda: self._session().call,
                                            warn=lambda line: print(line, file=sys.stderr))
        return self._prices

    # ---- Cloud Monitoring: a run's workload metrics (provision.runs.workload_metrics) --------------
    def write_time_series(self, series: list[Json]) -> int:
        """``projects.timeSeries.create`` (Monitoring v3, discovery document ``monitoring.v3.json``):
        at most 200 series a call, as the API takes them; the answer is empty when all were written.
        A refusal (a point older than the series' last one, a missing permission) is a CloudError
        in Google's words."""
        from .gcp_rest import monitoring_base

        url = f"{monitoring_base()}/v3/projects/{self.project}/timeSeries"
        for i in range(0, len(series), 200):
            self._call("monitoring.projects.timeSeries.create", "POST", url, body={"timeSeries": series[i:i + 200]})
        return len(series)

    # ---- the TPU service agent (TPU Nodes write checkpoints to the bucket as this account) ----------
    def tpu_service_agent(self, zone: str) -> str:
        res = self._call("tpu.v2.generateServiceIdentity", "POST", f"{self._loc(zone)}:generateServiceIdentity",
                         body={})
        return str((res.get("identity") or {}).get("email") or "")

    def preempted_tpus(self, cluster: str | None = None) -> list[Preemption]:
        """Compute Engine TPU VMs deleted by their preemption (the Cloud TPU API keeps a preempted
        node, listed as PREEMPTED, so only Compute Engine's records are read)."""
        return self._compute.preempted(cluster)

    # ---- rehearsal ---------------------------------------------------------------------------------
    def simulate_preemption(self, zone: str, name: str, notice_s: float = 0.0) -> TpuNode | None:
        """Preempt through the fake cloud's admin API; Google Cloud itself offers no such call.

        The fake gives the notice as Google does (``instance/preempted`` TRUE in the guest's
        metadata: on a Compute Engine TPU VM, or on every worker of a Cloud TPU API TPU VM) and
        powers the TPU off ``notice_s`` later. A TPU Node has no guest of the user's to tell: it
        is PREEMPTED at once."""
        admin = _admin_url()
        if admin is None:
            raise NotAvailable("Google Cloud cannot preempt a TPU on request",
                               hint="rehearse with --provider local, or against the fake cloud (tests/fakegcp)")
        import urllib.request

        workers = [] if self._tpu_api_view(lambda: self._get_v2(zone, name), None) else \
            self._compute.worker_instances(zone, name)
        if not workers:
            node = self.get_tpu(zone, name)
            if node is not None and node.arch == Arch.NODE:
                notice_s = 0.0
        body = json.dumps({"project": self.project, "zone": zone, "name": workers[0]["name"] if workers else name,
                           "state": "PREEMPTED", "kind": "vm" if workers else "tpu", "notice": notice_s}).encode()
        req = urllib.request.Request(f"{admin}/_admin/preempt", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        # None: powered off at once and deleted (a Spot VM whose termination action is DELETE)
        return self.get_tpu(zone, name)


def _add(used: list[Used], cidr: Any, source: str, kind: str) -> None:
    """Record a range in use; an absent or unparsable one (an IPv6-only subnet's) is skipped."""
    if not cidr or not isinstance(cidr, str):
        return
    try:
        used.append(Used.of(cidr, source, kind))
    except ValueError:
        return


def _tpuctl_metadata(inst: Json) -> dict[str, str]:
    """tpuctl's keys of an instance's metadata (``metadata.items``), never its startup script."""
    return fields.tpuctl_keys({str(i.get("key")): str(i.get("value", "")) for i in _items(inst.get("metadata"))})


def _ranges_in(meta: Json) -> dict[str, Any]:
    for item in _items(meta):
        if item.get("key") == RANGES_METADATA_KEY:
            try:
                data = json.loads(item.get("value") or "{}")
            except json.JSONDecodeError:
                data = {}
            return data if isinstance(data, dict) else {}
    return {}


def _agent_metadata(spec: ClusterSpec, role: str) -> dict[str, str]:
    """The small bootstrap (the startup script itself is in the bucket, pinned by its sha256:
    startup.py) and the values it and the agent read."""
    meta = {"startup-script": startup.current().bootstrap, "tpuctl-cluster": spec.name, "tpuctl-role": role}
    if spec.bucket:
        meta["tpuctl-bucket"] = spec.bucket
    if spec.autodown_seconds and role == "host":
        meta["tpuctl-autodown-seconds"] = str(int(spec.autodown_seconds))
    return meta


def _admin_url() -> str | None:
    endpoint = os.environ.get("TPUCTL_TPU_API_ENDPOINT")
    if not endpoint:
        return None
    parsed = urlparse(endpoint)
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    return f"{parsed.scheme}://{parsed.netloc}"
