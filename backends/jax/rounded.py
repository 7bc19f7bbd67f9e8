"""A JAX program run with its products rounded as a device rounds them: the device model's simulation of a
side's reduced-precision products, on the host (``crosscheck._compare.device``).

A TPU makes a float32 product at JAX's default precision in one bfloat16 pass: each input rounded to
bfloat16 (round to nearest), the terms summed in float32. What that does to a gradient depends on the
program and the case (a product of length K rounds each of its K terms, about sqrt(K) units of a term;
a softmax turns a logit's absolute error into a relative one; layers compound it), so it is not a
constant: it is computed, by running the program's own jaxpr with every product the device rounds made
that way. ``rounded(fn, bits)`` traces ``fn`` (``jax.make_jaxpr``) and evaluates its jaxpr equation by
equation, each ``dot_general`` and ``conv_general_dilated`` whose ``precision`` is JAX's default having
its float32 inputs rounded to ``bits`` bits of mantissa (``lax.reduce_precision``); the jaxprs an
equation holds (a ``jit``, a ``scan``'s or ``while``'s body, a ``cond``'s branches, a checkpoint, a
custom derivative's primal) are rewritten the same way and the equation bound again with them. Public
JAX only: ``jax.make_jaxpr`` and ``jax.extend.core``'s jaxpr types.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core

from crosscheck._types import FrameworkArray, PyTree

#: The products a device rounds at a reduced precision (JAX's primitives).
PRODUCTS = ("dot_general", "conv_general_dilated")


def mantissa(unit: float) -> int:
    """The bits of mantissa a unit roundoff keeps (2^-8, bfloat16's: 7; 2^-11, TF32's: 10)."""
    return max(0, round(-math.log2(unit)) - 1)


def rounded(fn: Callable[..., Any], bits: int) -> Callable[..., Any]:
    """``fn`` with every product at JAX's default precision taking its float32 inputs rounded to ``bits``
    bits of mantissa (7: bfloat16), traced once per call's shapes; the same pytree out."""

    def run(*args: PyTree) -> PyTree:
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = jax.tree_util.tree_leaves(args)
        out = jax.jit(lambda *xs: evaluate(closed.jaxpr, closed.consts, xs, bits))(*flat)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), out)

    return run


def evaluate(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], bits: int) -> list[Any]:
    """``jaxpr`` at ``consts`` and ``args``, its products rounded (``rounded``)."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> FrameworkArray:
        return v.val if isinstance(v, core.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, args, strict=True):
        env[v] = x
    for eqn in jaxpr.eqns:
        values = [read(v) for v in eqn.invars]
        if eqn.primitive.name in PRODUCTS and _reduced(eqn.params):
            values = [_round(x, bits) for x in values[:2]] + values[2:]
        params = eqn.primitive.get_bind_params({k: _rewritten(v, bits) for k, v in eqn.params.items()})
        context = getattr(getattr(eqn, "ctx", None), "manager", None)
        with context if context is not None else contextlib.nullcontext():  # as JAX's evaluation binds
            out = eqn.primitive.bind(*values, **params)
        outs = out if eqn.primitive.multiple_results else [out]
        for v, x in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, core.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _reduced(params: dict[str, Any]) -> bool:
    """Whether a product's ``precision`` is JAX's default (what a device makes at its reduced precision)."""
    precision = params.get("precision")
    if precision is None:
        return True
    found = precision if isinstance(precision, (tuple, list)) else (precision,)
    return all(p is None or p == jax.lax.Precision.DEFAULT for p in found)


def _round(value: FrameworkArray, bits: int) -> FrameworkArray:
    if getattr(value, "dtype", None) != jnp.float32:
        return value
    return jax.lax.reduce_precision(value, exponent_bits=8, mantissa_bits=bits)


def _rewritten(value: object, bits: int) -> object:
    """A parameter with the jaxprs it holds rewritten (``_closed``), anything else as it is."""
    if isinstance(value, core.ClosedJaxpr):
        return _closed(value, bits)
    if isinstance(value, core.Jaxpr) and not value.constvars:
        closed = _closed(core.ClosedJaxpr(value, []), bits)
        return closed.jaxpr if not closed.consts else value
    if isinstance(value, tuple) and any(isinstance(v, (core.ClosedJaxpr, core.Jaxpr)) for v in value):
        return tuple(_rewritten(v, bits) for v in value)
    return value


def _closed(closed: core.ClosedJaxpr, bits: int) -> core.ClosedJaxpr:
    """A closed jaxpr traced again through ``evaluate``: the same inputs and outputs, its products rounded."""
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in closed.in_avals]
    return jax.make_jaxpr(lambda *xs: evaluate(closed.jaxpr, closed.consts, xs, bits))(*avals)
