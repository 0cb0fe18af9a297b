"""Whether a run is stalled: its TPU bills, its job runs, and no new step came for too long. Pure.

A stall is said once per step it is stuck at (the supervisor writes a ``stalled`` event, which
the notifier tells); a new step, a new attempt or a TPU that stops billing ends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def since_progress(progress: Mapping[str, Any] | None, attempt_started_at: float | None) -> float | None:
    """When the job last moved: its last step's time, or the attempt's start if that is later
    (a restarted job gets its full allowance to load and compile)."""
    p = progress if isinstance(progress, Mapping) else {}
    step_time = p.get("step_time")
    times = [t for t in (step_time, attempt_started_at)
             if isinstance(t, (int, float)) and not isinstance(t, bool)]
    return max(times) if times else None


def stalled(*, now: float, last_moved: float | None, job_running: bool, tpu_billing: bool,
            stall_after: float | None) -> float | None:
    """Seconds without progress if the run is stalled (past ``stall_after``), else None."""
    if not stall_after or not job_running or not tpu_billing or last_moved is None:
        return None
    quiet = now - last_moved
    return quiet if quiet >= stall_after else None
