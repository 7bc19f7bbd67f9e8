"""How the JAX leaves of a port are made from the PyTorch tensors, and how trained leaves go back.

Each mapped row of the table (``matching.Entry``) is a **piece**: a PyTorch tensor, or the part of it
its ``take`` names (one slice of a fused ``in_proj_weight``), permuted by its ``transform``, reshaped to
its ``box``'s shape and put there in the JAX leaf (a layer of a stacked leaf, a slice of a fused one;
an empty box: the whole leaf). A leaf of one whole piece is that piece; a leaf of several is their
concatenation, put box by box. Every step is a linear map that keeps each entry once (a selection), so
``jax.grad`` of the loss through it returns each PyTorch tensor's gradient in its own name and layout,
the sum over its uses where one tensor makes several leaves (tied weights). Pure array code: the
functions take the array module (``numpy`` or ``jax.numpy``).

``tiling`` says what is wrong with a leaf's pieces (a gap, an overlap, a piece outside the leaf): the
mapping refuses such a leaf, so every leaf crosscheck builds is made of PyTorch's values entirely.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import ModuleType

import numpy as np

from crosscheck._types import FrameworkArray
from crosscheck._workloads.port.mapping.matching import Entry, Tensor, heads_order, permutation

Box = tuple[tuple[int, int, int], ...]


@dataclasses.dataclass(frozen=True)
class Piece:
    """One mapped row, as the arrays need it: PyTorch's ``name``, its ``take``, the axes permutation
    (None: as it is) and the JAX leaf's ``box``."""

    name: str
    take: tuple[int, int, int] | None
    perm: tuple[int, ...] | None
    box: Box
    #: The head axes read last (``matching.HEADS_LAST``): see ``head_groups``.
    heads_last: bool = False

    @classmethod
    def of(cls, entry: Entry) -> Piece:
        assert entry.torch is not None and entry.transform is not None
        last = heads_order(entry.transform)[1]
        return cls(entry.torch.name, entry.take, permutation(entry.transform), entry.box, last)


def head_groups(shape: Sequence[int], target: Sequence[int]) -> list[list[int]] | None:
    """The axes of ``target`` each axis of ``shape`` splits into, in order (``(E, E)`` into ``(E, D,
    H)``: ``[[0], [1, 2]]``; axes of length 1 at the end join the last group), None where ``target``
    is not ``shape`` with axes split."""
    groups: list[list[int]] = []
    axis = 0
    for size in shape:
        group: list[int] = []
        product = 1
        while axis < len(target) and (not group or product < size):
            group.append(axis)
            product *= target[axis]
            axis += 1
        if product != size:
            return None
        groups.append(group)
    if not groups or any(target[a] != 1 for a in range(axis, len(target))):
        return None
    groups[-1].extend(range(axis, len(target)))
    return groups


def splits_heads(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """The sizes of the head axes an axis of ``shape`` splits into in ``target`` (two or more of
    length > 1: the order of their reading matters), or ``()``: none."""
    groups = head_groups(shape, target) or []
    for group in groups:
        sizes = tuple(target[a] for a in group if target[a] > 1)
        if len(sizes) > 1:
            return sizes
    return ()


def heads_last_reshape(shape: Sequence[int], target: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The shape to reshape a piece of ``shape`` to and the permutation that then makes ``target``,
    reading each split axis with its head axes last: ``(E, E)`` onto ``(E, D, H)`` is reshaped to
    ``(E, H, D)`` (PyTorch's ``h * D + d``) and its last two axes swapped."""
    groups = head_groups(shape, target)
    assert groups is not None, (shape, target)
    reshaped: list[int] = []
    order = [0] * len(target)
    for group in groups:
        offset = len(reshaped)
        reshaped.extend(target[a] for a in reversed(group))
        for k, a in enumerate(group):
            order[a] = offset + len(group) - 1 - k
    return tuple(reshaped), tuple(order)


def region(shape: Sequence[int], box: Box) -> tuple[slice, ...]:
    """The index of ``box`` in an array of ``shape`` (whole axes where the box says nothing)."""
    index = [slice(None)] * len(shape)
    for axis, start, stop in box:
        index[axis] = slice(start, stop)
    return tuple(index)


def box_shape(shape: Sequence[int], box: Box) -> tuple[int, ...]:
    """The shape of ``box`` in an array of ``shape``."""
    out = list(shape)
    for axis, start, stop in box:
        out[axis] = stop - start
    return tuple(out)


def _taken(array: FrameworkArray, take: tuple[int, int, int] | None) -> FrameworkArray:
    if take is None:
        return array
    axis, start, stop = take
    return array[region(array.shape, ((axis, start, stop),))]


def leaf(
    xp: ModuleType, pieces: Sequence[Piece], shape: Sequence[int], arrays: Mapping[str, FrameworkArray]
) -> FrameworkArray:
    """The JAX leaf of ``shape`` made of ``pieces`` from ``arrays`` (``xp``: the array module)."""
    parts = []
    for p in pieces:
        value = _taken(arrays[p.name], p.take)
        value = value if p.perm is None else xp.transpose(value, p.perm)
        target = box_shape(shape, p.box)
        if p.heads_last:
            reshaped, order = heads_last_reshape(value.shape, target)
            value = xp.transpose(xp.reshape(value, reshaped), order)
        parts.append((p, xp.reshape(value, target)))
    if len(parts) == 1 and not parts[0][0].box:
        return parts[0][1]
    out = xp.zeros(tuple(shape), parts[0][1].dtype)
    for p, value in parts:
        if hasattr(out, "at"):  # a JAX array: immutable
            out = out.at[region(shape, p.box)].set(value)
        else:
            out[region(shape, p.box)] = value
    return out


def back(
    pieces: Sequence[Sequence[Piece]], leaves: Sequence[FrameworkArray], shapes: Mapping[str, Sequence[int]]
) -> dict[str, np.ndarray]:
    """The PyTorch tensors ``shapes`` (name -> shape) read back from JAX ``leaves`` made of ``pieces``
    (a trained model's), as NumPy arrays: each from its first piece of each part (a tied tensor's first
    use: an untied port's other leaf trains apart, and the comparison shows it)."""
    out: dict[str, np.ndarray] = {}
    done: set[tuple[str, tuple[int, int, int] | None]] = set()
    for leaf_pieces, value in zip(pieces, leaves, strict=True):
        for p in leaf_pieces:
            if p.name not in shapes or (p.name, p.take) in done:
                continue
            done.add((p.name, p.take))
            shape = tuple(shapes[p.name])
            taken = box_shape(shape, (p.take,)) if p.take is not None else shape
            permuted = taken if p.perm is None else tuple(taken[i] for i in p.perm)
            array = np.asarray(value)
            part = array[region(array.shape, p.box)]
            if p.heads_last:
                part = np.transpose(part, np.argsort(heads_last_reshape(permuted, part.shape)[1]))
            part = np.reshape(part, permuted)
            part = part if p.perm is None else np.transpose(part, np.argsort(p.perm))
            if p.take is None:
                out[p.name] = part
            else:
                whole = out.setdefault(p.name, np.zeros(shape, part.dtype))
                whole[region(shape, (p.take,))] = part
    return out


def tiling(leaf: Tensor, boxes: Sequence[Box]) -> str | None:
    """What is wrong with ``boxes`` as the pieces of ``leaf`` (None: they cover it once, exactly)."""
    if len(boxes) == 1 and not boxes[0]:
        return None
    size = math.prod(leaf.shape)
    covered = 0
    for box in boxes:
        if not box:
            return "a piece fills the whole leaf beside others"
        for axis, start, stop in box:
            if not (0 <= axis < len(leaf.shape) and 0 <= start < stop <= leaf.shape[axis]):
                return f"a piece's box {box} is outside its shape {leaf.shape}"
        covered += math.prod(box_shape(leaf.shape, box))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if _overlap(a, b):
                return f"two pieces overlap ({_written(a)} and {_written(b)})"
    if covered != size:
        return f"its pieces cover {covered} of its {size} entries"
    return None


def _overlap(a: Box, b: Box) -> bool:
    spans_a, spans_b = {x: (s, e) for x, s, e in a}, {x: (s, e) for x, s, e in b}
    for axis in set(spans_a) & set(spans_b):
        (s1, e1), (s2, e2) = spans_a[axis], spans_b[axis]
        if e1 <= s2 or e2 <= s1:
            return False
    return True


def _written(box: Box) -> str:
    return ", ".join(f"axis {x} [{s}:{e}]" for x, s, e in box)


def where(shape: Sequence[int], box: Box) -> str:
    """A box in NumPy's index notation (``[2]``, ``[:, 0:64]``), empty for the whole array."""
    if not box:
        return ""
    spans = {x: (s, e) for x, s, e in box}
    last = max(spans)
    cells = []
    for axis in range(last + 1):
        if axis not in spans:
            cells.append(":")
            continue
        s, e = spans[axis]
        cells.append(str(s) if e == s + 1 else f"{s}:{e}")
    return f"[{', '.join(cells)}]"
