"""Which PyTorch module's output is compared with which JAX module's: the pairs the mapping's rows make.

A row pairs the module that owns its PyTorch tensor with the module that owns its JAX leaf; a stacked
layer ``i`` pairs with the JAX module's call in the scan's step of index ``i``
(``stacked.module_pairs``). Rows that do not say one module of each side (a fused tensor's parts,
several modules fused into one leaf, a tied tensor's second use, a conversion's rows that are not one
to one) make no pair: those modules pair by name, or not at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._workloads.port.declare.build import Prepared
from crosscheck._workloads.port.judge import subtrees
from crosscheck._workloads.port.mapping.matching import canonical
from crosscheck._workloads.port.mapping.stacked import is_stacked, module_lists, said
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
        paired = one_to_one(_converted(rows))
        steps = prepared.conversion.steps if prepared.conversion is not None else {}
        for torch_module, jax_module in subtrees.module_pairs(rows, steps).items():
            paired.setdefault(torch_module, jax_module)
        return paired
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


def _converted(rows: list[Any]) -> list[tuple[str, str]]:
    """A conversion's (PyTorch module, JAX module) pairs: a row whose leaf stacks a PyTorch module
    list's layers (``layers.2.linear.weight`` into ``layers/linear/kernel`` ``(L, ...)``) pairs the
    layer with the scan's step of its index, as a stacked row does (``layers.linear@2``)."""
    lists = module_lists(e.torch for e in rows)
    out = []
    for e in rows:
        layer = _layer(e, lists)
        if layer is None:
            out.append((".".join(e.torch.module), ".".join(e.jax.module)))
            continue
        row = dataclasses.replace(e, box=((0, layer, layer + 1),), how=said(layer, e.jax.shape[0]))
        out.extend(stacked_pairs([row]).items())
    return out


def _layer(e: Any, lists: dict[tuple[str, ...], int]) -> int | None:
    """The layer a conversion's row fills of a leaf that stacks its module list, or None: the row's
    PyTorch module with its list's index left out is the leaf's module, whose leading axis is the
    list's length."""
    module = canonical(e.torch.module)
    jax_module = canonical(e.jax.module)
    for k, token in enumerate(module):
        if token.isdigit() and lists.get(module[:k]) == (e.jax.shape or (0,))[0]:
            rest = (*module[:k], *module[k + 1 :])
            if jax_module[len(jax_module) - len(rest) :] == rest:
                return int(token)
    return None


def _part(e: Any, stacked: bool) -> tuple:
    """The part of a JAX leaf a row's tensor shares with others: the leaf, or its layer when stacked."""
    return (e.jax.path, e.box[0][1] if stacked else None)
