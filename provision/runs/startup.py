"""A run's startup, broken down: from ``tpuctl train`` to its first attempt's first step, phase by
phase, so that a slow first step says where the time went (pure, no I/O).

SkyPilot's users asked for exactly this (its per-phase startup breakdown: provisioning, setup,
file mounts and the job's start, each timed). tpuctl dates each phase from what it records anyway:

- the run record's ``created_at`` (``train`` made the run) and the ``created`` event (it is staged:
  the run's wheels built, its code, spec and the tpuctl wheel in the bucket, the run pinned);
- the ``attempt_started`` event of attempt 1 (the supervisor handed it to the hosts);
- what the attempt wrapper on each host records in its heartbeat and exit record (``startup``,
  :func:`provision.host.agent.run_attempt`): when it began (the host's agent took the attempt up),
  when the spec and workdir were fetched and unpacked, when the run's requirements (its pinned
  wheels) and the checkpoint directory were in place, and when the program started;
- on GCP, each host's bootstrap status (``tpuctl/clusters/<c>/bootstrap/``,
  :mod:`provision.cluster.bootstrap`): when it began installing tpuctl and when it was done;
- the attempt's program start and first step as goodput dates them (:mod:`provision.runs.goodput`).

The phases follow one another (each starts where the one before it ended), so they sum to the
startup; the host bootstrap, which runs on the hosts beside the rest, is shown as the part of a
phase it overlapped ("of which"). A phase whose instants are not recorded says so
(``"recorded": false``), never guessed; a step the attempt did not have (no requirements, no
checkpoint directory) is not listed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..cluster.timing import line, phase

__all__ = ["line", "marks", "phase", "run_startup"]

# the agent's marks (provision.host.agent.run_attempt: its heartbeat's and exit record's ``startup``)
BEGAN, FETCHED, REQUIREMENTS, RESTORE, PROGRAM = "began", "fetched", "requirements", "checkpoint_restore", \
    "program_started"
# phase names, in order
STAGED = "run created to staged"
HANDED = "staged to attempt started"
TAKEN_UP = "attempt started to taken up by the host"
HOST_BOOTSTRAP = "of which host bootstrap (tpuctl installed on the hosts)"
FETCH = "spec and workdir fetched"
WHEELS = "requirements (wheels) installed"
RESTORED = "checkpoint directory restored"
STARTED = "to program start"
BOOTSTRAP_ALL = "attempt started to program start"       # a host that recorded no marks (an older tpuctl)
FIRST_STEP = "program start to first step"
SO_FAR = "program start, no step yet"


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def marks(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One attempt's startup marks over its hosts (each record a host's heartbeat or exit record):
    for each instant the latest host's, since the slowest host holds the attempt back (the
    program of a slice starts only when every host runs it); spans as [earliest start, latest end]."""
    out: dict[str, Any] = {}
    hosts = 0
    for rec in records:
        s = rec.get("startup") if isinstance(rec, Mapping) else None
        if not isinstance(s, Mapping):
            continue
        hosts += 1
        for key in (BEGAN, FETCHED, PROGRAM):
            t = _num(s.get(key))
            if t is not None:
                out[key] = max(out.get(key, t), t)
        for key in (REQUIREMENTS, RESTORE):
            span = s.get(key)
            if isinstance(span, list) and len(span) == 2 and all(_num(x) is not None for x in span) \
                    and span[0] <= span[1]:
                a, b = float(span[0]), float(span[1])
                old = out.get(key)
                out[key] = [min(old[0], a), max(old[1], b)] if old else [a, b]
    if hosts:
        out["hosts"] = hosts
    return out


def _bootstrap(hosts: Iterable[Mapping[str, Any]] | None, lo: float, hi: float) -> tuple[float, float] | None:
    """The span of the TPU hosts' (workers') tpuctl install, from its bootstrap statuses, cut to
    [lo, hi]; None when none ran in it."""
    spans = []
    for h in hosts or []:
        if not isinstance(h, Mapping) or h.get("role") != "worker" or h.get("state") != "ok":
            continue
        a, b = _num(h.get("installing")), _num(h.get("time"))
        if a is not None and b is not None and a <= b:
            spans.append((a, b))
    if not spans:
        return None
    a, b = max(lo, min(s[0] for s in spans)), min(hi, max(s[1] for s in spans))
    return (a, b) if b > a else None


def run_startup(record: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *,
                program_started_at: float | None, first_step_at: float | None,
                agent: Mapping[str, Any] | None = None, hosts: Iterable[Mapping[str, Any]] | None = None,
                now: float | None = None) -> dict[str, Any] | None:
    """The first attempt's startup by phase, from the run's creation to its first step.

    ``program_started_at`` and ``first_step_at``: attempt 1's, as goodput dates them (None: not
    recorded, or not reached yet); ``agent``: its hosts' marks (:func:`marks`); ``hosts``: the
    hosts' bootstrap statuses (``HostBootstrap.to_dict``: ``role``, ``state``, ``installing``,
    ``time``). None before attempt 1 started."""
    created = _num(record.get("created_at"))
    evs = sorted((e for e in events if isinstance(e, Mapping) and _num(e.get("time")) is not None),
                 key=lambda e: float(e["time"]))
    started = next((float(e["time"]) for e in evs if e.get("event") == "attempt_started"
                    and e.get("attempt") in (1, None)), None)
    if created is None or started is None:
        return None
    staged = next((float(e["time"]) for e in evs if e.get("event") == "created"), None)
    staged = staged if staged is not None and created <= staged <= started else None
    agent = agent or {}
    end = first_step_at if first_step_at is not None and first_step_at >= started else None
    program = _num(agent.get(PROGRAM))
    if program is None or not started <= program <= (end if end is not None else math.inf):
        program = program_started_at if program_started_at is not None and program_started_at >= started else None

    phases = [phase(STAGED, created, staged), phase(HANDED, staged, started)]
    if staged is None:
        phases = [phase("run created to attempt started", created, started)]
    began = _num(agent.get(BEGAN))
    if began is not None and started <= began and (program is None or began <= program):
        phases.append(phase(TAKEN_UP, started, began))
        boot = _bootstrap(hosts, started, began)
        if boot is not None:
            phases.append(phase(HOST_BOOTSTRAP, *boot, part_of=TAKEN_UP))
        cursor = began
        for name, at in ((FETCH, _num(agent.get(FETCHED))),
                         (WHEELS, (agent.get(REQUIREMENTS) or [None, None])[1]),
                         (RESTORED, (agent.get(RESTORE) or [None, None])[1])):
            at = _num(at)
            if at is None or at < cursor or (program is not None and at > program):
                continue
            phases.append(phase(name, cursor, at))
            cursor = at
        phases.append(phase(STARTED, cursor, program))
    else:
        phases.append(phase(BOOTSTRAP_ALL, started, program))
        boot = _bootstrap(hosts, started, program if program is not None else started)
        if boot is not None:
            phases.append(phase(HOST_BOOTSTRAP, *boot, part_of=BOOTSTRAP_ALL))
    if end is not None or now is None or program is None:
        phases.append(phase(FIRST_STEP, program, end))
    else:
        phases.append(phase(SO_FAR, program, max(program, now), live=True))
    chain = [p for p in phases if "part_of" not in p]
    total = end - created if end is not None and all(p["recorded"] for p in chain) else None
    timed = [p for p in chain if p["recorded"]]
    slowest = max(timed, key=lambda p: p["seconds"])["phase"] if timed else None
    return {"attempt": 1, "from": round(created, 3), "first_step_at": round(end, 3) if end is not None else None,
            "seconds": round(total, 3) if total is not None else None,
            "to_first_step_s": round(end - created, 3) if end is not None else None,
            "slowest": slowest, "hosts": agent.get("hosts"), "phases": phases}
