"""Importing a ``job: keras`` module and calling its functions.

A mistake in user code (an import that fails, a function that raises, a value of the wrong kind)
becomes a :class:`jobs.errors.ConfigError` whose one line names the user's file and line (the
deepest frame of the traceback in the user's code, else the function's ``def``) and the fix:
the job exits 2 before its first step and the supervisor never retries it. The traceback itself
is the error's ``__cause__`` (``python -m jobs run --verbose`` prints it). A lost connection is
not the user's mistake: it propagates (exit 42, retried).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .. import usercode
from ..errors import ConfigError
from ..exitcodes import is_infrastructure_error

MAX_MESSAGE = 200


@dataclass
class UserModule:
    """The imported module and the runner's functions it defines."""

    module: ModuleType
    path: str                 # its file
    root: str                 # the directory of the user's code (frames under it are theirs)
    functions: dict[str, Callable] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.functions

    def line_of(self, name: str) -> tuple[str, int]:
        """Where ``name`` is defined: (file, line of its def)."""
        code = getattr(inspect.unwrap(self.functions[name]), "__code__", None)
        if code is None:
            return self.path, 1
        return code.co_filename, code.co_firstlineno

    def where(self, name: str) -> str:
        path, line = self.line_of(name)
        return f"{path}:{line}"

    def call(self, name: str, *args: Any) -> Any:
        """``name(*args)``; an exception in it is a ConfigError naming the user's line."""
        try:
            return self.functions[name](*args)
        except ConfigError:
            raise
        except Exception as exc:  # any mistake in user code is the user's to fix
            if is_infrastructure_error(exc):
                raise
            call = f"{name}({', '.join(usercode.SIGNATURES[name])})"
            raise failure(exc, self.root, f"{call} raised", self.line_of(name)) from exc

    def mistake(self, name: str, problem: str) -> ConfigError:
        """A ConfigError for what ``name`` returned: at its def line."""
        return ConfigError(f"{self.where(name)}: {problem}")


def failure(exc: BaseException, root: str, what: str, fallback: tuple[str, int]) -> ConfigError:
    """One line for ``exc``: the deepest frame under ``root`` (else ``fallback``), what raised,
    the exception's type and first line, and what to do."""
    path, line = fallback
    for frame in traceback.extract_tb(exc.__traceback__):
        if _is_users(frame.filename, root):
            path, line = frame.filename, frame.lineno or 1
    if isinstance(exc, SyntaxError) and exc.filename:
        path, line = exc.filename, exc.lineno or 1
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "..."
    if isinstance(exc, ModuleNotFoundError):
        fix = "install it where the job runs, or fix the import"
    elif isinstance(exc, SyntaxError):
        fix = "fix the line"
    else:
        fix = "fix the code (python -m jobs run --verbose shows the traceback)"
    return ConfigError(f"{path}:{line}: {what} {type(exc).__name__}: {text}; {fix}")


def _is_users(filename: str, root: str) -> bool:
    path = os.path.abspath(filename)
    return (path.startswith(root.rstrip(os.sep) + os.sep)
            and not any(part in ("site-packages", "dist-packages") for part in path.split(os.sep)))


def load(module: str, search: Sequence[str]) -> UserModule:
    """Import ``module`` (found as :func:`jobs.usercode.locate` finds it) and check that it
    defines the runner's functions, taking the arguments the runner passes."""
    path = os.path.abspath(usercode.locate(module, search))
    if usercode.is_file(module):
        root = os.path.dirname(path)
        name = "tpuctl_user_" + os.path.splitext(os.path.basename(path))[0]
    else:
        depth = module.count(".") + (2 if path.endswith("__init__.py") else 1)
        root = path
        for _ in range(depth):
            root = os.path.dirname(root)
        name = module
    if root not in sys.path:  # the module's own imports (helpers beside it, its package)
        sys.path.insert(0, root)
    try:
        if usercode.is_file(module):
            spec = importlib.util.spec_from_file_location(name, path)
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[name] = loaded
            spec.loader.exec_module(loaded)
        else:
            loaded = importlib.import_module(name)
    except Exception as exc:  # an import that fails is the user's to fix
        if is_infrastructure_error(exc):
            raise
        raise failure(exc, root, f"importing {module} raised", (path, 1)) from exc
    user = UserModule(loaded, path, root)
    for name_, args in usercode.SIGNATURES.items():
        fn = getattr(loaded, name_, None)
        if fn is None:
            if name_ in usercode.REQUIRED:
                raise ConfigError(f"{path}: no function {name_}({', '.join(args)}); define it at "
                                  "the top level of the module (docs/own-code.md)")
            continue
        if not callable(fn):
            raise ConfigError(f"{path}: {name_} is a {type(fn).__name__}, not a function; define "
                              f"def {name_}({', '.join(args)})")
        user.functions[name_] = fn
        problem = arguments(fn).problem(name_)
        if problem:
            raise user.mistake(name_, problem)
    return user


def arguments(fn: Callable) -> usercode.Arguments:
    """How ``fn`` takes its arguments, as :class:`jobs.usercode.Arguments`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return usercode.Arguments(0, 0, varargs=True)  # a builtin: cannot tell, assume it fits
    kinds = inspect.Parameter
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    return usercode.Arguments(
        len(positional), sum(1 for p in positional if p.default is kinds.empty),
        any(p.kind == kinds.VAR_POSITIONAL for p in params),
        tuple(p.name for p in params if p.kind == kinds.KEYWORD_ONLY and p.default is kinds.empty))
