"""A ``job: keras`` spec's user code, found and read without running it.

The control plane (``tpuctl train``, ``tpuctl job run --dry-run``, ``tpuctl sweep``) and the job
(before TensorFlow starts) read the module the spec names with :mod:`ast`: a file that is not
there, a syntax error, a function that is missing or takes the wrong arguments is one line
naming the file, the line and the fix (exit 2), before a TPU is paid for. What only running the
code can tell (an import that fails, a dataset of the wrong structure, a loss of the wrong
shape) the job checks before its first step (:mod:`jobs.keras.user`). Standard library only.

``module`` is a Python file (``model.py``, ``src/model.py``: a path) or a module name
(``mypkg.model``). A relative file or a module name is looked up in ``search``, in order: the
workdir the run stages (``tpuctl train --workdir DIR``), or, for a job started here, the
spec's directory, the current directory and the directories of ``PYTHONPATH``.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ConfigError

# The functions the runner calls, with the arguments it passes (docs/own-code.md).
REQUIRED = {"model": ("params",), "dataset": ("params", "split", "context"),
            "loss": ("labels", "outputs")}
OPTIONAL = {"metrics": ("labels", "outputs"), "predict": ("outputs",), "optimizer": ("params",)}
SIGNATURES = {**REQUIRED, **OPTIONAL}
MAX_SOURCE_BYTES = 8 << 20
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class UserCode:
    """What reading the module found."""

    path: str                      # the module's file
    functions: dict[str, int]      # the runner's functions it defines, by name: their line
    metrics: tuple[str, ...]       # the names metrics() returns (a dict literal); () if unknown


@dataclass(frozen=True)
class Arguments:
    """How a function takes its arguments (from ``def`` or from :mod:`inspect`)."""

    positional: int       # parameters that can be passed by position
    required: int         # of those, the ones without a default
    varargs: bool = False
    required_keywords: tuple[str, ...] = ()   # keyword-only parameters without a default

    def problem(self, name: str) -> str | None:
        """Why the runner's call ``name(<its arguments>)`` does not fit; None if it does."""
        want = SIGNATURES[name]
        call = f"{name}({', '.join(want)})"
        if self.required_keywords:
            return (f"{name}() needs the keyword argument {self.required_keywords[0]} that the "
                    f"runner never passes; define it as def {call}")
        if self.required > len(want) or (self.positional < len(want) and not self.varargs):
            takes = self.required if self.required > len(want) else self.positional
            return (f"{name}() takes {takes} argument{'s' if takes != 1 else ''} but the runner "
                    f"calls {call}; define it as def {call}")
        return None


def search_path(spec_path: str | None = None) -> list[str]:
    """Where a job started on this machine looks for its module: beside the spec, in the
    current directory, then in the directories of PYTHONPATH (a run's staged code directory
    is one of them)."""
    dirs = [os.path.dirname(os.path.abspath(spec_path))] if spec_path else []
    dirs.append(os.getcwd())
    dirs += [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d]
    return list(dict.fromkeys(dirs))


def module_problem(module: str) -> str | None:
    """Why ``module`` can name neither a file nor a module (None if it can): no I/O."""
    if not isinstance(module, str) or not module.strip():
        return "module is empty; name your file (module: model.py) or module (module: mypkg.model)"
    if module.endswith(".py") or "/" in module or os.sep in module:
        return None if module.endswith(".py") else (
            f"module {module} is a path but not a .py file; name the Python file that defines "
            "model, dataset and loss (module: model.py)")
    if not _MODULE_NAME.fullmatch(module):
        return (f"module {module!r:.80} is neither a .py file nor a module name; use "
                "module: model.py or module: mypkg.model")
    return None


def is_file(module: str) -> bool:
    return module.endswith(".py")


def locate(module: str, search: Sequence[str]) -> str:
    """The file of ``module`` (a path, or ``a/b/c.py`` / ``a/b/c/__init__.py`` for ``a.b.c``)
    in the first directory of ``search`` that has it; ConfigError naming where it looked."""
    if is_file(module):
        candidates = [module] if os.path.isabs(module) else [os.path.join(d, module) for d in search]
    else:
        rel = module.replace(".", os.sep)
        candidates = [path for d in search
                      for path in (os.path.join(d, rel + ".py"), os.path.join(d, rel, "__init__.py"))]
    for path in candidates:
        if os.path.isfile(path):
            return path
    if os.path.isabs(module):
        raise ConfigError(f"module {module} not found; check the path")
    if not search:
        raise ConfigError(f"module {module} not found: no workdir was given; pass --workdir "
                          "DIR, the directory that holds it (it is staged with the run)")
    where = ", ".join(dict.fromkeys(os.path.abspath(d) for d in search))
    raise ConfigError(f"module {module} not found in {where}; put it there, or name it relative "
                      "to the workdir (module: src/model.py, module: mypkg.model)")


def read(path: str) -> ast.Module:
    """The module's syntax tree; a SyntaxError is one line naming the file and line."""
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            raise ConfigError(f"{path} is {os.path.getsize(path)} bytes; a module of functions "
                              "is far smaller: check that module names your code")
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc}); check its permissions") from None
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as exc:
        text = f": {exc.text.strip()[:60]}" if exc.text and exc.text.strip() else ""
        raise ConfigError(f"{path}:{exc.lineno or 1}: {exc.msg} (SyntaxError{text}); fix the "
                          "line") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path} is not Python source ({exc}); check that module names your "
                          "code") from None


def arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Arguments:
    a = node.args
    positional = len(a.posonlyargs) + len(a.args)
    keywords = tuple(arg.arg for arg, default in zip(a.kwonlyargs, a.kw_defaults) if default is None)
    return Arguments(positional, positional - len(a.defaults), a.vararg is not None, keywords)


def check(module: str, search: Sequence[str]) -> UserCode:
    """Find ``module`` and read it: the runner's functions defined at its top level with the
    arguments the runner passes, and the names its ``metrics`` returns."""
    path = locate(module, search)
    tree = read(path)
    found: dict[str, int] = {}
    metrics: tuple[str, ...] = ()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in SIGNATURES:
            problem = arguments(node).problem(node.name)
            if problem:
                raise ConfigError(f"{path}:{node.lineno}: {problem}")
            found[node.name] = node.lineno
            if node.name == "metrics":
                metrics = returned_names(node)
        else:  # bound another way (an import, an assignment): checked when the job imports it
            for name in bound_names(node):
                if name in SIGNATURES:
                    found[name] = node.lineno
    for name, args in REQUIRED.items():
        if name not in found:
            raise ConfigError(f"{path}: no function {name}({', '.join(args)}); define it at the "
                              "top level of the module (docs/own-code.md)")
    return UserCode(path, found, metrics)


def bound_names(node: ast.stmt) -> list[str]:
    """The top-level names a statement other than ``def`` binds."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.ClassDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
    return [t.id for t in targets if isinstance(t, ast.Name)]


def returned_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The keys of the dict literals ``node`` returns, when every return is one with string
    keys (the metric names a sweep may optimise); () when they cannot be read."""
    names: list[str] = []
    stack: list[ast.AST] = list(node.body)
    while stack:
        item = stack.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # a nested function's returns are not metrics()'s
        if isinstance(item, ast.Return):
            value = item.value
            if not isinstance(value, ast.Dict) or not all(
                    isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
                return ()
            names += [k.value for k in value.keys]
        stack.extend(ast.iter_child_nodes(item))
    return tuple(dict.fromkeys(names))
