"""SIGTERM (and Ctrl-C) turn into "checkpoint now, then exit 42", even mid host loop.

Python runs signal handlers only when the main thread is between bytecodes, and during a host
loop the main thread sits inside one TensorFlow call for up to ``steps_per_execution`` steps.
So besides the ordinary handler we register a wake-up fd: the C-level handler writes the signal
number to it immediately, a small thread wakes up and runs the callbacks, and the runner's
callback sets a ``tf.Variable`` that the training loop checks before every step. The loop then
ends after the step in flight, the main thread saves a checkpoint at that step and exits 42 --
well within the 30 s a preemptible VM gets.

Outside the training loop (connecting to the TPU, reading data, building the model) there is
nothing new to save and the main thread may be blocked in a C++ call for a long time, so a
signal there ends the process at once: ``on_immediate_exit`` callbacks run (the runner records
``status: preempted``) and the process exits 42 from the watcher thread.

A second Ctrl-C is an ordinary KeyboardInterrupt, for a person who does not want to wait.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignal:
    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signum: int | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._previous: dict[int, object] = {}
        self._previous_fd: int | None = None
        self._pipe: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self.graceful = False  # True while the training loop can stop and checkpoint
        self.on_immediate_exit: Callable[[], None] | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "signal"

    def on_request(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self.requested.is_set():
            callback()

    def install(self) -> StopSignal:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals can only be handled in the main thread; nothing to do
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="stop-signal", daemon=True)
        self._thread.start()
        return self

    def reclaim(self) -> None:
        """Take SIGTERM and SIGINT back after TensorFlow joined a cluster: MultiWorkerMirroredStrategy
        starts TF's own preemption notifier, whose C handler replaces ours (``preemption_notifier.cc:
        SIGTERM caught``), and a worker told to stop trained on to the end and exited 0."""
        if self._pipe is None or threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            signal.signal(signum, self._handle)
        signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.requested.is_set():
            raise KeyboardInterrupt
        self._request(signum)

    def _request(self, signum: int) -> None:
        first = not self.requested.is_set()
        self.signum = self.signum or signum
        self.requested.set()
        if first:
            for callback in list(self._callbacks):
                try:
                    callback()
                except Exception as exc:  # noqa: BLE001 - must never kill the watcher
                    print(f"jobs: warning: stop callback failed: {exc}", file=sys.stderr)

    def _watch(self) -> None:
        assert self._pipe is not None
        read_fd = self._pipe[0]
        while not self._closing:
            ready, _, _ = select.select([read_fd], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            for byte in data:
                if byte in (int(s) for s in SIGNALS):
                    self._request(byte)
                    if not self.graceful:
                        self._exit_now()

    def _exit_now(self) -> None:
        if self.on_immediate_exit is not None:
            try:
                self.on_immediate_exit()
            except Exception as exc:  # noqa: BLE001 - exiting regardless
                print(f"jobs: warning: {exc}", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        from ..quiet import drain

        drain()  # what the start-up filter still holds reaches the log before the process ends
        os._exit(42)

    def uninstall(self) -> None:
        if self._pipe is None:
            return
        self._closing = True
        signal.set_wakeup_fd(self._previous_fd if self._previous_fd is not None else -1)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._thread is not None:
            self._thread.join(timeout=2)
        for fd in self._pipe:
            os.close(fd)
        self._pipe = None
