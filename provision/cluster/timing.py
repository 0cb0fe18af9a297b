"""Time by phase, as ``up``, a run's startup and its preemptions show it (pure).

A phase is ``{"phase", "seconds", "from", "to", "recorded": true}``, or ``{"phase", "seconds":
None, "recorded": false}`` when its instants are not recorded (never guessed).
:func:`up_startup` is ``tpuctl up``'s own time by phase, from the instants it records
(``UpResult.marks``, :mod:`provision.cluster.apply`); :func:`line` says any such breakdown in one
line. A run's startup is :mod:`provision.runs.startup`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def phase(name: str, a: float | None, b: float | None, **extra: Any) -> dict[str, Any]:
    """A phase as goodput shows them: its seconds and instants, or ``recorded: false``."""
    if a is None or b is None:
        return {"phase": name, "seconds": None, "recorded": False, **extra}
    return {"phase": name, "seconds": round(max(0.0, b - a), 3), "from": round(a, 3), "to": round(b, 3),
            "recorded": True, **extra}


def up_startup(marks: Mapping[str, Any]) -> dict[str, Any] | None:
    """``tpuctl up``'s own time by phase, from the instants it recorded (``UpResult.marks``): looking
    and planning, deleting a dead TPU, the host VM and the TPU asked for (at once: they overlap), the
    TPU from created to READY, and the rest (records). None when nothing was recorded."""
    began, ended = _num(marks.get("began")), _num(marks.get("ended"))
    if began is None or ended is None:
        return None
    asked = [t for t in (_num(marks.get(k)) for k in ("vm_asked", "tpu_asked", "dead_deleting")) if t is not None]
    phases = [phase("look and plan", began, min(asked) if asked else None) if asked else
              phase("look and plan", began, _num(marks.get("tpu_ready")) or ended)]
    if _num(marks.get("dead_deleting")) is not None:
        phases.append(phase("dead TPU deleted", _num(marks.get("dead_deleting")), _num(marks.get("dead_deleted"))))
    if _num(marks.get("vm_asked")) is not None:
        phases.append(phase("host VM asked for to created", _num(marks["vm_asked"]), _num(marks.get("vm_created")),
                            alongside="the TPU"))
    tries = marks.get("tpu_tries") if isinstance(marks.get("tpu_tries"), int) else 0
    if _num(marks.get("tpu_asked")) is not None:
        phases.append(phase("TPU asked for to created", _num(marks["tpu_asked"]), _num(marks.get("tpu_created")),
                            tries=tries or 1, queued=bool(marks.get("queued")) or None))
        if tries > 1 and _num(marks.get("tpu_asked_last")) is not None:
            phases.append(phase(f"of which failed tries ({tries - 1}: stockout, quota, retries)",
                                _num(marks["tpu_asked"]), _num(marks["tpu_asked_last"]),
                                part_of="TPU asked for to created"))
    created = _num(marks.get("tpu_created"))
    ready = _num(marks.get("tpu_ready"))
    if created is not None:
        phases.append(phase("TPU created to READY", created, ready))
    last = max([t for t in (ready, _num(marks.get("vm_created"))) if t is not None], default=None)
    if last is not None and (asked or created is not None):
        phases.append(phase("ready to done (records)", last, ended))
    timed = [p for p in phases if p["recorded"] and "part_of" not in p]
    return {"from": round(began, 3), "to": round(ended, 3), "seconds": round(ended - began, 3),
            "by": marks.get("by") if isinstance(marks.get("by"), str) else None,
            "adopted": list(marks.get("adopted") or []) or None,
            "slowest": max(timed, key=lambda p: p["seconds"])["phase"] if timed else None, "phases": phases}


def line(s: Mapping[str, Any] | None, *, duration: Any, label: str = "startup") -> str | None:
    """One line: the total, then each recorded phase and its seconds (the overlapping ones said so)."""
    if not s or not s.get("phases"):
        return None
    total = _num(s.get("to_first_step_s") if "to_first_step_s" in s else s.get("seconds"))
    parts = []
    for p in s["phases"] if isinstance(s["phases"], list) else ():
        if not isinstance(p, Mapping) or not isinstance(p.get("phase"), str):
            continue
        if not p.get("recorded") or _num(p.get("seconds")) is None:
            parts.append(f"{p['phase']} not recorded")
            continue
        text = f"{p['phase']} {duration(p['seconds'])}"
        if isinstance(p.get("alongside"), str):
            text += f" (alongside {p['alongside']})"
        tries = p.get("tries")
        if isinstance(tries, int) and tries > 1:
            text += f" ({tries} tries)"
        parts.append(text)
    if not parts:
        return None
    if "to_first_step_s" in s:            # a run's startup: to its first step
        head = f"{label} {duration(total)} to the first step" if total is not None else f"{label} (no first step yet)"
    else:
        head = f"{label} {duration(total)}" if total is not None else label
    adopted = s.get("adopted")
    if isinstance(adopted, list) and adopted:
        parts.append("adopted " + ", ".join(str(a) for a in adopted))
    slow = f"; slowest: {s['slowest']}" if isinstance(s.get("slowest"), str) and len(parts) > 1 else ""
    return f"{head}: " + ", ".join(parts) + slow
