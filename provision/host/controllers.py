"""Which sweep controllers a host VM's agent runs: a pure decision of what it saw in the bucket.

A sweep handed to a host (``tpuctl sweep --detach --host CLUSTER`` on GCP) is a request object in
the bucket. The agent starts the sweep's controller; starts it again when it died while the sweep
is live (``sweep resume`` adopts running trials and never repeats an ended one), but not more
often than every ``restart_after_s`` (a controller that dies at once must not spin); leaves alone a
sweep another live controller holds (someone ran ``sweep resume`` elsewhere); and forgets the
request once the sweep has ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RESTART_AFTER_S = 20.0


@dataclass(frozen=True)
class Seen:
    sweep_id: str
    live: bool | None            # sweep.json says starting/running; False: ended; None: unreadable now
    held_elsewhere: bool         # a live controller that is not this agent's child holds the lease
    running_here: bool           # this agent's controller process for it still runs
    started_at: float | None     # when this agent last started one for it


@dataclass(frozen=True)
class Plan:
    start: tuple[str, ...] = ()
    forget: tuple[str, ...] = ()


def decide(seen: Iterable[Seen], now: float, restart_after_s: float = RESTART_AFTER_S) -> Plan:
    start: list[str] = []
    forget: list[str] = []
    for s in seen:
        if s.live is False:
            forget.append(s.sweep_id)
        elif s.live is None or s.running_here or s.held_elsewhere:
            continue
        elif s.started_at is None or now - s.started_at >= restart_after_s:
            start.append(s.sweep_id)
    return Plan(start=tuple(start), forget=tuple(forget))
