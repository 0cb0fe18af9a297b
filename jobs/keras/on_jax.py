"""``job: keras``'s check before the first step, on the JAX backend (imported only there): the
user's functions traced by :func:`jax.make_jaxpr` on the shapes of the global batch (what the
one ``jax.jit`` of the step sees), running nothing, and which trained variables the loss does
not reach, read off the trace (:func:`unreached`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Var

# primitives through which no gradient flows
NO_GRADIENT = frozenset({"stop_gradient"})


def abstract(shape: Sequence[int], dtype: Any) -> jax.ShapeDtypeStruct:
    """An abstract array of ``shape`` and ``dtype`` (a numpy dtype), as JAX holds it (int64
    becomes int32 unless x64 is on)."""
    return jax.ShapeDtypeStruct(tuple(shape), jax.dtypes.canonicalize_dtype(jnp.dtype(dtype)))


def shapes(fn: Callable, *args) -> Any:
    """``fn(*args)``'s outputs as abstract arrays; runs nothing."""
    return jax.eval_shape(fn, *args)


def unreached(fn: Callable, args: Sequence[Any], wrt: int) -> list[int]:
    """The indices of the leaves of ``args[wrt]`` that the gradient of ``fn(*args)`` (a float
    scalar) cannot reach: those its output does not depend on through floating-point values.
    Read backwards through the trace: an equation whose floating-point output is needed needs
    all its inputs; an integer or boolean output (``argmax``, a comparison) passes no gradient,
    nor does ``stop_gradient``. A call of a sub-trace (a nested jit, a custom gradient, a loop
    or a condition) is taken as one equation whose outputs need all its inputs: conservative, a
    variable reached only through a sub-trace's ``stop_gradient`` counts as reached."""
    closed = jax.make_jaxpr(fn)(*args)
    jaxpr = closed.jaxpr
    before = sum(len(jax.tree.leaves(a)) for a in args[:wrt])
    count = len(jax.tree.leaves(args[wrt]))
    needed = {v for v in jaxpr.outvars if isinstance(v, Var) and _inexact(v)}
    for eqn in reversed(jaxpr.eqns):
        if eqn.primitive.name in NO_GRADIENT:
            continue
        if any(isinstance(o, Var) and o in needed and _inexact(o) for o in eqn.outvars):
            needed.update(v for v in eqn.invars if isinstance(v, Var))
    inputs = jaxpr.invars[before:before + count]
    return [i for i, v in enumerate(inputs) if v not in needed]


def _inexact(var: Var) -> bool:
    return bool(jnp.issubdtype(var.aval.dtype, jnp.inexact))

