"""The cost ledger: one event per TPU lifetime change (created, deleted, preempted, cluster down),
appended locally and copied into the cluster's bucket. :mod:`provision.billing.costs` reads it.

Written by ``up``, ``down``, recreation and the reaper; never a reason for any of them to fail.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict


def ledger_dir(provider: str, project: str | None) -> Path:
    from ..basics.config import home

    return home() / "ledger" / provider / (project or "-")


def ledger_path(provider: str, project: str | None, cluster: str) -> Path:
    return ledger_dir(provider, project) / f"{cluster}.jsonl"


def event(kind: str, cluster: str, *, t: float | None = None, **data: Any) -> dict[str, Any]:
    out = {"id": uuid.uuid4().hex[:16], "t": round(t if t is not None else time.time(), 3), "event": kind,
           "cluster": cluster}
    out.update({k: v for k, v in data.items() if v is not None})
    return out


def node_fields(node: Any) -> dict[str, Any]:
    """What the ledger keeps of a TPU node (a :class:`~provision.cloud.base.TpuNode`)."""
    return {"node": node.name, "zone": node.zone, "accelerator_type": node.accelerator_type,
            "interruptible": bool(node.preemptible or node.spot), "created_at": node.created_at,
            "state": node.state.value}


def append(provider: str, project: str | None, entry: dict[str, Any]) -> None:
    """Append one event to the cluster's local ledger (O_APPEND of one short line, under its lock)."""
    from ..basics import statefile

    path = ledger_path(provider, project, entry["cluster"])
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    with statefile.locked(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def record(provider: Any, kind: str, cluster: str, *, bucket: Any = None, **data: Any) -> dict[str, Any] | None:
    """Record an event locally (and in ``bucket``, a :class:`provision.cloud.storage.Bucket`, when given).

    Never raises: the ledger is an account of what happened, not a reason for ``up`` or ``down``
    to fail. Returns the event, or None if it could not be written anywhere.
    """
    entry = event(kind, cluster, **data)
    wrote = False
    try:
        append(provider.name, provider.project, entry)
        wrote = True
    except Exception as exc:  # noqa: BLE001 - see docstring
        _warn(f"cost ledger: could not record {kind} for {cluster}: {exc}")
    if bucket is not None:
        try:
            body = json.dumps(entry, sort_keys=True)
            bucket.write_bytes(bucket_event_name(cluster, entry), body.encode(),
                               metadata={EVENT_KEY: body} if len(body) <= EVENT_METADATA_MAX else None)
            wrote = True
        except Exception as exc:  # noqa: BLE001
            _warn(f"cost ledger: could not copy {kind} for {cluster} to {getattr(bucket, 'url', 'the bucket')}: {exc}")
    return entry if wrote else None


def _warn(message: str) -> None:
    import sys

    print(f"tpuctl: warning: {message}", file=sys.stderr)


# The custom-metadata key of a ledger object that carries its event too (the object's bytes), so
# that a listing of a fleet's ledgers answers without a download per event; an event longer than
# EVENT_METADATA_MAX (Cloud Storage allows 8 KiB of custom metadata an object) has only its bytes.
EVENT_KEY = "tpuctl-event"
EVENT_METADATA_MAX = 4096


def bucket_event_name(cluster: str, entry: dict[str, Any]) -> str:
    return f"tpuctl/clusters/{cluster}/ledger/{int(entry['t'] * 1000):015d}-{entry['id']}.json"


def read_local(provider: str, project: str | None, cluster: str | None = None) -> list[dict[str, Any]]:
    root = ledger_dir(provider, project)
    paths = [ledger_path(provider, project, cluster)] if cluster else sorted(root.glob("*.jsonl"))
    return [e for path in paths for e in _events(path)]


def read_local_by_cluster(provider: str, project: str | None) -> dict[str, list[dict[str, Any]]]:
    """Every cluster's local ledger (what :func:`read_local` reads for one), from one pass over the
    ledger folder: a fleet's ``cost`` asks for thousands of clusters, most with no file here."""
    root = ledger_dir(provider, project)
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {e.name[:-len(".jsonl")]: _events(Path(e.path)) for e in entries if e.name.endswith(".jsonl")}


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line after a crash: skip it
    return out


def read_bucket(bucket: Any, cluster: str) -> list[dict[str, Any]]:
    return _read_listed(bucket, list(bucket.list(f"tpuctl/clusters/{cluster}/ledger/")))


class _BucketEvent(TypedDict, total=False):
    """A ledger event as :func:`event` writes it: the fields ``cost`` computes with."""
    id: str
    cluster: str
    node: str | None
    zone: str | None
    accelerator_type: str | None
    interruptible: bool | None
    created_at: float | None
    state: str | None
    by: str | None
    hourly_usd: float | None


class BucketEvent(_BucketEvent):
    t: float
    event: str


def _read_listed(bucket: Any, infos: list[Any]) -> list[dict[str, Any]]:
    """The events of listed ledger objects: from each listing's metadata (:data:`EVENT_KEY`), else
    (an object written without it) from its bytes; a half-written or foreign object is skipped.
    Anyone who can write the bucket can write one: an event whose fields have the wrong type is
    skipped with one line naming it (provision.basics.records), the rest are counted."""
    from ..basics.records import BadRecord, checked_object

    out = []
    for info in infos:
        try:
            listed = (info.metadata or {}).get(EVENT_KEY)
            entry = json.loads(listed) if listed else None
            if not isinstance(entry, dict):
                entry = json.loads(bucket.read_bytes(info.name))
        except Exception:  # noqa: BLE001, S112 - a half-written or foreign object
            continue
        if not isinstance(entry, dict):
            continue
        try:
            out.append(checked_object(entry, BucketEvent, f"{getattr(bucket, 'url', 'the bucket')}/{info.name}"))
        except BadRecord as exc:
            _warn(f"cost ledger: {exc.message}: left out")
    return out


class BucketLedgers:
    """The ledger events of every cluster in a bucket, from one listing of its clusters' ledgers
    (a page per thousand events; each event in its object's custom metadata), for a fleet's
    ``cost``: a listing per cluster would be a request per cluster, a download per event more. A
    bucket that cannot be listed raises for each cluster that asks, as a listing of the cluster's
    own folder would."""

    def __init__(self, open_bucket: Any) -> None:
        self._open = open_bucket
        self._index: dict[str, dict[str, list[Any]] | Exception] = {}

    def read(self, url: str, cluster: str) -> list[dict[str, Any]]:
        index = self._index.get(url)
        if index is None:
            index = self._index[url] = self._list(url)
        if isinstance(index, Exception):
            raise index
        return _read_listed(self._open(url), index.get(cluster, []))

    def _list(self, url: str) -> dict[str, list[Any]] | Exception:
        prefix = "tpuctl/clusters/"
        try:
            infos = list(self._open(url).list(prefix, glob=f"{prefix}*/ledger/*"))
        except Exception as exc:  # noqa: BLE001 - reported per cluster, as read_bucket's failure is
            return exc
        out: dict[str, list[Any]] = {}
        for info in infos:
            cluster, _, rest = info.name[len(prefix):].partition("/")
            if rest.startswith("ledger/"):
                out.setdefault(cluster, []).append(info)
        return out


def merge(*sources: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for src in sources:
        for e in src:
            seen.setdefault(str(e.get("id") or id(e)), e)
    return sorted(seen.values(), key=lambda e: (e.get("t", 0), e.get("event", "")))




def tpu_created(provider: Any, cluster: str, node: Any, *, by: str = "up") -> None:
    """A TPU this ``up`` (or recreate) created starts billing."""
    record(provider, "tpu_created", cluster, by=by, **node_fields(node))


def tpu_deleted(provider: Any, cluster: str, node: Any, *, by: str, hourly_usd: float, **data: Any) -> None:
    record(provider, "tpu_deleted", cluster, by=by, hourly_usd=hourly_usd, **data, **node_fields(node))


def cluster_down(provider: Any, cluster: str) -> None:
    """``tpuctl down NAME``: the user ended the cluster (see billing.costs.savings)."""
    record(provider, "cluster_down", cluster)
