"""YAML from files anyone may have written (job specs, sweep specs), read in bounded memory and time.

PyYAML's safe loader builds no arbitrary objects, but it still follows every alias (a "billion
laughs" bomb multiplies lists through aliases into gigabytes) and composes nested collections by
recursion (30,000 ``[`` exhaust Python's recursion limit). This loader refuses both, in
milliseconds: an alias may only repeat a single value, there are few of them, and nesting stops
at a depth no spec needs. It also reads numbers as people write them: PyYAML follows YAML 1.1,
whose floats need a dot and a signed exponent, so ``1e-4``, ``1E5`` and ``1.0e4`` would be
strings (and a sweep's ``{min: 1e-4, max: 1e-2}`` "not numbers"); here they are floats, as in
YAML 1.2 and JSON, and a quoted ``'1e-4'`` stays a string. The control plane (``provision``) reads sweep specs with it too: it
imports only PyYAML.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_DEPTH = 16          # a spec is key: value lines, a list or a small mapping at most
MAX_ALIASES = 64


class Refused(ValueError):
    """YAML this loader will not build: ``reason`` says why, ``hint`` (if any) how to write it
    instead; the caller knows what its file should look like and says so where there is none."""

    def __init__(self, reason: str, hint: str | None = None):
        super().__init__(reason if hint is None else f"{reason}; {hint}")
        self.reason, self.hint = reason, hint


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            target = self.anchors.get(event.anchor)
            if self._aliases > MAX_ALIASES or (target is not None and not isinstance(target, yaml.ScalarNode)):
                raise Refused(f"uses the alias *{event.anchor} to repeat a list or mapping (or too many aliases)",
                              "write the values out, aliases may only repeat single values")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise Refused(f"nests deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# YAML 1.2's floats with an exponent that YAML 1.1's resolver misses; tried after the int and
# 1.1 float resolvers, so 12 stays an int and 1.5 is read as before.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def load(text: str) -> Any:
    """The document in ``text``. Raises :class:`Refused` (a bomb, deep nesting) or
    ``yaml.YAMLError`` (not YAML)."""
    try:
        return yaml.load(text, Loader=_Loader)  # a bounded SafeLoader: no arbitrary objects
    except RecursionError:
        raise Refused(f"nests deeper than {MAX_DEPTH} levels") from None
