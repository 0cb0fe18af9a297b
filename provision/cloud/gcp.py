"""Google Cloud: host VMs on Compute Engine, TPU Nodes (Cloud TPU v1) and TPU VMs (v2).

Translation only: every decision lives in the pure core. Calls go through :meth:`GcpProvider._call`,
the one place that retries (tenacity, random exponential backoff with jitter) the errors
:mod:`provision.cloud.failures` calls transient and turns every other error into a :class:`CloudError`
of a known kind. The client libraries' own retries are switched off so retries are counted once.

Endpoints (DESIGN.md): ``TPUCTL_TPU_API_ENDPOINT`` and ``TPUCTL_COMPUTE_API_ENDPOINT`` are base
URLs given to the REST clients as ``api_endpoint``; the v1 client speaks gRPC only, so
``TPUCTL_TPU_GRPC_ENDPOINT`` (host:port, insecure) reaches a private or fake v1 endpoint.
``TPUCTL_CREDENTIALS=anonymous`` skips Application Default Credentials.

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
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlparse

from ..basics.errors import CloudError, NotAvailable, NotFound, UsageError
from ..basics.redact import redact
from .base import (
    Arch,
    ClusterSpec,
    Endpoint,
    Health,
    Operation,
    OperationError,
    TpuNode,
    TpuState,
    Used,
    Vm,
    VmState,
    matches,
    parse_pool,
)
from .failures import Kind
from .gcp_errors import compute_operation_failure, failure_of

T = TypeVar("T")

RANGES_METADATA_KEY = "tpuctl-tpu-ranges"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
HOST_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
NODE_HOST_IMAGE = "projects/deeplearning-platform-release/global/images/family/tf-latest-cpu"
CALL_TIMEOUT = 60.0
RETRY_ATTEMPTS = 7
RETRY_MAX_WAIT = 8.0
RETRY_BUDGET_S = 120.0


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _zone_of(resource_name: str) -> str:
    parts = resource_name.split("/")
    return parts[parts.index("locations") + 1] if "locations" in parts else parts[parts.index("zones") + 1]


def _ts(value: Any) -> float | None:
    if not value:
        return None
    if hasattr(value, "timestamp"):
        try:
            return float(value.timestamp())
        except (TypeError, ValueError, OSError):
            return None
    return None


class GcpProvider:
    name: ClassVar[str] = "gcp"
    default_bucket: ClassVar[str | None] = None

    def __init__(self, project: str, settings: dict[str, Any] | None = None):
        self.project = project
        settings = settings or {}
        self.cidr_pool = parse_pool(settings.get("tpu_cidr_pool"))
        self.calls: Counter[str] = Counter()
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._arch: dict[tuple[str, str], Arch] = {}

    # ---- clients -------------------------------------------------------------------------------
    def _credentials(self) -> Any:
        if "creds" in self._clients:
            return self._clients["creds"]
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
        self._clients["creds"] = creds
        return creds

    def _options(self, env: str) -> Any:
        from google.api_core.client_options import ClientOptions

        endpoint = os.environ.get(env)
        return ClientOptions(api_endpoint=endpoint.rstrip("/")) if endpoint else None

    def _client(self, key: str, build: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._clients:
                self._clients[key] = build()
            return self._clients[key]

    def tpu2(self) -> Any:
        def build() -> Any:
            from google.cloud import tpu_v2

            return tpu_v2.TpuClient(credentials=self._credentials(), transport="rest",
                                    client_options=self._options("TPUCTL_TPU_API_ENDPOINT"))

        return self._client("tpu2", build)

    def tpu1(self) -> Any:
        def build() -> Any:
            from google.cloud import tpu_v1

            target = os.environ.get("TPUCTL_TPU_GRPC_ENDPOINT")
            if target:
                import grpc
                from google.cloud.tpu_v1.services.tpu.transports import TpuGrpcTransport

                channel = grpc.insecure_channel(target)
                return tpu_v1.TpuClient(transport=TpuGrpcTransport(channel=channel))
            return tpu_v1.TpuClient(credentials=self._credentials())

        return self._client("tpu1", build)

    def compute(self, kind: str) -> Any:
        def build() -> Any:
            from .gcp_imports import compute_client

            service = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()
            cls = compute_client(service)
            return cls(credentials=self._credentials(), transport="rest",
                       client_options=self._options("TPUCTL_COMPUTE_API_ENDPOINT"))

        return self._client(f"compute.{kind}", build)

    # ---- the one place calls are retried and errors classified ---------------------------------
    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        import tenacity

        kwargs.setdefault("timeout", CALL_TIMEOUT)
        kwargs.setdefault("retry", None)   # the libraries' own retries off: retries happen here, once

        def transient(exc: BaseException) -> bool:
            return failure_of(exc).retriable

        def counted(*a: Any, **kw: Any) -> T:
            self.calls[what] += 1
            return fn(*a, **kw)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(transient),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=RETRY_MAX_WAIT),
            stop=tenacity.stop_after_attempt(RETRY_ATTEMPTS) | tenacity.stop_after_delay(RETRY_BUDGET_S),
            reraise=True,
        )
        try:
            return retrying(counted, *args, **kwargs)
        except (TypeError, AttributeError, KeyError):
            raise       # a bug in tpuctl, not a cloud failure: reported as an internal error
        except Exception as exc:  # noqa: BLE001 - every failure leaves here classified
            f = failure_of(exc)
            if f.kind == Kind.NOT_FOUND:
                raise NotFound(f"{what}: {f.message}") from None
            raise CloudError(f"{what} failed: {f.message}", kind=f.kind.value, hint=f.hint) from None

    def _parent(self, zone: str | None) -> str:
        return f"projects/{self.project}/locations/{zone or '-'}"

    # ---- host VMs ------------------------------------------------------------------------------
    def create_vm(self, spec: ClusterSpec, zone: str) -> Operation:
        compute_v1 = _ct()

        image = NODE_HOST_IMAGE if spec.arch == Arch.NODE else HOST_IMAGE
        iface = compute_v1.NetworkInterface(network=f"global/networks/{spec.network}")
        if spec.subnetwork:
            iface.subnetwork = f"regions/{zone.rsplit('-', 1)[0]}/subnetworks/{spec.subnetwork}"
        if spec.external_ips:
            iface.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
        instance = compute_v1.Instance(
            name=spec.name,
            machine_type=f"zones/{zone}/machineTypes/{spec.machine_type}",
            labels=spec.resource_labels("host"),
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=image, disk_size_gb=50))],
            network_interfaces=[iface],
            service_accounts=[compute_v1.ServiceAccount(email=spec.service_account or "default",
                                                        scopes=list(SCOPES))],
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v)
                                                for k, v in self.host_metadata(spec).items()]),
        )
        op = self._call("compute.instances.insert", self.compute("Instances").insert,
                        project=self.project, zone=zone, instance_resource=instance)
        return Operation(name=f"zone:{op.name}", zone=zone, verb="create", kind="vm", target=spec.name)

    def host_metadata(self, spec: ClusterSpec) -> dict[str, str]:
        """The host's startup script pulls tpuctl from the bucket and runs the agent (no inbound ssh)."""
        return _agent_metadata(spec, role="host")

    def _vm(self, inst: Any) -> Vm:
        internal = external = None
        for iface in inst.network_interfaces or []:
            internal = internal or iface.network_i_p or None
            for ac in iface.access_configs or []:
                external = external or ac.nat_i_p or None
        created = None
        if inst.creation_timestamp:
            from datetime import datetime

            try:
                created = datetime.fromisoformat(inst.creation_timestamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                created = None
        return Vm(name=inst.name, zone=_short(inst.zone), state=VmState.of(inst.status),
                  machine_type=_short(inst.machine_type) if inst.machine_type else None,
                  labels=dict(inst.labels or {}), internal_ip=internal, external_ip=external, created_at=created)

    def get_vm(self, zone: str, name: str) -> Vm | None:
        try:
            inst = self._call("compute.instances.get", self.compute("Instances").get, project=self.project,
                              zone=zone, instance=name)
        except NotFound:
            return None
        return self._vm(inst)

    def list_vms(self, zone: str | None = None, labels: dict[str, str] | None = None) -> list[Vm]:
        compute_v1 = _ct()

        flt = " AND ".join(f'labels.{k} = "{v}"' for k, v in sorted((labels or {}).items())) or None
        client = self.compute("Instances")
        out = []
        if zone:
            items = self._call("compute.instances.list", _all(client.list),
                               request=compute_v1.ListInstancesRequest(project=self.project, zone=zone, filter=flt))
            out = [self._vm(i) for i in items]
        else:
            scopes = self._call("compute.instances.aggregatedList", _all(client.aggregated_list),
                                request=compute_v1.AggregatedListInstancesRequest(project=self.project, filter=flt))
            for _scope, scoped in scopes:
                out.extend(self._vm(i) for i in scoped.instances or [])
        return [v for v in out if matches(v.labels, labels)]

    def delete_vm(self, zone: str, name: str) -> Operation:
        op = self._call("compute.instances.delete", self.compute("Instances").delete, project=self.project,
                        zone=zone, instance=name)
        return Operation(name=f"zone:{op.name}", zone=zone, verb="delete", kind="vm", target=name)

    # ---- TPUs ------------------------------------------------------------------------------------
    def offered(self, zone: str, accelerator_type: str) -> bool:
        """Whether the zone offers the type (one call; checked before anything is created)."""
        try:
            self._call("tpu.v2.acceleratorTypes.get", self.tpu2().get_accelerator_type,
                       name=f"{self._parent(zone)}/acceleratorTypes/{accelerator_type}")
        except NotFound:
            return False
        except CloudError as exc:
            if exc.kind in ("invalid",):
                return False
            raise
        return True

    def create_tpu(self, spec: ClusterSpec, zone: str, cidr: str | None) -> Operation:
        if spec.arch == Arch.NODE:
            return self._create_node_v1(spec, zone, cidr)
        if spec.queued:
            return self._create_queued(spec, zone)
        from google.cloud import tpu_v2

        node = self._v2_node(spec)
        op = self._call("tpu.v2.nodes.create", self.tpu2().create_node,
                        request=tpu_v2.CreateNodeRequest(parent=self._parent(zone), node_id=spec.name, node=node))
        self._arch[(zone, spec.name)] = Arch.VM
        return Operation(name=f"tpu2:{op.operation.name}", zone=zone, verb="create", kind="tpu", target=spec.name)

    def tpu_metadata(self, spec: ClusterSpec) -> dict[str, str]:
        """Every TPU VM worker runs the same bootstrap, as a worker: it only runs attempts."""
        return _agent_metadata(spec, role="worker")

    def _v2_node(self, spec: ClusterSpec) -> Any:
        from google.cloud import tpu_v2

        net = tpu_v2.NetworkConfig(network=f"projects/{self.project}/global/networks/{spec.network}",
                                   enable_external_ips=spec.external_ips)
        if spec.subnetwork:
            net.subnetwork = (f"projects/{self.project}/regions/{spec.zone.rsplit('-', 1)[0]}"
                              f"/subnetworks/{spec.subnetwork}")
        node = tpu_v2.Node(
            accelerator_type=spec.accelerator_type, runtime_version=spec.software_version(), network_config=net,
            scheduling_config=tpu_v2.SchedulingConfig(preemptible=spec.preemptible, spot=spec.spot),
            labels=spec.resource_labels("tpu"), metadata=self.tpu_metadata(spec))
        if spec.service_account:
            node.service_account = tpu_v2.ServiceAccount(email=spec.service_account, scope=list(SCOPES))
        return node

    def _create_node_v1(self, spec: ClusterSpec, zone: str, cidr: str | None) -> Operation:
        from google.cloud import tpu_v1

        node = tpu_v1.Node(
            accelerator_type=spec.accelerator_type, tensorflow_version=spec.software_version(),
            network=f"projects/{self.project}/global/networks/{spec.network}", cidr_block=cidr or "",
            scheduling_config=tpu_v1.SchedulingConfig(preemptible=spec.preemptible),
            labels=spec.resource_labels("tpu"))
        op = self._call("tpu.v1.nodes.create", self.tpu1().create_node,
                        request=tpu_v1.CreateNodeRequest(parent=self._parent(zone), node_id=spec.name, node=node))
        self._arch[(zone, spec.name)] = Arch.NODE
        return Operation(name=f"tpu1:{op.operation.name}", zone=zone, verb="create", kind="tpu", target=spec.name)

    def _create_queued(self, spec: ClusterSpec, zone: str) -> Operation:
        from google.cloud import tpu_v2
        from google.protobuf import timestamp_pb2

        qr = tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(
                parent=self._parent(zone), node_id=spec.name, node=self._v2_node(spec))]))
        if spec.spot or spec.preemptible:
            qr.spot = tpu_v2.QueuedResource.Spot()
        if spec.valid_until_seconds:
            ts = timestamp_pb2.Timestamp()
            ts.FromSeconds(int(time.time() + spec.valid_until_seconds))
            qr.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(valid_until_time=ts)
        self._call("tpu.v2.queuedResources.create", self.tpu2().create_queued_resource,
                   request=tpu_v2.CreateQueuedResourceRequest(parent=self._parent(zone),
                                                              queued_resource_id=spec.name, queued_resource=qr),
                   )
        self._arch[(zone, spec.name)] = Arch.VM
        # Done when the queued resource is ACTIVE (its node exists) or FAILED: see poll().
        return Operation(name=f"queued:{self._parent(zone)}/queuedResources/{spec.name}", zone=zone,
                         verb="create", kind="queued-resource", target=spec.name)

    def _node(self, n: Any, arch: Arch) -> TpuNode:
        sched = n.scheduling_config
        endpoints = [Endpoint(e.ip_address, e.port or 8470) for e in (n.network_endpoints or [])]
        if "tensorflow_version" in type(n).meta.fields:      # a v1 message
            version, network = n.tensorflow_version, n.network
        else:                                                # a v2 message (either architecture)
            version = n.runtime_version
            network = n.network_config.network if n.network_config else None
        spot = bool(getattr(sched, "spot", False)) if sched else False
        zone = _zone_of(n.name)
        self._arch[(zone, _short(n.name))] = arch
        return TpuNode(name=_short(n.name), zone=zone, arch=arch, accelerator_type=n.accelerator_type,
                       state=TpuState.of(n.state), health=Health.of(n.health),
                       health_description=n.health_description or "", cidr_block=n.cidr_block or None,
                       preemptible=bool(sched.preemptible) if sched else False, spot=spot,
                       version=version or None, network=_short(network) if network else None,
                       labels=dict(n.labels or {}), endpoints=endpoints, created_at=_ts(n.create_time))

    @staticmethod
    def _api_arch(n: Any, default: Arch) -> Arch:
        version = getattr(getattr(n, "api_version", None), "name", "") or ""
        if version.startswith("V1"):
            return Arch.NODE
        if version.startswith("V2"):
            return Arch.VM
        return default

    def get_tpu(self, zone: str, name: str) -> TpuNode | None:
        order = [self._arch.get((zone, name), Arch.VM)]
        order.append(Arch.NODE if order[0] == Arch.VM else Arch.VM)
        for arch in order:
            try:
                if arch == Arch.VM:
                    n = self._call("tpu.v2.nodes.get", self.tpu2().get_node,
                                   name=f"{self._parent(zone)}/nodes/{name}")
                else:
                    n = self._call("tpu.v1.nodes.get", self.tpu1().get_node,
                                   name=f"{self._parent(zone)}/nodes/{name}")
            except NotFound:
                continue
            return self._node(n, self._api_arch(n, arch))
        return None

    def list_tpus(self, zone: str | None = None, labels: dict[str, str] | None = None) -> list[TpuNode]:
        found: dict[tuple[str, str], TpuNode] = {}
        for arch, what, client in ((Arch.VM, "tpu.v2.nodes.list", self.tpu2),
                                   (Arch.NODE, "tpu.v1.nodes.list", self.tpu1)):
            nodes = self._call(what, _all(client().list_nodes), parent=self._parent(zone))
            for n in nodes:
                node_arch = self._api_arch(n, arch)
                key = (_zone_of(n.name), _short(n.name))
                # each API may list the other's nodes; keep the view from the node's own API
                if key in found and node_arch != arch:
                    continue
                found[key] = self._node(n, node_arch)
        return [n for n in found.values() if matches(n.labels, labels)]

    def delete_tpu(self, zone: str, name: str) -> Operation:
        node = self.get_tpu(zone, name)
        if node is None:
            raise NotFound(f"TPU {name} not found in {zone}")
        if node.arch == Arch.NODE:
            op = self._call("tpu.v1.nodes.delete", self.tpu1().delete_node,
                            name=f"{self._parent(zone)}/nodes/{name}")
            return Operation(name=f"tpu1:{op.operation.name}", zone=zone, verb="delete", kind="tpu", target=name)
        qr = self._queued_resource_of(zone, name)
        if qr is not None:
            from google.cloud import tpu_v2

            op = self._call("tpu.v2.queuedResources.delete", self.tpu2().delete_queued_resource,
                            request=tpu_v2.DeleteQueuedResourceRequest(name=qr, force=True))
            return Operation(name=f"tpu2:{op.operation.name}", zone=zone, verb="delete", kind="tpu", target=name)
        op = self._call("tpu.v2.nodes.delete", self.tpu2().delete_node, name=f"{self._parent(zone)}/nodes/{name}")
        return Operation(name=f"tpu2:{op.operation.name}", zone=zone, verb="delete", kind="tpu", target=name)

    def _queued_resource_of(self, zone: str, name: str) -> str | None:
        try:
            qr = self._call("tpu.v2.queuedResources.get", self.tpu2().get_queued_resource,
                            name=f"{self._parent(zone)}/queuedResources/{name}")
        except (NotFound, CloudError):
            return None
        return qr.name

    # ---- operations ------------------------------------------------------------------------------
    def poll(self, op: Operation) -> Operation:
        if op.done:
            return op
        scheme, _, ref = op.name.partition(":")
        if scheme in ("tpu1", "tpu2"):
            client = self.tpu1() if scheme == "tpu1" else self.tpu2()
            res = self._call(f"tpu.{'v1' if scheme == 'tpu1' else 'v2'}.operations.get", client.get_operation,
                             request={"name": ref})
            if res.done:
                op.done = True
                if res.HasField("error") and res.error.code:
                    op.error = OperationError(res.error.code, redact(res.error.message))
        elif scheme == "zone":
            res = self._call("compute.zoneOperations.get", self.compute("ZoneOperations").get,
                             project=self.project, zone=op.zone, operation=ref)
            if getattr(res.status, "name", str(res.status)) == "DONE":
                op.done = True
                if res.error and res.error.errors:
                    op.error = OperationError(*compute_operation_failure(
                        type(res).to_dict(res, preserving_proto_field_name=False)))
        elif scheme == "queued":
            self._poll_queued(op, ref)
        else:  # pragma: no cover - operations are only made here
            raise ValueError(op.name)
        return op

    def _poll_queued(self, op: Operation, name: str) -> None:
        try:
            qr = self._call("tpu.v2.queuedResources.get", self.tpu2().get_queued_resource, name=name)
        except NotFound:
            op.done, op.error = True, OperationError(5, f"queued resource {op.target} disappeared")
            return
        state = getattr(qr.state.state, "name", str(qr.state.state))
        if state == "ACTIVE":
            op.done = True
        elif state in ("FAILED", "SUSPENDED"):
            op.done = True
            detail = ""
            failed = getattr(qr.state, "failed_data", None)
            if failed and failed.error and failed.error.message:
                detail = failed.error.message
            op.error = OperationError(8 if "capacity" in detail.lower() or not detail else 9,
                                      redact(detail or f"queued resource {op.target} {state.lower()}"))

    # ---- network: ranges in use and the reservations every tpuctl sees -----------------------------
    def used_ranges(self, spec: ClusterSpec) -> list[Used]:
        """Every range on the network a TPU block must avoid; the reads run concurrently."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(5) as pool:
            network_f = pool.submit(self._network, spec.network)
            subnets_f = pool.submit(self._call, "compute.subnetworks.aggregatedList",
                                    _all(self.compute("Subnetworks").aggregated_list), project=self.project)
            routes_f = pool.submit(self._call, "compute.routes.list", _all(self.compute("Routes").list),
                                   project=self.project)
            tpus_f = pool.submit(self.list_tpus)
            ranges_f = pool.submit(self._read_ranges)
            network = network_f.result()
            used = self._network_ranges(spec, network, subnets_f.result(), routes_f.result())
            for node in tpus_f.result():
                if node.cidr_block and node.name != spec.name:
                    used.append(Used.of(node.cidr_block, f"TPU {node.name} in {node.zone}", "tpu"))
            for cluster, rec in ranges_f.result()[0].items():
                if cluster != spec.name and rec.get("network") == spec.network:
                    used.append(Used.of(rec["cidr"], f"range reserved by tpuctl cluster {cluster}", "reservation"))
        return used

    def _network(self, name: str) -> Any:
        try:
            return self._call("compute.networks.get", self.compute("Networks").get, project=self.project,
                              network=name)
        except NotFound:
            raise UsageError(f"network {name} not found in project {self.project}",
                             hint="pass --network with an existing VPC network") from None

    def _network_ranges(self, spec: ClusterSpec, network: Any, subnet_scopes: Any, routes: Any) -> list[Used]:
        net_url_tail = f"/global/networks/{spec.network}"
        used: list[Used] = []
        if getattr(network, "I_pv4_range", None):
            used.append(Used.of(network.I_pv4_range, f"legacy network {spec.network}", "subnet"))
        for _region, scoped in subnet_scopes:
            for sn in scoped.subnetworks or []:
                if not (sn.network or "").endswith(net_url_tail):
                    continue
                where = f"subnetwork {sn.name} in {_short(sn.region)}"
                used.append(Used.of(sn.ip_cidr_range, where, "subnet"))
                for sec in sn.secondary_ip_ranges or []:
                    used.append(Used.of(sec.ip_cidr_range, f"secondary range {sec.range_name} of {where}",
                                        "secondary"))
        for route in routes:
            if (route.network or "").endswith(net_url_tail) and route.dest_range:
                used.append(Used.of(route.dest_range, f"route {route.name}", "route"))
        regions = sorted({z.rsplit("-", 1)[0] for z in spec.zones})
        compute_v1 = _ct()
        for peering in network.peerings or []:
            for region in regions:
                req = compute_v1.ListPeeringRoutesNetworksRequest(
                    project=self.project, network=spec.network, peering_name=peering.name, direction="INCOMING",
                    region=region)
                for pr in self._call("compute.networks.listPeeringRoutes",
                                     _all(self.compute("Networks").list_peering_routes), request=req):
                    used.append(Used.of(pr.dest_range, f"peered network {peering.name}", "peering"))
        return used

    def _read_ranges(self) -> tuple[dict[str, Any], str | None]:
        proj = self._call("compute.projects.get", self.compute("Projects").get, project=self.project)
        meta = proj.common_instance_metadata
        for item in (meta.items if meta else []) or []:
            if item.key == RANGES_METADATA_KEY:
                try:
                    data = json.loads(item.value or "{}")
                except json.JSONDecodeError:
                    data = {}
                return (data if isinstance(data, dict) else {}), meta.fingerprint
        return {}, (meta.fingerprint if meta else None)

    def _write_ranges(self, update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
        """Compare-and-swap the reservation map; returns False if ``update`` refused (returned None)."""
        compute_v1 = _ct()

        for _attempt in range(20):
            proj = self._call("compute.projects.get", self.compute("Projects").get, project=self.project)
            meta = proj.common_instance_metadata or compute_v1.Metadata()
            items = list(meta.items or [])
            current: dict[str, Any] = {}
            for item in items:
                if item.key == RANGES_METADATA_KEY:
                    try:
                        current = json.loads(item.value or "{}")
                    except json.JSONDecodeError:
                        current = {}
            new = update(dict(current))
            if new is None:
                return False
            if new == current:
                return True
            items = [i for i in items if i.key != RANGES_METADATA_KEY]
            if new:
                items.append(compute_v1.Items(key=RANGES_METADATA_KEY, value=json.dumps(new, sort_keys=True)))
            body = compute_v1.Metadata(fingerprint=meta.fingerprint, items=items)
            try:
                op = self._call("compute.projects.setCommonInstanceMetadata",
                                self.compute("Projects").set_common_instance_metadata,
                                project=self.project, metadata_resource=body)
            except CloudError as exc:
                if "fingerprint" in exc.message.lower():
                    # another tpuctl wrote in between: read again and retry the swap
                    time.sleep(random.uniform(0.02, 0.1 * (1 + _attempt)))
                    continue
                raise
            if self._wait_global(op.name):
                return True
            time.sleep(0.05 + 0.1 * _attempt)
        raise CloudError("could not update the TPU range reservations: too much contention", kind="transient",
                         hint="retry in a minute")

    def _wait_global(self, name: str) -> bool:
        deadline = time.monotonic() + 120
        delay = 0.03
        while time.monotonic() < deadline:
            res = self._call("compute.globalOperations.get", self.compute("GlobalOperations").get,
                             project=self.project, operation=name)
            if getattr(res.status, "name", str(res.status)) == "DONE":
                return not (res.error and res.error.errors)
            time.sleep(delay)
            delay = min(1.0, delay * 1.5)
        return False

    def reserved_range(self, spec: ClusterSpec) -> str | None:
        rec = self._read_ranges()[0].get(spec.name)
        return rec["cidr"] if rec else None

    def reserve_range(self, spec: ClusterSpec, block: str) -> bool:
        net = ipaddress.ip_network(block)

        def claim(cur: dict[str, Any]) -> dict[str, Any] | None:
            for cluster, rec in cur.items():
                if (cluster != spec.name and rec.get("network") == spec.network
                        and ipaddress.ip_network(rec["cidr"]).overlaps(net)):
                    return None
            cur[spec.name] = {"cidr": block, "network": spec.network, "zone": spec.zone, "at": int(time.time())}
            return cur

        return self._write_ranges(claim)

    def release_range(self, cluster: str) -> None:
        def drop(cur: dict[str, Any]) -> dict[str, Any]:
            cur.pop(cluster, None)
            return cur

        self._write_ranges(drop)

    # ---- telling hosts where their work is -------------------------------------------------------
    def point_hosts_at(self, spec: ClusterSpec, bucket: str) -> list[str]:
        """Set ``tpuctl-bucket`` in the metadata of the cluster's host VM and TPU VM, if it differs.

        The hosts' bootstrap waits on that key (templates/host-startup.sh); a cluster created without
        --bucket learns it when its first run starts. Returns what was updated.
        """
        from ..basics.validate import CLUSTER_LABEL

        updated = []
        for vm in self.list_vms(None, {CLUSTER_LABEL: spec.name}):
            if self._set_vm_metadata(vm.zone, vm.name, {"tpuctl-bucket": bucket}):
                updated.append(f"VM {vm.name}")
        for node in self.list_tpus(None, {CLUSTER_LABEL: spec.name}):
            if node.arch == Arch.VM and self._set_tpu_metadata(node.zone, node.name, {"tpuctl-bucket": bucket}):
                updated.append(f"TPU {node.name}")
        return updated

    def _set_vm_metadata(self, zone: str, name: str, values: dict[str, str]) -> bool:
        compute_v1 = _ct()
        for attempt in range(10):
            inst = self._call("compute.instances.get", self.compute("Instances").get, project=self.project,
                              zone=zone, instance=name)
            items = {i.key: i.value for i in (inst.metadata.items or [])}
            if all(items.get(k) == v for k, v in values.items()):
                return False
            items.update(values)
            body = compute_v1.Metadata(fingerprint=inst.metadata.fingerprint,
                                       items=[compute_v1.Items(key=k, value=v) for k, v in items.items()])
            try:
                op = self._call("compute.instances.setMetadata", self.compute("Instances").set_metadata,
                                project=self.project, zone=zone, instance=name, metadata_resource=body)
            except CloudError as exc:
                if "fingerprint" in exc.message.lower():
                    time.sleep(random.uniform(0.02, 0.1 * (1 + attempt)))
                    continue
                raise
            from .operations import wait_all

            wait_all(self, [Operation(name=f"zone:{op.name}", zone=zone, verb="update", kind="vm", target=name)],
                     timeout=120)
            return True
        raise CloudError(f"could not update the metadata of VM {name}: it keeps changing", kind="transient")

    def _set_tpu_metadata(self, zone: str, name: str, values: dict[str, str]) -> bool:
        from google.cloud import tpu_v2
        from google.protobuf import field_mask_pb2

        node = self._call("tpu.v2.nodes.get", self.tpu2().get_node, name=f"{self._parent(zone)}/nodes/{name}")
        meta = dict(node.metadata)
        if all(meta.get(k) == v for k, v in values.items()):
            return False
        meta.update(values)
        op = self._call("tpu.v2.nodes.patch", self.tpu2().update_node,
                        request=tpu_v2.UpdateNodeRequest(node=tpu_v2.Node(name=node.name, metadata=meta),
                                                         update_mask=field_mask_pb2.FieldMask(paths=["metadata"])))
        from .operations import wait_all

        wait_all(self, [Operation(name=f"tpu2:{op.operation.name}", zone=zone, verb="update", kind="tpu",
                                  target=name)], timeout=300)
        return True

    def reservations(self) -> dict[str, dict[str, Any]]:
        """Every cluster's range reservation: {cluster: {cidr, network, zone, at}}."""
        return dict(self._read_ranges()[0])

    def metadata_of(self, kind: str, zone: str, name: str) -> dict[str, str]:
        """The instance metadata of a host VM (``kind`` vm) or TPU VM (``kind`` tpu); {} if none."""
        if kind == "vm":
            try:
                inst = self._call("compute.instances.get", self.compute("Instances").get, project=self.project,
                                  zone=zone, instance=name)
            except NotFound:
                return {}
            return {i.key: i.value for i in (inst.metadata.items if inst.metadata else []) or []}
        try:
            node = self._call("tpu.v2.nodes.get", self.tpu2().get_node, name=f"{self._parent(zone)}/nodes/{name}")
        except NotFound:
            return {}
        return dict(node.metadata or {})

    def duty_cycles(self, window_s: float) -> tuple[dict[tuple[str, str | None], Any] | None, str]:
        from . import dutycycle

        try:
            table = dutycycle.fetch(self.project, window_s=window_s)
        except dutycycle.Unavailable as exc:
            return None, f"unavailable ({exc}): the progress record decides"
        return table, f"read from Cloud Monitoring ({dutycycle.METRIC}) for {len(table)} node(s)"

    # ---- the TPU service agent (TPU Nodes write checkpoints to the bucket as this account) ----------
    def tpu_service_agent(self, zone: str) -> str:
        res = self._call("tpu.v2.generateServiceIdentity", self.tpu2().generate_service_identity,
                         request={"parent": self._parent(zone)})
        return res.identity.email

    # ---- rehearsal ---------------------------------------------------------------------------------
    def simulate_preemption(self, zone: str, name: str) -> TpuNode:
        """Preempt through the fake cloud's admin API; Google Cloud itself offers no such call."""
        admin = _admin_url()
        if admin is None:
            raise NotAvailable("Google Cloud cannot preempt a TPU on request",
                               hint="rehearse with --provider local, or against the fake cloud (tests/fakegcp)")
        import urllib.request

        body = json.dumps({"project": self.project, "zone": zone, "name": name, "state": "PREEMPTED",
                           "kind": "tpu"}).encode()
        req = urllib.request.Request(f"{admin}/_admin/preempt", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        node = self.get_tpu(zone, name)
        if node is None:
            raise NotFound(f"TPU {name} not found in {zone}")
        return node


def _ct() -> Any:
    """Compute's message types, without importing the whole client package."""
    from .gcp_imports import compute_types

    return compute_types()


def _agent_metadata(spec: ClusterSpec, role: str) -> dict[str, str]:
    from ..basics.templates import templates_dir

    meta = {"startup-script": (templates_dir() / "host-startup.sh").read_text(), "tpuctl-cluster": spec.name,
            "tpuctl-role": role}
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



def _all(list_method: Callable[..., Any]) -> Callable[..., list[Any]]:
    """Wrap a paged list call so every page is fetched inside one retried, counted call."""

    def fetch(**kwargs: Any) -> list[Any]:
        return list(list_method(**kwargs))

    return fetch
