"""Errors the job reports in one line, and that map to exit code 2 (fix the spec or the inputs).

Pure Python: :mod:`jobs.spec` (no TensorFlow) raises them too.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

# Every error line of every entry point, the control plane's and the job side's (python -m jobs,
# python -m jobs.bert.predict, the data and SQuAD tools), starts the same way: one prefix to look
# for in a log, whichever program wrote it.
ERROR_PREFIX = "tpuctl: error: "


def report(problem: object) -> None:
    """One error line on stderr, with the common prefix."""
    print(f"{ERROR_PREFIX}{problem}", file=sys.stderr, flush=True)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, whose mistakes are one line with the common prefix (not ``prog: error:`` after a
    usage block), exit 2 as every bad input."""

    def error(self, message: str) -> NoReturn:
        report(f"{message} (see {self.prog} --help)")
        sys.exit(2)


class ConfigError(ValueError):
    """A spec, a file or a model directory that cannot work; ``str()`` is one line naming the fix.

    Raised before the first training step, so the run costs nothing and is not retried.
    """

    def __init__(self, message: str):
        text = " ".join(str(message).split())
        # one line a terminal shows as it is: no control or escape characters from user values
        super().__init__("".join(ch if ch.isprintable() else "?" for ch in text))
