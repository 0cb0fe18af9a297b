"""The errors tpuctl reports, and the exit code each one maps to.

DESIGN.md fixes the exit codes: 0 success, 2 a usage or validation error, 1 a cloud or job
failure. Every error carries a one-line message that names the fix; the CLI prints it as
``tpuctl: error: <message>`` and never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

# no control or terminal escape characters (from a user's value or a cloud's message)
from .text import printable

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class TpuctlError(Exception):
    """Base class: a failure tpuctl understands and can explain in one line."""

    exit_code = EXIT_FAILURE
    # further problems of the same input, one line each, printed after the error's line
    more: tuple[str, ...] = ()

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message}; {self.hint}"
        return printable(" ".join(text.split()))

    def __str__(self) -> str:
        return self.one_line()


class UsageError(TpuctlError):
    """Bad input: found before any resource is created. Exit code 2."""

    exit_code = EXIT_USAGE


class SpecProblems(UsageError):
    """Every problem found in one input (a sweep spec and its job spec), so that it is fixed in
    one round: the most fundamental problem is the error's line, the others follow it, one line
    each (``more``), in the order the caller ranked them. Exit code 2."""

    def __init__(self, problems: Sequence[TpuctlError]):
        first, *rest = problems
        super().__init__(first.message, hint=first.hint)
        self.more = tuple(p.one_line() for p in rest)


class NotFound(TpuctlError):
    """A cluster, run or object that does not exist."""


class UnknownName(NotFound, UsageError):
    """A cluster, run or sweep name typed on the command line that matches nothing: bad input,
    found before anything is created, so exit 2 like any other (``tpuctl status`` lists clusters).
    Exit 1 stays for what the cloud or the job did."""

    exit_code = EXIT_USAGE


class NotAvailable(UsageError):
    """A capability the user asked for that this provider or build does not offer."""


class CloudError(TpuctlError):
    """A provider call failed in a way retries did not fix.

    ``kind`` is the classification from :mod:`provision.cloud.failures` (stockout, quota, permission,
    transient, conflict, ...), which decides what the caller does next.
    """

    def __init__(self, message: str, *, kind: str = "unknown", hint: str | None = None,
                 zone: str | None = None):
        super().__init__(message, hint=hint)
        self.kind = kind
        self.zone = zone


class PartialFailure(TpuctlError):
    """An operation failed halfway; ``remaining`` names what is still billed and how to remove it."""

    def __init__(self, message: str, *, remaining: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.remaining = list(remaining or [])

    def one_line(self) -> str:
        base = super().one_line()
        if not self.remaining:
            return base
        return printable(f"{base}; still exists: {', '.join(self.remaining)}")


class JobFailed(TpuctlError):
    """A training run ended without finishing (budget exhausted, job error)."""
