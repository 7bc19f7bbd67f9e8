"""A port's ``overrides``: PyTorch name or glob pattern -> what the tensor maps to (see ``crosscheck.Port``).

A pattern's ``*`` wildcards are captured, and a target path reuses them: each ``*`` of the target takes
the text of the pattern's wildcard at the same position, ``{1}``, ``{2}`` name one by its number. One
line then covers every layer::

    {"layer.*.conv.weight": "params/layer/layer_*/conv/kernel"}
    {"blocks.*.attn.*.weight": ("params/blocks_{1}/{2}/kernel", "transpose")}

``(path, [transform,] "stacked")`` maps the tensor onto one layer of a stacked leaf ``(L, ...)``, the
pattern's first ``*`` its index (``stacked.override``)::

    {"layers.*.linear.weight": ("params/layers/linear/kernel", "transpose", "stacked")}

``None`` leaves the tensor unmapped: the PyTorch model keeps its value (a constant of the check), its
gradient is not checked, and the mapping table and the report say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from crosscheck._workloads.port.matching import (
    TRANSFORMS,
    UNMAPPED,
    Entry,
    Index,
    Tensor,
    layout_entry,
    match,
    transformed,
)
from crosscheck._workloads.port.stacked import override as stacked_override
from crosscheck._workloads.port.stacked import wanted as stacked_wanted

#: A reference to a captured wildcard in a target path: ``*`` (the next one) or ``{n}`` (the n-th).
REFERENCE = re.compile(r"\*|\{(\d+)\}")


def decide(overrides: Mapping[str, Any], by_name: dict, leaves: dict, index: Index) -> dict[str, Entry]:
    """The entries the overrides decide, by PyTorch name (a later pattern wins over an earlier one).

    Raises:
        ValueError: a pattern that matches no PyTorch tensor, a target with more wildcards than its
            pattern, or an override that does not fit (see ``_override``): one line each, with the fix.
    """
    out: dict[str, Entry] = {}
    decide_one = lambda t, v, ls: _override(t, v, ls, index)  # noqa: E731  (one leaf, for `stacked`)
    for pattern, value in overrides.items():
        regex = _regex(str(pattern))
        found = [(n, m.groups()) for n in by_name if (m := regex.fullmatch(n)) is not None]
        if not found:
            raise ValueError(
                f"override `{pattern}` matches no PyTorch tensor; names look like "
                f"`{next(iter(by_name), '')}`."
            )
        for name, groups in found:
            if stacked_wanted(value):  # one layer of a stacked leaf, the pattern's first `*`
                value_filled = (_fill(value[0], groups, str(pattern)), *value[1:])
                out[name] = stacked_override(
                    by_name[name], value_filled, groups, str(pattern), leaves, decide_one
                )
                continue
            target = _substitute(value, groups, str(pattern))
            out[name] = _override(by_name[name], target, leaves, index)
    return out


def _regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression whose ``*`` are groups (``?`` one character, ``[...]`` a set)."""
    parts, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        close = pattern.find("]", i + 2) if c == "[" else -1
        if c == "*":
            parts.append("(.*?)")
        elif c == "?":
            parts.append(".")
        elif close > 0:
            inner = pattern[i + 1 : close]
            parts.append(
                "[" + ("^" + inner[1:] if inner.startswith("!") else inner).replace("\\", "\\\\") + "]"
            )
            i = close
        else:
            parts.append(re.escape(c))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def _substitute(value: Any, groups: tuple[str, ...], pattern: str) -> Any:
    """``value`` with the captured wildcards put into its target path (a string, or a tuple's first)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return (_fill(value[0], groups, pattern), value[1])
    return _fill(value, groups, pattern) if isinstance(value, str) else value


def _fill(path: str, groups: tuple[str, ...], pattern: str) -> str:
    if path in TRANSFORMS or not REFERENCE.search(path):
        return path
    position = iter(range(len(groups) + 1))

    def one(found: re.Match[str]) -> str:
        k = int(found.group(1)) - 1 if found.group(1) else next(position)
        if not 0 <= k < len(groups):
            raise ValueError(
                f"override `{pattern}` -> `{path}`: the target refers to wildcard {k + 1}, the pattern "
                f"has {len(groups)}; each `*` of the target takes the pattern's `*` at its position."
            )
        return groups[k]

    return REFERENCE.sub(one, path)


def _override(t: Tensor, value: Any, leaves: dict, index: Index) -> Entry:
    if value is None:
        return Entry(t, None, None, UNMAPPED, unmapped=True)
    path, transform = (value, None) if isinstance(value, str) and value in leaves else (None, value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        path, transform = value
    elif isinstance(value, str) and "/" in value and value not in leaves:
        path = value  # a path, not a transform's name: said as a missing leaf below
    if path is None:
        auto = match(t, index, set())
        if auto.jax is None:
            raise ValueError(
                f"override of `{t.name}`: {auto.how}; give the JAX path too: ('PATH', {transform!r})."
            )
        target = auto.jax
    elif path not in leaves:
        raise ValueError(
            f"override of `{t.name}`: no JAX leaf `{path}`; leaves look like `{next(iter(leaves), '')}`."
        )
    else:
        target = leaves[path]
    if transform is None:
        return layout_entry(t, target, "by override")
    name = _transform_name(t, transform)
    perm = TRANSFORMS.get(name) if name in TRANSFORMS else tuple(transform)
    shape = transformed(name, perm, t.shape, target.shape)
    if shape is None:
        raise ValueError(
            f"override of `{t.name}`: `{name}` does not apply to {t.shape} against {target.shape} of "
            f"`{'/'.join(target.path)}`."
        )
    if shape != target.shape:
        raise ValueError(
            f"override of `{t.name}`: `{name}` turns {t.shape} into {shape}, not {target.shape} of "
            f"`{'/'.join(target.path)}`."
        )
    return Entry(t, target, name, "by override")


def _transform_name(t: Tensor, transform: Any) -> str:
    if isinstance(transform, str):
        if transform not in TRANSFORMS:
            raise ValueError(
                f"override of `{t.name}`: unknown transform `{transform}` (and no JAX leaf of that path); "
                f"expected one of {', '.join(TRANSFORMS)}, a permutation tuple or a JAX leaf's path."
            )
        return transform
    perm = tuple(transform) if isinstance(transform, (tuple, list)) else None
    if perm is None or sorted(perm) != list(range(len(t.shape))):
        raise ValueError(
            f"override of `{t.name}`: a transform must be a name or a permutation of {len(t.shape)} "
            f"axes, found {transform!r}."
        )
    named = [k for k, v in TRANSFORMS.items() if v == perm or (v is None and perm == tuple(range(len(perm))))]
    return named[0] if named else str(perm)
