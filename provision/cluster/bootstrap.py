"""What each host of a cluster said about its bootstrap (``templates/host-startup.sh``).

Every host (the host VM, each TPU VM worker) writes one object per boot to
``tpuctl/clusters/<cluster>/bootstrap/<role>-<worker>.json`` in the cluster's bucket: state
``installing``, ``ok`` or ``failed`` (the script has stopped; nothing will run on that host until it
reboots), the step, a message, the last lines of its log, when the script started, when it began
installing tpuctl (``installing``) and when it wrote the status (``time``; for ``ok``, when tpuctl
was installed): a run's startup says how long the install held its first attempt back. ``tpuctl train`` stops waiting for an
agent that will never come, and ``tpuctl status`` says why; see docs/reliability.md#host-bootstrap.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..basics.text import printable

PREFIX = "tpuctl/clusters/{cluster}/bootstrap/"


@dataclass(frozen=True)
class HostBootstrap:
    role: str
    worker: str
    host: str
    state: str
    step: str
    message: str
    started: float | None
    time: float | None
    log_tail: tuple[str, ...] = field(default=())
    installing: float | None = None     # when it began installing tpuctl (the wheel pinned, found): a run's startup

    @property
    def who(self) -> str:
        return f"{self.role}-{self.worker}" if self.role == "worker" else f"{self.role} {self.host or self.worker}"

    def line(self) -> str:
        """One line for a terminal: the status is a bucket object anyone with write access to the
        bucket could have written, so no escape sequence of it reaches the screen."""
        return printable(f"host bootstrap failed: {self.who} at {self.step}: {self.message}")

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "worker": self.worker, "host": self.host, "state": self.state, "step": self.step,
                "message": self.message, "started": self.started, "installing": self.installing, "time": self.time,
                "log_tail": list(self.log_tail)}


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def parse(data: Any) -> HostBootstrap | None:
    """One status object, or None for anything that is not one (a foreign or half-written object)."""
    if not isinstance(data, dict) or data.get("state") not in ("installing", "ok", "failed"):
        return None
    tail = data.get("log_tail")
    return HostBootstrap(role=str(data.get("role") or "?"), worker=str(data.get("worker") or "?"),
                         host=str(data.get("host") or ""), state=data["state"], step=str(data.get("step") or "?"),
                         message=" ".join(str(data.get("message") or "").split())[:400],
                         started=_epoch(data.get("started")), time=_epoch(data.get("time")),
                         log_tail=tuple(str(x) for x in tail[-40:]) if isinstance(tail, list) else (),
                         installing=_epoch(data.get("installing")))


def read(bucket: Any, cluster: str) -> list[HostBootstrap]:
    """Every host's latest status; an unreadable object is skipped, never fatal."""
    out = []
    for info in bucket.list(PREFIX.format(cluster=cluster)):
        if not info.name.endswith(".json"):
            continue
        with contextlib.suppress(Exception):
            status = parse(json.loads(bucket.read_bytes(info.name)))
            if status is not None:
                out.append(status)
    return sorted(out, key=lambda s: (s.role, s.worker))


def failed(statuses: list[HostBootstrap], *, workers_since: float | None = None) -> list[HostBootstrap]:
    """The hosts whose bootstrap stopped for good. A worker's status from before its TPU was
    (re)created belongs to an earlier machine; a host VM keeps its status until it reboots."""
    out = []
    for s in statuses:
        if s.state != "failed":
            continue
        if s.role == "worker" and workers_since is not None and (s.started or s.time or 0) < workers_since - 60:
            continue
        out.append(s)
    return out
