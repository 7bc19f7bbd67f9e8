"""Is it really checkpointed? Inspect how a backend computes the gradient and what it keeps for backward.

Numerical agreement cannot show that a backend uses ``lax.scan`` and ``jax.checkpoint`` or
``torch.utils.checkpoint``: a plain unrolled loop gives the same numbers. This module looks instead.

- **JAX** backends expose ``loss_fn()``, the scalar loss they differentiate. The program of
  ``jax.grad(loss)`` is traced (``jax.make_jaxpr``) and walked through every sub-program: which ``scan``
  consumes the weights and over how many steps, and where the checkpoint (remat) primitive sits: inside
  the scan body (a per-layer boundary), around the whole scan, or around segments of layers. Residuals
  come from ``jax.ad_checkpoint``'s ``saved_residuals``, what ``print_saved_residuals`` prints.
- **PyTorch** backends are watched while ``grad`` runs, with no help from them: a dispatch mode records
  every operation and whether autograd's engine is running it (backward), and
  ``torch.autograd.graph.saved_tensors_hooks`` records every tensor autograd saves during forward. A
  ReLU that runs during backward is a layer's forward running again (ReLU's own backward is
  ``threshold_backward``); a checkpointed region saves only its inputs (through
  ``torch.utils.checkpoint``), its inner operations save nothing until they are recomputed.

A backend states what it does in a ``claims`` attribute, e.g. ``{"scan": True, "checkpoint": "layer"}``
(``"checkpoint"``: ``"layer"``, ``"scan"``, ``"segment"`` or ``None``); a claim the program contradicts
is a problem.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np

from crosscheck._registry import backend_info

#: Primitives that carry a checkpointed sub-program (``jax.checkpoint`` / ``jax.remat``).
REMAT_PRIMITIVES = frozenset({"remat2", "checkpoint", "remat"})
#: Primitives that only re-shape or re-type the weights: their outputs are still "the weights".
_SHAPE_PRIMITIVES = frozenset(
    {"reshape", "transpose", "squeeze", "expand_dims", "convert_element_type", "copy", "slice"}
    | {"dynamic_slice", "index_in_dim", "gather", "broadcast_in_dim"}
)
#: Residuals made by these from the weights are (views of) the weights, e.g. ``weights[k]``.
_WEIGHT_VIEWS = frozenset({"reshape", "squeeze", "slice", "dynamic_slice", "transpose"})


@dataclass
class Residual:
    """One value kept from forward to backward."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    origin: str
    role: str  # "weights" (the parameters, alive anyway) or "activation" (x and what is computed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "bytes": self.nbytes,
            "origin": self.origin,
            "role": self.role,
        }


@dataclass
class Structure:
    """What ``inspect_backend`` found for one backend, against what it claims."""

    backend: str
    framework: str  # "jax", "torch", or "" when the backend cannot be inspected
    layers: int
    claims: dict[str, Any] | None
    found: dict[str, Any] = field(default_factory=dict)
    residuals: list[Residual] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No claim is contradicted by what the program does."""
        return not self.problems

    @property
    def activation_bytes(self) -> int:
        """Bytes kept for backward besides the weights (which are alive anyway)."""
        return sum(r.nbytes for r in self.residuals if r.role != "weights")

    @property
    def residual_bytes(self) -> int:
        """Bytes of every residual, the weights included."""
        return sum(r.nbytes for r in self.residuals)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "framework": self.framework,
            "layers": self.layers,
            "claims": self.claims,
            "found": self.found,
            "ok": self.ok,
            "problems": self.problems,
            "evidence": self.evidence,
            "residuals": [r.to_dict() for r in self.residuals],
            "residual_bytes": self.residual_bytes,
            "activation_bytes": self.activation_bytes,
        }


def inspect_backend(
    backend: Any, weights: np.ndarray, x: np.ndarray, *, check_loss: bool = True
) -> Structure:
    """Inspect how ``backend`` differentiates the stack on these inputs, and check its ``claims``.

    Args:
        backend: a loaded backend (``crosscheck.load_backend``). JAX backends must offer ``loss_fn()``;
            PyTorch ones are recognised by ``info()["framework"] == "torch"`` or a ``"framework"`` claim.
        weights: ``(L, d, d)`` array.
        x: ``(N, d)`` array.
        check_loss: for a JAX backend, also check that ``grad`` returns the gradient of ``loss_fn()``
            (otherwise the program inspected need not be the one that runs).

    Returns:
        A ``Structure``; ``.ok`` is False when a claim is contradicted, or when the backend claims
        checkpointing but cannot be inspected.
    """
    claims = getattr(backend, "claims", None)
    claims = dict(claims) if isinstance(claims, dict) else None
    name = getattr(backend, "name", type(backend).__name__)
    framework = _framework(backend, claims)
    result = Structure(backend=name, framework=framework, layers=int(weights.shape[0]), claims=claims)
    if framework == "jax":
        _inspect_jax(backend, weights, x, result)
        if check_loss:
            _check_loss_fn(backend, weights, x, result)
    elif framework == "torch":
        _inspect_torch(backend, weights, x, result)
    else:
        result.evidence.append(
            "not inspectable: neither a JAX backend with `loss_fn()` nor a PyTorch backend"
        )
        if claims and any(claims.get(k) for k in ("scan", "checkpoint")):
            result.problems.append(f"claims {_claims_text(claims)} but offers no way to verify it")
        return result
    _check_claims(result)
    return result


def _framework(backend: Any, claims: dict | None) -> str:
    if callable(getattr(backend, "loss_fn", None)):
        return "jax"
    declared = (claims or {}).get("framework") or backend_info(backend).get("framework", "")
    return declared if declared in ("jax", "torch") else ""


def _claims_text(claims: dict[str, Any]) -> str:
    parts = []
    if claims.get("scan"):
        parts.append("a scan over the layers")
    checkpoint = claims.get("checkpoint")
    parts.append(f"checkpointing per {checkpoint}" if checkpoint else "no checkpointing")
    return ", ".join(parts)


def _check_claims(result: Structure) -> None:
    claims, found = result.claims, result.found
    if claims is None:
        result.evidence.append("the backend claims nothing (no `claims` attribute): nothing to check")
        return
    if claims.get("scan") and not found.get("scan"):
        result.problems.append(
            "claims a scan over the layers, but no scan consumes the weights: "
            f"{found.get('weight_products_outside_scan', 0)} products with the weights run outside any "
            "scan (an unrolled loop)"
        )
    claimed, boundary = claims.get("checkpoint"), found.get("checkpoint")
    if result.layers == 1 and {claimed, boundary} == {"layer", "segment"}:
        boundary = claimed  # one layer: a segment of one layer is a layer
    if claimed and not boundary:
        result.problems.append(
            f"claims checkpointing per {claimed}, but is NOT checkpointed: {found.get('why_not', '')}"
        )
    elif claimed and boundary != claimed:
        result.problems.append(
            f"claims checkpointing per {claimed}, but the boundary found is per {boundary}"
        )
    elif not claimed and boundary:
        result.problems.append(f"claims no checkpointing, but it is checkpointed per {boundary}")


# --- JAX -------------------------------------------------------------------------------------------


def _inspect_jax(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
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


def _check_loss_fn(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
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
    """What ``jax.ad_checkpoint.print_saved_residuals(loss, weights, x)`` prints, as records."""
    import inspect

    # Not re-exported publicly; `jax.ad_checkpoint.print_saved_residuals` prints exactly this list.
    from jax._src.ad_checkpoint import saved_residuals

    try:
        first = next(iter(inspect.signature(loss).parameters))
    except (TypeError, ValueError, StopIteration):
        first = "weights"
    out = []
    for aval, origin in saved_residuals(loss, weights, x):
        shape = tuple(int(n) for n in aval.shape)
        dtype = np.dtype(aval.dtype)
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


# --- PyTorch ---------------------------------------------------------------------------------------


def _inspect_torch(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
    ops, saved = watch_torch(backend, weights, x)
    layers = result.layers
    forward_relu = sum(n for (op, backward), n in ops.items() if op.startswith("aten.relu") and not backward)
    recomputed = sum(n for (op, backward), n in ops.items() if op.startswith("aten.relu") and backward)
    result.residuals = saved
    ckpt_inputs = [r for r in saved if r.origin == "checkpoint input" and r.role == "activation"]
    other = [r for r in saved if r.origin != "checkpoint input" and r.role == "activation"]
    if recomputed == 0:
        checkpoint = None
    elif recomputed == layers and len(ckpt_inputs) == layers:
        checkpoint = "layer"
    elif 0 < len(ckpt_inputs) < layers:
        checkpoint = "segment"
    else:
        checkpoint = "other"
    result.found = {
        "checkpoint": checkpoint,
        "forward_layers": forward_relu,
        "recomputed_layers": recomputed,
        "checkpoint_inputs": len(ckpt_inputs),
        "saved_outside_checkpoints": len(other),
        "why_not": "no layer's forward ran again during backward (0 ReLUs recomputed), and autograd "
        f"saved {len(other)} activations outside any checkpoint"
        if checkpoint is None
        else "",
    }
    result.evidence.append(
        f"forward ran {forward_relu} layer(s); during backward {recomputed} layer forward(s) ran again "
        "(counted as ReLUs executed by autograd's engine)"
    )
    result.evidence.append(
        f"autograd saved {len(ckpt_inputs)} activation(s) as checkpoint inputs and {len(other)} "
        f"elsewhere ({', '.join(sorted({r.origin for r in other})) or 'none'})"
    )


def watch_torch(backend: Any, weights: np.ndarray, x: np.ndarray) -> tuple[Counter, list[Residual]]:
    """Run ``backend.grad`` once, recording every aten operation (and whether it ran in backward) and
    every tensor autograd saved during forward (deduplicated: a tensor saved twice counts once)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: Counter = Counter()
    saved: dict[tuple, Residual] = {}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops[(str(func), torch._C._current_autograd_node() is not None)] += 1
            return func(*args, **(kwargs or {}))

    def pack(tensor):
        if torch._C._current_autograd_node() is None:  # kept from forward to backward
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
            saved.setdefault(key, _torch_residual(tensor))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Recorder():
        backend.grad(weights, x)
    return ops, list(saved.values())


def _torch_residual(tensor: Any) -> Residual:
    base = tensor._base if tensor._base is not None else tensor
    is_weights = base.is_leaf and base.requires_grad
    return Residual(
        tuple(int(n) for n in tensor.shape),
        str(tensor.dtype).removeprefix("torch."),
        tensor.numel() * tensor.element_size(),
        _torch_origin(),
        "weights" if is_weights else "activation",
    )


def _torch_origin() -> str:
    """Who asked autograd to save: a checkpoint's inputs, or an operation in the user's code."""
    frame: FrameType | None = sys._getframe(2)
    torch_dir = os.sep + "torch" + os.sep
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.endswith(os.path.join("utils", "checkpoint.py")) and torch_dir in filename:
            return "checkpoint input"
        if torch_dir not in filename and filename != __file__:
            return f"saved by autograd in {frame.f_code.co_name} ({os.path.basename(filename)})"
        frame = frame.f_back
    return "saved by autograd"


# --- agreement with the plain variant ----------------------------------------------------------------


def grouped(residuals: list[Residual]) -> list[tuple[int, Residual]]:
    """Identical residuals (shape, dtype, role, origin) counted once each: ``[(count, residual)]``."""
    counts: Counter = Counter((r.shape, r.dtype, r.nbytes, r.origin, r.role) for r in residuals)
    return [(n, Residual(*key)) for key, n in counts.items()]


def ulp_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    """How many entries differ, and the largest difference in units in the last place of the larger."""
    a, b = np.asarray(a), np.asarray(b)
    differ = int(np.count_nonzero(a != b))
    if not differ:
        return 0, 0.0
    spacing = np.spacing(np.maximum(np.abs(a), np.abs(b)))
    return differ, float(np.max(np.abs(a.astype(np.float64) - b) / spacing))


def plain_sibling(structure: Structure) -> str | None:
    """The built-in non-checkpointed variant of the same framework, to cross-check against."""
    return {"jax": "jax-plain", "torch": "torch-plain"}.get(structure.framework)
