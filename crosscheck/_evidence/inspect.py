"""Is it really checkpointed? Inspect how a backend computes the gradient and what it keeps for backward.

Numerical agreement cannot show that a backend uses ``lax.scan`` and ``jax.checkpoint`` or
``torch.utils.checkpoint``: a plain unrolled loop gives the same numbers. This module looks instead
(the driver and the claims check here; each framework's walk in its folder's ``walk.py``, e.g. the
JAX walk in ``backends/jax/walk.py``, the PyTorch watcher in ``backends/torch/walk.py``; the records in
``inspect_records``).

- **JAX** backends expose ``loss_fn()``, the scalar loss they differentiate. The program of
  ``jax.grad(loss)`` is traced (``jax.make_jaxpr``) and walked through every sub-program: which ``scan``
  consumes the weights and over how many steps, and where the checkpoint (remat) primitive sits: inside
  the scan body (a per-layer boundary), around the whole scan, or around segments of layers. Residuals
  are what the public ``jax.ad_checkpoint.print_saved_residuals`` prints, checked against ``jax.vjp``'s.
- **PyTorch** backends are watched while ``grad`` runs, with no help from them: a ``TorchFunctionMode``
  records every torch function called and whether autograd's engine is running a node (backward), and
  ``torch.autograd.graph.saved_tensors_hooks`` records every tensor autograd saves during forward. A
  ReLU that runs during backward is a layer's forward running again (ReLU's own backward is
  ``threshold_backward``); a checkpointed region saves only its inputs (through
  ``torch.utils.checkpoint``), its inner operations save nothing until they are recomputed.

A backend states what it does in a ``claims`` attribute, e.g. ``{"scan": True, "checkpoint": "layer"}``
(``"checkpoint"``: ``"layer"``, ``"scan"``, ``"segment"`` or ``None``); a claim the program contradicts
is a problem.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._backends import (
    DECLARED,
    Framework,
    backend_info,
    framework_named,
    import_adapter,
    install_hint,
)
from crosscheck._evidence.inspect_records import Residual, Structure, grouped, ulp_difference

__all__ = ["Residual", "Structure", "grouped", "inspect_backend", "plain_sibling", "ulp_difference"]


def stack_inputs(*, layers: int, batch: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(weights, x)`` of the stack of this shape (gaussian, float32), made by the workload itself
    (``load_workload("stack")``) as a run makes them."""
    from crosscheck._workloads.registry import load_workload

    stack = load_workload("stack").configure(layers=layers, batch=batch, dim=dim)
    point = stack.point(dtype="float32", seed=seed)
    return point.params["weights"], point.inputs["x"]


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
    found = framework.name if framework else ""
    result = Structure(backend=name, framework=found, layers=int(weights.shape[0]), claims=claims)
    if framework is None:
        kinds = " nor ".join(f.inspectable for f in DECLARED)
        result.evidence.append(f"not inspectable: neither {kinds}")
        if claims and any(claims.get(k) for k in ("scan", "checkpoint")):
            result.problems.append(f"claims {_claims_text(claims)} but offers no way to verify it")
        return result
    walk = import_adapter(f"{framework.name}.walk", name, install_hint(framework.extra))
    walk.inspect_backend(backend, weights, x, result, check_loss=check_loss)
    _check_claims(result)
    return result


def _framework(backend: Any, claims: dict | None) -> Framework | None:
    """The framework whose marks the backend has (JAX's ``loss_fn``), else the one it declares."""
    for framework in DECLARED:
        if any(callable(getattr(backend, mark, None)) for mark in framework.marks):
            return framework
    declared = (claims or {}).get("framework") or backend_info(backend).get("framework", "")
    return framework_named(declared) if isinstance(declared, str) else None


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


def plain_sibling(structure: Structure) -> str | None:
    """The built-in non-checkpointed variant of the same framework, to cross-check against."""
    framework = framework_named(structure.framework)
    return framework.plain if framework else None
