"""Ports that are not one-to-one: fused and split projections, head axes, tied parameters.

Run by ``mapping.build`` on what the matching by name left unmatched (``complete``); pure Python on
``Tensor`` records, whatever their origin (a stacked leaf's per-layer view too). Each pattern makes
ordinary rows, with ``take`` (the slice of a fused PyTorch tensor) and ``box`` (the slice of a fused
JAX leaf), and says itself in the row's ``how``:

- **fused -> split**: PyTorch's ``in_proj_weight`` ``(3E, E)`` of ``nn.MultiheadAttention`` (or GPT-2's
  ``c_attn.weight`` ``(E, 3E)``) against ``query``, ``key``, ``value`` leaves of the same module: one
  row per part, its ``take`` the part's rows (or columns), in PyTorch's q, k, v order;
- **split -> fused**: ``q_proj``, ``k_proj``, ``v_proj`` against one ``qkv`` leaf: one row per part,
  its ``box`` the part's slice of the leaf (grouped-query attention's smaller k and v included: the
  sizes are the parts' own);
- **renamed projections**: ``out_proj`` against ``out``, ``q_proj`` against ``query`` (``ROLES``);
- **head axes**: a piece ``(E, E)`` against ``(E, H, D)`` or ``(H, D, E)`` is reshaped by its box
  (``assemble``); the layouts decide the transpose (Flax ``DenseGeneral``: input axes, then output
  axes), else the one that fits, else the row is ambiguous and says the override to write;
- **tied**: ``lm_head.weight`` is ``wte.weight`` (``state_dict`` lists both, ``named_parameters`` one):
  where the port has a leaf of the alias's name, the one PyTorch tensor makes two leaves (two rows;
  ``jax.grad`` sums its two uses).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from crosscheck._workloads.port.mapping.matching import (
    TRANSFORMS,
    Entry,
    Index,
    Tensor,
    canonical,
    heads_order,
    loose,
    match,
    said_order,
)

#: The spellings of each attention projection, by role (a module's name, or a leaf's: ``wqkv``,
#: ``in_proj_weight``). Fused roles are their parts' concatenation in PyTorch's order (``PARTS``).
ROLES = {
    "q": ("q", "query", "q_proj", "wq", "to_q", "query_proj"),
    "k": ("k", "key", "k_proj", "wk", "to_k", "key_proj"),
    "v": ("v", "value", "v_proj", "wv", "to_v", "value_proj"),
    "out": ("out", "out_proj", "o_proj", "o", "wo", "to_out", "c_proj", "output_proj"),
    "qkv": ("qkv", "in_proj", "c_attn", "wqkv", "qkv_proj", "to_qkv"),
    "kv": ("kv", "wkv", "kv_proj", "to_kv"),
}
#: A fused role's parts, in the order of the concatenation (PyTorch's ``nn.MultiheadAttention``).
PARTS = {"qkv": ("q", "k", "v"), "kv": ("k", "v")}
#: Layouts of the fused PyTorch weights: ``nn.MultiheadAttention``'s ``in_proj_weight`` is read by
#: ``F.linear`` (out, in); Hugging Face's ``Conv1D`` (GPT-2's ``c_attn``) keeps (in, out).
FUSED_LAYOUTS = {"MultiheadAttention": "out,in", "Conv1D": "in,out"}
WEIGHTS, BIASES = ("weight", "kernel", "w"), ("bias", "b")
_SPELLING = {s: role for role, spellings in ROLES.items() for s in spellings}
_SUFFIX = re.compile(r"(.+?)_(weight|kernel|bias)")

Key = tuple[tuple[str, ...], str]


def role_of(t: Tensor) -> tuple[Key, str] | None:
    """``((parent module, weight or bias), role)`` of a projection's tensor, None for any other."""
    leaf, module = t.path[-1], t.module
    kind = "weight" if leaf in WEIGHTS else "bias" if leaf in BIASES else None
    if kind is not None and module and module[-1].lower() in _SPELLING:
        return (loose(module[:-1]), kind), _SPELLING[module[-1].lower()]
    found = _SUFFIX.fullmatch(leaf)
    if found is not None and found.group(1).lower() in _SPELLING:
        return (loose(module), "bias" if found.group(2) == "bias" else "weight"), _SPELLING[
            found.group(1).lower()
        ]
    if leaf.lower() in _SPELLING and t.skip == 0 and len(t.shape) >= 2:  # a plain pytree's `wqkv`
        return (loose(module), "weight"), _SPELLING[leaf.lower()]
    return None


def _roles(tensors: Sequence[Tensor]) -> dict[Key, dict[str, Tensor]]:
    out: dict[Key, dict[str, Tensor]] = {}
    for t in tensors:
        found = role_of(t)
        if found is not None:
            out.setdefault(found[0], {}).setdefault(found[1], t)
    return out


def boundaries(shape: Sequence[int]) -> set[int]:
    """The products of the leading axes of ``shape`` (where a reshape may split or join axes)."""
    return {math.prod(shape[: i + 1]) for i in range(len(shape))}


def regroups(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether ``a`` and ``b`` are the same axes, some of them split (``(E, E)`` and ``(E, H, D)``)."""
    if math.prod(a) != math.prod(b):
        return False
    return boundaries(a) <= boundaries(b) or boundaries(b) <= boundaries(a)


def moved(name: str, shape: Sequence[int]) -> tuple[int, ...] | None:
    perm = TRANSFORMS[name]
    if perm is None:
        return tuple(shape)
    return tuple(shape[i] for i in perm) if len(perm) == len(shape) else None


def fitting(shape: Sequence[int], target: Sequence[int], start: int = 1) -> list[str]:
    """The transforms (identity, transpose) that make ``shape`` regroup into ``target``, the box
    starting at ``start``'s product of ``target``'s leading axes on a boundary of the piece."""
    out = []
    for name in ("identity", "transpose"):
        m = moved(name, shape)
        if m is not None and regroups(m, target) and start in {1, *boundaries(m)}:
            out.append(name)
    return out


def torch_layout(t: Tensor) -> str | None:
    base = re.search(r"\(a (\w+)\)$", t.module_type)
    return t.layout or FUSED_LAYOUTS.get(base.group(1) if base else t.module_type)


def decide(pieces: Sequence[tuple[Tensor, Tensor, tuple, tuple, int]]) -> tuple[str | None, str, tuple]:
    """The transform every piece ``(torch, leaf, piece shape, box shape, box start)`` takes: the
    layouts', else the one that fits them all; with what the table says, and the choices if none."""
    common: list[str] | None = None
    for _, _, shape, box, start in pieces:
        fits = fitting(shape, box, start)
        common = fits if common is None else [f for f in common if f in fits]
    t, j = pieces[0][0], pieces[0][1]
    layouts = (torch_layout(t), j.layout)
    known = None if None in layouts else "identity" if layouts[0] == layouts[1] else "transpose"
    if known == "transpose" and layouts != ("out,in", "in,out") and layouts != ("in,out", "out,in"):
        known = None
    if not common:
        return None, "no transform fits the shapes", ()
    if known in common:
        return known, f"layout: {t.module_type} ({layouts[0]}) -> {j.module_type} ({layouts[1]})", ()
    if len(common) == 1:
        return common[0], "the only layout that fits the shapes", ()
    return None, f"{' and '.join(common)} both fit the shapes", tuple(common)


def heads(shape: Sequence[int], transform: str | None, box: Sequence[int]) -> str:
    base = heads_order(transform or "identity")[0]
    m = moved(base, shape)
    said = said_order(transform or "identity")
    order = f", {said}" if said else ""
    return f"; head axes {m}->{tuple(box)}{order}" if m is not None and tuple(m) != tuple(box) else ""


def whole(t: Tensor, j: Tensor, said: str) -> list[Entry]:
    """One tensor onto one leaf of another name (``out_proj`` onto ``out``), head axes regrouped."""
    transform, how, choices = decide([(t, j, t.shape, j.shape, 1)])
    if transform is None and not choices:
        return []
    how = f"{said}; {how}{heads(t.shape, transform or choices[0], j.shape)}"
    if transform is None:
        how += f"; decide with overrides={{'{t.name}': ('{'/'.join(j.path)}', TRANSFORM)}}"
    return [Entry(t, j, transform, how, choices)]


def part_sizes(total: int, whole_size: int, parts: Sequence[Tensor], axis_size: int) -> list[int] | None:
    rest = whole_size // axis_size
    sizes = [math.prod(p.shape) // rest for p in parts]
    if any(math.prod(p.shape) % rest for p in parts) or sum(sizes) != total or 0 in sizes:
        return None
    return sizes


def split(t: Tensor, leaves: Sequence[Tensor], names: Sequence[str]) -> list[Entry]:
    """A fused PyTorch tensor onto one leaf per part: each row takes its part's slice of ``t``."""
    found = []
    for axis, size in enumerate(t.shape):
        sizes = part_sizes(size, math.prod(t.shape), leaves, size)
        if sizes is None:
            continue
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        takes = [(axis, s, s + n) for s, n in zip(starts, sizes, strict=True)]
        pieces = [
            (t, j, tuple(n if a == axis else d for a, d in enumerate(t.shape)), j.shape, 1)
            for j, n in zip(leaves, sizes, strict=True)
        ]
        decided = decide(pieces)
        if decided[0] is not None or decided[2]:
            found.append((takes, pieces, decided))
    paths = [f"'{'/'.join(j.path)}'" for j in leaves]
    write = f"overrides={{'{t.name}': [{', '.join(f'({p}, TRANSFORM)' for p in paths)}]}}"
    if len(found) != 1:
        why = "no axis of it splits into" if not found else "more than one axis of it splits into"
        return [Entry(t, None, None, f"fused: {why} {', '.join(paths)}; map it with {write}")]
    takes, pieces, (transform, how, choices) = found[0]
    rows = []
    for (_, j, shape, box, _), take, name in zip(pieces, takes, names, strict=True):
        said = f"fused: {name} of `{t.name}` {span(take)}; {how}{heads(shape, transform or 'identity', box)}"
        if transform is None:
            said += f"; decide with {write}, TRANSFORM one of {', '.join(map(repr, choices))}"
        rows.append(Entry(t, j, transform, said, choices, take=take))
    return rows


def span(take: tuple[int, int, int]) -> str:
    axis, start, stop = take
    return f"[{start}:{stop}]" if axis == 0 else f"axis {axis} [{start}:{stop}]"


def fuse(parts: Sequence[Tensor], j: Tensor, names: Sequence[str]) -> list[Entry]:
    """One PyTorch tensor per part onto one fused leaf: each row fills its part's box of ``j``."""
    found = []
    for axis, size in enumerate(j.shape):
        sizes = part_sizes(size, math.prod(j.shape), parts, size)
        if sizes is None:
            continue
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        boxes = [((axis, s, s + n),) for s, n in zip(starts, sizes, strict=True)]
        start = math.prod(j.shape[:axis])
        shapes = [tuple(n if a == axis else d for a, d in enumerate(j.shape)) for n in sizes]
        pieces = [(t, j, t.shape, box, start) for t, box in zip(parts, shapes, strict=True)]
        decided = decide(pieces)
        if decided[0] is not None or decided[2]:
            found.append((boxes, pieces, decided))
    leaf = "/".join(j.path)
    if len(found) != 1:
        why = "no axis of it holds" if not found else "more than one axis of it holds"
        return [
            Entry(
                t,
                None,
                None,
                f"fused leaf `{leaf}`: {why} {', '.join(p.name for p in parts)}; map each "
                f"with overrides={{NAME: ('{leaf}', TRANSFORM, ((AXIS, START, STOP),))}}",
            )
            for t in parts
        ]
    boxes, pieces, (transform, how, choices) = found[0]
    rows = []
    for (t, _, shape, box, _), where, name in zip(pieces, boxes, names, strict=True):
        said = f"fused leaf: {name} at `{leaf}` {span(where[0])}; {how}{heads(shape, transform, box)}"
        if transform is None:
            said += (
                f"; decide with overrides={{'{t.name}': ('{leaf}', TRANSFORM, {where})}}, "
                f"TRANSFORM one of {', '.join(map(repr, choices))}"
            )
        rows.append(Entry(t, j, transform, said, choices, box=where))
    return rows


def patterns(torch: Sequence[Tensor], jax: Sequence[Tensor]) -> list[Entry]:
    """The rows of the projections among ``torch`` and ``jax`` (both unmatched), module by module."""
    rows: list[Entry] = []
    jax_roles = _roles(jax)
    for key, mine in _roles(torch).items():
        theirs = jax_roles.get(key, {})
        for role, t in mine.items():
            parts = PARTS.get(role, ())
            if role in theirs:
                j = theirs[role]
                same = canonical(_label(t).split(".")) == canonical(_label(j).split("/"))
                rows += whole(t, j, "by name" if same else f"renamed: `{_label(t)}` is `{_label(j)}`")
            elif parts and all(p in theirs for p in parts):
                rows += split(t, [theirs[p] for p in parts], parts)
        for role, j in theirs.items():
            parts = PARTS.get(role, ())
            if role not in mine and parts and all(p in mine for p in parts):
                rows += fuse([mine[p] for p in parts], j, parts)
    return rows


def _label(t: Tensor) -> str:
    """A projection's module path (its leaf's name where that is the projection's: ``in_proj_weight``)."""
    inside = t.path[t.skip :]
    sep = "." if t.kind in ("parameter", "buffer") else "/"
    return sep.join(inside[:-1] if t.path[-1] in WEIGHTS + BIASES else inside)


def tied(aliases: Sequence[Tensor], index: Index, used: set, names: dict[str, Tensor]) -> list[Entry]:
    """The rows of tied aliases that reach a leaf of their own: the tensor they are, onto that leaf."""
    rows = []
    for alias in aliases:
        entry = match(alias, index, used)
        if entry.jax is None or entry.transform is None:
            continue
        used.add(entry.jax.path)
        how = f"tied: `{alias.name}` is `{alias.tied}`; {entry.how}"
        rows.append(Entry(names[alias.tied], entry.jax, entry.transform, how, entry.choices))
    return rows


def complete(
    entries: list[Entry], aliases: Sequence[Tensor], jax: Sequence[Tensor], index: Index, used: set
) -> list[Entry]:
    """``entries`` (one per PyTorch tensor, in order) with the patterns' rows in place of the unmatched
    parameters they map, and the tied aliases' rows after their tensors; ``used`` gains their leaves."""
    names = {e.torch.name: e.torch for e in entries if e.torch is not None}
    extra = tied([a for a in aliases if a.tied in names], index, used, names)
    unmatched = [
        e.torch
        for e in entries
        if e.status == "unmatched" and e.torch is not None and e.torch.kind == "parameter"
    ]
    rows = patterns(unmatched, [j for j in jax if j.path not in used])
    found: dict[str, list[Entry]] = {}
    for row in rows + extra:
        assert row.torch is not None
        found.setdefault(row.torch.name, []).append(row)
        if row.jax is not None:
            used.add(row.jax.path)
    out = []
    for e in entries:
        mine = found.get(e.torch.name, []) if e.torch is not None else []
        replaced = e.status == "unmatched" and mine
        out += ([] if replaced else [e]) + mine
    return out
