"""Reading a job spec: YAML (bounded), ``--set key=value`` overrides, and the coercion of each
value to its key's declared type; then the spec's own checks. Every problem is a
:class:`jobs.spec.base.SpecError` whose message is one line naming the fix.

Standard library and PyYAML only: the control plane loads specs without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Union

import yaml

from .. import bounded_yaml
from .base import MAX_INT, SpecError, example, show, suggest
from .registry import JOBS

MAX_SPEC_BYTES = 1 << 20     # a spec is a few dozen lines


def parse_yaml(text: str, what: str) -> Any:
    """The document in ``text`` (``what``, e.g. ``job spec a.yaml``, names it in errors), read by
    the bounded loader with YAML 1.2 numbers: job specs and sweep specs alike. Raises
    :class:`SpecError`."""
    try:
        return bounded_yaml.load(text)
    except bounded_yaml.Refused as exc:
        raise SpecError(f"{what} {exc.reason}; {exc.hint or 'a spec is flat key: value lines'}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{what}{where} is not valid YAML "
                        f"({getattr(exc, 'problem', None) or 'parse error'}); fix the file") from None


def read_yaml(path: str) -> dict[str, Any]:
    """The mapping in the spec file at ``path``: bounded in size, depth and aliases, so hostile
    YAML fails in milliseconds instead of eating memory. Raises :class:`SpecError`."""
    if not os.path.isfile(path):
        raise SpecError(f"job spec {show(path)} not found; pass the path of a job spec YAML file such "
                        "as templates/bert-finetune.yaml")
    try:
        size = os.path.getsize(path)
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"job spec {path} is {size} bytes; a spec is a few dozen key: value lines "
                            f"(at most {MAX_SPEC_BYTES} bytes): check that this is the right file")
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"job spec {path} is not UTF-8 text; save it as UTF-8 YAML") from None
    except OSError as exc:
        raise SpecError(f"cannot read job spec {path} ({exc.strerror or exc}); check its permissions") from None
    raw = parse_yaml(text, f"job spec {path}")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"job spec {path} must be a mapping of key: value lines, "
                        f"not a {type(raw).__name__}; write one 'key: value' per line, as in "
                        "templates/bert-finetune.yaml")
    return raw


def load(path: str, overrides: Sequence[str] | Sequence[tuple[str, str]] = ()) -> Any:
    """Read the YAML spec at ``path``, apply ``--set`` overrides, and check everything.

    ``overrides`` are ``"key=value"`` strings or ``(key, value)`` pairs; each value is coerced to
    the key's declared type. Raises :class:`SpecError` with one line that names the fix.
    """
    return from_dict(read_yaml(path), overrides, source=path)


def from_dict(raw: dict[str, Any], overrides: Iterable[str] | Iterable[tuple[str, str]] = (),
              source: str = "job spec") -> Any:
    if not isinstance(raw, dict):
        raise SpecError(f"{source} must be a mapping of key: value lines, not a {type(raw).__name__}; write "
                        "one 'key: value' per line, as in templates/bert-finetune.yaml")
    values = dict(raw)
    for key in values:
        if not isinstance(key, str):
            raise SpecError(f"key {show(key)} in {source} is not a name; spec keys are names such as "
                            "num_train_steps (quote it if it is one)")
    pairs = [_split_override(o) for o in overrides]
    # ``job`` decides which keys exist, so an override of it applies first.
    for key, value in pairs:
        if key == "job":
            values["job"] = value
    job = values.get("job")
    if job is None:
        raise SpecError(f"{source} has no 'job' key; add 'job: bert-pretrain' or "
                        "'job: bert-finetune'")
    if not isinstance(job, str) or job not in JOBS:
        raise SpecError(f"unknown job {show(job)} in {source}; use one of {', '.join(JOBS)}")
    cls = JOBS[job]
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    entries: list[tuple[str, Any, str]] = []   # ``params.NAME``: an entry of a mapping key
    for key, value in values.items():
        if _entry_of(key, hints):
            entries.append((key, value, "spec"))
            continue
        if key not in fields:
            raise SpecError(f"unknown key {show(key)} in {source} for {job}; {suggest(key, fields)}")
        if value is None and fields[key].metadata.get("required"):
            continue  # a template's placeholder: reported below unless --set fills it
        kwargs[key] = value if fields[key].metadata.get("raw") else _coerce(key, value, hints[key], origin="spec")
    for key, value in pairs:
        if _entry_of(key, hints):
            entries.append((key, value, "--set"))
            continue
        if key not in fields:
            raise SpecError(f"unknown key {show(key)} in --set {show(key, quote=False)}=...; "
                            f"{suggest(key, fields)}")
        kwargs[key] = value if fields[key].metadata.get("raw") else _coerce(key, value, hints[key], origin="--set")
    for key, value, origin in entries:
        name, _, entry = key.partition(".")
        mapping = kwargs.setdefault(name, {})
        if entry not in mapping:
            known = ", ".join(sorted(mapping)[:8]) or "none"
            close = suggest(entry, mapping) if mapping else ""
            hint = f"{close} " if close.startswith("did you") else ""
            raise SpecError(f"{name} has no entry {show(entry)} ({origin}: {show(key, quote=False)}); "
                            f"{hint}add it to the spec's {name}: first (its entries: {known})")
        mapping[entry] = _coerce_entry(key, value, mapping[entry], origin)
    spec = cls(**kwargs)
    for name, f in fields.items():
        if (f.metadata.get("required") and getattr(spec, name) in (None, "")
                and (getattr(spec, "do_train", True) or not f.metadata.get("training"))):
            raise SpecError(f"{source} is missing {name} ({f.metadata['doc']}); add '{name}: ...' "
                            f"to the spec or pass --set {name}=...")
    spec._check()
    return spec


def describe(job: str) -> list[tuple[str, str, Any, str]]:
    """(key, type, default, doc) for every key of ``job``: for docs and ``--help`` text."""
    cls = JOBS[job]
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append((f.name, _type_name(hints[f.name]), "(required)" if f.metadata.get("required")
                    else default, f.metadata.get("doc", "")))
    return out


# --------------------------------------------------------------------------------------------
# Helpers


def _split_override(item: str | tuple[str, str]) -> tuple[str, str]:
    if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        key, value = item
        if not key.strip():
            raise SpecError(f"invalid --set {show(key + '=' + value)}; use --set key=value, "
                            "such as --set num_train_steps=1000")
        return key.strip(), value
    if not isinstance(item, str):
        raise SpecError(f"invalid --set {show(item)}; use --set key=value, such as --set num_train_steps=1000")
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"invalid --set {show(item)}; use --set key=value, "
                        "such as --set num_train_steps=1000")
    return key.strip(), value


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(key: str, value: Any, hint: Any, origin: str) -> Any:
    """Convert a YAML value or a ``--set`` string to the declared type of ``key``."""
    base, optional = _unwrap_optional(hint)
    from_string = isinstance(value, str) and origin == "--set"
    if value is None or (optional and isinstance(value, str)
                         and value.strip().lower() in ("null", "~")) \
            or (optional and from_string and value == ""):
        if optional:
            return None
        raise SpecError(f"{key} needs a value of type {_type_name(base)}; set it (--set {key}=...)")
    if typing.get_origin(base) is dict:
        if isinstance(value, dict):
            return dict(value)
        raise SpecError(f"{key} must be a mapping (one 'name: value' line per entry under "
                        f"'{key}:'), got {show(value)} (from {origin}); set one entry with "
                        f"--set {key}.NAME=VALUE")
    try:
        if base is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError
        if base is int:
            if isinstance(value, bool):
                raise ValueError
            number: Any = None
            if isinstance(value, int):
                number = value
            elif isinstance(value, float) and value.is_integer():
                number = int(value)
            elif isinstance(value, str) and len(value) <= 40:
                text = value.strip().replace("_", "")
                try:
                    number = int(text)
                except ValueError:
                    as_float = float(text)
                    if as_float.is_integer():
                        number = int(as_float)
            if number is None or abs(number) > MAX_INT:
                raise ValueError
            return number
        if base is float:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, (int, float)) and not (isinstance(value, int) and abs(value) > MAX_INT):
                number = float(value)
            elif isinstance(value, str) and len(value) <= 60:
                number = float(value.strip())
            else:
                raise ValueError
            if not math.isfinite(number):
                raise ValueError
            return number
        if base is str:
            if isinstance(value, (dict, list, bool)):
                raise ValueError
            return str(value)
        if typing.get_origin(base) is list:
            if isinstance(value, str):
                items = [v.strip() for v in value.split(",")]
                return [v for v in items if v]
            if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
                return [str(v) for v in value]
            raise ValueError
    except ValueError:
        pass
    raise SpecError(f"{key} must be {_article(_type_name(base))}, got {show(value)} "
                    f"(from {origin}); e.g. --set {key}={example(base)}")


def _entry_of(key: Any, hints: dict[str, Any]) -> bool:
    """Whether ``key`` is ``NAME.ENTRY`` for a mapping key NAME of the spec (``params.hidden``)."""
    if not isinstance(key, str) or "." not in key:
        return False
    name, _, entry = key.partition(".")
    return bool(entry) and typing.get_origin(hints.get(name)) is dict


def _scalar(text: str) -> Any:
    """A ``--set`` string as the YAML scalar a person means: a boolean, null, an integer, a
    number (1e-3 too, which YAML 1.1 leaves a string), else the string itself."""
    word = text.strip()
    if word.lower() in ("true", "false"):
        return word.lower() == "true"
    if word.lower() in ("null", "~", ""):
        return None
    try:
        return int(word.replace("_", ""))
    except ValueError:
        pass
    try:
        number = float(word)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _coerce_entry(key: str, value: Any, existing: Any, origin: str) -> Any:
    """A new value for the entry ``key`` (``params.NAME``) of the type of the spec's own value:
    a number stays a number, a boolean a boolean, a string a string; a list takes a
    comma-separated ``--set``; an entry that is null in the spec takes any scalar."""
    from_set = isinstance(value, str) and origin == "--set"
    if isinstance(existing, dict):
        raise SpecError(f"{key} is a mapping; change its entries in the spec file")
    if isinstance(existing, str):
        return value if isinstance(value, str) else str(value)
    if isinstance(existing, list):
        if from_set:
            return [_scalar(v) for v in value.split(",") if v.strip()]
        if isinstance(value, list):
            return value
    elif isinstance(existing, bool):
        new = _scalar(value) if from_set else value
        if isinstance(new, bool):
            return new
    elif isinstance(existing, (int, float)):
        new = _scalar(value) if from_set else value
        if isinstance(new, (int, float)) and not isinstance(new, bool) and math.isfinite(new):
            return new
    else:
        return _scalar(value) if from_set else value
    kind = {bool: "boolean", list: "comma-separated list"}.get(type(existing), "number")
    raise SpecError(f"{key} must be {_article(kind)} like its value {show(existing)} in the spec, "
                    f"got {show(value)} (from {origin})")


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _type_name(hint: Any) -> str:
    base, _ = _unwrap_optional(hint)
    if typing.get_origin(base) is list:
        name = "comma-separated list"
    else:
        name = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
            base, "mapping" if typing.get_origin(base) is dict else str(base))
    return name


def _article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name

