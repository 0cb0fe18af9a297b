"""Runs: the record of one ``tpuctl train``, kept in the bucket beside its checkpoints.

A run's directory holds everything needed to resume it from anywhere (the laptop, the host VM):

    tpuctl/runs/<run_id>/run.json            the RunRecord: status, counts, supervisor lease (its
                                             summary also in its custom metadata: record_summary)
    tpuctl/runs/<run_id>/spec.yaml           the job spec as the job sees it (overrides applied)
    tpuctl/runs/<run_id>/tpuctl/<wheel>      the exact tpuctl that started it
    tpuctl/workdirs/<sha256>.tar.gz          the user's workdir (--workdir), shared by every run of it
    tpuctl/runs/<run_id>/events.jsonl        preempted, recreated, resumed at step N, steps lost ...
    tpuctl/runs/<run_id>/attempts/<n>/       command.json, exit-<worker>.json, alive-<worker>.json,
                                             log-<worker>.txt, stop.json
    tpuctl/clusters/<cluster>/current.json   which run (and attempt) the cluster's hosts should run

The supervisor holding the run's lease (supervisor.json) is the only writer of run.json; events
are appended to events.jsonl by compare-and-swap, so no writer drops another's; hosts write only
under attempts/. A small index under ``$TPUCTL_HOME/runs`` lets ``logs``, ``status`` and ``cost`` find a
run's bucket from its id; the bucket stays the source of truth.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from ..basics import statefile
from ..basics.config import home
from ..basics.errors import NotFound, TpuctlError, UnknownName, UsageError
from ..cloud.storage import LOCAL_DEFAULT_BUCKET

RUNS_PREFIX = "tpuctl/runs"
# A host agent refreshes an attempt's alive record this often; the supervisor reads it.
ALIVE_EVERY_S = 5.0
CLUSTERS_PREFIX = "tpuctl/clusters"
# Conditional appends to events.jsonl before giving up (a lost race costs one retry, with backoff).
EVENT_ATTEMPTS = 40

LIVE = ("starting", "running", "recovering")
ENDED = ("finished", "failed", "gave_up", "stopped")


def new_run_id(cluster: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now or time.time()))
    return f"{cluster[:40].rstrip('-')}-{stamp}-{secrets.token_hex(2)}"


@dataclass
class RunRecord:
    run_id: str
    cluster: str
    provider: str
    project: str
    zone: str
    bucket: str                       # gs://BUCKET
    model_dir: str
    num_train_steps: int
    save_checkpoints_steps: int
    job: str = ""
    status: str = "starting"
    reason: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    attempts: int = 0
    preemptions: int = 0
    failures: int = 0
    steps_lost: int = 0
    seconds_lost: float = 0.0
    max_preemptions: int | None = None
    max_failures: int = 3
    # seconds between the supervisor's looks (train --poll), kept for a supervisor on the host
    poll_s: float = 10.0
    # the attempt on the current TPU: {"n", "tpu_created_at", "started_at", "zone"}
    attempt: dict[str, Any] | None = None
    # an outage being recovered from: {"detected_at", "step", "checkpoint_step", "cause",
    # "preemptions": [the ordinals of the preemptions it covers: more than one when they overlapped]}
    recovering: dict[str, Any] | None = None
    # outages already counted, by what they hit (policy.outage_key), newest last; and the creation
    # time of the TPU incarnation last seen (what a TPU found gone was)
    outages: list[str] = field(default_factory=list)
    tpu_seen: float | None = None
    # the supervisor holding the lease: {"owner", "host", "pid", "where", "heartbeat_at"}
    supervisor: dict[str, Any] | None = None
    last_progress: dict[str, Any] | None = None
    # seconds spent per state, for tpuctl cost: training, waiting (after a preemption), idle
    seconds_by_state: dict[str, float] = field(default_factory=dict)
    code: bool = False              # the run has a workdir (tpuctl train --workdir)
    wheel: str | None = None
    # job: command: which workers of a slice run the program (all, first); None: the TF runner's plan
    hosts: str | None = None
    # the runner's Keras backend as train resolved it (jax, tensorflow; jobs.spec.backends), told to
    # the job as TPUCTL_BACKEND; None for job: command and for runs of a tpuctl before backends
    backend: str | None = None
    # hard caps (train --budget-usd / --deadline, or the spec's budget_usd / deadline): dollars at
    # list price and unix seconds; a cap that stopped the run ("budget" or "deadline"), else None
    budget_usd: float | None = None
    deadline: float | None = None
    stopped_by: str | None = None
    # the TPU as the caps and the projection price it: {"accelerator_type", "zone", "tier",
    # "usd_per_hour", "price", "interruptions_per_hour", "recovery_s"} (docs/estimate.md)
    pricing: dict[str, Any] | None = None
    # the work per step ({"key", "job", "train_batch_size", "hosts", "flops_per_step", "flops_basis"}),
    # the estimate made when the run started (provision.runs.estimate.Estimate.to_dict, or
    # {"none": why}), and the live pace: {"meter", "usd_by_state", "projections", "warned", "over"}
    workload: dict[str, Any] | None = None
    estimate: dict[str, Any] | None = None
    pace: dict[str, Any] = field(default_factory=dict)


    # the last failed attempt (an exit other than 0, 2 and 42): {"attempt", "error_line", "early"}, where
    # early means before its first progress (provision.runs.policy.repeated_failure compares two)
    last_failure: dict[str, Any] | None = None
    # the workdir's files its rules left out ({"path", "why"}, the first 50): named when a failure names one
    left_out: list[dict[str, str]] = field(default_factory=list)

    # step, loss and metrics at each look of the supervisor, bounded (provision.runs.curve): tpuctl ui
    curve: list[dict[str, Any]] = field(default_factory=list)

    # what the run keeps of its goodput breakdown (provision.runs.goodput.summary), written by its
    # supervisor when a recovery ends and when the run ends; in the listed summary too, so a fleet's
    # `cost --since` reads it from one listing of a bucket's records, and `estimate` its recoveries
    goodput: dict[str, Any] | None = None

    @property
    def live(self) -> bool:
        return self.status in LIVE

    @property
    def prefix(self) -> str:
        return f"{RUNS_PREFIX}/{self.run_id}"

    @property
    def step(self) -> int | None:
        return (self.last_progress or {}).get("step")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "run.json") -> RunRecord:
        """The record ``data`` (run.json's JSON) holds, its fields and the objects inside them that
        tpuctl computes with (:data:`RECORD_PARTS`) of their types, or
        :class:`~provision.basics.records.BadRecord` naming ``where`` and the field: a bucket's
        writers write run.json too."""
        from ..basics.records import checked

        return checked(cls, data, where, parts=RECORD_PARTS)


# The objects inside a run's record that tpuctl computes with, as the keys it reads: the one gate
# for records read from a bucket (provision.basics.records) checks them with the record's own
# fields, so a value of the wrong type is one line naming run.json, never an internal error.
class _Progress(TypedDict, total=False):
    """``last_progress``: the job's progress.json as the supervisor last saw it."""
    step: float | None
    loss: float | None
    examples_per_sec: float | None
    time: float | None
    started_at: float | None
    step_time: float | None
    first_step_time: float | None
    metrics: dict[str, Any] | None
    outputs: list[Any] | None
    data_creation: list[Any] | None
    progress_reported: bool | None


class _Attempt(TypedDict, total=False):
    n: int
    tpu_created_at: float | None
    started_at: float | None
    zone: str | None


class _Lease(TypedDict, total=False):
    owner: str | None
    host: str | None
    pid: int | None
    where: str | None
    heartbeat_at: float | None


class _Projection(TypedDict):
    """One entry of ``pace.projections`` (provision.runs.pace.Projection.to_dict, kept only with an ETA)."""
    t: float
    eta: float
    projected_usd: float


class _Meter(TypedDict, total=False):
    steps: float
    seconds: float
    step: float | None
    time: float | None
    warmups: list[float]


class _Pace(TypedDict, total=False):
    usd_by_state: dict[str, float]          # the supervisor adds to it: never null
    projections: list[_Projection] | None
    meter: _Meter | None
    warned: list[str] | None
    over: dict[str, bool] | None


class _Pricing(TypedDict, total=False):
    """``pricing``: the TPU as the caps, the projection and cost price it (provision.runs.forecast.attach)."""
    accelerator_type: str | None
    zone: str | None
    tier: str | None
    capacity: str | None
    usd_per_hour: float | None
    price: dict[str, Any] | None
    interruptions_per_hour: float | None
    recovery_s: float | None


class _RecoveringBase(TypedDict, total=False):
    step: float | None
    checkpoint_step: float | None
    cause: str | None
    preemptions: list[int]


class _Recovering(_RecoveringBase):
    """``recovering``: the outage being recovered from; its detection time dates the recovery."""
    detected_at: float


class _Workload(TypedDict, total=False):
    """``workload``: the work per step (provision.runs.forecast.Work.to_dict), read by estimate's history."""
    key: str | None
    job: str | None
    train_batch_size: float | None
    hosts: float | None
    flops_per_step: float | None
    flops_basis: str | None


class _Estimate(TypedDict, total=False):
    total_s: float | None
    total_usd: float | None
    steps: float | None
    none: str


RECORD_PARTS: dict[str, Any] = {
    "last_progress": _Progress | None, "attempt": _Attempt | None, "supervisor": _Lease | None,
    "pace": _Pace, "estimate": _Estimate | None, "pricing": _Pricing | None, "recovering": _Recovering | None,
    "workload": _Workload | None,
}


class _Event(TypedDict, total=False):
    """One line of events.jsonl: its time and kind (the rest is the event's own)."""
    time: float
    event: str


class _WorkerRecord(TypedDict, total=False):
    """An attempt's ``exit-<worker>.json`` or ``alive-<worker>.json`` (provision.host.agent)."""
    code: int
    time: float
    pid: int | None
    refused: str | None


def usable_progress(data: Any) -> dict[str, Any] | None:
    """A job's progress.json (its JSON) when the fields tpuctl computes with have their types
    (:class:`_Progress`), else None: the supervisor then sees no progress this poll, as for a file
    that is not JSON (the job writes it, and a program of the user's may write anything)."""
    from ..basics.records import BadRecord, checked_object

    try:
        return checked_object(data, _Progress, "progress.json")
    except BadRecord:
        return None


class RunStore:
    """A run's files in its bucket (any :class:`provision.cloud.storage.Bucket`)."""

    def __init__(self, bucket: Any, run_id: str):
        self.bucket = bucket
        self.run_id = run_id
        self.prefix = f"{RUNS_PREFIX}/{run_id}"

    # -- the record and its events (single writer: the supervisor) ---------------------------
    def load(self) -> RunRecord:
        from ..basics.records import parse

        where = f"{self.bucket.url}/{self.prefix}/run.json"
        try:
            raw = self.bucket.read_bytes(f"{self.prefix}/run.json")
        except NotFound:
            raise UnknownName(f"run {self.run_id} not found in {self.bucket.url}",
                           hint="check the run id with tpuctl status") from None
        return RunRecord.from_dict(parse(raw, where), where)

    def save(self, rec: RunRecord) -> None:
        from ..basics.redact import redact_data

        rec.updated_at = time.time()
        data = redact_data(rec.to_dict())
        self.bucket.write_bytes(f"{self.prefix}/run.json", _dumps(data),
                                metadata={SUMMARY_KEY: json.dumps(record_summary(data), sort_keys=True)})

    def event(self, kind: str, **data: Any) -> dict[str, Any]:
        """Append one event: a read, then a write conditioned on the generation read, again on a lost
        race, so concurrent writers (a supervisor and a ``train`` stopping it) never drop one."""
        from ..basics.redact import redact_data
        from ..cloud.storage import PreconditionFailed

        entry = redact_data({"time": round(time.time(), 3), "event": kind, **data})
        line = json.dumps(entry, sort_keys=True).encode() + b"\n"
        name = f"{self.prefix}/events.jsonl"
        delay = 0.01
        for _ in range(EVENT_ATTEMPTS):
            old, gen = self.bucket.read_versioned(name) or (b"", 0)
            if old and not old.endswith(b"\n"):
                old += b"\n"
            try:
                self.bucket.write_if_generation(name, old + line, gen)
                return entry
            except PreconditionFailed:
                time.sleep(delay * (0.5 + secrets.randbelow(1000) / 1000))
                delay = min(delay * 2, 1.0)
        raise TpuctlError(f"could not append to {self.bucket.url}/{name}: it kept changing "
                          f"({EVENT_ATTEMPTS} tries)", hint="is something else rewriting it?")

    def events(self) -> list[dict[str, Any]]:
        """The run's events, each line checked (:class:`_Event`): a bad one is named by its line."""
        from ..basics.records import checked_object, parse

        name = f"{self.prefix}/events.jsonl"
        try:
            raw = self.bucket.read_bytes(name)
        except NotFound:
            return []
        out = []
        for number, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                where = f"{self.bucket.url}/{name} line {number}"
                out.append(checked_object(parse(line, where), _Event, where))
        return out

    # -- attempts (written by hosts) -------------------------------------------------------------
    def attempt_prefix(self, n: int) -> str:
        return f"{self.prefix}/attempts/{n}"

    def write_json(self, name: str, data: Any) -> None:
        self.bucket.write_bytes(name, _dumps(data))

    def read_json(self, name: str) -> Any | None:
        """The JSON value of the object ``name`` (None: there is none); not JSON is
        :class:`~provision.basics.records.BadRecord` naming it."""
        from ..basics.records import parse

        try:
            raw = self.bucket.read_bytes(name)
        except NotFound:
            return None
        return parse(raw, f"{self.bucket.url}/{name}")

    def write_current(self, cluster: str, pointer: dict[str, Any]) -> None:
        """Point ``cluster``'s hosts at a run (``current.json``), with the run it names also in the
        object's custom metadata (:data:`POINTER_RUN_KEY`): a fleet's reaper learns every cluster's
        run from one listing of the clusters' folder instead of a read per cluster."""
        self.bucket.write_bytes(current_name(cluster), _dumps(pointer),
                                metadata={POINTER_RUN_KEY: str(pointer_run(pointer) or "")})

    def exits(self, n: int) -> dict[str, dict[str, Any]]:
        """Exit records of attempt ``n`` by worker."""
        return self._by_worker(n, "exit")

    def alive(self, n: int) -> dict[str, dict[str, Any]]:
        """Heartbeats of attempt ``n`` by worker."""
        return self._by_worker(n, "alive")

    def _by_worker(self, n: int, kind: str) -> dict[str, dict[str, Any]]:
        from ..basics.records import checked_object

        out = {}
        for info in self.bucket.list(f"{self.attempt_prefix(n)}/{kind}-"):
            worker = info.name.rsplit(f"/{kind}-", 1)[1].removesuffix(".json")
            data = self.read_json(info.name)
            if data is not None:
                out[worker] = checked_object(data, _WorkerRecord, f"{self.bucket.url}/{info.name}")
        return out

    def log_workers(self, n: int) -> list[str]:
        """Workers that wrote a log for attempt ``n`` (one per host of the slice)."""
        prefix = f"{self.attempt_prefix(n)}/log-"
        return sorted(i.name[len(prefix):].removesuffix(".txt") for i in self.bucket.list(prefix))

    def log(self, n: int, worker: str = "0") -> bytes:
        try:
            return self.bucket.read_bytes(f"{self.attempt_prefix(n)}/log-{worker}.txt")
        except NotFound:
            return b""


def current_name(cluster: str) -> str:
    return f"{CLUSTERS_PREFIX}/{cluster}/current.json"


# The custom-metadata key of a run pointer that names its run ("": none); pointers written before
# it existed lack it, and their run is read from their bytes.
POINTER_RUN_KEY = "tpuctl-run"


def pointer_run(pointer: Any) -> str | None:
    """The run a pointer (``current.json``) names: the one its hosts run, or the one that ended
    there last."""
    if not isinstance(pointer, dict):
        return None
    return pointer.get("run_id") or pointer.get("ended") or None


# The custom-metadata key of run.json that carries the record's summary (:func:`record_summary`),
# written with the record itself, so a listing of many runs' records answers what a fleet's reaper
# reads of each (records written before it existed lack it, and are downloaded).
SUMMARY_KEY = "tpuctl-summary"
# Every run's record and no other file of its folder (checkpoints, logs), as a listing's glob
RECORD_GLOB = f"{RUNS_PREFIX}/*/run.json"
# What the summary keeps of a record: what tells whether the run is alive (status, last progress,
# end), which of a cluster's runs is newest (created_at) and where its job reports progress; and
# its cluster and goodput summary, for a fleet's goodput (provision.runs.goodput.fleet)
SUMMARY_FIELDS = ("run_id", "status", "created_at", "ended_at", "model_dir", "provider", "project", "cluster",
                  "goodput")
# Cloud Storage allows 8 KiB of custom metadata an object: a summary longer than this keeps
# its goodput's recoveries out (then all of its goodput), never the fields that judge a run alive
SUMMARY_MAX = 4096


def record_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of a record (run.json, as a dict) that judge whether its run is alive, and its
    cluster and goodput summary, with the same names and meaning: a reader of the record reads
    the summary alike."""
    out = {k: record.get(k) for k in SUMMARY_FIELDS}
    progress_at = (record.get("last_progress") or {}).get("time")
    out["last_progress"] = {"time": progress_at} if progress_at is not None else None
    if isinstance(out["goodput"], dict) and len(json.dumps(out, default=str)) > SUMMARY_MAX:
        out["goodput"] = {**out["goodput"], "recovery_s": []}
        if len(json.dumps(out, default=str)) > SUMMARY_MAX:
            out["goodput"] = None
    return out


def listed_summaries(bucket: Any) -> dict[str, dict[str, Any]]:
    """Each run's record summary in ``bucket`` by run id, from one listing of the records (a
    page per thousand runs); a record without one (written by an older tpuctl, or not JSON) is
    left out, to be downloaded."""
    out: dict[str, dict[str, Any]] = {}
    for info in bucket.list(f"{RUNS_PREFIX}/", glob=RECORD_GLOB):
        raw = (info.metadata or {}).get(SUMMARY_KEY)
        try:
            summary = json.loads(raw) if raw else None
        except ValueError:
            continue
        run_id = info.name[len(RUNS_PREFIX) + 1:].split("/", 1)[0]
        if (isinstance(summary, dict) and summary.get("run_id") == run_id
                and isinstance(summary.get("created_at"), (int, float)) and isinstance(summary.get("status"), str)):
            out[run_id] = summary
    return out


def cluster_spec_name(cluster: str) -> str:
    """The cluster's spec as `up` made it, so a supervisor elsewhere recreates the TPU the same way."""
    return f"{CLUSTERS_PREFIX}/{cluster}/spec.json"


def wheel_object(prefix: str, wheel_name: str) -> str:
    """Where a tpuctl wheel is staged under a run's, sweep's or data request's prefix: the one shape
    the hosts' bootstrap accepts (templates/host-startup.sh, WHEEL_RE)."""
    return f"{prefix}/tpuctl/{wheel_name}"


def agent_name(cluster: str) -> str:
    """Which tpuctl wheel the cluster's hosts install (read by templates/host-startup.sh)."""
    return f"{CLUSTERS_PREFIX}/{cluster}/agent.json"


def _dumps(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True, default=str) + "\n").encode()


# ---- the local index: run id -> where its record lives ------------------------------------------

def _index_path(run_id: str):
    return home() / "runs" / f"{run_id}.json"


def remember(rec: RunRecord, pin: dict[str, str | None] | None = None) -> None:
    """Index the run on this machine; ``pin``: what its hosts may run (provision.runs.pins), kept
    here too (mode 0600), where a supervisor re-attaching on this machine finds it again."""
    entry = {"run_id": rec.run_id, "cluster": rec.cluster, "provider": rec.provider, "project": rec.project,
             "bucket": rec.bucket, "created_at": rec.created_at}
    if pin is None:
        pin = (statefile.read_json(_index_path(rec.run_id)) or {}).get("pin")
    if pin is not None:
        entry["pin"] = pin
    statefile.write_json(_index_path(rec.run_id), entry)


def _checked_ref(ref: str) -> str:
    """A run id or cluster name given on the command line (it becomes a file name here)."""
    import re

    if not isinstance(ref, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,119}", ref):
        raise UsageError(f"invalid run id {ref!r:.70}",
                         hint="use a run id printed by tpuctl train, or a cluster name")
    return ref


def lookup(run_id: str) -> dict[str, Any]:
    entry = statefile.read_json(_index_path(_checked_ref(run_id)))
    if entry is None:
        raise UnknownName(f"no run {run_id} is known on this machine",
                       hint="use a run id printed by tpuctl train here, or a cluster name for its latest run")
    return entry


def known_runs(cluster: str | None = None) -> list[dict[str, Any]]:
    root = home() / "runs"
    if not root.is_dir():
        return []
    entries = [statefile.read_json(p) for p in root.glob("*.json")]
    entries = [e for e in entries if e and (cluster is None or e.get("cluster") == cluster)]
    return sorted(entries, key=lambda e: e.get("created_at", 0))


def latest_for(cluster: str) -> dict[str, Any] | None:
    runs = known_runs(cluster)
    return runs[-1] if runs else None


def latest_by_cluster() -> dict[str, dict[str, Any]]:
    """Each cluster's latest run started on this machine, from one read of the run index (a
    fleet's status asks for every cluster's: one :func:`latest_for` each would read it per cluster)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in known_runs():
        cluster = entry.get("cluster")
        if isinstance(cluster, str):
            out[cluster] = entry          # known_runs is oldest first: the last one wins
    return out


def resolve_run(ref: str) -> dict[str, Any]:
    """A run id, or a cluster name meaning its latest run."""
    entry = statefile.read_json(_index_path(_checked_ref(ref)))
    if entry is not None:
        return entry
    latest = latest_for(ref)
    if latest is not None:
        return latest
    raise UnknownName(f"no run or cluster {ref!r} is known on this machine",
                   hint="pass a run id printed by tpuctl train, or the cluster's name")


def supervisor_identity(where: str) -> dict[str, Any]:
    import os

    return {"owner": secrets.token_hex(6), "host": socket.gethostname(), "pid": os.getpid(), "where": where,
            "heartbeat_at": time.time()}


def check_bucket_for(provider: str, bucket: str | None) -> str:
    if bucket:
        return bucket
    if provider == "local":
        return LOCAL_DEFAULT_BUCKET
    raise UsageError("a run needs a bucket for its checkpoints and records",
                     hint="pass --bucket gs://BUCKET to tpuctl train (or to tpuctl up)")
