"""Job exit codes (DESIGN.md) and which failures are worth a retry.

0: finished. 42: preempted or the infrastructure failed (SIGTERM after a checkpoint, a lost TPU,
a dropped connection): the supervisor restarts from the last checkpoint. 2: the spec cannot run
(found before any training step). Anything else: a bug in the job, retried only within its own
small budget. The same convention as xpk's retry-on-42, so the run can move between tools.
"""

from __future__ import annotations

OK = 0
JOB_ERROR = 1
BAD_SPEC = 2
RETRY = 42

# Substrings of low-level error messages that mean "the TPU or the network went away", for
# errors that TensorFlow reports under a generic class (InternalError, UnknownError).
_LOST_DEVICE_HINTS = (
    "socket closed", "connection reset", "connection refused", "failed to connect",
    "unavailable", "tpu system is not available", "preempt", "heartbeat", "health check",
    "deadline exceeded", "broken pipe", "end of file while reading from the tpu",
)


def is_infrastructure_error(exc: BaseException) -> bool:
    """True for errors that mean the machine, not the job, failed: exit 42, retry elsewhere.

    TensorFlow reports a lost TPU or worker as UnavailableError, AbortedError or
    DeadlineExceededError (and sometimes as Internal/Unknown with a socket message); Python
    reports dropped connections as ConnectionError.
    """
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover - the job side always has TensorFlow
        return False
    if isinstance(exc, (tf.errors.UnavailableError, tf.errors.AbortedError,
                        tf.errors.DeadlineExceededError)):
        return True
    if isinstance(exc, (tf.errors.InternalError, tf.errors.UnknownError)):
        text = str(exc).lower()
        return any(hint in text for hint in _LOST_DEVICE_HINTS)
    return False
