"""Waiting on long-running operations: several at once, with capped exponential backoff.

The cap bounds how late tpuctl notices a finished operation: ``up`` must finish within two
seconds of its slower resource, start-up and planning included, so an operation may be noticed
at most 0.75 s late. The growth up to the cap keeps short waits cheap; a 5-minute TPU create
costs about 400 polls (1.3 QPS), well inside the Cloud TPU API's per-project limits.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .base import Operation, Provider


@dataclass(frozen=True)
class Backoff:
    initial: float = 0.25
    factor: float = 1.6
    cap: float = 0.75
    jitter: float = 0.1

    def delays(self):
        d = self.initial
        while True:
            yield d * (1 + random.uniform(-self.jitter, self.jitter))
            d = min(self.cap, d * self.factor)


DEFAULT_BACKOFF = Backoff()


class OperationTimeout(Exception):
    def __init__(self, pending: list[Operation]):
        super().__init__(", ".join(op.describe() for op in pending))
        self.pending = pending


def wait_all(provider: Provider, ops: Sequence[Operation], *, timeout: float,
             on_done: Callable[[Operation], None] | None = None,
             backoff: Backoff = DEFAULT_BACKOFF) -> list[Operation]:
    """Poll until every operation is done; call ``on_done`` as each finishes, in finishing order."""
    pending = [op for op in ops if not op.done]
    for op in ops:
        if op.done and on_done:
            on_done(op)
    deadline = time.monotonic() + timeout
    delays = backoff.delays()
    while pending:
        still = []
        for op in pending:
            op = provider.poll(op)
            if op.done:
                if on_done:
                    on_done(op)
            else:
                still.append(op)
        pending = still
        if not pending:
            break
        if time.monotonic() >= deadline:
            raise OperationTimeout(pending)
        time.sleep(min(next(delays), max(0.0, deadline - time.monotonic())))
    return list(ops)


def wait_until(check: Callable[[], bool], *, timeout: float, backoff: Backoff = DEFAULT_BACKOFF) -> bool:
    """Poll ``check`` until it returns True or ``timeout`` passes; returns the last result."""
    deadline = time.monotonic() + timeout
    delays = backoff.delays()
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(next(delays), max(0.0, deadline - time.monotonic())))
