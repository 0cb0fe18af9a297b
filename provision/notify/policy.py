"""When to try a delivery again, and when to hold a notice back: pure, on any clock.

Retries: a failed delivery is tried again after ``base``, ``2*base``, ``4*base`` ... seconds (at
most ``cap``), each delay jittered to between half and all of it so that many hosts failing
together do not retry together, until ``attempts`` tries are spent. Some failures are not worth
another try (a 4xx other than 408 and 429: the URL or the credentials are wrong).

Rate limit: a preemption storm is not a page storm. Per subject (a run, a sweep, a cluster) and
kind, the first notice in a window of ``window`` seconds goes out at once; later ones are held,
and when the window ends the newest held one goes out, saying how many it stands for. Notices
that end something (a run finished or failed, a budget stop, a sweep's end) are never held.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .messages import Notice


@dataclass(frozen=True)
class Retry:
    attempts: int = 5
    base: float = 2.0
    cap: float = 60.0

    def delay(self, failed: int, rand: float) -> float | None:
        """Seconds to wait after the ``failed``-th failed try (1-based), or None: give up.
        ``rand`` in [0, 1) picks the jitter."""
        if failed >= self.attempts:
            return None
        full = min(self.cap, self.base * (2 ** (failed - 1)))
        return full * (0.5 + 0.5 * rand)


def retriable_status(status: int) -> bool:
    """An HTTP answer worth another try: the receiver's trouble (5xx), a timeout, or too many requests."""
    return status >= 500 or status in (408, 425, 429)


@dataclass
class _Window:
    opened: float
    held: Notice | None = None
    count: int = 0


@dataclass
class RateLimit:
    """Per (subject, kind): at most one notice per ``window`` seconds, the rest summed up."""

    window: float = 600.0
    _windows: dict[tuple[str, str], _Window] = field(default_factory=dict)

    def offer(self, notice: Notice, now: float) -> Notice | None:
        """The notice to send now, or None if it is held (:meth:`due` lets it out later)."""
        if notice.final or self.window <= 0:
            return notice
        key = (notice.subject, notice.kind)
        w = self._windows.get(key)
        if w is None or now - w.opened >= self.window:
            if w is not None and w.held is not None:
                # a window ended with notices held and nobody asked: this one stands for them too
                notice = dataclasses.replace(notice, held=notice.held + w.count)
            self._windows[key] = _Window(opened=now)
            return notice
        w.held, w.count = notice, w.count + 1
        return None

    def due(self, now: float) -> list[Notice]:
        """Held notices whose window has ended: the newest of each, standing for the others."""
        out = []
        for key, w in list(self._windows.items()):
            if now - w.opened < self.window:
                continue
            if w.held is not None:
                out.append(dataclasses.replace(w.held, held=w.count - 1))
                self._windows[key] = _Window(opened=now)
            else:
                del self._windows[key]
        return out

    def next_due(self) -> float | None:
        """When the earliest window with held notices ends (None: nothing held)."""
        ends = [w.opened + self.window for w in self._windows.values() if w.held is not None]
        return min(ends) if ends else None
