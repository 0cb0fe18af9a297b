"""Errors the job reports in one line, and that map to exit code 2 (fix the spec or the inputs).

Pure Python: :mod:`jobs.spec` (no TensorFlow) raises them too.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A spec, a file or a model directory that cannot work; ``str()`` is one line naming the fix.

    Raised before the first training step, so the run costs nothing and is not retried.
    """

    def __init__(self, message: str):
        text = " ".join(str(message).split())
        # one line a terminal shows as it is: no control or escape characters from user values
        super().__init__("".join(ch if ch.isprintable() else "?" for ch in text))
