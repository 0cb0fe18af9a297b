"""Where a sweep lives: its directory in the bucket, beside its trials' checkpoints.

    tpuctl/sweeps/<id>/sweep.json            the SweepRecord: options, parsed spec, state, best
    tpuctl/sweeps/<id>/spec.yaml             the sweep spec as the user wrote it
    tpuctl/sweeps/<id>/job.yaml              the job spec with the sweep's fixed ``set`` applied
    tpuctl/sweeps/<id>/study/journal/<n>.json  Optuna's journal (provision.sweeps.study)
    tpuctl/sweeps/<id>/trials/<n>.json       a TrialRecord: params, state, run id, cluster, metric
    tpuctl/sweeps/<id>/trials/<n>/model/     the trial run's model_dir (checkpoints; TensorBoard in tb/)
    tpuctl/sweeps/<id>/controller.json       the controller's lease and heartbeat
    tpuctl/sweeps/<id>/stop.json             a stop request (tpuctl sweep stop)
    tpuctl/clusters/<host>/sweeps/<id>.json  a sweep handed to that cluster's host VM (GCP --detach)

Each trial is an ordinary run too (``tpuctl/runs/<run id>/``), so ``tpuctl logs RUN`` works on it.
``tensorboard --logdir_spec`` over the trials' ``model/tb`` finds every trial's HParams summaries
(their own directories: TensorBoard never lists the checkpoints). A small
index under ``$TPUCTL_HOME/sweeps`` maps a sweep id to its bucket; the bucket stays the truth.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from ..basics import statefile
from ..basics.config import home
from ..basics.errors import NotFound, UnknownName, UsageError

SWEEPS_PREFIX = "tpuctl/sweeps"
SWEEP_LABEL = "tpuctl-sweep"
# The controller renews its heartbeat this often; one older than CONTROLLER_STALE_S is a dead one's.
HEARTBEAT_S = 5.0
CONTROLLER_STALE_S = 30.0
# The controller's lease, in the sweep's directory (taken by compare-and-swap: provision.runs.lease).
CONTROLLER_LEASE = "controller.json"

# what a controller, `sweep resume` and `sweep stop` change in a SweepRecord: the rest defines the sweep
MUTABLE = frozenset({"state", "reason", "created_at", "updated_at", "ended_at", "best", "detached", "host"})

LIVE = ("starting", "running")
ENDED = ("finished", "stopped", "failed")


def host_requests_prefix(cluster: str) -> str:
    """Where a host VM's agent looks for the sweeps whose controller it runs (GCP ``--detach``)."""
    from ..runs.store import CLUSTERS_PREFIX

    return f"{CLUSTERS_PREFIX}/{cluster}/sweeps/"


def host_request_name(cluster: str, sweep_id: str) -> str:
    return f"{host_requests_prefix(cluster)}{check_id(sweep_id)}.json"


def new_sweep_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now or time.time()))
    return f"sweep-{stamp}-{secrets.token_hex(2)}"


def check_id(ref: str) -> str:
    import re

    if not isinstance(ref, str) or not re.fullmatch(r"sweep-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}", ref):
        raise UsageError(f"invalid sweep id {ref!r:.60}", hint="use an id printed by tpuctl sweep (sweep-YYYYMMDD-HHMMSS-xxxx)")
    return ref


@dataclass
class SweepRecord:
    sweep_id: str
    provider: str
    project: str
    bucket: str
    zones: list[str]
    accelerator_type: str               # one type, or several comma-separated (any of them would do)
    preemptible: bool
    spot: bool
    max_concurrent: int
    max_trials: int
    spec: dict[str, Any]                      # provision.sweeps.spec.SweepSpec.to_dict()
    budget_usd: float | None = None
    hourly_usd: float = 0.0                   # one pool TPU at list price
    price: dict[str, Any] | None = None       # that price: region, tier, source, date (prices.Price)
    eval_every_steps: int | None = None
    num_train_steps: int = 0
    max_failures: int = 3
    poll_s: float = 10.0
    state: str = "starting"
    reason: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    best: dict[str, Any] | None = None
    detached: bool = False
    host: str | None = None                   # the cluster whose host VM's agent drives it (GCP --detach)
    service_account: str | None = None        # of the pool's TPU VMs (None: the Compute Engine default)
    # sha256 of the workdir archive every trial runs in (tpuctl/workdirs/<sha256>.tar.gz), or None
    workdir: str | None = None


    # the channels told of a new best trial and the end (provision.notify.settings, references only);
    # part of the digest a host VM's pin holds, so no bucket writer changes them
    notify: dict[str, Any] | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def digest(self) -> str:
        """sha256 of what defines the sweep (not its state): what a host VM's pin holds for it
        (provision.runs.pins), so the controller there runs only the sweep that was handed over."""
        import hashlib

        defining = {k: v for k, v in self.to_dict().items() if k not in MUTABLE}
        return hashlib.sha256(json.dumps(defining, sort_keys=True, default=str).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "sweep.json") -> SweepRecord:
        """The record ``data`` holds, each field of its type (the spec's too: :class:`_SpecShape`),
        or :class:`~provision.basics.records.BadRecord` naming ``where``: the bucket's writers
        write sweep.json too."""
        from ..basics.records import checked

        return checked(cls, data, where, parts={"spec": _SpecShape})


class _SpecShape(TypedDict):
    """What a sweep's view reads of its spec (provision.sweeps.spec.SweepSpec.to_dict)."""
    metric: str
    goal: str
    method: str
    pruner: str
    parameters: dict[str, Any]


@dataclass
class TrialRecord:
    trial: int
    params: dict[str, Any]
    state: str = "queued"                     # queued, running, finished, pruned, failed, stopped
    run: str | None = None
    cluster: str | None = None
    model_dir: str | None = None
    metric: float | None = None
    steps: int = 0
    preemptions: int = 0
    cost_usd: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    reported_step: int | None = None          # the newest eval step told to Optuna
    reason: str | None = None

    @property
    def seconds(self) -> float:
        if self.started_at is None:
            return 0.0
        return max(0.0, (self.ended_at or time.time()) - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "trial record") -> TrialRecord:
        """The trial ``data`` holds, each field of its type, or
        :class:`~provision.basics.records.BadRecord` naming ``where``."""
        from ..basics.records import checked

        return checked(cls, data, where)


class SweepStore:
    """A sweep's files in its bucket (any :class:`provision.cloud.storage.Bucket`)."""

    def __init__(self, bucket: Any, sweep_id: str):
        self.bucket = bucket
        self.sweep_id = sweep_id
        self.prefix = f"{SWEEPS_PREFIX}/{sweep_id}"

    def name(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def write_json(self, rel: str, data: Any) -> None:
        self.bucket.write_bytes(self.name(rel), (json.dumps(data, indent=1, sort_keys=True, default=str) + "\n").encode())

    def read_json(self, rel: str) -> Any | None:
        try:
            return json.loads(self.bucket.read_bytes(self.name(rel)))
        except NotFound:
            return None
        except ValueError:
            return None

    def where(self, rel: str) -> str:
        """The URL of one of the sweep's objects, as an error names it."""
        return f"{self.bucket.url}/{self.name(rel)}"

    def load(self) -> SweepRecord:
        from ..basics.records import parse

        try:
            raw = self.bucket.read_bytes(self.name("sweep.json"))
        except NotFound:
            raise UnknownName(f"sweep {self.sweep_id} not found in {self.bucket.url}",
                           hint="check the id, or pass --bucket gs://B where it lives") from None
        return SweepRecord.from_dict(parse(raw, self.where("sweep.json")), self.where("sweep.json"))

    def save(self, rec: SweepRecord) -> None:
        rec.updated_at = time.time()
        self.write_json("sweep.json", rec.to_dict())

    def trials(self) -> list[TrialRecord]:
        from ..basics.records import parse

        out = []
        for info in self.bucket.list(self.name("trials/")):
            rest = info.name[len(self.name("trials/")):]
            if "/" in rest or not rest.endswith(".json"):
                continue
            try:
                raw = self.bucket.read_bytes(self.name(f"trials/{rest}"))
            except NotFound:
                continue            # deleted since the listing
            where = self.where(f"trials/{rest}")
            out.append(TrialRecord.from_dict(parse(raw, where), where))
        return sorted(out, key=lambda t: t.trial)

    def save_trial(self, t: TrialRecord) -> None:
        self.write_json(f"trials/{t.trial}.json", t.to_dict())

    def model_dir_url(self, bucket_url: str, n: int) -> str:
        return f"{bucket_url.rstrip('/')}/{self.prefix}/trials/{n}/model"

    # -- the controller's lease -----------------------------------------------------------------
    def controller(self) -> dict[str, Any] | None:
        return self.read_json(CONTROLLER_LEASE)

    def stop_requested(self) -> dict[str, Any] | None:
        return self.read_json("stop.json")


def controller_identity(where: str) -> dict[str, Any]:
    return {"owner": secrets.token_hex(6), "host": socket.gethostname(), "pid": os.getpid(), "where": where,
            "heartbeat_at": time.time()}


def controller_alive(lease: dict[str, Any] | None, now: float | None = None) -> bool:
    """A controller holds the sweep: its heartbeat is fresh and, on this host, its process lives."""
    from ..basics.procs import alive

    if not lease or lease.get("released"):
        return False
    if (now or time.time()) - float(lease.get("heartbeat_at") or 0) >= CONTROLLER_STALE_S:
        return False
    if lease.get("host") == socket.gethostname() and isinstance(lease.get("pid"), int):
        return alive(lease["pid"])
    return True


@dataclass(frozen=True)
class Liveness:
    """What the reaper needs to know of a sweep: is a controller about to use its TPUs?"""

    sweep_id: str
    state: str
    heartbeat_at: float | None
    alive: bool


def liveness(bucket: Any, sweep_id: str) -> Liveness:
    store = SweepStore(bucket, sweep_id)
    rec = store.read_json("sweep.json") or {}
    lease = store.controller()
    return Liveness(sweep_id=sweep_id, state=str(rec.get("state") or "unknown"),
                    heartbeat_at=float(lease["heartbeat_at"]) if lease and lease.get("heartbeat_at") else None,
                    alive=bool(rec.get("state") in LIVE and controller_alive(lease)))


# ---- the local index: sweep id -> its bucket -------------------------------------------------------

def _index_path(sweep_id: str):
    return home() / "sweeps" / f"{check_id(sweep_id)}.json"


def remember(rec: SweepRecord) -> None:
    statefile.write_json(_index_path(rec.sweep_id), {"sweep_id": rec.sweep_id, "provider": rec.provider,
                                                     "project": rec.project, "bucket": rec.bucket,
                                                     "created_at": rec.created_at})


def lookup(sweep_id: str) -> dict[str, Any] | None:
    return statefile.read_json(_index_path(sweep_id))


def known() -> list[dict[str, Any]]:
    root = home() / "sweeps"
    if not root.is_dir():
        return []
    entries = [statefile.read_json(p) for p in root.glob("sweep-*.json")]
    return sorted((e for e in entries if e), key=lambda e: e.get("created_at", 0))


def local_dir(sweep_id: str):
    """This machine's scratch directory of a sweep: the controller's log, the job spec copy."""
    from ..basics import private

    return private.make_dirs(home() / "sweeps" / check_id(sweep_id))
