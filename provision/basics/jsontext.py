"""JSON text as ``json.dumps(data, indent=2, sort_keys=True)`` writes it, faster, in one pass.

Python's encoder uses its C implementation only without ``indent``; with it, every value goes
through generators (a fleet's 4 MB ``status --json`` took 0.14 s to encode). ``--json`` also
had to become plain JSON first (``json.loads(json.dumps(data, default=...))``) and be redacted
string by string (another walk): three passes over the document and two copies of it.
:func:`dumps_indented` writes the same bytes as those steps in one: it converts what JSON has no
type for as ``json.dumps`` would (``default``, tuples, keys that are numbers), gives every string,
keys included, to ``strings`` (the redaction), and escapes with the C encoder's string escaping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any


def dumps_indented(data: Any, *, default: Callable[[Any], Any] | None = None,
                   strings: Callable[[str], str] | None = None) -> str:
    """``json.dumps(data, indent=2, sort_keys=True)``, byte for byte, of the document that
    ``json.loads(json.dumps(data, default=default))`` reads back with ``strings`` applied to each
    of its strings (keys included, before they are sorted; keys that become equal keep the last
    value, as a dict built from them would). Raises TypeError where ``json.dumps`` would."""
    text: Callable[[str], str] = strings or _same
    out: list[str] = []
    append = out.append

    def key(k: Any) -> str:
        # json.dumps writes a key that is not a string as one (bool before int: it is one)
        if isinstance(k, str):
            return text(str.__str__(k))
        if k is True or k is False or k is None:
            return text({True: "true", False: "false", None: "null"}[k])
        if isinstance(k, float):
            return text(_float(k))
        if isinstance(k, int):
            return text(int.__repr__(k))
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")

    def write(value: Any, newline: str) -> None:
        kind = type(value)
        if kind is str:
            append(encode_basestring_ascii(text(value)))
        elif kind is dict:
            if not value:
                append("{}")
                return
            named = {key(k): v for k, v in value.items()}
            inner = newline + "  "
            sep = "{" + inner
            for k in sorted(named):
                append(sep)
                append(encode_basestring_ascii(k))
                append(": ")
                write(named[k], inner)
                sep = "," + inner
            append(newline + "}")
        elif kind is list or kind is tuple:
            if not value:
                append("[]")
                return
            inner = newline + "  "
            sep = "[" + inner
            for item in value:
                append(sep)
                write(item, inner)
                sep = "," + inner
            append(newline + "]")
        elif value is None:
            append("null")
        elif value is True:
            append("true")
        elif value is False:
            append("false")
        elif kind is int:
            append(int.__repr__(value))
        elif kind is float:
            append(_float(value))
        else:
            write(_plain(value, default), newline)

    write(data, "\n")
    return "".join(out)


def _same(text: str) -> str:
    return text


def _plain(value: Any, default: Callable[[Any], Any] | None) -> Any:
    """What ``json.dumps`` writes in place of a value of a subclass or of no JSON type (an enum
    with a str or int mixin is its str or int; anything else is ``default``'s answer)."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(int.__repr__(value))
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    if default is None:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return default(value)


def _float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)
