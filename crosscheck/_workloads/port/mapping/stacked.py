"""Stacked layers: one JAX leaf ``(L, ...)`` for the ``L`` PyTorch tensors ``layers.{i}.X``.

A port that scans over its layers (Flax linen ``nn.scan(..., variable_axes={"params": 0})``, ``nnx.scan``
over ``nnx.vmap``-made layers, Equinox ``eqx.filter_vmap`` + ``jax.lax.scan``) keeps each parameter of
its layers once, with the layers on a leading axis: ``params/layers/linear/kernel`` ``(4, 8, 8)`` where
PyTorch has ``layers.0.linear.weight`` to ``layers.3.linear.weight``. A JAX leaf that name matching
left over, whose module path reads as a PyTorch module list of length ``L`` (the leaf's leading axis)
once a layer index is put in it (``layers/linear`` as ``layers/{i}/linear``), put in place of one of
its names (``encoder/ScanBlock_0/linear`` as ``encoder/{i}/linear``), or the list's name and index put
in place of Flax's own name of an unnamed scan (``ScanLayer_0/linear`` as ``layers/{i}/linear``), is
seen as ``L`` **views**: virtual
leaves of shape ``leaf.shape[1:]`` whose paths carry the index. The ordinary matching (name, layout)
runs on the views; each row found is mapped back to the real leaf as a piece, ``box=((0, i, i + 1),)``
(``assemble`` reshapes it to its unit axis), its ``how`` ending ``stacked: layer i of L on axis 0``.

A leaf that reads as more than one module list (an encoder's and a decoder's ``layers`` of the same
length) is refused as ambiguous, with the override to write: ``{"encoder.layers.*.linear.weight":
("params/layers/linear/kernel", "transpose", "stacked")}`` (the pattern's first ``*`` is the layer
index; the transform may be left out: the layouts decide). Pure Python (no framework), like
``matching``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from crosscheck._workloads.port.mapping.matching import Entry, Tensor, canonical

#: The word an override's value carries to map a tensor onto one layer of a stacked leaf.
STACKED = "stacked"

Matcher = Callable[[Sequence[Tensor], Sequence[Tensor]], list[Entry]]


def said(i: int, length: int) -> str:
    """What a stacked row's ``how`` ends with."""
    return f"stacked: layer {i} of {length} on axis 0"


def is_stacked(entry: Entry) -> bool:
    """Whether a mapped row is one layer of a stacked leaf."""
    return len(entry.box) >= 1 and entry.box[0][0] == 0 and "stacked: layer " in entry.how


def module_lists(torch: Iterable[Tensor]) -> dict[tuple[str, ...], int]:
    """PyTorch's module lists: the module path before an index (read as ``canonical``) -> its length,
    for the lists whose indices are exactly ``0 .. L-1``."""
    found: dict[tuple[str, ...], set[int]] = {}
    for t in torch:
        module = canonical(t.module)
        for k, token in enumerate(module):
            if token.isdigit():
                found.setdefault(module[:k], set()).add(int(token))
    return {prefix: len(ix) for prefix, ix in found.items() if ix == set(range(len(ix)))}


@dataclasses.dataclass(frozen=True)
class Reading:
    """One way to read a stacked leaf: the index goes at raw path position ``at`` (``replace``: in place
    of the name there); ``prefix`` is the PyTorch module list it then names."""

    leaf: Tensor
    at: int
    replace: bool
    prefix: tuple[str, ...]
    #: The PyTorch list's name put before the index, in place of Flax's own name of an unnamed scan.
    name: str | None = None

    def view(self, i: int) -> Tensor:
        path = self.leaf.path
        rest = path[self.at + 1 :] if self.replace else path[self.at :]
        index = (str(i),) if self.name is None else (self.name, str(i))
        return dataclasses.replace(
            self.leaf, path=(*path[: self.at], *index, *rest), shape=self.leaf.shape[1:]
        )

    def views(self) -> list[Tensor]:
        return [self.view(i) for i in range(self.leaf.shape[0])]

    @property
    def shown(self) -> str:
        return ".".join(self.prefix)


#: Flax's own name of an unnamed ``nn.scan`` module (``ScanLayer_0``, ``ScanCheckpointLayer_0``), which
#: stands for whichever PyTorch module list of its parent fits.
UNNAMED_SCAN = re.compile(r"Scan\w*_\d+")


def readings(leaf: Tensor, lists: dict[tuple[str, ...], int]) -> list[Reading]:
    """The ways ``leaf``'s module path reads as a PyTorch module list of its leading axis's length."""
    if not leaf.shape or leaf.shape[0] < 1:
        return []
    out = []
    for at in range(leaf.skip, len(leaf.path)):
        prefix = canonical(leaf.path[leaf.skip : at])
        if lists.get(prefix) != leaf.shape[0]:
            continue
        out.append(Reading(leaf, at, False, prefix))
        if at < len(leaf.path) - 1 and not re.fullmatch(r"\d+", leaf.path[at]):
            out.append(Reading(leaf, at, True, prefix))
    for at in range(leaf.skip, len(leaf.path) - 1):  # `ScanLayer_0`: a list of PyTorch's, by its name
        if not UNNAMED_SCAN.fullmatch(leaf.path[at]):
            continue
        parent = canonical(leaf.path[leaf.skip : at])
        for prefix, length in lists.items():
            if prefix and prefix[:-1] == parent and length == leaf.shape[0]:
                out.append(Reading(leaf, at, True, prefix, prefix[-1]))
    return out


def stack(entries: list[Entry], jax: Sequence[Tensor], used: set, matcher: Matcher) -> list[Entry]:
    """``entries`` (one per PyTorch tensor) with those left unmatched mapped onto the stacked leaves
    among ``jax`` not ``used`` yet (``used`` gains them); ``matcher(tensors, views)`` is the ordinary
    matching (one row per tensor, or several for a fused tensor split).

    Every reading of every such leaf offers its views at once (a fused PyTorch tensor split onto
    several stacked leaves, ``in_proj_weight`` onto a scan's ``query``, ``key``, ``value``, needs every
    part's views together); a leaf whose rows come from one reading takes them, a leaf that several
    readings fill is refused as ambiguous (``_ambiguous``), with the override to write."""
    left = [e.torch for e in entries if e.status == "unmatched" and e.torch is not None]
    lists = module_lists(e.torch for e in entries if e.torch is not None)
    if not left or not lists:
        return entries
    pool: dict[tuple[str, ...], tuple[Reading, int]] = {}
    for leaf in jax:
        if leaf.path in used:
            continue
        distinct = {tuple(v.path for v in r.views()): r for r in readings(leaf, lists)}  # same views: one
        for reading in distinct.values():
            pool.update({v.path: (reading, i) for i, v in enumerate(reading.views())})
    found: dict[tuple[str, ...], dict[int, tuple[Reading, list[Entry]]]] = {}
    views = [reading.views()[i] for reading, i in pool.values()]
    for e in matcher(left, views) if pool else []:
        if e.torch is None or e.jax is None or e.jax.path not in pool:
            continue
        reading, i = pool[e.jax.path]
        mine = found.setdefault(reading.leaf.path, {}).setdefault(id(reading), (reading, []))
        mine[1].append(_back(e, reading, i))
    decided: dict[str, list[Entry]] = {}
    for path, fitting in found.items():
        if len(fitting) == 1:
            used.add(path)
            for e in next(iter(fitting.values()))[1]:  # a fused tensor split: several rows
                decided.setdefault(e.torch.name, []).append(e)  # type: ignore[union-attr]
        else:
            leaf = next(iter(fitting.values()))[0].leaf
            decided.update({k: [v] for k, v in _ambiguous(leaf, list(fitting.values())).items()})
    return [row for e in entries for row in (decided.get(e.torch.name, [e]) if e.torch is not None else [e])]


#: An override suggested for a view (a leaf that is not there): the stacked one is said instead.
_VIEW_SUGGESTION = re.compile(r"; decide with overrides=\{.*?\)\}(, TRANSFORM one of [^;]*)?")


def _back(entry: Entry, reading: Reading, i: int) -> Entry:
    """A row found on view ``i`` as the piece of the real leaf (its layer ``i``); the view's path is
    not a leaf: said as the leaf's layer, and an override the view's row suggests is left out
    (``suggestion`` says the stacked one)."""
    view = "/".join(reading.view(i).path)
    how = _VIEW_SUGGESTION.sub("", entry.how).replace(
        f"`{view}`", f"layer {i} of `{'/'.join(reading.leaf.path)}`"
    )
    how = f"{how}; {said(i, reading.leaf.shape[0])}"
    if reading.name is not None:
        how += f" (`{reading.leaf.path[reading.at]}` read as `{reading.shown}`)"
    box = ((0, i, i + 1), *((axis + 1, s, e) for axis, s, e in entry.box))
    return dataclasses.replace(entry, jax=reading.leaf, how=how, box=box)


def _ambiguous(leaf: Tensor, fitting: list[tuple[Reading, list[Entry]]]) -> dict[str, Entry]:
    """Every tensor that one of several readings of ``leaf`` maps, refused with the override to write."""
    patterns = [sorted({pattern(e) for e in rows}) for _, rows in fitting]
    shown = " or as ".join(", ".join(f"`{p}`" for p in group) for group in patterns)
    path = "/".join(leaf.path)
    out = {}
    for _, rows in fitting:
        for e in rows:
            assert e.torch is not None
            how = (
                f"ambiguous: `{path}` {leaf.shape} reads as the {leaf.shape[0]} layers of {shown}; "
                f"choose with overrides={{'{pattern(e)}': ('{path}', '{STACKED}')}}"
            )
            out[e.torch.name] = Entry(e.torch, None, None, how)
    return out


def index_at(entry: Entry) -> int:
    """Where the layer index is in a stacked row's PyTorch name: the token of the box's layer after
    which the module path reads as the JAX module's end (``layers.1.mlp.1`` against ``layers/mlp/1``:
    the first ``1``), else its first such token."""
    assert entry.torch is not None and entry.jax is not None
    i, tokens = str(entry.box[0][1]), entry.torch.path
    found = [k for k, token in enumerate(tokens[:-1]) if token == i]
    jax_module = canonical(entry.jax.module)
    for k in found:
        after = canonical(tokens[k + 1 : -1])
        if not after or jax_module[len(jax_module) - len(after) :] == after:
            return k
    return found[0] if found else len(tokens) - 1


def hint(leaf: Tensor, torch: Iterable[Tensor]) -> str | None:
    """The override to write for a leaf left unmatched whose leading axis is the length of a PyTorch
    module list (one, said with its name), or None. A leaf whose second axis is also the length of a
    list inside each of those layers holds layers scanned inside a scan, which a ``'stacked'``
    override (one layer axis) cannot map: said, with ``convert=``, the way that maps it."""
    found = module_lists(torch)
    lists = [p for p, n in found.items() if leaf.shape and n == leaf.shape[0] and p]
    if len(lists) != 1:
        return None
    path = "/".join(leaf.path)
    outer = len(lists[0])
    inner = sorted(
        ".".join((*lists[0], "*", *p[outer + 1 :]))
        for p, n in found.items()
        if len(leaf.shape) > 1 and n == leaf.shape[1] and len(p) > outer + 1
        if p[:outer] == lists[0] and p[outer].isdigit()
    )
    if inner:
        return (
            f"its leading axes {leaf.shape[:2]} are PyTorch's `{'.'.join(lists[0])}` and, in each, "
            f"`{inner[0]}`: layers scanned inside a scan (nested), which a '{STACKED}' override maps one "
            f"inner layer J at a time, overrides={{'{inner[0]}.J.NAME': ('{path}', TRANSFORM, "
            f"((0, J, J + 1),), '{STACKED}')}} for J in 0..{leaf.shape[1] - 1}; or map the port with your "
            "own conversion, convert=fn (fn(state_dict) -> the JAX parameter pytree, the layers stacked "
            "twice)"
        )
    return (
        f"its leading axis {leaf.shape[0]} is the length of PyTorch's `{'.'.join(lists[0])}`: map its layers "
        f"with overrides={{'{'.'.join(lists[0])}.*.NAME': ('{path}', '{STACKED}')}}"
    )


def _pattern(name: str, at: int) -> str:
    tokens = name.split(".")
    return ".".join([*tokens[:at], "*", *tokens[at + 1 :]])


def pattern(entry: Entry) -> str:
    """A stacked row's PyTorch name with its layer index as ``*`` (an override's pattern)."""
    assert entry.torch is not None
    return _pattern(entry.torch.name, index_at(entry))


# ---- Overrides ------------------------------------------------------------------------------------------


def wanted(value: Any) -> bool:
    """Whether an override's value asks for a stacked leaf: ``(path, "stacked")``, ``(path,
    transform, "stacked")`` or ``(path, transform, box, "stacked")`` (the box inside one layer, as
    ``((AXIS, START, STOP), ...)`` of the layer's shape: a part of a fused leaf)."""
    return isinstance(value, tuple) and len(value) in (2, 3, 4) and value[-1] == STACKED


def suggestion(entry: Entry) -> str:
    """The override that decides an ambiguous stacked row, every layer at once: ``{'layers.*.X':
    (PATH, TRANSFORM, 'stacked')}``, with the row's box inside the layer where it has one."""
    assert entry.jax is not None
    inner = tuple((axis - 1, start, stop) for axis, start, stop in entry.box[1:])
    box = f", {inner!r}" if inner else ""
    return f"overrides={{'{pattern(entry)}': ('{'/'.join(entry.jax.path)}', TRANSFORM{box}, '{STACKED}')}}"


def override(
    t: Tensor, value: tuple, groups: tuple[str, ...], pattern: str, leaves: dict, decide: Callable
) -> Entry:
    """The row an override ``(path, [transform, [box,]] "stacked")`` decides for ``t``: layer ``i`` of
    the leaf at ``path``, ``i`` the pattern's first ``*``; ``decide(t, value, leaves)`` is the override
    of one leaf (``overrides``), run on the layer's view. The layer is a box of the leaf, so ``t`` is
    reshaped to it: head axes (``(E, E)`` onto a layer ``(H, D, E)``) are taken as a box's are, with or
    without a box inside the layer.

    Raises:
        ValueError: no wildcard, one that is not a layer index, no such leaf, an index past the leaf's
            leading axis, a transform that does not fit the layer (one line each, with the fix).
    """
    where = f"override `{pattern}` -> {value!r}"
    if not groups or not groups[0].isdigit():
        found = repr(groups[0]) if groups else "none"
        raise ValueError(
            f"{where}: `{STACKED}` takes the layer index from the pattern's first `*`, found {found}; "
            "write the layer's index as `*` (`layers.*.linear.weight`)."
        )
    path, i = value[0], int(groups[0])
    if path not in leaves:
        raise ValueError(f"{where}: no JAX leaf `{path}`; leaves look like `{next(iter(leaves), '')}`.")
    leaf = leaves[path]
    if not leaf.shape or i >= leaf.shape[0]:
        raise ValueError(f"{where}: `{path}` {leaf.shape} has no layer {i} on its leading axis.")
    view = Reading(leaf, len(leaf.path) - 1, False, ()).view(i)
    named = "/".join(view.path)
    try:
        if len(value) == 4:  # a box inside the layer
            entry = decide(t, (named, value[1], value[2]), {named: view})
        else:
            try:
                entry = decide(t, (named, value[1]) if len(value) == 3 else named, {named: view})
            except ValueError as first:  # head axes: the layer's whole box, reshaped to it
                entry = _reshaped(t, value, named, view, decide, first)
    except ValueError as exc:
        raise ValueError(f"{str(exc).rstrip('.')} (layer {i} of `{path}` {leaf.shape}).") from exc
    if entry.jax is None:
        raise ValueError(
            f"{where}: no transform turns {t.shape} into {view.shape}, layer {i} of `{path}` {leaf.shape}."
        )
    return _back(entry, Reading(leaf, len(leaf.path) - 1, False, ()), i)


def _reshaped(
    t: Tensor, value: tuple, named: str, view: Tensor, decide: Callable, first: ValueError
) -> Entry:
    """The row of a stacked override whose transform fits the layer only reshaped (head axes): the
    layer's whole box decided as a box is (``overrides``), said without it; else ``first`` raised."""
    if not view.shape:
        raise first
    whole = ((0, 0, view.shape[0]),)
    try:
        entry = decide(t, (named, value[1] if len(value) == 3 else None, whole), {named: view})
    except ValueError:
        raise first from None
    return dataclasses.replace(entry, box=(), how=entry.how.replace(f"at [0:{view.shape[0]}]; ", "", 1))


# ---- Localisation ----------------------------------------------------------------------------------------


def module_pairs(entries: Iterable[Entry]) -> dict[str, str]:
    """PyTorch module -> JAX module of every mapped row (dotted names, without Flax's collection). A
    stacked row's layer ``i`` is the JAX module's call in the scan's step of index ``i``
    (``layers.linear@2`` for ``layers.2.linear``: ``steps.label``), and so is every PyTorch module
    between the list's index and the parameter's module (``layers.2`` -> ``layers@2``)."""
    out = {}
    for e in entries:
        if e.torch is None or e.jax is None:
            continue
        if not is_stacked(e):
            out[".".join(e.torch.module)] = ".".join(e.jax.module)
            continue
        i, k = e.box[0][1], index_at(e)
        before, after = e.torch.path[:k], e.torch.path[k + 1 : -1]
        call = f"@{i}"
        jax_module = e.jax.module
        for k in range(len(after) + 1):
            torch_name = ".".join((*before, str(i), *after[:k]))
            jax_name = ".".join(jax_module[: len(jax_module) - (len(after) - k)])
            out.setdefault(torch_name, jax_name + call)
    return out


def spread(name: str, value: Any) -> list[tuple[str, Any]]:
    """A listed intermediate as records: ``layers.*.linear`` with a stacked array ``(L, ...)`` (a scan's
    per-step outputs) as ``layers.0.linear`` to ``layers.{L-1}.linear``; any other name as it is."""
    if "*" not in name:
        return [(name, value)]
    return [(name.replace("*", str(i)), value[i]) for i in range(value.shape[0])]
