"""The ``--json`` document as text: what ``json.dumps(data, indent=2, sort_keys=True)`` writes, sooner.

With ``indent`` the standard library does not use its C encoder: it walks the document through a
generator per level, a yield per token. A fleet's ``status --json`` (thousands of TPUs and VMs)
spent half a second there. This writer walks the same document once, appending to one list, and
leaves strings to the C escaper the standard library uses itself, so its bytes are the same
(tests/unit/test_jsondoc.py compares them). It accepts what ``json.loads`` returns (dicts with
string keys, lists, strings, numbers, booleans, None); anything else is the standard library's.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii
from typing import Any

INDENT = "  "


class _Other(Exception):
    """A value ``json.loads`` never returns: the standard library writes the document."""


def dumps(data: Any) -> str:
    """``json.dumps(data, indent=2, sort_keys=True)``, byte for byte."""
    out: list[str] = []
    try:
        _write(data, out, "\n")
    except (_Other, TypeError):     # TypeError: keys sorted() cannot order
        return json.dumps(data, indent=2, sort_keys=True)
    return "".join(out)


def _float(value: float) -> str:
    if math.isfinite(value):
        return float.__repr__(value)
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _write(value: Any, out: list[str], newline: str) -> None:
    kind = type(value)
    if kind is str:
        out.append(encode_basestring_ascii(value))
    elif kind is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + INDENT
        sep = "{" + inner
        for key in sorted(value):
            if type(key) is not str:
                raise _Other
            out.append(sep)
            out.append(encode_basestring_ascii(key))
            out.append(": ")
            _write(value[key], out, inner)
            sep = "," + inner
        out.append(newline + "}")
    elif kind is list:
        if not value:
            out.append("[]")
            return
        inner = newline + INDENT
        sep = "[" + inner
        for item in value:
            out.append(sep)
            _write(item, out, inner)
            sep = "," + inner
        out.append(newline + "]")
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(_float(value))
    else:
        raise _Other
