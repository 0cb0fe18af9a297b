"""The cost ledger (TPU lifetimes) and what they cost: hours by state at list price, and savings.

**Ledger.** One JSON line per event in ``$TPUCTL_HOME/ledger/<provider>/<project>/<cluster>.jsonl``
(and, from the reaper, one object per event under ``tpuctl/clusters/<cluster>/ledger/`` in the
cluster's bucket, so a host VM's autodown is seen from the laptop). Events:

- ``tpu_created``  a TPU incarnation exists (``up``, or the supervisor's recreate after preemption)
- ``tpu_preempted`` seen PREEMPTED or TERMINATED (billing stopped at the latest then)
- ``tpu_deleted``  deleted, ``by`` down, reaper (``down --idle``), autodown or recreate
- ``cluster_down`` ``tpuctl down NAME`` (the user's own end of the cluster)

Events carry an ``id``; readers merge the local and the bucket copy by it.

**Accounting** (pure: :func:`lifetimes`, :func:`account`, :func:`savings`). A TPU bills from its
creation until it is deleted or preempted, whatever runs on it. Every billed second is one of

- ``training``: a run is live and the job has been started (and no preemption is being recovered);
  ``tpuctl cost`` calls it "training (no progress reported)" for a program that has never reported
  a step (``progress_reported`` false): running, of unknown progress, never waiting,
- ``making_data``: the job is making its pretraining data from ``corpus_files`` on the TPU host
  (its progress.json's ``data_creation`` spans): billed, but never training time (``tpuctl data``
  makes it before the TPU exists),
- ``starting``: a run is live and its first attempt has not started (staging, TPU creating),
- ``waiting``: a run is recovering from a preemption: from the supervisor noticing it to the
  first new step (the ``preempted`` event, then ``resumed``'s ``seconds_lost`` later); unbilled
  waiting (the TPU was gone) is reported apart at $0,
- ``idle``: billed with no live run on the cluster.

**Savings of idle reaping: the counterfactual.** Without the reaper an idle TPU keeps billing until
somebody next acts on its cluster: the next ``tpu_created`` (``up``/``train`` needed a TPU again) or
``cluster_down`` of that cluster, or *now* if nobody has yet. An idle TPU the reaper deleted at
time d therefore saved ``price x (min(next action, now) - d)``; those not yet followed by an action
keep saving their hourly price from now on. A PREEMPTED/TERMINATED node bills nothing: deleting it
frees quota and saves $0.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..catalog import prices
from ..catalog.prices import Price, PriceBook
from ..cluster.ledger import ledger_dir, merge, node_fields, read_bucket, read_local

REAPERS = ("reaper", "autodown")
STATES = ("training", "making_data", "starting", "waiting", "idle")


# ---- pure accounting ----------------------------------------------------------------------------

@dataclass
class Lifetime:
    """One TPU incarnation: billed from ``created_at`` to ``billed_until``."""

    cluster: str
    node: str
    zone: str
    accelerator_type: str
    interruptible: bool
    created_at: float
    deleted_at: float | None = None
    preempted_at: float | None = None
    deleted_by: str | None = None
    idle_since: float | None = None
    reason: str | None = None
    open_note: str | None = None     # why an open lifetime was closed by assumption
    book: PriceBook | None = field(default=None, repr=False, compare=False)   # None: the bundled table

    @property
    def price(self) -> Price | None:
        return price_of(self.accelerator_type, self.interruptible, self.zone, self.book)

    @property
    def hourly(self) -> float | None:
        """Its list price per hour; None when no source knows it."""
        return hourly(self.accelerator_type, self.interruptible, self.zone, self.book)

    def billed_until(self, now: float) -> float:
        ends = [t for t in (self.deleted_at, self.preempted_at) if t is not None]
        return max(self.created_at, min(ends) if ends else now)

    @property
    def reaped(self) -> bool:
        return self.deleted_by in REAPERS

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"cluster": self.cluster, "node": self.node, "zone": self.zone,
                "accelerator_type": self.accelerator_type, "interruptible": self.interruptible,
                "created_at": self.created_at, "deleted_at": self.deleted_at, "preempted_at": self.preempted_at,
                "deleted_by": self.deleted_by, "idle_since": self.idle_since,
                "billed_hours": round((self.billed_until(now) - self.created_at) / 3600, 4),
                "hourly_usd": self.hourly, "price": _price_dict(self.price), "note": self.open_note}


def price_of(accelerator_type: str, interruptible: bool, zone: str | None = None,
             book: PriceBook | None = None) -> Price | None:
    """The list price of a TPU in its zone's region and tier; None for a type tpuctl does not know."""
    from ..catalog.accelerators import parse

    try:
        acc = parse(accelerator_type)
    except Exception:  # noqa: BLE001 - a type the price table does not know bills at an unknown rate
        return None
    return (book or prices.BUNDLED).tpu_price(acc, zone or None, prices.tier_of(interruptible))


def hourly(accelerator_type: str, interruptible: bool, zone: str | None = None,
           book: PriceBook | None = None) -> float | None:
    """The list price per hour; None for a type or tier no source prices (the sums below count
    it as nothing and :func:`cluster_cost` notes that they are lower bounds)."""
    p = price_of(accelerator_type, interruptible, zone, book)
    return p.usd_per_hour if p else None


def _price_dict(p: Price | None) -> dict[str, Any] | None:
    return p.to_dict() if p else None


def lifetimes(events: Iterable[dict[str, Any]], live: Iterable[dict[str, Any]] | None = None, *,
              now: float) -> list[Lifetime]:
    """TPU incarnations from ledger events, completed by what the cloud lists now (``live``: dicts
    of :func:`node_fields` plus ``cluster``; None when the cloud could not be listed). A ledger
    incarnation the cloud no longer lists, with no deletion recorded, was deleted outside tpuctl:
    it is counted until the cluster's next event, or now."""
    events = sorted(events, key=lambda e: e.get("t", 0))
    out: list[Lifetime] = []
    open_: dict[tuple[str, str, str], Lifetime] = {}

    def key(e: dict[str, Any]) -> tuple[str, str, str]:
        return (e.get("cluster", ""), e.get("zone", ""), e.get("node") or e.get("cluster", ""))

    def find_open(e: dict[str, Any]) -> Lifetime | None:
        lt = open_.get(key(e))
        if lt is None and e.get("created_at"):
            # an event about an incarnation the ledger never saw created (adopted, or made elsewhere)
            lt = Lifetime(cluster=e["cluster"], node=e.get("node") or e["cluster"], zone=e.get("zone", ""),
                          accelerator_type=e.get("accelerator_type", "v2-8"),
                          interruptible=bool(e.get("interruptible")), created_at=float(e["created_at"]))
            out.append(lt)
            open_[key(e)] = lt
        return lt

    for e in events:
        kind = e.get("event")
        if kind == "tpu_created":
            created = float(e.get("created_at") or e["t"])
            old = open_.get(key(e))
            if old is not None and abs(old.created_at - created) < 1.0:
                continue  # the same incarnation recorded twice (local and bucket copies of one up)
            if old is not None and old.deleted_at is None:
                old.deleted_at, old.open_note = created, "replaced before a deletion was recorded"
            lt = Lifetime(cluster=e["cluster"], node=e.get("node") or e["cluster"], zone=e.get("zone", ""),
                          accelerator_type=e.get("accelerator_type", "v2-8"),
                          interruptible=bool(e.get("interruptible")), created_at=created)
            out.append(lt)
            open_[key(e)] = lt
        elif kind == "tpu_preempted":
            lt = find_open(e)
            if lt is not None and lt.deleted_at is None:
                t = float(e.get("preempted_at") or e["t"])
                lt.preempted_at = t if lt.preempted_at is None else min(lt.preempted_at, t)
        elif kind == "tpu_deleted":
            lt = find_open(e)
            if lt is not None and lt.deleted_at is None:
                lt.deleted_at = float(e["t"])
                lt.deleted_by = e.get("by")
                lt.idle_since = e.get("idle_since")
                lt.reason = e.get("reason")
                if e.get("state") in ("PREEMPTED", "TERMINATED") and lt.preempted_at is None:
                    lt.preempted_at = float(e.get("preempted_at") or e["t"])
                open_.pop(key(e), None)

    checked = live is not None
    live = list(live or ())
    for n in live:
        k = (n["cluster"], n.get("zone", ""), n["node"])
        lt = open_.get(k)
        if lt is not None and n.get("created_at") and abs(lt.created_at - float(n["created_at"])) < 2.0:
            continue
        if n.get("created_at"):
            if lt is not None and lt.deleted_at is None:
                lt.deleted_at, lt.open_note = float(n["created_at"]), "replaced outside tpuctl"
            new = Lifetime(cluster=k[0], node=n["node"], zone=n.get("zone", ""),
                           accelerator_type=n.get("accelerator_type", "v2-8"),
                           interruptible=bool(n.get("interruptible")), created_at=float(n["created_at"]))
            if n.get("state") in ("PREEMPTED", "TERMINATED"):
                new.preempted_at = n.get("preempted_at")
            out.append(new)
            open_[k] = new
    listed = {(n["cluster"], n.get("zone", ""), n["node"]) for n in live}
    for k, lt in list(open_.items()):
        if checked and lt.deleted_at is None and k not in listed:
            later = [float(e["t"]) for e in events if e.get("cluster") == lt.cluster and e.get("t", 0) > lt.created_at
                     and e.get("event") in ("tpu_created", "cluster_down")]
            lt.deleted_at = min(later) if later else now
            lt.open_note = "gone without a recorded deletion (deleted outside tpuctl); counted until " + (
                "the cluster's next event" if later else "now")
    return sorted(out, key=lambda lt: lt.created_at)


@dataclass
class RunSpan:
    """A run as cost accounting sees it (from its record and event log)."""

    run_id: str
    cluster: str
    created_at: float
    ended_at: float | None = None
    first_attempt_at: float | None = None
    waits: list[tuple[float, float | None]] = field(default_factory=list)
    data_spans: list[tuple[float, float | None]] = field(default_factory=list)
    status: str = ""
    seconds_by_state: dict[str, float] = field(default_factory=dict)
    # the run's pace, estimate and estimate against actual (provision.runs.pace.summary)
    pace: dict[str, Any] = field(default_factory=dict)
    # its wall time by cause (provision.runs.goodput.breakdown): for a run asked about alone
    goodput: dict[str, Any] | None = None
    # False: its program has never reported a step, so its "training" is training of unknown progress
    progress_reported: bool | None = None

    def end(self, now: float) -> float:
        return self.ended_at if self.ended_at is not None else now


def run_span(record: dict[str, Any], events: Iterable[dict[str, Any]]) -> RunSpan:
    span = RunSpan(run_id=record["run_id"], cluster=record.get("cluster", ""),
                   created_at=float(record.get("created_at") or 0), ended_at=record.get("ended_at"),
                   status=record.get("status", ""), seconds_by_state=dict(record.get("seconds_by_state") or {}))
    progress = record.get("last_progress") or {}
    if isinstance(progress.get("progress_reported"), bool):
        span.progress_reported = progress["progress_reported"]
    for entry in progress.get("data_creation") or []:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], (int, float)):
            end = entry[1] if isinstance(entry[1], (int, float)) else None
            span.data_spans.append((float(entry[0]), float(end) if end is not None else None))
    open_wait: float | None = None
    for e in sorted(events, key=lambda e: e.get("time", 0)):
        kind, t = e.get("event"), float(e.get("time", 0))
        if kind == "attempt_started" and span.first_attempt_at is None:
            span.first_attempt_at = t
        elif kind == "preempted" and open_wait is None:
            open_wait = t
        elif kind == "resumed" and open_wait is not None:
            # the waiting ended at the first new step, not when a poll noticed it (a detached
            # supervisor may look a poll later, after a short run has trained to its end): the
            # supervisor dates that step as seconds_lost after the preemption it noticed
            lost = e.get("seconds_lost")
            end = min(t, open_wait + float(lost)) if isinstance(lost, (int, float)) else t
            span.waits.append((open_wait, max(open_wait, end)))
            open_wait = None
    if open_wait is not None:
        span.waits.append((open_wait, span.ended_at))
    return span


def refine_preemptions(lives: list[Lifetime], spans: list[RunSpan]) -> None:
    """A TPU deleted while PREEMPTED stopped billing when it was preempted. Unless the ledger has a
    better time, that is taken from the supervisor's ``preempted`` event (it notices within a
    poll); without one, the deletion time stays (an upper bound: tpuctl first saw it dead then)."""
    for lt in lives:
        if lt.preempted_at is None or lt.deleted_at is None or lt.preempted_at < lt.deleted_at:
            continue
        starts = [a for sp in spans if sp.cluster == lt.cluster for a, _b in sp.waits
                  if lt.created_at <= a <= lt.deleted_at]
        if starts:
            lt.preempted_at = min(starts)


def _state_at(t: float, runs: list[RunSpan], now: float) -> str:
    """The state of a cluster's billed TPU at time t (the midpoint of a sweep segment)."""
    live = [r for r in runs if r.created_at <= t < r.end(now)]
    if not live:
        return "idle"
    r = max(live, key=lambda r: r.created_at)
    if any(a <= t < (b if b is not None else r.end(now)) for a, b in r.waits):
        return "waiting"
    if r.first_attempt_at is None or t < r.first_attempt_at:
        return "starting"
    if any(a <= t < (b if b is not None else r.end(now)) for a, b in r.data_spans):
        return "making_data"
    return "training"


@dataclass
class Account:
    hours: dict[str, float]                 # billed hours by state
    cost: dict[str, float]                  # at the price each TPU actually ran at
    cost_on_demand: dict[str, float]        # the same hours at on-demand prices
    cost_preemptible: dict[str, float]      # the same hours at preemptible prices
    waiting_unbilled_hours: float           # recovering from preemption with no TPU billing
    billed_hours: float
    total_usd: float

    def to_dict(self) -> dict[str, Any]:
        r = _rounded
        return {"hours": r(self.hours), "cost_usd": r(self.cost), "cost_usd_on_demand": r(self.cost_on_demand),
                "cost_usd_preemptible": r(self.cost_preemptible),
                "waiting_unbilled_hours": round(self.waiting_unbilled_hours, 4),
                "billed_hours": round(self.billed_hours, 4), "total_usd": round(self.total_usd, 4)}


def account(lives: list[Lifetime], runs: list[RunSpan], *, now: float, start: float | None = None,
            end: float | None = None) -> Account:
    """Split billed TPU time into states and price it; optionally only within [start, end)."""
    hours = dict.fromkeys(STATES, 0.0)
    cost = dict.fromkeys(STATES, 0.0)
    cost_od = dict.fromkeys(STATES, 0.0)
    cost_pe = dict.fromkeys(STATES, 0.0)
    lo, hi = (start if start is not None else float("-inf")), (end if end is not None else now)
    marks = sorted({t for r in runs for t in [r.created_at, r.end(now), r.first_attempt_at or r.created_at,
                                               *[a for a, _ in r.waits], *[b or r.end(now) for _, b in r.waits],
                                               *[a for a, _ in r.data_spans],
                                               *[b or r.end(now) for _, b in r.data_spans]]})
    billed = []
    for lt in lives:
        a, b = max(lt.created_at, lo), min(lt.billed_until(now), hi)
        if b <= a:
            continue
        billed.append((a, b))
        cuts = [a] + [m for m in marks if a < m < b] + [b]
        for x, y in itertools.pairwise(cuts):
            state = _state_at((x + y) / 2, runs, now)
            h = (y - x) / 3600
            hours[state] += h
            cost[state] += h * (lt.hourly or 0.0)
            cost_od[state] += h * (hourly(lt.accelerator_type, False, lt.zone, lt.book) or 0.0)
            cost_pe[state] += h * (hourly(lt.accelerator_type, True, lt.zone, lt.book) or 0.0)
    # recovering from preemption while no TPU billed (preempted, deleted, being recreated)
    unbilled = 0.0
    for r in runs:
        for a, b in r.waits:
            a, b = max(a, lo), min(b if b is not None else r.end(now), hi)
            if b > a:
                unbilled += (b - a) - _overlap((a, b), billed)
    billed_h = sum(hours.values())
    return Account(hours=hours, cost=cost, cost_on_demand=cost_od, cost_preemptible=cost_pe,
                   waiting_unbilled_hours=max(0.0, unbilled) / 3600, billed_hours=billed_h,
                   total_usd=sum(cost.values()))


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in d.items()}


def _overlap(span: tuple[float, float], intervals: list[tuple[float, float]]) -> float:
    """Length of ``span`` covered by the union of ``intervals``."""
    a, b = span
    total, cur_end = 0.0, a
    for x, y in sorted(intervals):
        x, y = max(x, cur_end), min(y, b)
        if y > x:
            total += y - x
            cur_end = y
    return total


@dataclass
class Saving:
    cluster: str
    node: str
    deleted_at: float
    idle_since: float | None
    hourly: float | None   # None: its price is unknown
    until: float
    ongoing: bool          # no action on the cluster since: still saving ``hourly`` per hour
    by: str
    reason: str | None
    price: Price | None = None     # the rate ``hourly`` was (None when the node billed nothing)

    @property
    def usd(self) -> float:
        return (self.hourly or 0.0) * max(0.0, self.until - self.deleted_at) / 3600

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "node": self.node, "deleted_at": self.deleted_at, "by": self.by,
                "idle_since": self.idle_since, "hourly_usd": self.hourly, "price": _price_dict(self.price),
                "counted_until": self.until,
                "ongoing": self.ongoing, "saved_usd": round(self.usd, 4), "reason": self.reason,
                "billed_idle_seconds": round(self.deleted_at - self.idle_since, 1) if self.idle_since else None}


def savings(lives: list[Lifetime], events: Iterable[dict[str, Any]], *, now: float) -> list[Saving]:
    """What idle reaping saved, under the counterfactual in the module docstring."""
    actions = sorted((float(e["t"]), e.get("cluster")) for e in events
                     if e.get("event") in ("tpu_created", "cluster_down"))
    out = []
    for lt in lives:
        if not lt.reaped or lt.deleted_at is None:
            continue
        billing = lt.preempted_at is None or lt.preempted_at >= lt.deleted_at
        rate = lt.hourly if billing else 0.0
        nxt = [t for t, c in actions if c == lt.cluster and t > lt.deleted_at]
        until = min(nxt[0], now) if nxt else now
        out.append(Saving(cluster=lt.cluster, node=lt.node, deleted_at=lt.deleted_at, idle_since=lt.idle_since,
                          hourly=rate, until=until, ongoing=not nxt, by=lt.deleted_by or "", reason=lt.reason,
                          price=lt.price if billing else None))
    return out


def price_rows(types: Iterable[str | tuple[str, str | None]], book: PriceBook | None = None) -> list[dict[str, Any]]:
    """Price rows for accelerator types (or (type, zone) pairs): on-demand and preemptible (spot)
    in the zone's region, each with its source and date (``on_demand``/``spot`` as full prices).
    One row per type and region: a region's zones (two clusters in us-east5-a and us-east5-b)
    share its prices, so a second zone adds no row (``zone``: the first of them)."""
    pairs = sorted({(t, None) if isinstance(t, str) else (t[0], t[1] or None) for t in types},
                   key=lambda p: (p[0], p[1] or ""))
    rows = []
    seen: set[tuple[str, str]] = set()
    for t, zone in pairs:
        od, sp = price_of(t, False, zone, book), price_of(t, True, zone, book)
        if od is None or sp is None or (t, od.region) in seen:
            continue
        seen.add((t, od.region))
        rows.append({"accelerator_type": t, "zone": zone, "region": od.region,
                     "on_demand_usd_per_hour": od.usd_per_hour, "preemptible_usd_per_hour": sp.usd_per_hour,
                     "source": od.source, "recorded": od.date, "on_demand": od.to_dict(), "spot": sp.to_dict()})
    return rows


# ---- gathering what the accounting needs (I/O) ---------------------------------------------------

COUNTERFACTUAL = ("an idle TPU deleted by the reaper would otherwise have billed until the next up/train "
                  "(a new TPU) or down of its cluster, or until now if neither happened yet")


@dataclass
class ClusterCost:
    cluster: str
    lives: list[Lifetime]
    runs: list[RunSpan]
    account: Account
    savings: list[Saving]
    notes: list[str] = field(default_factory=list)

    @property
    def saved_usd(self) -> float:
        return sum(s.usd for s in self.savings)

    @property
    def saving_per_hour(self) -> float:
        return sum(s.hourly or 0.0 for s in self.savings if s.ongoing)

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"cluster": self.cluster, "account": self.account.to_dict(),
                "lifetimes": [lt.to_dict(now) for lt in self.lives],
                "runs": [{"run_id": r.run_id, "status": r.status, "created_at": r.created_at, "ended_at": r.ended_at,
                          "seconds_by_state": r.seconds_by_state, "pace": r.pace,
                          "progress_reported": r.progress_reported,
                          **({"goodput": r.goodput, "startup": r.goodput.get("startup")}
                             if r.goodput is not None else {})} for r in self.runs],
                "savings": [s.to_dict() for s in self.savings], "saved_usd": round(self.saved_usd, 4),
                "saving_usd_per_hour": round(self.saving_per_hour, 4), "notes": self.notes}


def known_clusters(provider: Any, live: list[dict[str, Any]] | None) -> list[str]:
    from ..cluster import cache_dir
    from ..runs import store as runs

    names = {p.stem for p in ledger_dir(provider.name, provider.project).glob("*.jsonl")}
    names |= {n["cluster"] for n in live or []}
    names |= {p.stem for p in cache_dir(provider).glob("*.json")} if cache_dir(provider).is_dir() else set()
    names |= {e["cluster"] for e in runs.known_runs() if e.get("provider") == provider.name and e.get("cluster")}
    return sorted(names)


def live_nodes(provider: Any) -> tuple[list[dict[str, Any]] | None, str | None]:
    from ..basics.validate import CLUSTER_LABEL

    try:
        nodes = [n for n in provider.list_tpus(None, None) if CLUSTER_LABEL in n.labels]
    except Exception as exc:  # noqa: BLE001 - cost works from the ledger alone
        return None, f"could not list TPUs ({type(exc).__name__}: {exc}); open lifetimes are counted until now"
    return [{**node_fields(n), "cluster": n.labels[CLUSTER_LABEL]} for n in nodes], None


def group_by_cluster(items: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Items (live nodes, run index entries) by their ``cluster``, in their order, indexed once: a
    fleet's cost report looks up every cluster's, and a scan per cluster would be quadratic."""
    out: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        out.setdefault(item.get("cluster") or "", []).append(item)
    return out


@dataclass(frozen=True)
class LocalRecords:
    """What this machine keeps about the provider's clusters, by cluster: the run index, the local
    ledgers and the cluster cache. A fleet's ``cost`` reads them once for all its clusters, not a
    file (or a try at one) per cluster."""

    runs: dict[str, list[dict[str, Any]]]
    ledgers: dict[str, list[dict[str, Any]]]
    specs: dict[str, dict[str, Any]]

    @classmethod
    def read(cls, provider: Any) -> LocalRecords:
        from ..cluster import cached_specs
        from ..cluster.ledger import read_local_by_cluster
        from ..runs import store as runs

        return cls(runs=group_by_cluster(runs.known_runs()),
                   ledgers=read_local_by_cluster(provider.name, provider.project), specs=cached_specs(provider))


def _exits(store: Any, attempts: int) -> dict[int, Any]:
    """A run's exit records by attempt; one that cannot be read is left out (its times unattributed)."""
    out: dict[int, Any] = {}
    for n in range(1, attempts + 1):
        with contextlib.suppress(Exception):  # a bad exit record costs its attempt's exit time, not the report
            out[n] = store.exits(n)
    return out


def _first_alive(store: Any, exits: dict[int, Any]) -> dict[int, Any]:
    """The first attempt's heartbeats, when its exit records do not say how it started (it is
    running, or was lost with its host): what its startup is read from. {} when not needed."""
    if any(isinstance(e, dict) and e.get("startup") for e in (exits.get(1) or {}).values()):
        return {}
    with contextlib.suppress(Exception):  # unreadable: its startup's host phases are not recorded
        return {1: store.alive(1)}
    return {}


def _hosts(provider: Any, store: Any, cluster: str) -> list[dict[str, Any]] | None:
    """The cluster's host bootstrap statuses (GCP hosts write them; the local provider has none)."""
    if provider.name == "local":
        return None
    from ..cluster import bootstrap

    try:
        return [b.to_dict() for b in bootstrap.read(store.bucket, cluster)]
    except Exception:  # noqa: BLE001 - unreadable: the startup says the host bootstrap is not recorded
        return None


def cluster_cost(provider: Any, target: Any, cluster: str, live: list[dict[str, Any]] | None, *,
                 now: float, run_ids: set[str] | None = None,
                 local: LocalRecords | None = None, ledgers: Any = None, since: float | None = None,
                 hosts: list[dict[str, Any]] | None = None) -> ClusterCost:
    """Ledger (local and bucket), run records and what exists now, accounted for one cluster.
    ``live`` may hold other clusters' nodes too; ``local``: this machine's records of a fleet, read
    once (None: this cluster's are read); ``ledgers``: a fleet's
    :class:`~provision.cluster.ledger.BucketLedgers` (None: the cluster's ledger folder is listed);
    ``since``: only the hours from then on, and the savings of TPUs reaped since (``cost --since``);
    ``hosts``: the cluster's host bootstrap statuses as read already (``status NAME``), else a run
    asked about on GCP reads them, for its startup."""
    from ..cloud.storage import open_bucket
    from ..runs import store as runs
    from ..runs.pace import summary

    notes: list[str] = []
    events = (read_local(provider.name, provider.project, cluster) if local is None
              else list(local.ledgers.get(cluster, [])))
    entries = [e for e in (runs.known_runs(cluster) if local is None else local.runs.get(cluster, []))
               if e.get("provider") == provider.name and e.get("cluster") == cluster]
    if provider.name != "local":
        from ..cluster import bucket_for

        buckets = {e["bucket"] for e in entries}
        b, _src = bucket_for(provider, cluster, cache=local.specs if local is not None else None)
        if b:
            buckets.add(b)
        for url in sorted(buckets):
            try:
                found = (ledgers.read(url, cluster) if ledgers is not None
                         else read_bucket(open_bucket(url, target), cluster))
                events = merge(events, found)
            except Exception as exc:  # noqa: BLE001
                notes.append(f"ledger in {url} unreadable ({type(exc).__name__})")
    all_spans = []
    asked: dict[str, tuple[dict[str, Any], list[dict[str, Any]], dict[int, Any]]] = {}
    for e in entries:
        try:
            store = runs.RunStore(open_bucket(e["bucket"], target), e["run_id"])
            rec = store.load()
            run_events = store.events()
            span = run_span(rec.to_dict(), run_events)
            span.pace = summary(rec)
            all_spans.append(span)
            if run_ids is not None and rec.run_id in run_ids:
                # a run asked about alone: its hosts' exit records too, for its goodput, and what
                # they recorded of the first attempt's startup
                exits = _exits(store, rec.attempts)
                asked[rec.run_id] = (rec.to_dict(), run_events, exits, _first_alive(store, exits),
                                     hosts if hosts is not None else _hosts(provider, store, cluster))
        except Exception as exc:  # noqa: BLE001 - one unreadable run must not hide the rest
            notes.append(f"run {e['run_id']} unreadable ({type(exc).__name__}: {exc})")
    # every run of the cluster decides what is idle, even when only one run is reported
    spans = [s for s in all_spans if run_ids is None or s.run_id in run_ids]
    lives = lifetimes(events, None if live is None else [n for n in live if n["cluster"] == cluster], now=now)
    book = provider.price_book()
    for lt in lives:
        lt.book = book
    refine_preemptions(lives, all_spans)
    if run_ids is not None and spans:
        r = spans[0]
        acct = account(lives, all_spans, now=now, start=r.created_at, end=r.end(now))
        saves: list[Saving] = []
    else:
        acct = account(lives, all_spans, now=now, start=since)
        saves = [s for s in savings(lives, events, now=now) if since is None or s.deleted_at >= since]
    for lt in lives:
        if lt.hourly is None:
            notes.append(f"TPU {lt.node} ({lt.accelerator_type}): its price is unknown "
                         f"({(lt.price.note if lt.price else None) or 'no source prices it'}); the dollar figures "
                         f"leave its hours out, so they are at least what is shown")
        if lt.open_note:
            notes.append(f"TPU {lt.node} created {time.strftime('%Y-%m-%d %H:%M', time.localtime(lt.created_at))}: "
                         f"{lt.open_note}")
    if asked:
        from ..runs.goodput import Billed, breakdown

        billed = [Billed(lt.created_at, lt.billed_until(now), lt.hourly) for lt in lives]
        for span in spans:
            if span.run_id in asked:
                rec_d, evs, exits, alive, statuses = asked[span.run_id]
                span.goodput = breakdown(rec_d, evs, now=now, exits=exits, billed=billed, alive=alive,
                                         hosts=statuses)
    return ClusterCost(cluster=cluster, lives=lives, runs=spans, account=acct, savings=saves, notes=notes)



def fleet_buckets(provider: Any, local: LocalRecords, cluster: str | None = None) -> set[str]:
    """The buckets where a fleet's runs keep their records, as ``cost`` finds its clusters' ledgers:
    those of this machine's runs and of its cluster cache, and the provider's default; of one
    cluster's only, given ``cluster``. (The TPU list's metadata would name the others' too, at the
    price of every TPU's metadata in the list: 4 MB more at 2,000 clusters.)"""
    out = {e.get("bucket") for c, entries in local.runs.items() if cluster in (None, c) for e in entries
           if e.get("provider") == provider.name}
    out |= {spec.get("bucket") for c, spec in local.specs.items() if cluster in (None, c) and isinstance(spec, dict)}
    if getattr(provider, "default_bucket", None):
        out.add(provider.default_bucket)
    return {b for b in out if isinstance(b, str) and b.startswith("gs://")}


def fleet_goodput(provider: Any, target: Any, buckets: Iterable[str], local: LocalRecords, *, since: float,
                  now: float, cluster: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Goodput of every run live since ``since`` (:func:`provision.runs.goodput.fleet`), from one
    listing of each bucket's run records: each record's summary, its goodput's with it, is in its
    custom metadata (a page per thousand runs; no record, event log or exit record is read). This
    machine's runs that no listing summarized (a record of a tpuctl before summaries) are listed
    without goodput. Returns the view and notes (a bucket that could not be listed)."""
    from ..cloud.storage import open_bucket
    from ..runs import goodput
    from ..runs import store as runs

    notes: list[str] = []
    found: dict[str, dict[str, Any]] = {}
    listed = sorted(set(buckets))
    for url in listed:
        try:
            summaries = runs.listed_summaries(open_bucket(url, target))
        except Exception as exc:  # noqa: BLE001 - one bucket must not hide the others
            notes.append(f"runs in {url} could not be listed ({type(exc).__name__}); their goodput is left out")
            continue
        for run_id, summary in summaries.items():
            if summary.get("provider") not in (None, provider.name):
                continue
            if cluster is not None and summary.get("cluster") != cluster:
                continue
            found.setdefault(run_id, summary)
    for c, entries in local.runs.items():
        for e in entries:
            if e.get("provider") != provider.name or cluster not in (None, c) or e.get("run_id") in found:
                continue
            created = e.get("created_at")
            # its end is not known here: a run started before the window is not counted in it
            if isinstance(created, (int, float)) and created >= since:
                found[e["run_id"]] = {"run_id": e.get("run_id"), "cluster": c, "status": None,
                                      "created_at": created, "ended_at": None}
    view = goodput.fleet(found.values(), since=since, now=now)
    view["buckets"] = listed
    return view, notes
