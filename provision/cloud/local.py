"""The embedded local provider: the "VM" is this machine, the "TPU" is its CPU or GPU.

Resources are JSON records under ``$TPUCTL_HOME/local``, one file each, written atomically and
under a lock (see :mod:`provision.basics.statefile`), so concurrent tpuctl processes never corrupt them.
State changes are real, only evaluated lazily: a TPU is CREATING until its create delay has
passed and READY afterwards, whoever looks first persists the transition. Preemption is given as
Compute Engine gives it to a Spot VM: a notice first (SIGTERM to the attempt wrappers registered
on the TPU, which pass it to their program), then the power-off -- the TPU PREEMPTED and whatever
of its job is left SIGKILLed -- at the end of the grace period, or as soon as every job process of
the TPU has exited (the emulated guest has shut down, as a real one powers off when its ACPI
shutdown completes). Without a notice the power-off is at once.

It implements the same :class:`~provision.cloud.base.Provider` protocol as the GCP provider,
so ``up``, ``down``, the supervisor and the reaper run unchanged on a laptop.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from ..basics import procs, statefile
from ..basics.errors import CloudError, NotFound, UsageError
from ..basics.procs import alive, is_autodown_agent
from ..basics.validate import region_of
from ..catalog.prices import BUNDLED, PriceBook
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
    TpuNode,
    TpuState,
    Used,
    Vm,
    VmState,
    matches,
    parse_pool,
)
from .storage import LOCAL_DEFAULT_BUCKET

PREEMPTED_DESCRIPTION = "The TPU was preempted (simulated by tpuctl simulate preempt)."

# Subnetworks of the simulated "default" network, one per region as in an auto-mode VPC.
_REGION_SUBNETS = {
    "us-central1": "10.128.0.0/20", "europe-west1": "10.132.0.0/20", "us-west1": "10.138.0.0/20",
    "asia-east1": "10.140.0.0/20", "us-east1": "10.142.0.0/20", "europe-west4": "10.164.0.0/20",
    "us-central2": "10.188.0.0/20", "us-east5": "10.202.0.0/20", "us-south1": "10.206.0.0/20",
}
_DEFAULT_SUBNET = "10.200.0.0/20"
# Compute Engine's general-purpose families and shapes (cloud.google.com/compute/docs/general-purpose-machines)
_MACHINE_FAMILY = re.compile(r"^(e2|n1|n2|n2d|n4|c2|c2d|c3|c3d|c4|c4a|c4d|t2a|t2d)-(standard|highmem|highcpu)-\d{1,3}$"
                             r"|^e2-(micro|small|medium)$")

ENV_DELAYS = {
    "tpu_create_seconds": "TPUCTL_LOCAL_TPU_CREATE_SECONDS",
    "vm_create_seconds": "TPUCTL_LOCAL_VM_CREATE_SECONDS",
    "delete_seconds": "TPUCTL_LOCAL_DELETE_SECONDS",
}
DEFAULT_DELAYS = {"tpu_create_seconds": 3.0, "vm_create_seconds": 1.0, "delete_seconds": 1.0}


def detect_device() -> str:
    """What stands in for the TPU here: ``gpu:N`` when NVIDIA GPUs are visible, else ``cpu``."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "cpu"
    try:
        out = subprocess.run([smi, "-L"], check=False, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return f"gpu:{count}" if count else "cpu"


class LocalProvider:
    name: ClassVar[str] = "local"
    default_bucket: ClassVar[str | None] = LOCAL_DEFAULT_BUCKET
    offers_queued: ClassVar[bool] = False     # --queued creates the TPU directly (and up says so)
    offers_compute_tpus: ClassVar[bool] = False  # it emulates the Cloud TPU API's TPU VMs only

    def __init__(self, home: Path, settings: dict[str, Any] | None = None):
        self.root = Path(home) / "local"
        self.project = "local"
        settings = settings or {}
        self.delays = {}
        for key, env in ENV_DELAYS.items():
            raw = os.environ.get(env, settings.get(key, DEFAULT_DELAYS[key]))
            self.delays[key] = max(0.0, float(raw))
        stock = os.environ.get("TPUCTL_LOCAL_STOCKOUT_ZONES", settings.get("stockout_zones", ""))
        self.stockout_zones = {z.strip() for z in str(stock).split(",") if z.strip()}
        self.cidr_pool = parse_pool(settings.get("tpu_cidr_pool"))

    # ---- paths -----------------------------------------------------------------------------
    def _tpu_path(self, zone: str, name: str) -> Path:
        return self.root / "tpus" / zone / f"{name}.json"

    def _vm_path(self, zone: str, name: str) -> Path:
        return self.root / "vms" / zone / f"{name}.json"

    def _op_path(self, op_id: str) -> Path:
        return self.root / "operations" / f"{op_id}.json"

    def _job_path(self, zone: str, name: str) -> Path:
        return self.root / "jobs" / zone / f"{name}.json"

    def _ranges_path(self) -> Path:
        return self.root / "ranges.json"

    def bucket_dir(self, bucket: str) -> Path:
        return self.root / "buckets" / bucket

    # ---- lazy state machine ----------------------------------------------------------------
    @staticmethod
    def _advance(rec: dict[str, Any], now: float) -> bool:
        """Apply a due pending transition; True if the record changed."""
        pending = rec.get("pending")
        if not pending or now < pending["at"]:
            return False
        rec["state"] = pending["state"]
        rec["state_since"] = pending["at"]
        rec["pending"] = None
        if rec["state"] == TpuState.READY.value:
            rec["health"] = Health.HEALTHY.value
        if rec["state"] == TpuState.PREEMPTED.value:
            rec.update(health=Health.HEALTH_UNSPECIFIED.value, health_description=PREEMPTED_DESCRIPTION)
        return True

    def _read_live(self, path: Path) -> dict[str, Any] | None:
        """Read a record, persisting any transition that has come due; None once deleted."""
        rec = statefile.read_json(path)
        if rec is None:
            return None
        now = time.time()
        if not self._due(rec, now):
            return rec
        powered_off = []

        def apply(cur: dict[str, Any] | None) -> Any:
            if cur is None:
                return statefile.DELETE
            pending = cur.get("pending")
            if pending and pending.get("notice") and self._due(cur, now):
                pending["at"] = min(pending["at"], now)    # the guest shut down before the grace ended
                powered_off.append(cur)
            self._advance(cur, now)
            return statefile.DELETE if cur["state"] == "DELETED" else cur

        new = statefile.update_json(path, apply)
        for cur in powered_off:
            # the power-off: whatever of the job still runs goes with the TPU
            self._kill_job(cur["zone"], cur["name"])
        return None if new is statefile.DELETE else new

    def _due(self, rec: dict[str, Any], now: float) -> bool:
        """Whether the record's pending transition has come due: at its time, or, for the power-off
        after a preemption notice, once no job process of the TPU is left."""
        pending = rec.get("pending")
        if not pending:
            return False
        if now >= pending["at"]:
            return True
        return bool(pending.get("notice")) and self.job(rec["zone"], rec["name"]) is None

    def _list_records(self, kind: str, zone: str | None) -> list[Path]:
        base = self.root / kind
        if not base.is_dir():
            return []
        zones = [base / zone] if zone else sorted(p for p in base.iterdir() if p.is_dir())
        return [p for z in zones if z.is_dir() for p in sorted(z.glob("*.json"))]

    def _new_op(self, zone: str, verb: str, kind: str, target: str, delay: float,
                error: OperationError | None = None) -> Operation:
        op_id = f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        now = time.time()
        statefile.write_json(self._op_path(op_id), {
            "name": op_id, "zone": zone, "verb": verb, "kind": kind, "target": target,
            "started_at": now, "done_at": now + delay,
            "error": {"code": error.code, "message": error.message} if error else None,
        })
        return Operation(name=op_id, zone=zone, verb=verb, kind=kind, target=target, started_at=now)

    # ---- VMs --------------------------------------------------------------------------------
    def create_vm(self, spec: ClusterSpec, zone: str) -> Operation:
        path = self._vm_path(zone, spec.name)
        delay = self.delays["vm_create_seconds"]
        now = time.time()

        def create(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is not None:
                raise CloudError(f"VM {spec.name} already exists in {zone}", kind="exists", zone=zone)
            return {"name": spec.name, "zone": zone, "state": VmState.PROVISIONING.value,
                    "machine_type": spec.machine_type, "labels": spec.resource_labels("host"),
                    "created_at": now, "state_since": now,
                    "pending": {"state": VmState.RUNNING.value, "at": now + delay},
                    "internal_ip": "127.0.0.1", "hostname": socket.gethostname()}

        statefile.update_json(path, create)
        return self._new_op(zone, "create", "vm", spec.name, delay)

    def _vm(self, rec: dict[str, Any]) -> Vm:
        return Vm(name=rec["name"], zone=rec["zone"], state=VmState.of(rec["state"]),
                  machine_type=rec.get("machine_type"), labels=dict(rec.get("labels") or {}),
                  internal_ip=rec.get("internal_ip"), external_ip=None, created_at=rec.get("created_at"))

    def get_vm(self, zone: str, name: str) -> Vm | None:
        rec = self._read_live(self._vm_path(zone, name))
        return self._vm(rec) if rec else None

    def list_vms(self, zone: str | None = None, labels: dict[str, str] | None = None, *,
                 metadata: bool = False) -> list[Vm]:
        """``metadata`` is left to metadata_of: it reads a file of this machine, no request."""
        out = []
        for path in self._list_records("vms", zone):
            rec = self._read_live(path)
            if rec and matches(rec.get("labels") or {}, labels):
                out.append(self._vm(rec))
        return out

    def delete_vm(self, zone: str, name: str) -> Operation:
        path = self._vm_path(zone, name)
        delay = self.delays["delete_seconds"]

        def delete(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(f"VM {name} not found in {zone}")
            now = time.time()
            cur.update(state=VmState.STOPPING.value, state_since=now,
                       pending={"state": "DELETED", "at": now + delay})
            return cur

        rec = statefile.update_json(path, delete)
        # Deleting the "VM" ends the host agent that ran on it (tpuctl up --autodown).
        self._stop_agent(rec.get("agent"))
        return self._new_op(zone, "delete", "vm", name, delay)

    # ---- TPUs -------------------------------------------------------------------------------
    def offered(self, zone: str, accelerator_type: str) -> bool:
        """What Google offers there, by the bundled zone table (:mod:`provision.catalog.zones`, a
        source per row): the "TPU" is this machine, but a rehearsal refuses ``v4-8`` in
        us-central1-b, or a zone with no TPU, as Google Cloud would."""
        from ..catalog import accelerators, zones

        return zones.offers(zone, accelerators.parse(accelerator_type))

    def caveats(self, zone: str, accelerator_type: str) -> list[str]:
        """A zone the table has only from earlier editions of Google's list: Google may refuse it now."""
        from ..catalog import accelerators, zones

        note = zones.unconfirmed(zone, accelerators.parse(accelerator_type))
        return [note] if note else []

    def runtime_versions(self, zone: str) -> list[str]:
        """The rehearsal offers, in every zone, the images seen in public use
        (:data:`provision.catalog.images.SEEN`, dated, a source per row): the choice ``up`` makes
        here is the one it makes on Google Cloud where a zone lists them, and a mistyped
        ``--runtime-version`` fails here as it would there. Only the GCP provider knows what a
        zone really lists today."""
        from ..catalog.images import seen_images

        return seen_images()

    def machine_types(self, zone: str, names: tuple[str, ...]) -> list[str]:
        """Any machine type of a general-purpose family (this machine stands in for the host VM);
        a name of no known family (a typo) is refused, as Compute would refuse it."""
        return [n for n in names if _MACHINE_FAMILY.match(n)]

    def machine_type_zones(self, name: str) -> list[str]:
        """None: the local provider emulates no Compute Engine TPU machine type in any zone."""
        return []

    def region_zones(self, region: str) -> list[str]:
        """The zones of ``region`` that the bundled zone table names (the rehearsal's zones)."""
        from ..catalog import zones

        return zones.region_zones(region)

    def compute_tpu_image(self, accelerator_type: str) -> str:
        raise UsageError("the local provider has no Compute Engine TPUs", hint="use --api auto or tpu")

    def create_tpu(self, spec: ClusterSpec, zone: str, cidr: str | None) -> Operation:
        path = self._tpu_path(zone, spec.name)
        delay = self.delays["tpu_create_seconds"]
        if zone in self.stockout_zones:
            # as the cloud does: the create call is accepted, its operation fails
            err = OperationError(8, f"There is no more capacity in the zone \"{zone}\"; you can try in another "
                                    f"zone where Cloud TPU Nodes are offered")
            return self._new_op(zone, "create", "tpu", spec.name, min(delay, 0.2), error=err)
        now = time.time()
        device = detect_device()

        def create(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is not None:
                raise CloudError(f"TPU {spec.name} already exists in {zone}", kind="exists", zone=zone)
            return {"name": spec.name, "zone": zone, "arch": spec.arch.value,
                    "accelerator_type": spec.accelerator_type, "state": TpuState.CREATING.value,
                    "health": Health.HEALTH_UNSPECIFIED.value, "cidr_block": cidr,
                    "preemptible": spec.preemptible, "spot": spec.spot, "version": spec.software_version(),
                    "network": spec.network, "labels": spec.resource_labels("tpu"), "created_at": now,
                    "state_since": now, "pending": {"state": TpuState.READY.value, "at": now + delay},
                    "device": device}

        statefile.update_json(path, create)
        return self._new_op(zone, "create", "tpu", spec.name, delay)

    def _tpu(self, rec: dict[str, Any]) -> TpuNode:
        endpoints = []
        if rec["state"] == TpuState.READY.value:
            endpoints = [Endpoint("127.0.0.1", 8470)]
        return TpuNode(name=rec["name"], zone=rec["zone"], arch=Arch(rec["arch"]),
                       accelerator_type=rec["accelerator_type"], state=TpuState.of(rec["state"]),
                       health=Health.of(rec.get("health")), health_description=rec.get("health_description", ""),
                       cidr_block=rec.get("cidr_block"), preemptible=bool(rec.get("preemptible")),
                       spot=bool(rec.get("spot")), version=rec.get("version"), network=rec.get("network"),
                       labels=dict(rec.get("labels") or {}), endpoints=endpoints,
                       created_at=rec.get("created_at"), device=rec.get("device"))

    def get_tpu(self, zone: str, name: str) -> TpuNode | None:
        rec = self._read_live(self._tpu_path(zone, name))
        return self._tpu(rec) if rec else None

    def list_tpus(self, zone: str | None = None, labels: dict[str, str] | None = None, *,
                  metadata: bool = False, near: tuple[str, ...] = (), api: str | None = None) -> list[TpuNode]:
        """``metadata`` is left to metadata_of (a file of this machine, no request); ``near`` and
        ``api`` to the directory listing, which costs the same."""
        out = []
        for path in self._list_records("tpus", zone):
            rec = self._read_live(path)
            if rec and matches(rec.get("labels") or {}, labels):
                out.append(self._tpu(rec))
        return out

    def delete_tpu(self, zone: str, name: str) -> Operation:
        path = self._tpu_path(zone, name)
        delay = self.delays["delete_seconds"]

        def delete(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(f"TPU {name} not found in {zone}")
            now = time.time()
            cur.update(state=TpuState.DELETING.value, state_since=now, health=Health.HEALTH_UNSPECIFIED.value,
                       pending={"state": "DELETED", "at": now + delay})
            return cur

        statefile.update_json(path, delete)
        # Deleting a TPU ends whatever ran on it.
        self._kill_job(zone, name)
        return self._new_op(zone, "delete", "tpu", name, delay)

    # ---- operations -------------------------------------------------------------------------
    def poll(self, op: Operation) -> Operation:
        rec = statefile.read_json(self._op_path(op.name))
        if rec is None:
            raise NotFound(f"operation {op.name} not found")
        now = time.time()
        if now < rec["done_at"]:
            return op
        op.done = True
        if rec.get("error"):
            op.error = OperationError(rec["error"]["code"], rec["error"]["message"])
        elif op.verb == "create":
            getter = self.get_tpu if op.kind == "tpu" else self.get_vm
            if getter(op.zone, op.target) is None:
                op.error = OperationError(10, f"{op.kind} {op.target} was deleted before its creation finished")
        return op

    # ---- network ----------------------------------------------------------------------------
    def used_ranges(self, spec: ClusterSpec) -> list[Used]:
        used = []
        for region, block in _REGION_SUBNETS.items():
            used.append(Used.of(block, f"subnetwork {spec.network} in {region}", "subnet"))
        used.append(Used.of("0.0.0.0/0", f"default route of {spec.network}", "route"))
        for node in self.list_tpus():
            if node.cidr_block and node.name != spec.name:
                used.append(Used.of(node.cidr_block, f"TPU {node.name} in {node.zone}", "tpu"))
        for cluster, rec in (statefile.read_json(self._ranges_path(), {}) or {}).items():
            if cluster != spec.name:
                used.append(Used.of(rec["cidr"], f"range reserved by tpuctl cluster {cluster}", "reservation"))
        return used

    def reserved_range(self, spec: ClusterSpec) -> str | None:
        rec = (statefile.read_json(self._ranges_path(), {}) or {}).get(spec.name)
        return rec["cidr"] if rec else None

    def reserve_range(self, spec: ClusterSpec, block: str) -> bool:
        """Claim ``block`` for the cluster; False if it overlaps another cluster's claim."""
        net = ipaddress.ip_network(block)

        def claim(cur: dict[str, Any] | None) -> dict[str, Any]:
            cur = dict(cur or {})
            for cluster, rec in cur.items():
                if cluster != spec.name and ipaddress.ip_network(rec["cidr"]).overlaps(net):
                    raise _Taken()
            cur[spec.name] = {"cidr": block, "network": spec.network, "zone": spec.zone, "at": time.time()}
            return cur

        try:
            statefile.update_json(self._ranges_path(), claim, default={})
            return True
        except _Taken:
            return False

    def release_range(self, cluster: str) -> None:
        def drop(cur: dict[str, Any] | None) -> dict[str, Any]:
            cur = dict(cur or {})
            cur.pop(cluster, None)
            return cur

        statefile.update_json(self._ranges_path(), drop, default={})

    # ---- jobs on the "TPU" (used by the supervisor and by simulate preempt) --------------------
    def register_job(self, zone: str, name: str, pid: int, run_id: str | None = None,
                     others: list[int] | tuple[int, ...] = ()) -> None:
        """``pid`` runs on the TPU (with ``others``: the other hosts of an emulated slice), each the
        leader of a session of its own (so its process group id is its pid: asking the kernel
        now could race with the child's setsid)."""
        pgids = [pid, *others]
        statefile.write_json(self._job_path(zone, name), {"pid": pid, "pgid": _pgid(pid), "pgids": pgids,
                                                           "run_id": run_id, "started_at": time.time()})

    def clear_job(self, zone: str, name: str, pid: int | None = None) -> None:
        path = self._job_path(zone, name)

        def clear(cur: dict[str, Any] | None) -> Any:
            if cur is None or (pid is not None and cur.get("pid") != pid):
                return cur if cur is not None else statefile.DELETE
            return statefile.DELETE

        statefile.update_json(path, clear)

    def job(self, zone: str, name: str) -> dict[str, Any] | None:
        """The job on this TPU while any of its hosts' processes lives (one host of a slice may
        have exited while another still runs, and still holds the TPU)."""
        rec = statefile.read_json(self._job_path(zone, name))
        if rec and not any(alive(p) for p in (rec.get("pgids") or [rec["pid"]]) if p):
            return None
        return rec

    def _kill_job(self, zone: str, name: str) -> int | None:
        rec = statefile.read_json(self._job_path(zone, name))
        if not rec:
            return None
        pid, pgid = rec.get("pid"), rec.get("pgid")
        leaders = rec.get("pgids") or ([pgid] if pgid and pgid != os.getpgrp() else [pid])
        # the programs the wrappers run in sessions of their own die with the "VM" too: found
        # before the wrappers die (their orphans would no longer be theirs)
        leaders = [*leaders, *procs.child_groups([p for p in leaders if p])]
        for leader in leaders:
            if not leader or leader == os.getpgrp():
                continue   # never our own process group
            try:
                os.killpg(leader, signal.SIGKILL)
            except ProcessLookupError:   # not a group leader after all: the process alone
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(leader, signal.SIGKILL)
            except PermissionError:
                pass
        return pid

    def preempted_tpus(self, cluster: str | None = None) -> list[Preemption]:
        """None: a preempted local TPU stays listed as PREEMPTED until it is recreated or deleted."""
        return []

    def simulate_preemption(self, zone: str, name: str, notice_s: float = 0.0) -> TpuNode:
        """Preempt the TPU as Compute Engine preempts a Spot VM. With ``notice_s``: the notice now
        (SIGTERM to each attempt wrapper on the TPU, which gives its program SIGTERM and records
        an exit after it as a preemption), the power-off pending until ``notice_s`` has passed or
        no job process is left (whoever reads the TPU then applies it, as every transition here).
        Without: PREEMPTED, and the job SIGKILLed, at once."""
        path = self._tpu_path(zone, name)

        def preempt(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(f"TPU {name} not found in {zone}")
            now = time.time()
            self._advance(cur, now)
            if cur["state"] in (TpuState.DELETING.value, "DELETED"):
                raise CloudError(f"TPU {name} is being deleted; nothing to preempt", kind="invalid")
            if notice_s > 0 and cur["state"] == TpuState.READY.value:
                earlier = (cur.get("pending") or {}).get("at", now + notice_s)    # a notice given already
                cur["pending"] = {"state": TpuState.PREEMPTED.value, "at": min(earlier, now + notice_s),
                                  "notice": now}
                return cur
            cur.update(state=TpuState.PREEMPTED.value, state_since=now, pending=None,
                       health=Health.HEALTH_UNSPECIFIED.value, health_description=PREEMPTED_DESCRIPTION)
            return cur

        rec = statefile.update_json(path, preempt)
        if rec.get("pending"):
            self._notify_job(zone, name)
        else:
            # no notice: a preempted TPU disappears under the job
            self._kill_job(zone, name)
        return self._tpu(rec)

    def _notify_job(self, zone: str, name: str) -> None:
        """The preemption notice: SIGTERM to each process registered on the TPU (the attempt
        wrappers, which pass it on to their program as the host agent passes the metadata
        server's notice on), not to their groups, so that a program gets it once."""
        rec = self.job(zone, name)
        for pid in (rec or {}).get("pgids") or ([rec["pid"]] if rec else []):
            if pid and pid != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)

    def region_of(self, zone: str) -> str:
        return region_of(zone)

    # ---- the host agent of a local "VM" (tpuctl up --autodown; see provision.billing.reaper) ----------
    def claim_agent(self, zone: str, name: str, pid: int) -> bool:
        """Record ``pid`` as the VM's agent unless another live agent holds it; False if one does."""
        taken = {}

        def claim(cur: dict[str, Any] | None) -> Any:
            if cur is None:
                return statefile.DELETE
            held = cur.get("agent") or {}
            if held.get("pid") not in (None, pid) and is_autodown_agent(held["pid"]):
                taken["pid"] = held["pid"]
                return cur
            cur["agent"] = {"pid": pid, "started_at": time.time()}
            return cur

        new = statefile.update_json(self._vm_path(zone, name), claim)
        return new is not statefile.DELETE and not taken

    def agent(self, zone: str, name: str) -> dict[str, Any] | None:
        """The VM's live agent record, if any."""
        rec = statefile.read_json(self._vm_path(zone, name)) or {}
        held = rec.get("agent") or {}
        return held if held.get("pid") and is_autodown_agent(held["pid"]) else None

    def _stop_agent(self, held: dict[str, Any] | None) -> None:
        pid = (held or {}).get("pid")
        if pid and pid != os.getpid() and is_autodown_agent(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)

    def reservations(self) -> dict[str, dict[str, Any]]:
        """Every cluster's range reservation: {cluster: {cidr, network, zone, at}}."""
        return dict(statefile.read_json(self._ranges_path(), {}) or {})

    def _metadata_path(self, cluster: str) -> Path:
        from ..basics.validate import cluster_name

        return self.root / "metadata" / f"{cluster_name(cluster)}.json"

    def metadata_of(self, kind: str, zone: str, name: str) -> dict[str, str]:
        """What tpuctl wrote for the hosts of cluster ``name`` (this machine is its VM and its TPU):
        a mode-0600 file under ``$TPUCTL_HOME/local/metadata``, the local counterpart of instance
        metadata (the pin of what they may run; the cluster cache says everything else)."""
        data = statefile.read_json(self._metadata_path(name), {}) or {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}

    def update_host_metadata(self, cluster: str, key: str, update: Callable[[str | None], str]) -> list[str]:
        """Set ``key`` to ``update(its value)`` in the cluster's metadata file, under its lock
        (read first without it: an unchanged value is not written again)."""
        current = self.metadata_of("vm", "", cluster).get(key)
        if update(current) == current:
            return []
        changed = []

        def apply(cur: dict[str, Any] | None) -> dict[str, Any]:
            cur = dict(cur or {})
            value = update(cur.get(key))
            if cur.get(key) != value:
                cur[key] = value
                changed.append(f"VM {cluster}")
            return cur

        statefile.update_json(self._metadata_path(cluster), apply)
        return changed

    # ---- firewall: none here (every emulated worker is a process on this machine) ---------------
    def firewall_rules(self, network: str) -> None:
        return None

    def worker_ranges(self, spec: ClusterSpec, zone: str) -> list[str]:
        return ["127.0.0.0/8"]

    def create_firewall_rule(self, rule: FirewallRule) -> None:
        raise UsageError("the local provider has no firewall", hint="drop --create-firewall-rule")

    def delete_firewall_rule(self, name: str) -> bool:
        return False

    def duty_cycles(self, window_s: float) -> tuple[None, str]:
        return None, "unavailable (the local provider has no Cloud Monitoring): the progress record decides"

    def write_time_series(self, series: list[dict[str, Any]]) -> int:
        raise UsageError("the local provider has no Cloud Monitoring to write to",
                         hint="export a run on Google Cloud (--provider gcp); the local run's breakdown is in "
                              "tpuctl cost RUN --json")

    def price_book(self) -> PriceBook:
        """The bundled table, no network: what the same cluster would cost on Google Cloud."""
        note = "the local provider bills nothing; Google Cloud would bill these"
        return PriceBook(tpu=BUNDLED.tpu, vm=BUNDLED.vm, origin=BUNDLED.origin, notes=(note,))

    # ---- queued resources: none here (this machine's "TPU" needs no queue) ----------------------
    def list_queued(self, zone: str | None = None, labels: dict[str, str] | None = None) -> list[QueuedRequest]:
        return []

    def get_queued(self, zone: str, name: str) -> QueuedRequest | None:
        return None

    def delete_queued(self, zone: str, name: str, force: bool = False) -> Operation:
        raise NotFound(f"queued resource {name} not found in {zone} (the local provider has none)")

    def watch_queued(self, zone: str, name: str) -> Operation:
        raise NotFound(f"queued resource {name} not found in {zone} (the local provider has none)")


class _Taken(Exception):
    pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None
