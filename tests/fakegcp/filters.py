"""Compute Engine's ``filter`` list parameter, enough of it for tpuctl and gcloud.

Supported: ``field = value`` (``*`` wildcards), ``!=``, ``:`` (has; ``labels.k:*``), the legacy
regex forms ``field eq RE`` / ``field ne RE``, ``NOT``/``-``, parentheses, ``AND`` (or juxtaposition)
and ``OR`` (which binds tighter than AND, as in Google's filter grammar). Fields are dotted paths
into the resource's JSON (``labels.tpuctl-cluster``, ``status``, ``name``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from .errors import ApiError

_TOKEN = re.compile(r'\s*(?:(\()|(\))|(!=|=|:|<=|>=|<|>)|"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([^\s()=!:<>"\']+))')

Predicate = Callable[[dict[str, Any]], bool]


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ApiError(3, f"Invalid value for field 'filter': '{text}'. Invalid list filter "
                              "expression.", compute_reason="invalid")
        pos = m.end()
        lp, rp, op, dq, sq, word = m.groups()
        if lp:
            out.append(("(", lp))
        elif rp:
            out.append((")", rp))
        elif op:
            out.append(("op", op))
        elif dq is not None:
            out.append(("str", dq.replace('\\"', '"')))
        elif sq is not None:
            out.append(("str", sq))
        else:
            out.append(("word", word))
    return out


def _lookup(resource: dict[str, Any], path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.roots: set[str] = set()

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise self.error()
        self.i += 1
        return tok

    def error(self) -> ApiError:
        return ApiError(3, f"Invalid value for field 'filter': '{self.text}'. Invalid list filter "
                           "expression.", compute_reason="invalid")

    def value(self) -> str:
        kind, text = self.take()
        if kind not in ("word", "str"):
            raise self.error()
        return text

    def parse(self) -> Predicate:
        pred = self.sequence()
        if self.peek() is not None:
            raise self.error()
        return pred

    def sequence(self) -> Predicate:
        parts = [self.disjunction()]
        while (tok := self.peek()) is not None and tok[0] != ")":
            if tok == ("word", "AND"):
                self.take()
            parts.append(self.disjunction())
        return lambda r: all(p(r) for p in parts)

    def disjunction(self) -> Predicate:
        parts = [self.unit()]
        while self.peek() == ("word", "OR"):
            self.take()
            parts.append(self.unit())
        return lambda r: any(p(r) for p in parts)

    def unit(self) -> Predicate:
        tok = self.take()
        if tok == ("word", "NOT"):
            inner = self.unit()
            return lambda r: not inner(r)
        if tok[0] == "(":
            inner = self.sequence()
            if self.take()[0] != ")":
                raise self.error()
            return inner
        if tok[0] != "word":
            raise self.error()
        field = tok[1]
        negate = field.startswith("-")
        field = field.lstrip("-")
        self.roots.add(field.split(".")[0])
        op_tok = self.take()
        op = op_tok[1]
        if op_tok[0] == "word" and op in ("eq", "ne"):
            pattern = self.value()
            try:
                rx = re.compile(pattern)
            except re.error:
                raise self.error() from None
            want = op == "eq"
            pred: Predicate = lambda r: (
                (v := _lookup(r, field)) is not None and bool(rx.fullmatch(_text(v)))) == want
        elif op_tok[0] == "op":
            pred = _compare(field, op, self.value())
        else:
            raise self.error()
        return (lambda r: not pred(r)) if negate else pred


def _compare(field: str, op: str, value: str) -> Predicate:
    def match(actual: Any) -> bool:
        if actual is None:
            return False
        if isinstance(actual, list):
            return any(match(a) for a in actual)
        text = _text(actual)
        if "*" in value:
            return fnmatch.fnmatchcase(text, value)
        return text == value

    if op == "=":
        return lambda r: match(_lookup(r, field))
    if op == "!=":
        return lambda r: not match(_lookup(r, field))
    if op == ":":
        if value == "*":
            return lambda r: _lookup(r, field) is not None
        return lambda r: match(_lookup(r, field)) or value in _text(_lookup(r, field) or "")

    def ordered(r: dict[str, Any]) -> bool:
        actual = _lookup(r, field)
        if actual is None:
            return False
        a, b = _text(actual), value
        try:
            a, b = float(a), float(b)  # type: ignore[assignment]
        except ValueError:
            pass
        return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]  # type: ignore[operator]

    return ordered


def compile_filter(text: str | None) -> Predicate:
    return compile_with_roots(text)[0]


def compile_with_roots(text: str | None) -> tuple[Predicate, frozenset[str]]:
    """The predicate and the top-level fields it reads (``labels`` of ``labels.k = v``): a list
    whose filter reads only fields a resource's cheap probe carries can skip rendering the rest."""
    if not text or not text.strip():
        return (lambda r: True), frozenset()
    parser = _Parser(text)
    pred = parser.parse()
    return pred, frozenset(parser.roots)
