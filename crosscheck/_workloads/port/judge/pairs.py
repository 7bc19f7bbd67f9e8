"""Which PyTorch module's output is compared with which JAX module's: the pairs the mapping's rows make.

A row pairs the module that owns its PyTorch tensor with the module that owns its JAX leaf; a stacked
layer ``i`` pairs with the JAX module's call in the scan's step of index ``i``
(``stacked.module_pairs``). Rows that do not say one module of each side (a fused tensor's parts,
several modules fused into one leaf, a tied tensor's second use, a conversion's rows that are not one
to one) make no pair: those modules pair by name, or not at all.
"""

from __future__ import annotations

from typing import Any

from crosscheck._workloads.port.declare.build import Prepared
from crosscheck._workloads.port.mapping.stacked import is_stacked
from crosscheck._workloads.port.mapping.stacked import module_pairs as stacked_pairs
from crosscheck._workloads.port.mapping.table import one_to_one


def module_pairs(prepared: Prepared) -> dict[str, str]:
    """PyTorch module -> JAX module of every mapped tensor (dotted names, without Flax's collection; a
    stacked layer ``i``: the module's call in the step of index ``i``, ``stacked.module_pairs``); not a
    fused tensor's parts (``in_proj_weight``'s module holds the JAX ``query``, ``key``, ``value``) nor
    the tensors of several modules fused into one leaf (``q_proj``, ``k_proj`` into ``qkv``; per layer
    of a stacked leaf): their modules pair by name, or not at all; nor a tied tensor's second use
    (``wte.weight`` as the head's kernel: ``lm_head`` pairs by name). With ``convert=``, the one-to-one
    pairs only (``mapping.one_to_one``)."""

    rows = [e for e in prepared.table.mapped() if e.torch is not None and e.jax is not None]
    if prepared.port.convert is not None:
        return one_to_one([(".".join(e.torch.module), ".".join(e.jax.module)) for e in rows])  # type: ignore[union-attr]
    fused: dict[tuple, set] = {}
    for e in rows:
        if e.box:
            fused.setdefault(_part(e, is_stacked(e)), set()).add(e.torch.module)  # type: ignore[union-attr]
    kept, seen = [], set()
    for e in rows:
        if e.take is None and len(fused.get(_part(e, is_stacked(e)), ())) <= 1 and e.torch.name not in seen:  # type: ignore[union-attr]
            kept.append(e)
        seen.add(e.torch.name)  # type: ignore[union-attr]
    return stacked_pairs(kept)


def _part(e: Any, stacked: bool) -> tuple:
    """The part of a JAX leaf a row's tensor shares with others: the leaf, or its layer when stacked."""
    return (e.jax.path, e.box[0][1] if stacked else None)
