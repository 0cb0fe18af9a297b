"""A run's curve as its supervisor saw it: step, loss and metrics at each look, bounded. Pure.

``tpuctl ui`` draws it from run.json (TensorBoard stays the tool for every step's scalars). The
newest points are kept as they came; when the curve is full, every other point of its older half
is dropped, so a run of any length keeps its whole shape in at most ``MAX_POINTS`` points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_POINTS = 300
MAX_METRICS = 12


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def point(progress: Mapping[str, Any]) -> dict[str, Any] | None:
    """The point of a progress record: ``{"t", "step", "loss", "m": {metric: value}}``."""
    step = _num(progress.get("step"))
    if step is None:
        return None
    out: dict[str, Any] = {"t": _num(progress.get("step_time")) or _num(progress.get("time")), "step": int(step)}
    loss = _num(progress.get("loss"))
    if loss is not None:
        out["loss"] = loss
    metrics = progress.get("metrics")
    if isinstance(metrics, Mapping):
        m = {str(k)[:60]: v for k, v in sorted(metrics.items())[:MAX_METRICS] if _num(v) is not None}
        if m:
            out["m"] = m
    return out


def added(curve: list[dict[str, Any]] | None, p: dict[str, Any] | None,
          max_points: int = MAX_POINTS) -> list[dict[str, Any]]:
    """``curve`` with ``p`` appended (a repeat of the last step replaces it), thinned to ``max_points``."""
    out = [c for c in (curve or []) if isinstance(c, dict)]
    if p is None:
        return out
    if out and out[-1].get("step") == p["step"]:
        out[-1] = p
    else:
        out.append(p)
    while len(out) > max_points:
        half = len(out) // 2
        out = out[:half:2] + out[half:]
    return out
