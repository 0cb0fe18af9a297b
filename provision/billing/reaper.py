"""The idle reaper: find tpuctl's TPUs, judge each with :func:`provision.billing.idle.judge`, delete the idle.

The I/O edge around the pure policy, used by ``tpuctl down --idle`` (every cluster of the
project), by ``tpuctl up --autodown`` (one cluster, continuously: the host VM's agent on GCP, a
detached local agent on the local provider) and by the benchmark. For every TPU labelled
``tpuctl-cluster`` it

1. finds the cluster's run: the newest of the run this machine's run index knows and the run
   ``tpuctl/clusters/<cluster>/current.json`` names in the cluster's bucket (the bucket comes from
   ``--bucket``, the local cluster cache, or the ``tpuctl-bucket`` metadata of the host VM or TPU);
2. builds a :class:`~provision.billing.idle.RunView` from the run record, the job's progress record and
   the supervisor's lease, and judges the node (with its duty cycle, when asked and available);
3. deletes the idle ones, all operations started at once and waited on; the result says per
   deletion (once: ``down --idle``'s table, autodown's log line) what it saves per hour at list
   price. The host VM stays: it is cheap and runs the agent
   (``tpuctl down NAME`` deletes everything);
4. judges every queued resource of a cluster that has no node (:func:`provision.billing.idle.judge_queued`):
   FAILED and SUSPENDED requests hold quota until deleted and never provision, so they go, and the
   output names the quota each frees; a waiting one goes only when its cluster has nothing else;
5. clears what clusters with no resources left still hold: their TPU range reservation and
   their local record.

A run whose records cannot be read (a bucket error) keeps its TPU: the reaper never deletes what
it cannot see is idle. A cluster whose bucket nobody here knows has no run this machine can see;
its TPU is judged as one with no run, and the output says so (``--bucket`` tells it where to look).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import NotFound, TpuctlError
from ..basics.validate import CLUSTER_LABEL, format_duration
from ..catalog import prices
from ..cloud.base import Arch, DutyCycle, Operation, Provider, QueuedRequest, TpuNode, Vm
from ..cloud.operations import Backoff, OperationTimeout, wait_all
from ..cluster import bucket_for, cached_spec, cached_specs, delete_request, ledger
from ..sweeps.store import SWEEP_LABEL
from .idle import (
    RunView,
    SweepView,
    Verdict,
    judge,
    judge_queued,
    needs_progress,
    needs_supervisor,
    view_of,
)

Log = Callable[[str], None]

# A range reservation or cached record with no resources is cleared only when older than this
# (an ``up`` reserves its range before its TPU exists).
STALE_RECORD_S = 600.0
# Clusters examined at once (their run records read), bounded: the storage client's pool holds 16
# connections per client, and more threads only queue on the interpreter.
READ_THREADS = 16
# Run records a bucket must have to read before the reaper lists them all instead (one request per
# thousand runs of the bucket's history, against one download each): two rounds of READ_THREADS.
LIST_RECORDS_FROM = 2 * READ_THREADS


def _noop(_: str) -> None:
    pass


# ---- results -------------------------------------------------------------------------------------

@dataclass
class NodeReport:
    node: TpuNode
    verdict: Verdict
    run: RunView | None = None
    run_source: str | None = None
    bucket: str | None = None
    hourly: float | None = 0.0            # None: no source knows its price
    price: prices.Price | None = None     # what ``hourly`` is: region, tier, source, date
    duty: str | None = None
    duty_cycle: DutyCycle | None = None
    sweep: SweepView | None = None
    deleted: bool = False
    deleted_at: float | None = None
    error: str | None = None

    @property
    def cluster(self) -> str:
        return self.node.cluster or self.node.name

    def to_dict(self) -> dict[str, Any]:
        n, v = self.node, self.verdict
        return {"cluster": self.cluster, "name": n.name, "zone": n.zone, "accelerator_type": n.accelerator_type,
                "state": n.state.value, "preemptible": n.preemptible, "spot": n.spot, "keep_label": n.keep,
                "created_at": n.created_at, "verdict": "delete" if v.delete else "keep", "reason": v.reason,
                "idle_since": v.idle_since, "run_id": self.run.run_id if self.run else None,
                "run_status": self.run.status if self.run else None,
                "heartbeat_at": self.run.heartbeat_at if self.run else None, "run_source": self.run_source,
                "duty_cycle": self.duty, "saves_usd_per_hour": self.hourly if v.delete else 0.0,
                "price": self.price.to_dict() if self.price else None,
                "deleted": self.deleted, "deleted_at": self.deleted_at, "error": self.error}


@dataclass
class QueuedReport:
    """A queued resource without a node: what it holds and whether it goes."""

    request: QueuedRequest
    verdict: Verdict
    deleted: bool = False
    error: str | None = None

    @property
    def cluster(self) -> str:
        return self.request.cluster or self.request.name

    def line(self, dry_run: bool) -> str:
        q = self.request
        verb = "would delete" if dry_run else "deleted" if self.deleted else "could not delete"
        return (f"{verb} queued resource {q.name} ({q.zone}, {q.state.value}): bills nothing; "
                f"{'would free' if dry_run or not self.deleted else 'frees'} the quota it held: {q.quota()}"
                + (f"; {self.error}" if self.error else ""))

    def to_dict(self) -> dict[str, Any]:
        q, v = self.request, self.verdict
        return {"cluster": self.cluster, "name": q.name, "zone": q.zone, "accelerator_type": q.accelerator_type,
                "state": q.state.value, "spot": q.spot, "keep_label": q.keep, "created_at": q.created_at,
                "quota": q.quota(), "verdict": "delete" if v.delete else "keep", "reason": v.reason,
                "deleted": self.deleted, "error": self.error}


@dataclass
class ReapResult:
    provider: str
    project: str | None
    zone: str | None
    idle_for: float
    dry_run: bool = False
    who: str = "reaper"
    min_duty_cycle: float | None = None
    duty_status: str | None = None
    nodes: list[NodeReport] = field(default_factory=list)
    requests: list[QueuedReport] = field(default_factory=list)
    kept_vms: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    price_source: str = field(default_factory=prices.describe_source)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def to_delete(self) -> list[NodeReport]:
        return [r for r in self.nodes if r.verdict.delete]

    @property
    def deleted(self) -> list[NodeReport]:
        return [r for r in self.nodes if r.deleted]

    @property
    def failed(self) -> list[NodeReport]:
        return [r for r in self.nodes if r.error]

    @property
    def requests_to_delete(self) -> list[QueuedReport]:
        return [r for r in self.requests if r.verdict.delete]

    @property
    def failed_requests(self) -> list[QueuedReport]:
        return [r for r in self.requests if r.error]

    @property
    def saved(self) -> prices.Total:
        """What the deletions save per hour; a TPU whose price is unknown makes it a lower bound."""
        done = self.to_delete if self.dry_run else self.deleted
        return prices.Total.of((f"TPU {r.node.name}", r.hourly) for r in done)

    @property
    def saved_per_hour(self) -> float | None:
        return self.saved.usd

    def to_dict(self) -> dict[str, Any]:
        gone = [r for r in self.requests if r.deleted]
        return {"ok": not self.failed and not self.failed_requests, "provider": self.provider,
                "project": self.project, "zone": self.zone or "all",
                "dry_run": self.dry_run, "idle_for_s": self.idle_for, "min_duty_cycle": self.min_duty_cycle,
                "duty_cycle": self.duty_status, "nodes": [r.to_dict() for r in self.nodes],
                "queued_resources": [r.to_dict() for r in self.requests],
                "deleted": [f"TPU {r.node.name} ({r.node.zone})" for r in self.deleted]
                + [f"queued resource {r.request.name} ({r.request.zone})" for r in gone],
                "would_delete": ([f"TPU {r.node.name} ({r.node.zone})" for r in self.to_delete]
                                 + [f"queued resource {r.request.name} ({r.request.zone})"
                                    for r in self.requests_to_delete]) if self.dry_run else [],
                "kept_vms": self.kept_vms, "cleared": self.cleared, "notes": self.notes,
                "saves_usd_per_hour": self.saved_per_hour, "price_source": self.price_source,
                "seconds": round(self.seconds, 2)}

    def summary(self) -> str:
        from ..basics.text import table

        lines = []
        if not self.nodes and not self.requests:
            lines.append("no tpuctl TPUs" + (f" in {self.zone}" if self.zone else ""))
        else:
            rows = []
            for r in self.nodes:
                n = r.node
                action = ("would delete" if self.dry_run else "deleted" if r.deleted else "FAILED") \
                    if r.verdict.delete else "keep"
                rows.append([r.cluster, n.zone, n.accelerator_type, n.state.value,
                             f"{r.run.run_id} ({r.run.status})" if r.run else None, action, r.verdict.reason,
                             prices.usd_text(r.hourly, dollar=False) if r.verdict.delete else None])
            for q in self.requests:
                action = ("would delete" if self.dry_run else "deleted" if q.deleted else "FAILED") \
                    if q.verdict.delete else "keep"
                rows.append([q.cluster, q.request.zone, f"{q.request.accelerator_type} (queued)",
                             q.request.state.value, None, action, q.verdict.reason,
                             "0.00" if q.verdict.delete else None])
            lines.append(table(rows, ("CLUSTER", "ZONE", "TPU", "STATE", "RUN", "ACTION", "WHY", "SAVES $/H")))
        # each TPU's row says what was done and what it saves; only a failure needs a line more
        for r in self.failed:
            lines.append(f"could not delete TPU {r.node.name} ({r.node.zone}): {r.error}")
        for q in self.requests_to_delete:
            lines.append(q.line(self.dry_run))
        for vm in self.kept_vms:
            lines.append(f"kept host VM {vm}")
        for c in self.cleared:
            lines.append(("would clear " if self.dry_run else "cleared ") + c)
        if self.duty_status:
            lines.append(f"duty cycle: {self.duty_status}")
        lines.extend(self.notes)
        count = len(self.to_delete) if self.dry_run else len(self.deleted)
        reqs = len(self.requests_to_delete) if self.dry_run else len([r for r in self.requests if r.deleted])
        tail = " (dry run: nothing was deleted)" if self.dry_run else ""
        done = self.to_delete if self.dry_run else self.deleted
        labels = sorted({r.price.label() for r in done if r.price and r.hourly != 0})
        lines.append(f"{'would delete' if self.dry_run else 'deleted'} {count} TPU(s)"
                     + (f" and {reqs} queued resource(s)" if reqs else "")
                     + f", saves {self.saved.text()} at list price"
                     + (f" ({'; '.join(labels)})" if labels else "") + tail)
        return "\n".join(lines)


# ---- finding a cluster's run ---------------------------------------------------------------------

@dataclass(frozen=True)
class BucketRuns:
    """What listings of a bucket told the reaper about its clusters' runs, so that judging a
    fleet reads per bucket, not per cluster."""

    # the clusters whose run pointer (current.json) is there, each with the run it names as its
    # custom metadata says ("": none; None: a pointer written without it, whose bytes say)
    pointers: dict[str, str | None]
    # the record summaries of the bucket's runs by run id (runs.store.record_summary); None: the
    # records were not listed (too few to read for a listing to pay), each is downloaded
    summaries: dict[str, dict[str, Any]] | None = None


def clusters_with_runs(target: Any, bucket_url: str) -> dict[str, str | None] | None:
    """The clusters whose run pointer (``current.json``) is in the bucket, from one listing of the
    pointers (a page per thousand clusters; ``matchGlob`` leaves each cluster's other files out),
    each with the run the pointer names as its custom metadata says (``""``: none; None: a pointer
    written without it, whose bytes say). A fleet's reaper then reads only the pointers that
    exist and lack it, instead of every cluster's. None when the bucket cannot be listed (each
    pointer is read, as before)."""
    from ..cloud.storage import open_bucket
    from ..runs import store as runs

    prefix = runs.CLUSTERS_PREFIX + "/"
    try:
        objects = list(open_bucket(bucket_url, target).list(prefix, glob=runs.current_name("*")))
    except TpuctlError:
        return None
    found: dict[str, str | None] = {}
    for o in objects:
        cluster = o.name[len(prefix):].split("/", 1)[0]
        if o.name == runs.current_name(cluster):
            found[cluster] = (o.metadata or {}).get(runs.POINTER_RUN_KEY)
    return found


def list_runs(target: Any, bucket_url: str, pointers: dict[str, str | None] | None,
              clusters: set[str]) -> BucketRuns | None:
    """What the bucket's listings say of the runs of ``clusters`` (those judged there): the
    pointers, and where at least :data:`LIST_RECORDS_FROM` of them name a run, the runs' record
    summaries too (one listing instead of that many downloads). None when the pointers could not
    be listed."""
    from ..cloud.storage import open_bucket
    from ..runs import store as runs

    if pointers is None:
        return None
    named = sum(1 for c in clusters if pointers.get(c))
    if named < LIST_RECORDS_FROM:
        return BucketRuns(pointers)
    try:
        return BucketRuns(pointers, runs.listed_summaries(open_bucket(bucket_url, target)))
    except TpuctlError:
        return BucketRuns(pointers)     # each record is downloaded, and its error is the run's


def runs_started_here(provider: Provider, cluster: str | None = None) -> dict[str, dict[str, Any]]:
    """The newest run this machine started on each cluster (or on ``cluster``) of this provider and
    project, from one read of the local run index."""
    from ..runs import store as runs

    out: dict[str, dict[str, Any]] = {}
    for e in runs.known_runs(cluster):       # oldest first: the newest of each cluster wins
        if e.get("provider") == provider.name and (e.get("project") or provider.project) == provider.project \
                and isinstance(e.get("cluster"), str):
            out[e["cluster"]] = e
    return out


def find_run(provider: Provider, target: Any, cluster: str, bucket_url: str | None, *,
             listed: BucketRuns | None = None,
             node: TpuNode | None = None, idle_for: float | None = None,
             local_runs: dict[str, dict[str, Any]] | None = None) -> tuple[RunView | None, str | None]:
    """The cluster's newest run as a :class:`RunView`, and where it was found; ``listed``: what
    :func:`list_runs` found in ``bucket_url``: the clusters with a run pointer there, with the run
    each names where the listing said (None: read the pointer), and the runs' record summaries
    where they were listed (a summary stands for its record: both were written at once);
    ``node``: the TPU being judged, whose verdict may not need the supervisor's lease
    (:func:`~provision.billing.idle.needs_supervisor`: then it is not read; None: always read);
    ``idle_for``: the reaper's threshold, past which the job's progress file is read only where it
    can change the verdict (:func:`~provision.billing.idle.needs_progress`; None: always read);
    ``local_runs``: :func:`runs_started_here` for every cluster, read once by a reaper judging many
    (None: this machine's run index is read for this cluster).

    Raises :class:`TpuctlError` when run records exist but cannot be read.
    """
    from ..cloud.storage import open_bucket
    from ..runs import store as runs
    from ..runs.supervisor import LEASE_NAME, read_progress

    candidates: list[tuple[str, str, str]] = []   # (bucket, run_id, source)
    latest = (local_runs if local_runs is not None else runs_started_here(provider, cluster)).get(cluster)
    if latest:
        candidates.append((latest["bucket"], latest["run_id"], "this machine's run index"))
    pointers = listed.pointers if listed is not None else None
    summaries = listed.summaries if listed is not None else None
    if bucket_url and (pointers is None or cluster in pointers):
        run_id = pointers.get(cluster) if pointers is not None else None
        if run_id is None:      # not in the listing's metadata: the pointer's bytes say
            from ..basics.records import BadRecord, parse

            name = runs.current_name(cluster)
            try:
                named = runs.pointer_run(parse(open_bucket(bucket_url, target).read_bytes(name),
                                               f"{bucket_url}/{name}"))
            except (NotFound, BadRecord):    # none, or not JSON (anyone who can write the bucket writes it)
                named = None
            run_id = named if isinstance(named, str) else None
        if run_id:
            candidates.append((bucket_url, run_id, f"{bucket_url}/{runs.current_name(cluster)}"))
    best: tuple[dict[str, Any], Any, str] | None = None
    seen: set[str] = set()
    for bucket, run_id, source in candidates:
        if run_id in seen:
            continue
        seen.add(run_id)
        store = runs.RunStore(open_bucket(bucket, target), run_id)
        rec = summaries.get(run_id) if summaries is not None and bucket == bucket_url else None
        if rec is None:
            try:
                rec = store.load().to_dict()
            except NotFound:
                continue
        if best is None or rec["created_at"] > best[0]["created_at"]:
            best = (rec, store, source)
    if best is None:
        return None, None
    rec, store, source = best
    progress = None
    if rec.get("model_dir") and (idle_for is None or needs_progress(view_of(rec), now=time.time(), idle_for=idle_for)):
        progress = read_progress(rec["model_dir"], rec["provider"], rec["project"])
    view = view_of(rec, progress)
    if node is not None and not needs_supervisor(node, view):
        return view, source
    from ..runs.lease import checked_holder

    lease = store.read_json(f"{store.prefix}/{LEASE_NAME}")
    if isinstance(lease, dict):      # its heartbeat is compared: of the type tpuctl writes, or one line naming it
        lease = checked_holder(lease, f"{store.bucket.url}/{store.prefix}/{LEASE_NAME}")
    return view_of(rec, progress, lease), source


def find_sweep(target: Any, bucket_url: str, sweep_id: str) -> SweepView:
    """Whether the sweep a pool TPU belongs to has a live controller (its heartbeat in the bucket)."""
    from ..cloud.storage import open_bucket
    from ..sweeps.store import liveness

    live = liveness(open_bucket(bucket_url, target), sweep_id)
    return SweepView(sweep_id=sweep_id, alive=live.alive, state=live.state)


# ---- the reaper ---------------------------------------------------------------------------------

def reap(provider: Provider, target: Any, *, idle_for: float, zone: str | None = None, cluster: str | None = None,
         bucket: str | None = None, dry_run: bool = False, min_duty_cycle: float | None = None,
         who: str = "reaper", timeout: float = 900.0, log: Log = _noop,
         backoff: Backoff | None = None) -> ReapResult:
    """Judge every tpuctl TPU (of ``cluster``, or all) and delete the idle ones; see the module doc."""
    from ..cluster import tpu_price

    start = time.monotonic()
    backoff = backoff or Backoff()
    result = ReapResult(provider=provider.name, project=provider.project, zone=zone, idle_for=idle_for,
                        dry_run=dry_run, who=who, min_duty_cycle=min_duty_cycle)
    book = provider.price_book()
    result.price_source = book.describe()
    selector = {CLUSTER_LABEL: cluster} if cluster else None
    # the range reservations, read while the rest is judged: they wait on the API, not on the fleet
    claims_f = _started(provider.reservations) if cluster is None and zone is None else None
    # the TPUs' lists carry their tpuctl metadata (the bucket): no read per cluster to find it. The
    # TPUs are judged as soon as they are listed; the host VMs (more pages on Compute Engine) are
    # waited for only where a TPU's bucket can come from its VM, and before anything is deleted
    tpus_f = _started(lambda: provider.list_tpus(zone, selector, metadata=True))
    vms_f = _started(lambda: provider.list_vms(None, selector))
    queued_f = _started(lambda: provider.list_queued(zone, selector))
    # what this machine knows, read while the lists are on their way
    local_runs = runs_started_here(provider)
    cache = cached_specs(provider) if cluster is None else None
    all_nodes = tpus_f.result()
    nodes = [n for n in all_nodes if CLUSTER_LABEL in n.labels]

    @functools.cache
    def hosts() -> dict[str, Vm]:
        return {v.labels[CLUSTER_LABEL]: v for v in vms_f.result() if CLUSTER_LABEL in v.labels}

    def bucket_of(n: TpuNode) -> str | None:
        name = n.cluster or n.name
        # a TPU VM's metadata, as listed, answers for its host VM too (bucket_for): no VM needed
        vm = None if n.metadata is not None and n.arch == Arch.VM else hosts().get(name)
        return bucket_for(provider, name, hint=bucket, node=n, vm=vm, cache=cache)[0]

    duty_table: dict[tuple[str, str | None], DutyCycle] | None = None
    if min_duty_cycle is not None:
        duty_table, result.duty_status = provider.duty_cycles(idle_for)

    def examine(node: TpuNode) -> NodeReport:
        name = node.cluster or node.name
        price = tpu_price(node, book)
        report = NodeReport(node=node, verdict=Verdict(False, "not judged"), hourly=price.usd_per_hour, price=price)
        if node.keep:
            report.verdict = judge(node, None, now=time.time(), idle_for=idle_for)
            return report
        b = buckets[id(node)]
        report.bucket = b
        try:
            report.run, report.run_source = find_run(provider, target, name, b,
                                                     listed=listings.get(b) if b else None, node=node,
                                                     idle_for=idle_for, local_runs=local_runs)
        except Exception as exc:  # noqa: BLE001 - never delete what we cannot see is idle
            why = exc.one_line() if isinstance(exc, TpuctlError) else f"{type(exc).__name__}: {exc}"
            report.verdict = Verdict(False, f"its run records cannot be read ({why[:200]}); kept")
            return report
        duty = None
        if duty_table is not None:
            from ..cloud.dutycycle import lookup

            duty = lookup(duty_table, node.name, node.zone)
            report.duty, report.duty_cycle = _describe_duty(duty, min_duty_cycle), duty
        sweep_id = node.labels.get(SWEEP_LABEL)
        if sweep_id and b:
            try:
                report.sweep = find_sweep(target, b, sweep_id)
            except Exception as exc:  # noqa: BLE001 - never delete what we cannot see is idle
                why = exc.one_line() if isinstance(exc, TpuctlError) else f"{type(exc).__name__}: {exc}"
                report.verdict = Verdict(False, f"its sweep's records cannot be read ({why[:200]}); kept")
                return report
        report.verdict = judge(node, report.run, now=time.time(), idle_for=idle_for, duty=duty,
                               min_duty_cycle=min_duty_cycle, sweep=report.sweep)
        if report.run is None and b is None:
            report.verdict = Verdict(report.verdict.delete,
                                     report.verdict.reason + " (no run record found here: its bucket is unknown "
                                                             "on this machine; --bucket gs://B looks there)",
                                     report.verdict.idle_since)
        return report

    buckets: dict[int, str | None] = {}
    listings: dict[str, BucketRuns | None] = {}
    if nodes:
        # the run records are small reads that wait on the network: more of them at once than cores
        with ThreadPoolExecutor(min(READ_THREADS, len(nodes))) as pool:
            judged = [n for n in nodes if not n.keep]
            for n, b in zip(judged, in_shares(pool, bucket_of, judged)):
                buckets[id(n)] = b
            if len(judged) > 1:     # a listing or two per bucket instead of reads per cluster
                judged_in: dict[str, set[str]] = {}
                for n in judged:
                    if buckets[id(n)]:
                        judged_in.setdefault(buckets[id(n)], set()).add(n.cluster or n.name)
                listings = dict(zip(judged_in, pool.map(
                    lambda b: list_runs(target, b, clusters_with_runs(target, b), judged_in[b]), judged_in)))
            result.nodes = in_shares(pool, examine, nodes)
    result.nodes.sort(key=lambda r: (r.cluster, r.node.zone, r.node.name))
    vm_of = hosts()
    try:
        queued = [q for q in queued_f.result() if CLUSTER_LABEL in q.labels]
    except TpuctlError as exc:      # idle TPUs are still reaped; the output says what was not seen
        queued = []
        result.notes.append(f"could not list queued resources, so none was judged: {exc.one_line()}")

    node_clusters = {n.cluster for n in nodes}
    now = time.time()
    for q in queued:
        if any(q.owns(n) for n in all_nodes):
            continue    # a request that has its node is judged through it (deleting the node deletes it)
        more = q.cluster in vm_of or q.cluster in node_clusters or cached_spec(provider, q.cluster) is not None
        result.requests.append(QueuedReport(q, judge_queued(q, now=now, idle_for=idle_for, cluster_has_more=more)))
    result.requests.sort(key=lambda r: (r.cluster, r.request.zone, r.request.name))

    if not dry_run:
        _recheck(provider, target, [r for r in result.nodes if r.verdict.delete and not r.node.dead], idle_for,
                 min_duty_cycle)
    doomed = result.to_delete
    if doomed and not dry_run:
        _delete(provider, doomed, who=who, target=target, timeout=timeout, log=log, backoff=backoff)
    if result.requests_to_delete and not dry_run:
        _delete_requests(provider, result.requests_to_delete, all_nodes, timeout=timeout, log=log, backoff=backoff)
    touched = {r.cluster for r in doomed}
    for name in sorted(touched):
        vm = vm_of.get(name)
        if vm is not None:
            vp = book.vm_price(vm.machine_type, vm.zone)
            result.kept_vms.append(f"{vm.name} ({vm.zone}, ${vp.usd_per_hour:.2f}/hour): it runs "
                                   f"the cluster's agent; tpuctl down {name} deletes it too (price: {vp.label()})")
    for name in sorted(touched - set(vm_of)):
        if any(r.cluster == name and not (r.deleted or (dry_run and r.verdict.delete)) for r in result.nodes):
            continue
        # only a Cloud TPU API TPU with a reserved range holds one (never a Compute Engine TPU)
        what = "range reservation and local record" if _holds_range(provider, name, claims_f) else "local record"
        if dry_run:
            result.cleared.append(f"cluster {name}'s {what} (no host VM)")
        else:
            _clear(provider, name, result, reason="its TPU was deleted and it has no host VM", what=what)
    if cluster is None and zone is None:
        alive = {n.cluster or n.name for n in nodes} | set(vm_of) | {r.cluster for r in result.requests
                                                                     if not r.deleted}
        # read again after deletions (they took time); else what was read meanwhile is current
        claims: Future[dict[str, dict[str, Any]]] | None = None if _deleted_any(result, dry_run) else claims_f
        _clear_stale(provider, alive, result, dry_run=dry_run, claims=claims)
    result.seconds = time.monotonic() - start
    return result


def _recheck(provider: Provider, target: Any, doomed: list[NodeReport], idle_for: float,
             min_duty_cycle: float | None) -> None:
    """Just before deleting, look at each doomed node's run once more: a ``tpuctl train`` that
    started while the reaper was judging keeps its TPU."""
    def again(r: NodeReport) -> None:
        try:
            run, _src = find_run(provider, target, r.cluster, r.bucket)
        except Exception:  # noqa: BLE001 - unreadable now: keep, as examine() would
            r.verdict = Verdict(False, "its run records became unreadable while judging; kept")
            return
        changed = (run is None) != (r.run is None) or (run is not None and r.run is not None and (
            run.run_id != r.run.run_id or run.heartbeat_at != r.run.heartbeat_at or run.status != r.run.status))
        if changed:
            verdict = judge(r.node, run, now=time.time(), idle_for=idle_for, duty=r.duty_cycle,
                            min_duty_cycle=min_duty_cycle, sweep=r.sweep)
            if not verdict.delete:
                r.run, r.verdict = run, Verdict(False, f"{verdict.reason} (its run changed while judging)",
                                                verdict.idle_since)

    if doomed:
        with ThreadPoolExecutor(min(8, len(doomed))) as pool:
            list(pool.map(again, doomed))


def _describe_duty(duty: DutyCycle | None, min_pct: float | None) -> str:
    if duty is None or not duty.points:
        return "no samples name this node: the progress record decides"
    t, v = duty.latest
    busy = duty.last_busy(min_pct or 0)
    when = f", last at or above {min_pct:g}% {format_duration(time.time() - busy)} ago" if busy else \
        f", never at or above {min_pct:g}% in the window"
    return f"{v:.0f}% {format_duration(max(0.0, time.time() - t))} ago{when}"


def _delete(provider: Provider, doomed: list[NodeReport], *, who: str, target: Any, timeout: float, log: Log,
            backoff: Backoff) -> None:
    def start(r: NodeReport) -> Any:
        n = r.node
        log(f"deleting TPU {n.name} in {n.zone}")     # what it saves: the caller's report, once done
        try:
            op = provider.delete_tpu(n.zone, n.name)
        except NotFound:
            r.deleted, r.deleted_at = True, time.time()
            return None
        except TpuctlError as exc:
            r.error = exc.one_line()
            return None
        r.deleted_at = time.time()
        return op

    with ThreadPoolExecutor(min(8, len(doomed))) as pool:
        ops = list(pool.map(start, doomed))
    pending = [(r, op) for r, op in zip(doomed, ops) if op is not None]
    _settle(provider, pending, timeout=timeout, backoff=backoff)
    for r in doomed:
        if not r.deleted:
            continue
        n = r.node
        bucket = _ledger_bucket(provider, r.bucket, target)
        ledger.record(provider, "tpu_deleted", r.cluster, bucket=bucket, t=r.deleted_at, by=who,
                     idle_since=r.verdict.idle_since, reason=r.verdict.reason, hourly_usd=r.hourly,
                     price=r.price.to_dict() if r.price else None,
                     run_id=r.run.run_id if r.run else None, **ledger.node_fields(n))


def _delete_requests(provider: Provider, doomed: list[QueuedReport], nodes: list[TpuNode], *, timeout: float,
                     log: Log, backoff: Backoff) -> None:
    """Delete queued resources (force only where one holds a node), all at once, and wait for them."""
    pending = []
    for r in doomed:
        q = r.request
        log(f"deleting {q.describe()}")
        try:
            op = delete_request(provider, q, nodes=nodes, log=log)
        except TpuctlError as exc:
            r.error = exc.one_line()
            continue
        if op is None:
            r.deleted = True
        else:
            pending.append((r, op))
    _settle(provider, pending, timeout=timeout, backoff=backoff)


def _settle(provider: Provider, pending: list[tuple[Any, Operation]], *, timeout: float, backoff: Backoff) -> None:
    """Wait for deletions started at once; mark each report deleted, or with the error that stopped
    it (a deletion's NOT_FOUND, code 5, means it is gone)."""
    try:
        wait_all(provider, [op for _r, op in pending], timeout=timeout, backoff=backoff)
    except OperationTimeout as exc:
        late = {op.target for op in exc.pending}
        for r, op in pending:
            if op.target in late:
                r.error = f"deletion still running after {format_duration(timeout)}; rerun tpuctl down --idle"
    for r, op in pending:
        if r.error:
            continue
        if op.error and op.error.code != 5:
            r.error = f"deletion failed: {op.error.message}"
        else:
            r.deleted = True


def _ledger_bucket(provider: Provider, url: str | None, target: Any) -> Any:
    """The cluster's bucket for the ledger copy, when one is known (GCP: so the laptop sees it)."""
    if provider.name == "local" or not url:
        return None
    try:
        from ..cloud.storage import open_bucket

        return open_bucket(url, target)
    except Exception:  # noqa: BLE001 - the local ledger still has it
        return None


def _holds_range(provider: Provider, cluster: str, claims: Future[dict[str, dict[str, Any]]] | None) -> bool:
    """Whether ``cluster`` holds a TPU range reservation (the claims as read meanwhile, else read
    now): what ``down --idle`` says it clears must be what there is. Unreadable: say it may."""
    try:
        return cluster in ((claims.result() if claims is not None else provider.reservations()) or {})
    except TpuctlError:
        return True


def _clear(provider: Provider, cluster: str, result: ReapResult, *, reason: str,
           what: str = "range reservation and local record") -> None:
    from ..cluster import uncache

    try:
        provider.release_range(cluster)
        uncache(provider, cluster)
        result.cleared.append(f"cluster {cluster}'s {what} ({reason})")
    except TpuctlError as exc:
        result.notes.append(f"could not clear cluster {cluster}'s records: {exc.one_line()}")


# Shares a fleet's clusters are judged in: a few per thread, so that a thread held up by a slow
# read leaves the rest of the fleet to the others
SHARES = 4 * READ_THREADS


def in_shares(pool: ThreadPoolExecutor, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``[fn(x) for x in items]`` on the pool's threads, in SHARES shares of the items (every
    SHARES-th one each) instead of a task per item: a fleet's thousands of clusters, most judged
    without a read, cost the pool's bookkeeping per share, while the reads of one share still
    overlap the others'."""
    shares = [items[i::SHARES] for i in range(min(SHARES, len(items)))]
    out: list[Any] = [None] * len(items)
    for i, done in enumerate(pool.map(lambda share: [fn(x) for x in share], shares)):
        out[i::SHARES] = done
    return out


def _started(read: Callable[[], Any]) -> Future[Any]:
    """``read`` running on a thread of its own from now on; its result (or error) in the future."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(read)
    finally:
        pool.shutdown(wait=False)


def _deleted_any(result: ReapResult, dry_run: bool) -> bool:
    """Whether the reaper deleted (or tried to delete) anything: what it read before is older now."""
    return not dry_run and bool(result.to_delete or result.requests_to_delete)


def _clear_stale(provider: Provider, alive: set[str], result: ReapResult, *, dry_run: bool,
                 claims: Future[dict[str, dict[str, Any]]] | None = None) -> None:
    """Range reservations and cached records of clusters that have no VM and no TPU left
    (``claims``: the reservations as read meanwhile; None: read them now)."""
    from ..basics import statefile
    from ..cluster.cache import cache_dir

    now = time.time()
    stale: dict[str, list[str]] = {}
    try:
        for name, rec in ((claims.result() if claims is not None else provider.reservations()) or {}).items():
            if name not in alive and now - float(rec.get("at") or 0) > STALE_RECORD_S:
                stale.setdefault(name, []).append(f"range reservation {rec.get('cidr')}")
    except TpuctlError as exc:
        result.notes.append(f"could not read range reservations: {exc.one_line()}")
    cache = cache_dir(provider)
    if cache.is_dir():
        for path in cache.glob("*.json"):
            with contextlib.suppress(TpuctlError):
                rec = statefile.read_json(path) or {}
                if path.stem not in alive and now - float(rec.get("updated_at") or 0) > STALE_RECORD_S:
                    stale.setdefault(path.stem, []).append("local record")
    for name, parts in sorted(stale.items()):
        what = " and ".join(parts)
        if dry_run:
            result.cleared.append(f"cluster {name}'s {what} (no VM or TPU left)")
        else:
            _clear(provider, name, result, reason="no VM or TPU left", what=what)
