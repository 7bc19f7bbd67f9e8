"""Module pairs that a conversion's leaves make, under any names (``Port(convert=fn)``).

``fn``, traced tensor by tensor (``convert.prepare``), says which JAX leaves each PyTorch tensor reaches
and, for a leaf that stacks layers, which index of its leading axis (``Conversion.steps``): the scan's
step that the tensor feeds. A JAX module called in step ``i`` (``blocks.attention@i``) is then made of
a known set of PyTorch tensors: those reaching a leaf under it at index ``i``. The PyTorch module whose
tensors are exactly that set, the smallest one holding them all, and none of whose tensors reaches
anything else, computes the same function of the same weights: the two are paired. So a port under
its own names (``model.layers.0.self_attn`` as ``blocks.attention@0``, its q, k and v fused into one
kernel) has each layer compared, and the first that differs is named, not the layer before the first
module paired by name.

A JAX module whose leaves are not all stacked is one module (no step). A set of tensors that no
PyTorch module holds alone (a leaf made of two modules' tensors and nothing else of either) pairs
nothing; neither does the top module (it pairs by name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from crosscheck._workloads.port.mapping.matching import canonical
from crosscheck._workloads.port.mapping.stacked import module_lists

#: A JAX module's call: its module path and the scan's step (None: not a stacked module).
Key = tuple[tuple[str, ...], int | None]


def module_pairs(rows: Sequence[Any], steps: Mapping[tuple[str, tuple[str, ...]], int]) -> dict[str, str]:
    """PyTorch module -> JAX module call (``blocks.attention@0``) of every subtree the conversion's
    ``rows`` (mapped, a tensor and a leaf each) and ``steps`` (see the module docstring) pair."""
    stacked = _stacked_modules(rows, steps)
    made: dict[Key, set[str]] = {}
    feeds: dict[str, set[tuple[tuple[str, ...], int | None]]] = {}
    modules: dict[str, tuple[str, ...]] = {}
    for e in rows:
        name, leaf = e.torch.name, tuple(e.jax.module)
        modules[name] = tuple(e.torch.module)
        step = steps.get((name, e.jax.path))
        feeds.setdefault(name, set()).add((leaf, step))
        for depth in range(1, len(leaf) + 1):
            module = leaf[:depth]
            made.setdefault((module, step if module in stacked else None), set()).add(name)
    chosen: dict[tuple[str, ...], Key] = {}
    for key, names in made.items():
        holder = _common(modules[n] for n in names)
        if not holder or not _alone(holder, key, names, modules, feeds):
            continue
        if holder not in chosen or len(key[0]) > len(chosen[holder][0]):  # the innermost JAX module
            chosen[holder] = key
    return {".".join(t): _call(key) for t, key in chosen.items()}


def _stacked_modules(
    rows: Sequence[Any], steps: Mapping[tuple[str, tuple[str, ...]], int]
) -> set[tuple[str, ...]]:
    """The JAX modules that stack layers: every row under one fills one index of its leaf's leading
    axis, and each index is filled from one layer of a PyTorch module list, another layer for each
    index (a fused kernel's parts, ``q`` at index 0 and ``k`` at 1 from one layer, are no steps)."""
    lists = module_lists(e.torch for e in rows)
    layers: dict[tuple[str, ...], dict[int, set[tuple[str, ...]]]] = {}
    broken: set[tuple[str, ...]] = set()
    for e in rows:
        leaf, step = tuple(e.jax.module), steps.get((e.torch.name, e.jax.path))
        layer = _layer(canonical(e.torch.module), lists)
        for depth in range(1, len(leaf) + 1):
            if step is None or layer is None:
                broken.add(leaf[:depth])
            else:
                layers.setdefault(leaf[:depth], {}).setdefault(step, set()).add(layer)
    out = set()
    for module, by_step in layers.items():
        each = [next(iter(found)) for found in by_step.values() if len(found) == 1]
        if module not in broken and len(each) == len(by_step) == len(set(each)) >= 2:
            out.add(module)
    return out


def _layer(module: tuple[str, ...], lists: Mapping[tuple[str, ...], int]) -> tuple[str, ...] | None:
    """The layer of a PyTorch module list that ``module`` (canonical) is in (``model, layers, 2``), or
    None."""
    for k, token in enumerate(module):
        if token.isdigit() and module[:k] in lists:
            return module[: k + 1]
    return None


def _common(paths: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    """The longest module path that starts every one of ``paths``."""
    out: tuple[str, ...] | None = None
    for p in paths:
        if out is None:
            out = p
            continue
        k = 0
        while k < min(len(out), len(p)) and out[k] == p[k]:
            k += 1
        out = out[:k]
    return out or ()


def _alone(
    holder: tuple[str, ...],
    key: Key,
    names: set[str],
    modules: Mapping[str, tuple[str, ...]],
    feeds: Mapping[str, set[tuple[tuple[str, ...], int | None]]],
) -> bool:
    """Whether the PyTorch module ``holder`` holds exactly ``names`` and each reaches only ``key``'s
    JAX module (at its step)."""
    under = {n for n, m in modules.items() if m[: len(holder)] == holder}
    if under != names:
        return False
    module, step = key
    return all(
        leaf[: len(module)] == module and (step is None or at == step) for n in names for leaf, at in feeds[n]
    )


def _call(key: Key) -> str:
    module, step = key
    return ".".join(module) + ("" if step is None else f"@{step}")
