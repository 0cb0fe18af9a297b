"""This host's pin (:mod:`provision.runs.pins`), read where bucket writers cannot write.

:func:`provision.runs.pinning.read_host_pin` reads it from the metadata server (the local
provider: its metadata file). The agent asks on every pass, so it is cached for :data:`TTL_S`
and read again at once when it does not name what the bucket asks for: work pinned since the
last read starts without waiting. Each refusal is logged once, not on every pass.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from ..runs.pinning import read_host_pin
from ..runs.pins import Pin

TTL_S = 60.0


class HostPin:
    """The pin of this host, cached (see the module docstring)."""

    def __init__(self, provider: str, cluster: str, *, ttl_s: float = TTL_S):
        self.provider, self.cluster, self.ttl_s = provider, cluster, ttl_s
        self._pin: Pin | None = None
        self._read_at = 0.0
        self._reported: set[str] = set()

    def get(self, *, fresh: bool = False) -> Pin:
        now = time.monotonic()
        if fresh or self._pin is None or now - self._read_at >= self.ttl_s:
            self._pin, self._read_at = read_host_pin(self.provider, self.cluster), now
        return self._pin

    def refusal(self, kind: str, ident: str, observed: Mapping[str, str | None] | None = None) -> str | None:
        """Why ``kind`` ``ident`` (with these digests) may not run here, or None; a refusal is
        checked once more against a fresh read before it stands."""
        reason = self.get().refusal(kind, ident, observed)
        if reason is not None:
            reason = self.get(fresh=True).refusal(kind, ident, observed)
        return reason

    def entry(self, kind: str, ident: str) -> dict[str, str | None] | None:
        return self.get().entry(kind, ident) or self.get(fresh=True).entry(kind, ident)

    def report_once(self, key: str, reason: str) -> bool:
        """Log a refusal on the agent's stderr the first time it happens; True that first time."""
        if key in self._reported:
            return False
        self._reported.add(key)
        print(f"tpuctl agent: refused {key}: {reason}", file=sys.stderr, flush=True)
        return True
