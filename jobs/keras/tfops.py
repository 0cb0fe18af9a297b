"""A ``job: keras`` module that computes with TensorFlow ops, found without running it, so that
the JAX backend refuses it before TensorFlow or JAX load (:func:`refuse_tf_ops`).

On the JAX backend the model, the loss, the metrics and ``predict`` are traced by ``jax.jit``:
a ``tf.`` op in them cannot take JAX's arrays. ``keras.ops`` runs on either backend. The input
pipeline stays TensorFlow's on both backends (``dataset`` returns a ``tf.data.Dataset``, fed
from the host CPU), so ``tf.`` in ``dataset`` and in what only ``dataset`` uses is allowed.

What is refused: a use of TensorFlow (``tf.reduce_sum``, ``tf.nn.softmax``, ``tf.float32``, a
name imported from ``tensorflow``) in the code that the device runs: ``model``, ``loss``,
``metrics``, ``predict``, ``optimizer`` and every top-level function, class or assignment of the
module they name, transitively, following ``from helpers import name`` into the user's own
modules beside it. The first such use (by line, in the module itself first) is one line naming
file, line and the fix: the ``keras.ops`` function of that name where there is one, else
``--set backend=tensorflow``. Names reached in other ways (``import helpers`` then
``helpers.loss``, ``getattr``, ``globals()``) are not followed: what they run is found when the
job traces it before its first step, as any other error in the user's code. Standard library
only.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os

from ..errors import ConfigError

# the runner's functions whose code the device runs (on JAX: traced by jax.jit)
DEVICE_HOOKS = ("model", "loss", "metrics", "predict", "optimizer")

# TensorFlow names whose keras.ops function has another name
RENAMED = {
    "reduce_sum": "sum", "reduce_mean": "mean", "reduce_max": "max", "reduce_min": "min",
    "reduce_prod": "prod", "reduce_any": "any", "reduce_all": "all",
    "reduce_logsumexp": "logsumexp", "reduce_std": "std", "reduce_variance": "var",
    "concat": "concatenate", "range": "arange", "pow": "power", "fill": "full",
    "unsorted_segment_sum": "segment_sum", "unsorted_segment_max": "segment_max",
    "segment_sum": "segment_sum", "segment_max": "segment_max", "gather": "take",
    "clip_by_value": "clip", "rank": "ndim", "constant": "convert_to_tensor", "floormod": "mod", "floordiv": "floor_divide",
    "sparse_softmax_cross_entropy_with_logits": "sparse_categorical_crossentropy",
    "softmax_cross_entropy_with_logits": "categorical_crossentropy",
    "sigmoid_cross_entropy_with_logits": "binary_crossentropy",
}
DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
                    "int64", "uint8", "uint16", "uint32", "uint64", "bool", "complex64",
                    "complex128"})
# if keras' own list of its ops cannot be read (another layout of the package)
COMMON_OPS = frozenset({
    "abs", "all", "any", "arange", "argmax", "argmin", "argsort", "cast", "clip",
    "concatenate", "cumsum", "equal", "exp", "expand_dims", "full", "greater", "less", "log",
    "logical_and", "logical_not", "logical_or", "matmul", "max", "maximum", "mean", "min",
    "minimum", "not_equal", "one_hot", "ones", "ones_like", "pad", "prod", "relu", "reshape",
    "segment_max", "segment_sum", "shape", "sigmoid", "softmax", "sqrt", "square", "squeeze",
    "stack", "stop_gradient", "sum", "take", "take_along_axis", "tile", "top_k", "transpose",
    "where", "zeros", "zeros_like"})


def refuse_tf_ops(module_path: str) -> str | None:
    """Why the JAX backend cannot run the ``job: keras`` module at ``module_path``: one line
    naming the file and line of its first TensorFlow use in code the device runs, and the fix;
    None when there is none (or when the file cannot be read: reading it is
    :func:`jobs.usercode.check`'s, which says why)."""
    found = first_tf_use(module_path)
    if found is None:
        return None
    path, line, name, where = found
    return f"{path}:{line}: {name} in {where} is TensorFlow, which the jax backend cannot run; " \
           f"{fix(name)}"


def fix(name: str) -> str:
    """What to write instead of the TensorFlow name ``name`` (``tf.nn.softmax``)."""
    parts = name.split(".")[1:]
    last = parts[-1] if parts else ""
    other = "or run it on TensorFlow: --set backend=tensorflow"
    if parts[:1] == ["keras"] and len(parts) > 1:
        return f"use keras.{'.'.join(parts[1:])} (import keras), {other}"
    if parts == ["function"]:
        return f"leave it out (the runner compiles the step), {other}"
    if len(parts) == 1 and last in DTYPES:
        return f"name the dtype as a string, \"{last}\", {other}"
    if parts[:1] == ["random"] and last in _keras_names("random"):
        return f"use keras.random.{last} (a seed: keras.random.SeedGenerator), {other}"
    if parts[:1] == ["nest"] and last in _keras_names("tree"):
        return f"use keras.tree.{last}, {other}"
    op = RENAMED.get(last, last)
    if op in _keras_names("ops"):
        return f"use keras.ops.{op}, {other}"
    return f"write it with keras.ops, {other}"


def first_tf_use(module_path: str) -> tuple[str, int, str, str] | None:
    """(file, line, dotted name, where) of the first TensorFlow use in the code the device runs:
    the module's own first (by line), else the first in a module of the user's it imports the
    device code from (``from helpers import loss``: a file beside it)."""
    todo: list[tuple[str, tuple[str, ...]]] = [(os.path.abspath(module_path), DEVICE_HOOKS)]
    seen: set[tuple[str, str]] = set()
    while todo:
        path, roots = todo.pop(0)
        roots = tuple(r for r in roots if (path, r) not in seen)
        seen.update((path, r) for r in roots)
        if not roots:
            continue
        found, imported = _in_module(path, roots)
        if found is not None:
            return found
        todo += imported
    return None


def _in_module(path: str, roots: tuple[str, ...]):
    """The first TensorFlow use in what ``roots`` reach in the module at ``path``, and the
    (file, names) of the user's modules they import reached names from."""
    from ..usercode import read

    try:
        tree = read(path)
    except ConfigError:
        return None, []
    definitions = _top_level(tree)
    sources = _imported_from_files(tree, path)
    reached = _reached(definitions, roots)
    aliases = _tf_aliases(tree)
    uses: list[tuple[int, int, str, str]] = []
    for name in reached:
        for node in definitions.get(name, []):
            for line, col, dotted in _tf_names(node, aliases):
                uses.append((line, col, dotted, _where(node, name)))
    imported: dict[str, list[str]] = {}
    for name in reached:
        if name in sources:
            file, original = sources[name]
            imported.setdefault(file, []).append(original)
    found = None
    if uses:
        line, _, dotted, where = min(uses)
        found = (path, line, dotted, where)
    return found, [(file, tuple(names)) for file, names in imported.items()]


def _imported_from_files(tree: ast.Module, path: str) -> dict[str, tuple[str, str]]:
    """Names the module imports from a module of the user's (``from helpers import loss``, a
    file beside it or in a package under its directory, or a relative import): local name ->
    (that module's file, the name there)."""
    here = os.path.dirname(path)
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or not (node.module or node.level):
            continue
        base = here
        for _ in range(max(node.level - 1, 0)):
            base = os.path.dirname(base)
        rel = (node.module or "").replace(".", os.sep)
        candidates = [os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")] \
            if rel else [os.path.join(base, "__init__.py")]
        file = next((c for c in candidates if os.path.isfile(c)), None)
        if file is None:
            continue
        for a in node.names:
            if a.name != "*":
                out[a.asname or a.name] = (os.path.abspath(file), a.name)
    return out


def _tf_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to TensorFlow, by what they stand for (``tf`` -> ``tf``, ``nn`` ->
    ``tf.nn``), from the module's imports anywhere in it."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "tensorflow" or a.name.startswith("tensorflow."):
                    if a.asname:
                        out[a.asname] = "tf" + a.name[len("tensorflow"):]
                    else:  # import tensorflow.x binds tensorflow
                        out["tensorflow"] = "tf"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "tensorflow" or node.module.startswith("tensorflow.")):
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = "tf" + node.module[len("tensorflow"):] + "." + a.name
    return out


def _top_level(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """The module's top-level definitions (functions, classes, assignments) by the name they
    bind (a name bound twice: both)."""
    out: dict[str, list[ast.AST]] = {}
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        for name in names:
            out.setdefault(name, []).append(node)
    return out


def _reached(definitions: dict[str, list[ast.AST]], roots: tuple[str, ...]) -> list[str]:
    """The names ``roots`` use, transitively through the top-level definitions they mention
    (``dataset`` excepted): the roots themselves and the names mentioned, defined here or not."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        for node in definitions.get(name, []):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id not in seen and sub.id != "dataset":
                    todo.append(sub.id)
    return seen


def _tf_names(node: ast.AST, aliases: dict[str, str]):
    """(line, column, dotted name) of each TensorFlow use under ``node``: the longest
    attribute chain on a TensorFlow name (``tf.nn.softmax``), or the name alone."""
    longest: dict[tuple[int, int], str] = {}
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Import, ast.ImportFrom)):
            continue
        chain: list[str] = []
        base = sub
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in aliases and isinstance(base.ctx, ast.Load):
            dotted = ".".join([aliases[base.id], *reversed(chain)])
            at = (base.lineno, base.col_offset)
            if len(dotted) > len(longest.get(at, "")):
                longest[at] = dotted
    for (line, col), dotted in longest.items():
        yield line, col, dotted


def _where(node: ast.AST, name: str) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{name}()"
    if isinstance(node, ast.ClassDef):
        return f"class {name}"
    return name


@functools.cache
def _keras_names(namespace: str) -> frozenset[str]:
    """The public names of ``keras.<namespace>`` (ops, random, tree), read from the installed
    Keras' API files without importing Keras (which would load a backend)."""
    try:
        spec = importlib.util.find_spec("keras")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        for path in (os.path.join(root, namespace, "__init__.py"),
                     os.path.join(root, "api", namespace, "__init__.py")):
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), filename=path)
            except (OSError, SyntaxError, ValueError):
                continue
            names = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                     for a in node.names}
            if names:
                return frozenset(names)
    return COMMON_OPS if namespace == "ops" else frozenset()
