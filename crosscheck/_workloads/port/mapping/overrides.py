"""A port's ``overrides``: PyTorch name or glob pattern -> what the tensor maps to (see ``crosscheck.Port``).

A pattern's ``*`` wildcards are captured, and a target path reuses them: each ``*`` of the target takes
the text of the pattern's wildcard at the same position, ``{1}``, ``{2}`` name one by its number. One
line then covers every layer::

    {"layer.*.conv.weight": "params/layer/layer_*/conv/kernel"}
    {"blocks.*.attn.*.weight": ("params/blocks_{1}/{2}/kernel", "transpose")}

``(path, [transform,] "stacked")`` maps the tensor onto one layer of a stacked leaf ``(L, ...)``, the
pattern's first ``*`` its index (``stacked.override``)::

    {"layers.*.linear.weight": ("params/layers/linear/kernel", "transpose", "stacked")}

reshaped to the layer where it has head axes; ``(path, transform, box, "stacked")`` puts it into that
box of the layer (a part of a stacked fused leaf).

``None`` leaves the tensor unmapped: the PyTorch model keeps its value (a constant of the check), its
gradient is not checked, and the mapping table and the report say so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from crosscheck._workloads.port.mapping import fused
from crosscheck._workloads.port.mapping.assemble import splits_heads
from crosscheck._workloads.port.mapping.matching import (
    HEADS_FIRST,
    HEADS_LAST,
    TRANSFORMS,
    UNMAPPED,
    Entry,
    Index,
    Tensor,
    layout_entry,
    match,
    said_order,
    transformed,
)
from crosscheck._workloads.port.mapping.stacked import override as stacked_override
from crosscheck._workloads.port.mapping.stacked import wanted as stacked_wanted

#: A reference to a captured wildcard in a target path: ``*`` (the next one) or ``{n}`` (the n-th).
REFERENCE = re.compile(r"\*|\{(\d+)\}")


def decide(
    overrides: Mapping[str, Any],
    by_name: dict,
    leaves: dict,
    index: Index,
    problems: list[ValueError] | None = None,
) -> dict[str, Entry | list[Entry]]:
    """The entries the overrides decide, by PyTorch name (a later pattern wins over an earlier one).
    With ``problems``, each override that does not fit is appended to it and left out (the tensor is
    matched as if it had none), so that every bad override is said at once.

    Raises:
        ValueError: without ``problems``: a pattern that matches no PyTorch tensor, a target with more
            wildcards than its pattern, or an override that does not fit (see ``_override``): one line
            each, with the fix.
    """
    out: dict[str, Entry | list[Entry]] = {}
    decide_one = lambda t, v, ls: _override(t, v, ls, index)  # noqa: E731  (one leaf, for `stacked`)
    for pattern, value in overrides.items():
        regex = _regex(str(pattern))
        found = [(n, m.groups()) for n in by_name if (m := regex.fullmatch(n)) is not None]
        if not found:
            _refuse(
                ValueError(
                    f"override `{pattern}` matches no PyTorch tensor; names look like "
                    f"`{next(iter(by_name), '')}`."
                ),
                problems,
            )
        for name, groups in found:
            try:
                if stacked_wanted(value):  # one layer of a stacked leaf, the pattern's first `*`
                    value_filled = (_fill(value[0], groups, str(pattern)), *value[1:])
                    out[name] = stacked_override(
                        by_name[name], value_filled, groups, str(pattern), leaves, decide_one
                    )
                    continue
                target = _substitute(value, groups, str(pattern))
                out[name] = _override(by_name[name], target, leaves, index)
            except ValueError as exc:
                _refuse(exc, problems)
    return out


def _refuse(exc: ValueError, problems: list[ValueError] | None) -> None:
    """Raise ``exc``, or, collecting (``problems`` a list), append it."""
    if problems is None:
        raise exc
    if str(exc) not in map(str, problems):  # a pattern's same mistake for each tensor it matches: once
        problems.append(exc)


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


def _substitute(value: object, groups: tuple[str, ...], pattern: str) -> object:
    """``value`` with the captured wildcards put into its target path (a string, or a tuple's first;
    each part of a split)."""
    if isinstance(value, list):
        return [_substitute(v, groups, pattern) for v in value]
    if isinstance(value, dict) and isinstance(value.get("parts"), list):
        return {**value, "parts": _substitute(value["parts"], groups, pattern)}
    if isinstance(value, tuple) and len(value) in (2, 3) and isinstance(value[0], str):
        return (_fill(value[0], groups, pattern), *value[1:])
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


def _override(t: Tensor, value: Any, leaves: dict, index: Index) -> Entry | list[Entry]:
    if value is None:
        return Entry(t, None, None, UNMAPPED, unmapped=True)
    if isinstance(value, (list, dict)):  # a fused tensor split into leaves, in order
        return _split(t, value, leaves)
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], str):  # a box of a leaf
        return _boxed(t, value, leaves)
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
    if (isinstance(transform, str) and said_order(transform)) or _regrouped(t, transform, target):
        chosen, how, _ = _chosen(t, target, t.shape, target.shape, 1, transform)
        return Entry(t, target, chosen, f"by override; {how}{fused.heads(t.shape, chosen, target.shape)}")
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


def _regrouped(t: Tensor, transform: Any, target: Tensor) -> bool:
    """Whether a named transform fits ``target`` only with head axes (``(E, E)`` onto ``(E, H, D)``)."""
    if not isinstance(transform, str) or transform not in TRANSFORMS:
        return False
    exact = transformed(transform, TRANSFORMS[transform], t.shape, target.shape) == target.shape
    return not exact and transform in fused.fitting(t.shape, target.shape)


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


def _split(t: Tensor, value: object, leaves: dict[str, Tensor]) -> list[Entry]:
    """The rows of an override that splits ``t`` in order into JAX leaves: ``[PATH or (PATH,
    TRANSFORM), ...]`` along its first axis, ``{"axis": AXIS, "parts": [...]}`` along another.

    Raises:
        ValueError: an axis ``t`` has not, a leaf that does not exist, sizes that do not add up to the
            axis, a transform that does not fit a part (one line, with the fix).
    """
    axis, parts = (value.get("axis", 0), value.get("parts")) if isinstance(value, dict) else (0, value)
    if not isinstance(parts, list) or not parts or not isinstance(axis, int) or not 0 <= axis < len(t.shape):
        raise ValueError(
            f"override of `{t.name}` {t.shape}: a split is a list of JAX leaves, or {{'axis': AXIS, "
            f"'parts': [...]}} with AXIS one of {list(range(len(t.shape)))}; found {value!r}."
        )
    targets = [(p, None) if isinstance(p, str) else tuple(p) for p in parts]
    missing = [p for p, *_ in targets if p not in leaves]
    if missing:
        raise ValueError(
            f"override of `{t.name}`: no JAX leaf `{missing[0]}`; leaves look like `{_one(leaves)}`."
        )
    chosen = [leaves[p] for p, *_ in targets]
    sizes = fused.part_sizes(t.shape[axis], math.prod(t.shape), chosen, t.shape[axis])
    if sizes is None:
        raise ValueError(
            f"override of `{t.name}` {t.shape}: the leaves {[j.shape for j in chosen]} do not split its axis "
            f"{axis} ({t.shape[axis]}) into parts; name the axis: {{'axis': AXIS, 'parts': [...]}}."
        )
    rows: list[Entry] = []
    start = 0
    for (_, *rest), j, size in zip(targets, chosen, sizes, strict=True):
        take = (axis, start, start + size)
        shape = tuple(size if a == axis else d for a, d in enumerate(t.shape))
        transform, how, choices = _chosen(t, j, shape, j.shape, 1, rest[0] if rest else None)
        said = f"by override: part {len(rows) + 1} of `{t.name}` {fused.span(take)}; {how}"
        said += fused.heads(shape, transform, j.shape)
        if transform is None:
            listed = ", ".join(map(repr, choices))
            said += f"; say it: ('{'/'.join(j.path)}', TRANSFORM), TRANSFORM one of {listed}"
        rows.append(Entry(t, j, transform, said, choices, take=take))
        start += size
    return rows


def _boxed(t: Tensor, value: tuple, leaves: dict[str, Tensor]) -> Entry:
    """The row of an override ``(PATH, TRANSFORM, ((AXIS, START, STOP), ...))``: ``t`` fills that box
    of the leaf (a part of a fused ``qkv`` leaf).

    Raises:
        ValueError: a leaf that does not exist, a box outside it, a transform that does not fit.
    """
    from crosscheck._workloads.port.mapping.assemble import box_shape

    path, transform, box = value
    if path not in leaves:
        raise ValueError(
            f"override of `{t.name}`: no JAX leaf `{path}`; leaves look like `{next(iter(leaves), '')}`."
        )
    j = leaves[path]
    try:
        box = tuple((int(a), int(s), int(e)) for a, s, e in box)
        inside = all(0 <= a < len(j.shape) and 0 <= s < e <= j.shape[a] for a, s, e in box)
    except (TypeError, ValueError):
        inside = False
    if not inside:
        raise ValueError(
            f"override of `{t.name}`: the box {value[2]!r} is not ((AXIS, START, STOP), ...) inside "
            f"{j.shape} of `{path}`."
        )
    shape = box_shape(j.shape, box)
    start = math.prod(j.shape[: box[0][0]]) if len(box) == 1 else 1
    chosen, how, choices = _chosen(t, j, t.shape, shape, start, transform)
    return Entry(
        t,
        j,
        chosen,
        f"by override: at {fused.span(box[0])}; {how}{fused.heads(t.shape, chosen, shape)}",
        choices,
        box=box,
    )


def _chosen(t: Tensor, j: Tensor, shape: tuple, box: tuple, start: int, transform: str | None) -> tuple:
    """The transform an override says (checked against the shapes), else the one the layouts decide."""
    if transform is None:
        return fused.decide([(t, j, shape, box, start)])
    fits = fused.fitting(shape, box, start)
    said = said_order(transform) if isinstance(transform, str) else ""
    split = [f for f in fits if splits_heads(fused.moved(f, shape) or (), box)]
    fits += [f"{f}, {order}" for order in (HEADS_LAST, HEADS_FIRST) for f in split]
    if transform not in fits:
        raise ValueError(
            f"override of `{t.name}`: `{transform}` does not turn {shape} into {box} of "
            f"`{'/'.join(j.path)}` (a reshape may only split or join axes"
            f"{f', and {said} only where an axis splits into head axes' if said else ''}); "
            f"fitting: {fits or 'none'}."
        )
    return transform, "the transform it says", ()


def _one(leaves: dict[str, Tensor]) -> str:
    return next(iter(leaves), "")
