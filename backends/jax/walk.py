"""JAX: the program of ``jax.grad(loss_fn())``, walked through every sub-program, and its residuals."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from crosscheck._evidence.inspect_records import Residual, Structure, ulp_difference

#: Primitives that carry a checkpointed sub-program (``jax.checkpoint`` / ``jax.remat``).
REMAT_PRIMITIVES = frozenset({"remat2", "checkpoint", "remat"})
#: Primitives that only re-shape or re-type the weights: their outputs are still "the weights".
_SHAPE_PRIMITIVES = frozenset(
    {"reshape", "transpose", "squeeze", "expand_dims", "convert_element_type", "copy", "slice"}
    | {"dynamic_slice", "index_in_dim", "gather", "broadcast_in_dim"}
)
#: Residuals made by these from the weights are (views of) the weights, e.g. ``weights[k]``.
_WEIGHT_VIEWS = frozenset({"reshape", "squeeze", "slice", "dynamic_slice", "transpose"})


def inspect_backend(
    backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure, *, check_loss: bool
) -> None:
    """What ``crosscheck inspect`` does with a JAX backend: walk the program of ``jax.grad(loss_fn())``
    and, with ``check_loss``, check that ``grad`` returns the gradient of that loss."""
    inspect_jax_backend(backend, weights, x, result)
    if check_loss:
        check_loss_fn(backend, weights, x, result)


def inspect_jax_backend(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
    """Fill ``result``'s residuals, findings and evidence from the program of ``jax.grad(loss_fn())``."""
    import jax
    import jax.numpy as jnp

    loss = backend.loss_fn()
    with jax.enable_x64(weights.dtype == np.float64):
        w, y = jnp.asarray(weights), jnp.asarray(x)
        closed = jax.make_jaxpr(jax.grad(loss))(w, y)
        result.residuals = jax_residuals(loss, w, y)
    result.found = jax_structure(closed.jaxpr, layers=result.layers)
    found = result.found
    scans = ", ".join(
        f"{s['length']} steps{' (reverse)' if s['reverse'] else ''}" for s in found["weight_scans"]
    )
    result.evidence.append(
        f"gradient program: scans over the weights: {scans or 'none'}; products with the weights "
        f"outside any scan: {found['weight_products_outside_scan']}; remat primitives: {found['remat_count']}"
    )
    result.evidence.append(
        f"layer products y @ w executed: {found['forward_layers']} in forward, "
        f"{found['recomputed_layers']} again for backward (counted through the scans' lengths)"
    )
    result.evidence.append(f"checkpoint boundary: {found['checkpoint'] or 'none'} ({found['where']})")


def check_loss_fn(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
    """``grad`` must be the gradient of the ``loss_fn()`` inspected (to rounding: one is jitted)."""
    import jax

    with jax.enable_x64(weights.dtype == np.float64):
        expected = np.asarray(jax.grad(backend.loss_fn())(weights, x))
    got = np.asarray(backend.grad(weights, x))
    differ, ulps = ulp_difference(got, expected)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    close = got.shape == expected.shape and np.allclose(got, expected, rtol=1e-4, atol=1e-5 * scale)
    if not close:
        result.problems.append(
            "`grad` does not return the gradient of `loss_fn()`: the program inspected is not the one "
            f"that runs ({differ} entries differ)"
        )
        return
    same = "bit for bit" if not differ else f"{differ} entries differ, by at most {ulps:.3g} ulp"
    result.evidence.append(f"`grad` agrees with jax.grad(loss_fn()): {same}")


def jax_residuals(loss: Any, weights: Any, x: Any) -> list[Residual]:
    """What the public ``jax.ad_checkpoint.print_saved_residuals(loss, weights, x)`` prints, as records.

    Each printed line (``f32[4,2,3] output of scan from ...``) is parsed; its dtype is taken from the
    residuals of ``jax.vjp`` (the leaves of its backward function, shapes from ``jax.eval_shape``), and
    the lines read must be exactly those residuals, or it is an error (never a shorter list).
    """
    import inspect

    try:
        first = next(iter(inspect.signature(loss).parameters))
    except (TypeError, ValueError, StopIteration):
        first = "weights"
    out = []
    for shape, dtype, origin in _printed_residuals(loss, weights, x):
        # The weights themselves, or a reshaped / sliced view of them (segments, an unrolled loop).
        reshaped = origin.split(" from ")[0] in {f"output of {p}" for p in _WEIGHT_VIEWS}
        is_weights = origin == f"from the argument {first}" or (
            reshaped and shape[-2:] == tuple(weights.shape[-2:]) and dtype == weights.dtype
        )
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        role = "weights" if is_weights else "activation"
        # "output of scan from /long/path/backends/jax.py:25:15 (_loss)" -> "... at jax.py:25 (_loss)"
        origin = re.sub(r" from (?:\S*/)?([^/\s:]+:\d+)(?::\d+)?", r" at \1", origin)
        origin = re.sub(r"\((?:[^()\s]*\.)?([^.()\s]+)\)$", r"(\1)", origin)  # (a.<locals>.loss) -> (loss)
        out.append(Residual(shape, dtype.name, nbytes, origin, role))
    return out


#: A line of ``print_saved_residuals``: ``f32[4,2,3] output of scan from ...`` (a memory space in
#: ``<...>`` and sharding marks after the shape are allowed and ignored).
_PRINTED = re.compile(r"(?P<dtype>[^\s<\[]+)(?:<[^>]*>)?\[(?P<shape>[^\]]*)\]\S* (?P<origin>.+)")


def _printed_residuals(loss: Any, weights: Any, x: Any) -> list[tuple[tuple[int, ...], np.dtype, str]]:
    """``(shape, dtype, origin)`` of each line ``print_saved_residuals`` prints, checked against the
    residuals ``jax.vjp`` keeps (the same values, as a multiset of shapes and dtypes)."""
    import contextlib
    import io
    from collections import Counter

    import jax
    from jax.ad_checkpoint import print_saved_residuals

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_saved_residuals(loss, weights, x)
    kept = jax.eval_shape(lambda w, y: jax.tree_util.tree_leaves(jax.vjp(loss, w, y)[1]), weights, x)
    dtypes = {_short_dtype_name(np.dtype(leaf.dtype)): np.dtype(leaf.dtype) for leaf in kept}
    lines = printed.getvalue().splitlines()
    out = []
    for line in lines:
        # Anything else printed while tracing (the loss's own prints) is not a residual: skipped, and
        # the lines read must still be exactly the residuals jax.vjp keeps (checked below).
        match = _PRINTED.fullmatch(line)
        dims = match["shape"].split(",") if match and match["shape"] else []
        if match and match["dtype"] in dtypes and all(re.match(r"\d+", d) for d in dims):
            shape = tuple(int(re.findall(r"\d+", d)[0]) for d in dims)
            out.append((shape, dtypes[match["dtype"]], match["origin"]))
    expected = Counter((tuple(leaf.shape), np.dtype(leaf.dtype)) for leaf in kept)
    if Counter((shape, dtype) for shape, dtype, _ in out) != expected:
        raise RuntimeError(
            f"jax.ad_checkpoint.print_saved_residuals printed {len(out)} residual line(s) that are not "
            f"the {len(kept)} residuals jax.vjp keeps: the residuals cannot be listed"
        )
    return out


def _short_dtype_name(dtype: np.dtype) -> str:
    """How JAX prints a dtype in short form: ``f32``, ``bf16``, ``i8``, ``u32``, ``c64``, ``bool``."""
    name = dtype.name.replace("float", "f").replace("uint", "u").replace("int", "i")
    return name.replace("complex", "c").replace("void", "float0")


def jax_structure(jaxpr: Any, *, layers: int) -> dict[str, Any]:
    """Walk a (gradient) jaxpr and its sub-jaxprs; say how the weights (its first input) are consumed.

    Returns a dict: ``scan`` (the weights are consumed by a scan over ``layers`` steps, or by nested
    scans whose lengths multiply to it), ``weight_scans`` (length and direction of every scan consuming
    the weights), ``weight_products_outside_scan``, ``remat_count``, ``forward_layers`` and
    ``recomputed_layers`` (products ``y @ w`` run, through the scans' lengths), ``checkpoint``
    (``"layer"``, ``"scan"``, ``"segment"``, ``"other"`` or None) with ``where`` and ``why_not``.
    """
    walk = _Walk(layers)
    walk.visit(jaxpr, {id(jaxpr.invars[0])}, ())
    return walk.summary()


class _Walk:
    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.scans: list[dict[str, Any]] = []
        self.remats: list[dict[str, Any]] = []
        self.outside = 0
        self.forward_products = 0

    def visit(self, jaxpr: Any, weights: set[int], context: tuple, times: int = 1) -> None:
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            consumes = any(id(v) in weights for v in eqn.invars)
            if consumes and name in _SHAPE_PRIMITIVES:
                weights = weights | {id(v) for v in eqn.outvars}
            if name == "dot_general" and consumes and not any(c[0] == "scan" for c in context):
                self.outside += 1
            if name == "dot_general" and id(eqn.invars[1]) in weights and _is_forward_product(eqn):
                self.forward_products += times  # y @ w, run `times` times by the enclosing scans
            here = context
            if name == "scan":
                length = int(eqn.params["length"])
                nested = [c[1] for c in context if c[0] == "scan" and c[2]]
                if consumes:
                    self.scans.append(
                        {"length": length, "reverse": bool(eqn.params["reverse"]), "in": nested}
                    )
                here = (*context, ("scan", length, consumes))
            elif name in REMAT_PRIMITIVES:
                record = {"inside_scans": [c[1] for c in context if c[0] == "scan"], "contains": []}
                self.remats.append(record)
                here = (*context, ("remat", record))
            for sub in _sub_jaxprs(eqn):
                inner = {id(s) for s, v in zip(sub.invars, eqn.invars, strict=False) if id(v) in weights}
                if len(sub.invars) != len(eqn.invars):
                    inner = set()
                self._note_scans_in_remat(here, sub)
                self.visit(sub, inner, here, times * (int(eqn.params["length"]) if name == "scan" else 1))

    def _note_scans_in_remat(self, context: tuple, sub: Any) -> None:
        for c in context:
            if c[0] == "remat":
                c[1]["contains"].extend(
                    int(e.params["length"]) for e in sub.eqns if e.primitive.name == "scan"
                )

    def summary(self) -> dict[str, Any]:
        lengths = {s["length"] for s in self.scans}
        single = self.layers in lengths
        nested = any(s["in"] and s["length"] * s["in"][-1] == self.layers for s in self.scans)
        checkpoint, where = self._boundary()
        why_not = (
            "the gradient program contains no checkpoint (remat) primitive, so every residual is kept "
            "from forward to backward and nothing is recomputed"
            if not self.remats
            else ""
        )
        return {
            "scan": bool(single or nested),
            "scan_kind": "one scan over the layers" if single else "nested scans" if nested else "none",
            "weight_scans": [{"length": s["length"], "reverse": s["reverse"]} for s in self.scans],
            "weight_products_outside_scan": self.outside,
            "remat_count": len(self.remats),
            "forward_layers": min(self.forward_products, self.layers),
            "recomputed_layers": self.forward_products - min(self.forward_products, self.layers),
            "checkpoint": checkpoint,
            "where": where,
            "why_not": why_not,
        }

    def _boundary(self) -> tuple[str | None, str]:
        layers = self.layers
        for remat in self.remats:
            if remat["inside_scans"] and remat["contains"]:
                return "segment", "a checkpointed body containing a scan, inside a scan over segments"
        for remat in self.remats:
            if layers in remat["contains"]:
                return "scan", f"the checkpoint wraps a scan over all {layers} layers"
        for remat in self.remats:
            if layers in remat["inside_scans"]:
                return "layer", f"the checkpoint sits inside the body of the scan over {layers} layers"
        if len(self.remats) >= layers:
            return "layer", f"{len(self.remats)} checkpoints outside any scan (an unrolled loop)"
        if self.remats:
            return "other", f"{len(self.remats)} checkpoint(s) at no recognised boundary"
        return None, "no checkpoint primitive in the gradient program"


def _is_forward_product(eqn: Any) -> bool:
    """``y @ w``: contracts the activations' last axis with the weights' first, no batch axes."""
    (lhs, rhs), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    return tuple(lhs) == (1,) and tuple(rhs) == (0,) and not lhs_batch and not rhs_batch


def _sub_jaxprs(eqn: Any):
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns") and hasattr(item, "invars"):
                yield item
            elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):
                yield item.jaxpr
