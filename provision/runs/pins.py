"""What a cluster's hosts may run: the pin, kept in their instance metadata (pure: no I/O).

Write access to a cluster's bucket must not be code execution on its hosts. The bucket says
*which* attempt to run (``current.json``, ``command.json``) and holds what it runs (the spec,
the user's code, the tpuctl wheel), but anyone with ``roles/storage.objectUser`` on it can write
all of that. So the command that starts work there (``tpuctl train``, ``sweep --detach --host``,
``data --on``) also writes a pin into the metadata of the cluster's hosts, where only holders of
``compute.instances.setMetadata`` (TPU VMs: ``tpu.nodes.update``) can write: the id of what it
started and the sha256 of what it staged. A host runs nothing the pin does not name, and nothing
whose bytes differ from their pinned digest (docs/security.md).

The pin is one JSON document under the metadata key ``tpuctl-pin``::

    {"version": 1,
     "run":   {"<run id>":   {"cluster": NAME, "wheel": SHA, "spec": SHA, "workdir": SHA|null, "requirements": SHA|null,
                              "cluster_spec": SHA, "notify": SHA, "placement": SHA, "launch": SHA}},
     "sweep": {"<sweep id>": {"wheel": SHA, "job": SHA, "record": SHA}},
     "data":  {"<request>":  {"wheel": SHA, "request": SHA}}}

the newest :data:`KEEP` entries of each kind (a metadata value holds at most 256 KB). What cannot
be read as a pin is an empty pin: a host that cannot read its pin runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KEY = "tpuctl-pin"
VERSION = 1
KINDS = ("run", "sweep", "data")
KEEP = 8
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,119}")
_VALUE = re.compile(r"[a-z0-9][a-z0-9-]{0,119}")       # digests (64 hex) and cluster names


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def launch_digest(command: Mapping[str, Any]) -> str:
    """The digest of what an attempt's ``command.json`` decides about where code runs and listens:
    the environment of each worker (``TF_CONFIG``, ``TPU_NAME``, ``TPUCTL_DEVICE``, the coordinator,
    the worker's index...) and which workers run the job. The supervisor pins it in the run's
    entry (field ``launch``) before it writes the command; the attempt runs only a command whose
    digest is the pinned one, so a bucket writer cannot point a job's TensorFlow server, its TPU
    client or its device anywhere (docs/security.md). The attempt number is left out: a command
    that is the same for the next attempt on the same TPU needs no new pin."""
    doc = {"env": command.get("env") or {}, "workers": command.get("workers") or {}}
    return sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


# The fields of a run's record (run.json) that decide where its attempts run and listen: the
# provider and project the launch is planned for (a local plan gives every worker TPUCTL_DEVICE=cpu
# and a TF_CONFIG; the project is where the job's TPU client looks its TPU up), the bucket the hosts
# of a recreated TPU are pointed at, which workers run a program (hosts), the runner's backend (JAX
# runs on every worker) and whether the workdir goes on the job's path (code). The TPU itself (its
# zone, type and addresses) is read from the cloud when each attempt starts, never from run.json.
PLACEMENT_FIELDS = ("cluster", "provider", "project", "bucket", "hosts", "backend", "code")


def placement_digest(record: Any) -> str:
    """The digest of :data:`PLACEMENT_FIELDS` of a run record (a mapping or a RunRecord): what
    ``tpuctl train`` pins with the run (field ``placement``) and what every supervisor compares
    the record it read from the bucket with before it plans an attempt from it. A bucket writer
    who rewrites run.json cannot change where its attempts run or listen (docs/security.md)."""
    get = record.get if isinstance(record, Mapping) else (lambda name: getattr(record, name, None))
    doc = {name: get(name) for name in PLACEMENT_FIELDS}
    return sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=repr).encode())


def manifest(files: Iterable[tuple[str, str]]) -> str:
    """One digest for a directory: its files' relative paths (``/``-separated) and sha256s. An
    added, removed, renamed or changed file changes it."""
    lines = sorted(f"{rel}\0{digest}\n" for rel, digest in files)
    return sha256("".join(lines).encode())


def _fields(raw: Any) -> dict[str, str | None] | None:
    if not isinstance(raw, dict) or len(raw) > 16:
        return None
    out: dict[str, str | None] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            return None
        if value is not None and not (isinstance(value, str) and _VALUE.fullmatch(value)):
            return None
        out[name] = value
    return out


@dataclass(frozen=True)
class Pin:
    """kind -> id -> {field: value}; ``None`` a field pinned as absent (a run without code)."""

    entries: Mapping[str, Mapping[str, Mapping[str, str | None]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | bytes | None) -> Pin:
        """The pin in a metadata value; an empty pin for anything else (nothing is allowed)."""
        try:
            doc = json.loads(text) if text else None
        except (ValueError, UnicodeDecodeError):
            doc = None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            return cls()
        entries: dict[str, dict[str, dict[str, str | None]]] = {}
        for kind in KINDS:
            raw = doc.get(kind)
            if not isinstance(raw, dict):
                continue
            kept = {ident: f for ident, f in ((i, _fields(v)) for i, v in raw.items())
                    if isinstance(ident, str) and _ID.fullmatch(ident) and f is not None}
            entries[kind] = dict(list(kept.items())[-KEEP:])
        return cls(entries)

    def to_text(self) -> str:
        doc: dict[str, Any] = {"version": VERSION}
        doc.update({kind: dict(self.entries.get(kind) or {}) for kind in KINDS if self.entries.get(kind)})
        return json.dumps(doc, separators=(",", ":"))

    def with_entry(self, kind: str, ident: str, fields: Mapping[str, str | None]) -> Pin:
        """This pin with ``ident`` (re)pinned as the newest of its kind; the oldest beyond KEEP go."""
        if kind not in KINDS or not _ID.fullmatch(ident) or _fields(dict(fields)) is None:
            raise ValueError(f"not a pin entry: {kind} {ident!r:.60}")
        entries = {k: dict(v) for k, v in self.entries.items()}
        mine = {i: f for i, f in (entries.get(kind) or {}).items() if i != ident}
        mine[ident] = dict(fields)
        entries[kind] = dict(list(mine.items())[-KEEP:])
        return Pin(entries)

    def entry(self, kind: str, ident: str) -> dict[str, str | None] | None:
        found = (self.entries.get(kind) or {}).get(ident)
        return dict(found) if found is not None else None

    def wheels(self) -> set[str]:
        """Every wheel digest pinned: what a host's bootstrap may install."""
        return {f["wheel"] for kind in self.entries.values() for f in kind.values() if f.get("wheel")}

    def refusal(self, kind: str, ident: str, observed: Mapping[str, str | None] | None = None) -> str | None:
        """Why ``kind`` ``ident`` may not run here (with ``observed`` digests or values), or None."""
        pinned = self.entry(kind, ident)
        if pinned is None:
            return (f"{kind} {ident} is not pinned in this host's metadata ({KEY}); a host runs only what "
                    f"tpuctl train, sweep --detach --host or data --on pinned there")
        for name, value in (observed or {}).items():
            if name not in pinned:
                return f"{kind} {ident} has no pinned {name}"
            if pinned[name] != value:
                return (f"the {name} of {kind} {ident} in the bucket ({_short(value)}) is not the one pinned in "
                        f"this host's metadata ({_short(pinned[name])}): not running it")
        return None


def _short(value: str | None) -> str:
    if value is None:
        return "none"
    return f"sha256 {value[:12]}" if re.fullmatch(r"[0-9a-f]{64}", value) else value


def updated(current: str | None, kind: str, ident: str, fields: Mapping[str, str | None]) -> str:
    """The metadata value ``current`` with the entry added: what a provider writes (compare-and-swap)."""
    return Pin.parse(current).with_entry(kind, ident, fields).to_text()
