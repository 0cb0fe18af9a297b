"""``FakeGCP``: start the fake cloud as a subprocess and drive its admin API from a test.

The server runs in its own process, as Google's would, so tpuctl processes, the client libraries
and gcloud all reach it over loopback exactly as they would reach the real endpoints, and a
test cannot accidentally share state with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .environment import tpuctl_env

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PROJECT = "tpuctl-test"


class FakeGCPError(RuntimeError):
    pass


class FakeGCP:
    """A running fake cloud. ``url`` is the REST base URL, ``grpc_target`` the v1 gRPC host:port."""

    def __init__(self, *, port: int = 0, grpc_port: int = 0, latency_scale: float = 1.0,
                 project: str = DEFAULT_PROJECT, start_timeout: float = 20.0) -> None:
        self.project = project
        cmd = [sys.executable, "-m", "tests.fakegcp", "--port", str(port), "--grpc-port", str(grpc_port),
               "--latency-scale", str(latency_scale), "--project", project]
        self._proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line = self._read_ready(start_timeout)
        parts = line.split()
        if len(parts) != 3 or parts[0] != "ready" or not parts[2].startswith("grpc="):
            self.stop()
            raise FakeGCPError(f"unexpected ready line from the fake cloud: {line!r}")
        self.url: str = parts[1]
        self.grpc_target: str = parts[2].split("=", 1)[1]
        threading.Thread(target=self._drain, daemon=True).start()

    def _read_ready(self, timeout: float) -> str:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self._proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not box or not box[0]:
            self._proc.kill()
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise FakeGCPError(f"the fake cloud did not start within {timeout}s:\n{err}")
        return box[0].strip()

    def _drain(self) -> None:
        # Keep the pipes empty so the server never blocks on a full stderr.
        for stream in (self._proc.stderr,):
            if stream:
                for _ in stream:
                    pass

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> FakeGCP:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a tpuctl process needs ----------------------------------------------------------------
    @property
    def compute_endpoint(self) -> str:
        """google-cloud-compute's ``api_endpoint`` is the host; its paths start with /compute/v1/."""
        return self.url

    def env(self) -> dict[str, str]:
        return tpuctl_env(self.url, self.grpc_target, self.project)

    def gcloud_config(self, directory: str | os.PathLike[str]) -> dict[str, str]:
        """Write a throwaway gcloud config pointing at the fake; returns the env to run gcloud with."""
        path = Path(directory)
        (path / "configurations").mkdir(parents=True, exist_ok=True)
        (path / "active_config").write_text("default")
        (path / "configurations" / "config_default").write_text(
            "[core]\n"
            f"project = {self.project}\n"
            "disable_usage_reporting = True\n"
            "disable_prompts = True\n"
            "check_gce_metadata = False\n"
            "disable_file_logging = True\n"
            "[auth]\n"
            "disable_credentials = True\n"
            "[component_manager]\n"
            "disable_update_check = True\n"
            "[survey]\n"
            "disable_prompts = True\n"
            "[api_endpoint_overrides]\n"
            f"tpu = {self.url}/\n"
            f"compute = {self.url}/compute/v1/\n"
        )
        return {"CLOUDSDK_CONFIG": str(path), "CLOUDSDK_CORE_PROJECT": self.project}

    # -- admin API ------------------------------------------------------------------------------------
    def metadata_url(self, zone: str, name: str, *, worker: int | None = None, project: str | None = None) -> str:
        """The metadata server of VM ``name`` (or, with ``worker``, of that worker of TPU VM ``name``),
        as ``TPUCTL_METADATA_URL`` takes it (tests/fakegcp/metadata_server.py)."""
        project = project or self.project
        where = (f"zones/{zone}/instances/{name}" if worker is None
                 else f"locations/{zone}/nodes/{name}/workers/{worker}")
        return f"{self.url}/_metadata/projects/{project}/{where}/computeMetadata/v1"

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/_admin/{path.lstrip('/')}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise FakeGCPError(f"admin {method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from None

    def reset(self, **latencies: float) -> None:
        """Forget every resource, fault and logged call; optionally set latencies at once."""
        self.admin("POST", "reset", {"latencies": latencies} if latencies else {})

    def set_latencies(self, **latencies: float) -> dict[str, float]:
        """Seconds per action: vm_create, vm_delete, tpu_create, tpu_delete, tpu_stop, tpu_start,
        queued_provisioning, address_create, op_poll, request; and ``scale`` for all of them."""
        return self.admin("POST", "latencies", latencies)

    def latencies(self) -> dict[str, float]:
        return self.admin("GET", "latencies")

    def preempt(self, zone: str, name: str, *, state: str = "PREEMPTED", project: str | None = None,
                kind: str = "tpu", notice: float = 0.0) -> dict[str, Any]:
        """Make a TPU PREEMPTED (or TERMINATED); ``kind="vm"`` makes an instance TERMINATED. With
        ``notice``, a TPU VM's workers read ``instance/preempted`` TRUE now and the node is
        PREEMPTED ``notice`` seconds later."""
        return self.admin("POST", "preempt", {"zone": zone, "name": name, "state": state, "kind": kind,
                                              "notice": notice, "project": project or self.project})

    def preempt_instance(self, zone: str, name: str, *, notice: float = 0.0,
                         project: str | None = None) -> dict[str, Any]:
        """Preempt a Compute Engine instance (a TPU VM or a slice's worker) as a Spot VM is: its guest's
        ``instance/preempted`` turns TRUE now, and ``notice`` seconds later it is TERMINATED (or
        deleted, when its instanceTerminationAction is DELETE)."""
        return self.admin("POST", "preempt", {"zone": zone, "name": name, "state": "TERMINATED", "kind": "vm",
                                              "notice": notice, "project": project or self.project})

    def set_topology(self, zone: str, mig: str, state: str | None, *, project: str | None = None) -> dict[str, Any]:
        """Set a MIG's appliedAcceleratorTopologies state (ACTIVE_DEGRADED, INCOMPLETE, FAILED...;
        None: computed from its VMs again)."""
        return self.admin("POST", "topology", {"zone": zone, "name": mig, "state": state,
                                               "project": project or self.project})

    def end_resize_request(self, zone: str, mig: str, state: str = "FAILED", *, message: str = "",
                           project: str | None = None) -> dict[str, Any]:
        """End a MIG's waiting resize requests (flex-start) as FAILED or CANCELLED."""
        return self.admin("POST", "resize-request", {"zone": zone, "name": mig, "state": state, "message": message,
                                                     "project": project or self.project})

    def guest_metadata_url(self, zone: str, name: str, *, project: str | None = None) -> str:
        """The metadata server as instance ``name``'s guest sees it (``TPUCTL_METADATA_URL``)."""
        return f"{self.url}/_guest/{project or self.project}/{zone}/{name}/computeMetadata/v1"

    def make_unhealthy(self, zone: str, name: str, *, health: str = "UNHEALTHY_TENSORFLOW",
                       description: str = "The TPU is unhealthy.", project: str | None = None) -> dict[str, Any]:
        return self.admin("POST", "preempt", {"zone": zone, "name": name, "state": "UNHEALTHY", "health": health,
                                              "description": description, "project": project or self.project})

    def stockout(self, zone: str, count: int | None = None, *, kind: str = "tpu", model: str | None = None) -> None:
        """The next ``count`` creates in ``zone`` (all, if None, until cleared) find no capacity.
        ``kind``: "tpu" (Cloud TPU API), "vm" (any instance), "compute-tpu" (a TPU machine type on
        Compute Engine; ``model`` narrows it to one provisioning model: SPOT, STANDARD, FLEX_START,
        RESERVATION_BOUND)."""
        self.admin("POST", "stockout", {"zone": zone, "count": count, "kind": kind, "model": model})

    def clear_stockout(self, zone: str | None = None) -> None:
        self.admin("POST", "stockout/clear", {"zone": zone})

    def quota(self, region: str, count: int | None = None, *, metric: str | None = None, limit: int = 0,
              at: str = "call", zone: str | None = None) -> None:
        """TPU creates in ``region`` exceed quota: HTTP 429 at the call, or the operation fails (code 8).
        With ``zone``, a per-zone quota: only creates in that zone, worded "in zone Z"."""
        body: dict[str, Any] = {"region": region, "count": count, "metric": metric, "limit": limit, "at": at}
        if zone:
            body.update(zone=zone, per="zone")
        self.admin("POST", "quota", body)

    def fault(self, api: str, path: str, body: dict[str, Any], *, status: int | None = None,
              where: str = "call", method: str = "POST", count: int | None = 1) -> dict[str, Any]:
        """Any error as Google sends it (``body`` = ``{"error": {...}}``) for the next ``count`` calls
        of ``api`` (tpu.v2, tpu.v1, compute.v1) whose method and path (a regex) match: the call fails
        with ``status``, or (``where="operation"``) succeeds and its operation ends with the error."""
        return self.admin("POST", "fault", {"api": api, "method": method, "path": path, "where": where,
                                            "status": status, "body": body, "count": count})

    def faults(self) -> dict[str, Any]:
        return self.admin("GET", "faults")

    def deny(self, permission: str, count: int | None = None) -> None:
        """Calls needing ``permission`` (a glob such as ``tpu.nodes.*``) get 403 PERMISSION_DENIED."""
        self.admin("POST", "deny", {"permission": permission, "count": count})

    def disable_service(self, service: str) -> None:
        """``tpu``/``compute`` (or the full service name): every call gets 403 SERVICE_DISABLED."""
        self.admin("POST", "disable", {"service": service})

    def enable_service(self, service: str) -> None:
        self.admin("POST", "enable", {"service": service})

    def burst(self, status: int, count: int = 1, *, method: str | None = None, path: str | None = None,
              message: str | None = None) -> None:
        """The next ``count`` API calls whose verb and path (a regex) match fail with ``status``."""
        self.admin("POST", "burst", {"status": status, "count": count, "method": method, "path": path,
                                     "message": message})

    def echo_credentials(self, count: int | None = 1, *, status: int = 400, method: str | None = None,
                         path: str | None = None) -> None:
        """The next ``count`` matching API calls fail with an error that quotes the call's
        Authorization header and a signed URL (as a misconfigured proxy might)."""
        self.admin("POST", "echo-credentials", {"count": count, "status": status, "method": method, "path": path})

    @property
    def token_uri(self) -> str:
        """The fake OAuth token endpoint, for a credential file's ``token_uri``."""
        return f"{self.url}/token"

    def set_token(self, access_token: str | None = None, *, fail: int | None = None) -> dict[str, Any]:
        """The access token ``/token`` issues; ``fail=N``: the next N grants are refused with an
        error that quotes the form they sent (refresh token, client secret). Returns what the
        endpoint has received."""
        body: dict[str, Any] = {}
        if access_token:
            body["access_token"] = access_token
        if fail is not None:
            body["fail"] = fail
        return self.admin("POST", "token", body)

    def cidr_conflicts(self, count: int = 1) -> None:
        """The next ``count`` TPU creates fail at completion with the CIDR-conflict error (code 3)."""
        self.admin("POST", "cidr-conflicts", {"count": count})

    def deny_tpu_nodes(self, enabled: bool = True) -> None:
        """TPU Node (v1) creates are refused with FAILED_PRECONDITION, as for projects without access."""
        self.admin("POST", "node-arch-denied", {"enabled": enabled})

    def allow_tpu_nodes(self, allowed: bool = True, *, project: str | None = None) -> dict[str, Any]:
        """Grant (or take back) TPU Node access: without it a v1 create is refused with
        FAILED_PRECONDITION, as Google refuses new TPU Nodes since 2025."""
        return self.admin("POST", "tpu-node-access", {"project": project or self.project, "allowed": allowed})

    def tpu_v1_unavailable(self, status: int | None = 404) -> None:
        """Every TPU v1 call (REST and gRPC) answers ``status``: 404 (v1 gone) or 403 (closed to the
        project); ``None`` serves v1 again."""
        self.admin("POST", "tpu-v1", {"status": status})

    def clear_faults(self) -> None:
        self.admin("POST", "faults/clear", {})

    def resources(self) -> dict[str, Any]:
        return self.admin("GET", "resources")

    def calls(self, since: int = 0) -> list[dict[str, Any]]:
        return self.admin("GET", f"calls?since={since}")["calls"]

    def call_counts(self) -> dict[str, int]:
        return self.admin("GET", "calls")["counts"]

    def bulk(self, *, instances: list[dict[str, Any]] = (), nodes: list[dict[str, Any]] = (),
             project: str | None = None) -> dict[str, Any]:
        """Put instances (``{zone, body, status?, created?}``) and TPU VMs (``{zone, nodeId, body,
        state?, created?}``) in place at once, already RUNNING / READY (``POST /_admin/bulk``)."""
        return self.admin("POST", "bulk", {"instances": list(instances), "nodes": list(nodes),
                                           "project": project or self.project})

    def traffic(self) -> tuple[int, int]:
        """API calls logged and response bytes sent since the last ``clear_calls``."""
        out = self.admin("GET", f"calls?since={2**62}")
        return int(out["total"]), int(out["bytes"])

    def clear_calls(self) -> None:
        self.admin("DELETE", "calls")

    def honour_fields(self, honour: bool = True) -> None:
        """Whether answers honour the ``fields`` parameter (False: whole bodies, whatever was asked)."""
        self.admin("POST", "fields", {"honour": honour})

    def add_network(self, name: str, *, auto: bool = False, project: str | None = None) -> dict[str, Any]:
        return self.admin("POST", "networks", {"name": name, "autoCreateSubnetworks": auto,
                                               "project": project or self.project})

    def add_subnetwork(self, name: str, region: str, cidr: str, *, network: str = "default",
                       secondary: dict[str, str] | None = None, project: str | None = None) -> dict[str, Any]:
        """A subnet and its route; ``cidr=""`` makes an IPv6-only one (stackType IPV6_ONLY, no
        ``ipCidrRange``, an internal /64 of the ULA range)."""
        ranges = [{"rangeName": k, "ipCidrRange": v} for k, v in (secondary or {}).items()]
        return self.admin("POST", "subnetworks", {"name": name, "region": region, "ipCidrRange": cidr,
                                                  "network": network, "secondaryIpRanges": ranges,
                                                  "project": project or self.project})

    def add_router(self, name: str, region: str, *, nats: list[dict[str, Any]] | None = None,
                   network: str = "default", project: str | None = None) -> dict[str, Any]:
        """A Cloud Router (compute v1 ``Router``) with ``nats`` (``RouterNat`` bodies), checked as an insert is."""
        project = project or self.project
        body: dict[str, Any] = {"name": name, "region": region, "project": project,
                                "network": f"projects/{project}/global/networks/{network}"}
        if nats is not None:
            body["nats"] = nats
        return self.admin("POST", "routers", body)

    def set_private_access(self, region: str, subnetwork: str, enabled: bool = True, *,
                           project: str | None = None) -> dict[str, Any]:
        """A subnetwork's Private Google Access (``privateIpGoogleAccess``)."""
        return self.admin("POST", "private-access", {"region": region, "name": subnetwork, "enabled": enabled,
                                                     "project": project or self.project})

    def create_service_account(self, account_id: str, *, display_name: str = "", description: str = "",
                               project: str | None = None) -> dict[str, Any]:
        """An IAM service account made as ``serviceAccounts.create`` makes one (not logged as a call)."""
        return self.admin("POST", "service-accounts", {"accountId": account_id, "project": project or self.project,
                                                       "serviceAccount": {"displayName": display_name,
                                                                          "description": description}})

    def service_accounts(self) -> list[dict[str, Any]]:
        """Every IAM service account, in every project, as ``serviceAccounts.get`` answers it."""
        return self.admin("GET", "service-accounts")["accounts"]

    def monitoring(self) -> dict[str, Any]:
        """Cloud Monitoring as written to: ``requests`` (every ``timeSeries.create`` as received:
        project, body, HTTP status) and ``timeSeries`` (every series written, its points newest first)."""
        return self.admin("GET", "monitoring")

    def add_route(self, dest_range: str, *, name: str | None = None, network: str = "default",
                  next_hop_ip: str | None = None, project: str | None = None) -> dict[str, Any]:
        return self.admin("POST", "routes", {"destRange": dest_range, "name": name, "network": network,
                                             "nextHopIp": next_hop_ip, "project": project or self.project})

    def add_peering(self, name: str, imported_ranges: list[str], *, network: str = "default",
                    peer_network: str | None = None, project: str | None = None) -> dict[str, Any]:
        return self.admin("POST", "peerings", {"name": name, "importedRanges": imported_ranges,
                                               "network": network, "peerNetwork": peer_network,
                                               "project": project or self.project})
