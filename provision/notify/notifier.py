"""Delivering in the background: a notice never blocks nor fails what it is about.

:meth:`Notifier.notice` takes a notice, passes it through the rate limit and queues it; one
daemon thread sends each queued notice on every channel, retrying with backoff
(:class:`provision.notify.policy.Retry`), and records each outcome through ``record``
(``notify_sent`` or ``notify_failed`` with the reason, in the run's events). Nothing here raises
to the caller: a channel whose secret cannot be read, a receiver that is down, a bucket that
cannot take the record are each a line of the log at most. :meth:`close` gives the last notices
(a run's ``finished``) a bounded time to go out before the process ends.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from ..basics.redact import redact
from .channels import DeliveryError, send
from .messages import Notice, RunContext, notice_for
from .policy import RateLimit
from .secrets import Secret, SecretUnavailable, read
from .settings import Channel, Settings

Record = Callable[..., Any]
CLOSE_TIMEOUT_S = 60.0


class Notifier:
    def __init__(self, settings: Settings, *, record: Record | None = None, log: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time, rand: Callable[[], float] = random.random,
                 sender: Callable[[Channel, Secret, Notice], None] = send,
                 secrets: Callable[[Channel], Secret] = read):
        self.settings = settings
        self._record = record
        self._log = log or (lambda _m: None)
        self._clock = clock
        self._rand = rand
        self._send = sender
        self._read_secret = secrets
        self._limit = RateLimit(window=settings.rate_limit_s)
        self._lock = threading.Lock()
        self._queue: queue.Queue[Notice | None] = queue.Queue()
        self._secrets: dict[str, Secret] = {}
        self._closing = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None

    @property
    def stall_after_s(self) -> float:
        return self.settings.stall_after_s

    # ---- what callers use ------------------------------------------------------------------------
    def run_event(self, entry: dict[str, Any], rec: Any) -> None:
        """One of a run's events as the supervisor wrote it; ``rec`` the run record (a RunRecord)."""
        try:
            ctx = RunContext(run_id=str(rec.run_id), cluster=str(getattr(rec, "cluster", "") or ""),
                             job=str(getattr(rec, "job", "") or ""),
                             num_train_steps=getattr(rec, "num_train_steps", None),
                             last_progress=getattr(rec, "last_progress", None),
                             preemptions=int(getattr(rec, "preemptions", 0) or 0),
                             seconds_lost=float(getattr(rec, "seconds_lost", 0.0) or 0.0),
                             steps_lost=int(getattr(rec, "steps_lost", 0) or 0))
            notice = notice_for(entry, ctx)
        except Exception as exc:  # noqa: BLE001 - a notice is never worth a run
            self._log(f"notify: cannot word event {entry.get('event')!r}: {type(exc).__name__}")
            return
        if notice is not None:
            self.notice(notice)

    def notice(self, notice: Notice) -> None:
        """Queue ``notice`` (unless its kind is not wanted, or the rate limit holds it)."""
        if not self.settings.channels or (notice.kind != "test" and not self.settings.wants(notice.kind)):
            return
        with self._lock:
            out = self._limit.offer(notice, self._clock())
            if out is not None:
                self._idle.clear()
                self._queue.put(out)
            self._ensure_thread()

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Send what the rate limit still holds, and wait up to ``timeout`` s for the queue to
        empty; True if everything went out (or failed for good) in time."""
        with self._lock:
            for held in self._limit.due(float("inf")):
                self._idle.clear()
                self._queue.put(held)
            if self._thread is None:
                return True
        self._closing.set()
        self._queue.put(None)
        done = self._idle.wait(timeout)
        if not done:
            self._log(f"notify: notices still unsent after {timeout:.0f}s; not waiting longer")
        return done

    # ---- the delivery thread ---------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="tpuctl-notify", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                due_at = self._limit.next_due()
            wait = None if due_at is None else max(0.0, due_at - self._clock())
            try:
                item = self._queue.get(timeout=min(wait, 5.0) if wait is not None else 5.0)
            except queue.Empty:
                item = None
            with self._lock:
                for held in self._limit.due(self._clock()):
                    self._idle.clear()
                    self._queue.put(held)
            if item is not None:
                for channel in self.settings.channels:
                    self._deliver(channel, item)
            with self._lock:
                if self._queue.empty():
                    self._idle.set()
                    if self._closing.is_set() and self._limit.next_due() is None:
                        return

    def _deliver(self, channel: Channel, notice: Notice) -> None:
        tries = 0
        while True:
            tries += 1
            try:
                secret = self._secret(channel)
                self._send(channel, secret, notice)
            except SecretUnavailable as exc:
                self._outcome("notify_failed", channel, notice, tries, exc.one_line())
                return
            except DeliveryError as exc:
                delay = self.settings.retry.delay(tries, self._rand()) if exc.retriable else None
                if delay is None:
                    self._outcome("notify_failed", channel, notice, tries, exc.reason)
                    return
                self._log(f"notify: {channel.name} ({channel.kind}) failed: {exc.reason}; "
                          f"retrying in {delay:.1f}s")
                time.sleep(delay)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever else: recorded, never raised
                self._outcome("notify_failed", channel, notice, tries, f"internal error {type(exc).__name__}")
                return
            self._outcome("notify_sent", channel, notice, tries, None)
            return

    def _secret(self, channel: Channel) -> Secret:
        cached = self._secrets.get(channel.name)
        if cached is None:
            cached = self._secrets[channel.name] = self._read_secret(channel)
        return cached

    def _outcome(self, kind: str, channel: Channel, notice: Notice, tries: int, error: str | None) -> None:
        data: dict[str, Any] = {"channel": channel.name, "via": channel.kind, "notice": notice.kind,
                                "subject": notice.subject, "tries": tries}
        if notice.held:
            data["held_back"] = notice.held
        if error:
            data["error"] = redact(error)
        line = f"notify: {'sent' if kind == 'notify_sent' else 'could not send'} {notice.kind} to {channel.name}" \
               + (f" after {tries} tries" if tries > 1 else "") + (f": {data['error']}" if error else "")
        self._log(line)
        if self._record is not None:
            with contextlib.suppress(Exception):
                self._record(kind, **data)
