"""A one-line progress bar on stderr: bytes, rate and ETA. Drawn only on a terminal, never with
``--json`` (the caller decides), redrawn at most four times a second by its own thread."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(s: float) -> str:
    s = int(s + 0.5)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def render(done: int, total: int, elapsed: float, width: int = 24) -> str:
    """The bar as text: pure, so its shape is tested without a terminal."""
    frac = 1.0 if total <= 0 else min(1.0, done / total)
    filled = int(frac * width)
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 and total > done else 0.0
    bar = "#" * filled + "-" * (width - filled)
    return (f"[{bar}] {frac * 100:5.1f}% {human_bytes(done)}/{human_bytes(total)} "
            f"{human_bytes(rate)}/s ETA {human_seconds(eta) if rate > 0 else '?'}")


class Progress:
    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None, interval: float = 0.25):
        self.total = total
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = time.monotonic()

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n

    def __enter__(self) -> Progress:  # noqa: PYI034 - Self needs Python 3.11
        self._start = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="tpuctl-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._draw(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def _draw(self, final: bool = False) -> None:
        line = render(min(self.done, self.total), self.total, time.monotonic() - self._start)
        redraw = getattr(self.stream, "redraw", None)      # the output edge's (provision.commands.common)
        if redraw is not None:
            redraw(line + ("\n" if final else ""))
        else:
            self.stream.write("\r" + line + ("\n" if final else ""))
        self.stream.flush()
