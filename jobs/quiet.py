"""Keep TensorFlow's C++ start-up chatter out of the user's terminal.

TensorFlow 2.17+ logs through absl before ``absl::InitializeLog()`` is called, so lines such as
``WARNING: All log messages before absl::InitializeLog() is called are written to STDERR``,
``I0000 ... cudart_stub.cc:31] Could not find cuda drivers`` and, on a machine without a GPU,
``E0000 ... failed call to cuInit: ... (303)`` reach stderr whatever ``TF_CPP_MIN_LOG_LEVEL`` says
(tensorflow/tensorflow#100442). They come from C++ straight onto file descriptor 2, so the only
place to drop them is that descriptor: :func:`quiet_tensorflow` routes fd 2 through a thread that
drops those lines (every INFO/WARNING line in TensorFlow's C++ formats, and the ERROR lines of
the known GPU-probe noise) and passes everything else through unchanged, as it comes.

Nothing is filtered when the user asked for TensorFlow's logs: ``--verbose`` on the entry point,
or ``TF_CPP_MIN_LOG_LEVEL`` set in the environment by the user. Imports no TensorFlow.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import threading

# absl/glog format: ``I0000 00:00:1795540508.383467   10082 port.cc:153] ...``; TensorFlow's
# older tsl format: ``2025-09-17 14:44:05.157831: I external/.../cudart_stub.cc:32] ...``.
_NATIVE_LINE = re.compile(rb"^(?:([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |"
                          rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) )[\w./-]+:\d+\] ")
_ABSL_PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# ERROR lines that only say "there is no GPU here" (or that a CUDA plugin registered twice).
_GPU_PROBE_ERRORS = (b"failed call to cuInit", b"Unable to register cuDNN factory",
                     b"Unable to register cuFFT factory", b"Unable to register cuBLAS factory",
                     b"could not retrieve CUDA device count")

_active: dict[str, object] = {}


def is_noise(line: bytes, keep_warnings: bool = False) -> bool:
    """Whether a stderr line is TensorFlow start-up chatter rather than something to read
    (``keep_warnings``: C++ WARNING lines other than the GPU probe's are kept)."""
    if line.rstrip(b"\r\n") == _ABSL_PREAMBLE:
        return True
    match = _NATIVE_LINE.match(line)
    if not match:
        return False
    level = match.group(1) or match.group(2)
    if level == b"I" or (level == b"W" and not keep_warnings):
        return True
    return level in (b"W", b"E") and any(marker in line for marker in _GPU_PROBE_ERRORS)


def wanted(verbose: bool = False, environ: dict | None = None) -> bool:
    """Filter unless the user asked for TensorFlow's own logs."""
    env = os.environ if environ is None else environ
    return not verbose and "TF_CPP_MIN_LOG_LEVEL" not in env


def quiet_tensorflow(verbose: bool = False, keep_warnings: bool = False) -> None:
    """Call before TensorFlow is imported: from then on fd 2 drops TensorFlow's start-up noise."""
    if not wanted(verbose) or _active:
        return
    try:
        original = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:
        return
    os.dup2(write_end, 2)
    os.close(write_end)
    thread = threading.Thread(target=_pump, args=(read_end, original, keep_warnings), name="tf-stderr-filter", daemon=True)
    thread.start()
    _active.update(original=original, thread=thread)
    atexit.register(drain)


def _pump(read_end: int, out: int, keep_warnings: bool) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        pending = b""
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not is_noise(line, keep_warnings):
                    _write(out, line + b"\n")
        if pending and not is_noise(pending, keep_warnings):
            _write(out, pending)


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


def drain() -> None:
    """At exit (also before an ``os._exit``): give fd 2 back and let the filter pass on what is
    still in the pipe, so a last line before exiting is not lost."""
    import sys

    original, thread = _active.get("original"), _active.get("thread")
    if original is None:
        return
    with contextlib.suppress(Exception):  # a closed stderr at exit is nothing to report
        sys.stderr.flush()
    os.dup2(original, 2)  # closes our last write end of the pipe (children may still hold theirs)
    thread.join(timeout=2.0)
    _active.clear()
