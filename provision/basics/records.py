"""The one gate for records read from a bucket (run.json, events.jsonl lines, a sweep's and its
trials' records, progress.json, a host's exit and alive records).

Whoever can write the bucket writes these, and the job writes its progress: a value of the wrong
type (``"attempts": "many"``, a list where an object belongs) used to travel until some command
did arithmetic on it and ended in ``internal error: TypeError``. Each record is checked here, field
by field against the types its dataclass declares (and, for the objects inside it that commands
compute with, against a TypedDict of the keys they read), before any of it is used. A record that
fails is one line that names the object and the field (:class:`BadRecord`, exit code 2), never a
traceback. Text is not judged here: a string is a string, and what it holds is made safe on its way
out (:func:`provision.basics.text.printable`, at the output edge, :mod:`provision.commands.common`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from .errors import UsageError

T = TypeVar("T")

# how much of a bad value an error line quotes
_SHOWN = 40
_MISSING = object()       # a key a shape requires, absent
_HINT = "tpuctl never writes that: someone who can write the bucket did; restore or delete the object"


class BadRecord(UsageError):
    """A record read from a bucket that tpuctl cannot use: ``<object>: "<field>" is <value>, not
    <type>``. Exit code 2, as for any value tpuctl refuses (docs/security.md, "Output")."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}", hint=_HINT)
        self.where = where


def parse(raw: bytes, where: str) -> Any:
    """The JSON value of an object's bytes, or :class:`BadRecord` naming it."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRecord(where, "is not JSON") from None


def checked(cls: type[T], data: Any, where: str, *, parts: Mapping[str, Any] | None = None) -> T:
    """``cls`` (a dataclass) built from ``data``, each field's value checked against the field's
    declared type (``parts``: a stricter type for a field, such as a TypedDict of the keys inside
    an object that commands read); keys ``cls`` does not know are dropped (a newer tpuctl's)."""
    if not isinstance(data, dict):
        raise BadRecord(where, f"is {_kind(data)}, not an object")
    hints = _hints(cls)
    known: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BadRecord(where, f'has no "{f.name}"')
            continue
        value = data[f.name]
        _check(value, (parts or {}).get(f.name, hints[f.name]), f.name, where)
        known[f.name] = value
    return cls(**known)


def checked_object(data: Any, shape: Any, where: str) -> dict[str, Any]:
    """``data`` when it is an object whose keys ``shape`` (a TypedDict) names have their types;
    other keys pass as they are."""
    _check(data, shape, "", where)
    return data


def _check(value: Any, hint: Any, path: str, where: str) -> None:
    problem = _mismatch(value, hint, path)
    if problem is not None:
        at, wanted, bad = problem
        if bad is _MISSING:
            raise BadRecord(where, f'has no "{at}"')
        name = f'"{at}" is ' if at else "is "
        raise BadRecord(where, f"{name}{_show(bad)}, not {wanted}")


def _mismatch(value: Any, hint: Any, path: str) -> tuple[str, str, Any] | None:
    """None when ``value`` fits ``hint``; else (where inside, what was wanted, what is there)."""
    if hint is Any or hint is object:
        return None
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        options = typing.get_args(hint)
        if any(_mismatch(value, option, path) is None for option in options):
            return None
        # a value of the right kind with a bad part inside: name that part
        inner = [m for option in options if (m := _mismatch(value, option, path)) and m[0] != path]
        return inner[0] if inner else (path, " or ".join(_describe(o) for o in options), value)
    if hint is type(None):
        return None if value is None else (path, "null", value)
    if hint is bool:
        return None if isinstance(value, bool) else (path, _describe(hint), value)
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else (path, _describe(hint), value)
    if hint is float:
        # NaN and infinities pass: a diverged job's loss is one, and JSON as Python writes it holds it
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else (path, _describe(hint), value)
    if hint is str:
        return None if isinstance(value, str) else (path, _describe(hint), value)
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return (path, "an object", value)
        fields = _hints(hint)
        for key in hint.__required_keys__:
            if key not in value:
                return (_join(path, key), "", _MISSING)
        for key, inner in fields.items():
            if key in value:
                found = _mismatch(value[key], inner, _join(path, key))
                if found:
                    return found
        return None
    if origin is dict:
        if not isinstance(value, dict):
            return (path, _describe(hint), value)
        _key, inner = typing.get_args(hint) or (str, Any)
        for k, v in value.items():
            found = _mismatch(v, inner, _join(path, k))
            if found:
                return found
        return None
    if origin is list:
        if not isinstance(value, list):
            return (path, _describe(hint), value)
        (inner,) = typing.get_args(hint) or (Any,)
        for i, v in enumerate(value):
            found = _mismatch(v, inner, f"{path}[{i}]")
            if found:
                return found
        return None
    return None         # a type this gate does not know: the dataclass's own business


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(o) for o in typing.get_args(hint))
    if origin is dict:
        inner = (typing.get_args(hint) or (str, Any))[1]
        return "an object" + ("" if inner is Any else f" of {_plural(inner)}")
    if origin is list:
        inner = (typing.get_args(hint) or (Any,))[0]
        return "a list" + ("" if inner is Any else f" of {_plural(inner)}")
    if typing.is_typeddict(hint):
        return "an object"
    return {str: "a string", int: "a whole number", float: "a number", bool: "true or false",
            type(None): "null"}.get(hint, getattr(hint, "__name__", str(hint)))


def _plural(hint: Any) -> str:
    one = _describe(hint)
    for article in ("an ", "a "):
        if one.startswith(article):
            return one[len(article):] + "s"
    return one


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false",
            type(None): "null"}.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    """A value as JSON writes it (ASCII, control characters escaped), cut short."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=str)
    except (ValueError, RecursionError):
        text = "?"
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)
