"""Outputs in another layout: which axes of the port's array are which of the original's, proven by the
values.

A port's output may hold the original's values in another layout: Flax writes an image NHWC where
PyTorch writes it NCHW; a VAE's attention applies its GroupNorm to ``(B, C, H*W)`` in PyTorch and to
``(B, H, W, C)`` in Flax. A ``Layout`` reads the port's array in the original's: a permutation of its
axes, then a reshape that only merges or splits adjacent axes. ``candidates`` lists every such layout
that gives the original's shape; where there are several (an image whose height is its width, a square
``(B, HW, C)`` with as many tokens as channels), the values decide (``prove``): the candidate that
brings the port's array nearest the original's, at most ``NEARER`` times the distance of every other
candidate that reads it differently. Where none is that much nearer (a symmetric output, a difference
as large as a transposition), nothing is guessed: ``prove`` says why, and a port's output is refused
until its layout is said (``Port(output_layout=...)``, or a ``jax_call`` that returns PyTorch's layout).
A port's output that no reading brings within ``APART`` of the original's is no question of layout: it
differs in every layout its shapes allow (``apart``), and its check fails there (``differs``), its
modules compared as for any difference.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: How much nearer the original's values the proven layout must bring the port's array than any other
#: candidate (distance ratio): a description of which reading the values pick, not a tolerance.
NEARER = 0.5
#: Arrays with more axes than this are read as they are or by their shape alone (720 permutations).
MAX_AXES = 6
#: Two candidates whose readings differ by less than this (relative to the largest entry) are one.
SAME = 1e-12
#: A reading at least this far from the original's values (relative, in norm) is a difference, not a
#: rounding: no comparison's rounding reaches a tenth of the output. It decides only whether an output
#: the values cannot place is refused (a reading nearer) or fails (every reading this far).
APART = 0.1


@dataclasses.dataclass(frozen=True)
class Layout:
    """The port's array read in the original's layout: ``np.transpose(a, perm)`` (shape ``moved``), then
    reshaped to the original's ``shape``."""

    perm: tuple[int, ...]
    moved: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def source(self) -> tuple[int, ...]:
        """The port's shape (what ``to_torch`` reads)."""
        return tuple(self.moved[list(self.perm).index(a)] for a in range(len(self.perm)))

    @property
    def identity(self) -> bool:
        return self.perm == tuple(range(len(self.perm))) and self.moved == self.shape

    def to_torch(self, a: Any) -> np.ndarray:
        """The port's array ``a`` in the original's layout."""
        return np.transpose(np.asarray(a), self.perm).reshape(self.shape)

    def to_jax(self, r: np.ndarray) -> np.ndarray:
        """An array in the original's layout (a projection drawn in it) in the port's: ``to_torch``'s
        inverse, so that ``sum(r * to_torch(a)) == sum(to_jax(r) * a)``."""
        return np.transpose(np.asarray(r).reshape(self.moved), np.argsort(self.perm))

    def words(self) -> str:
        """E.g. ``axes (0, 3, 1, 2)``, ``axes (0, 3, 1, 2) then reshaped to (2, 8, 256)``, ``as it is``."""
        if self.identity:
            return "as it is"
        axes = "" if self.perm == tuple(range(len(self.perm))) else f"axes {self.perm}"
        shaped = f"reshaped to {self.shape}" if self.moved != self.shape else ""
        return " then ".join(p for p in (axes, shaped) if p)


def _merges(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether a C-order reshape of shape ``a`` into ``b`` merges or splits adjacent axes only (every
    boundary of the coarser shape is one of the finer's)."""
    ca = set(itertools.accumulate((d for d in a if d != 1), operator.mul))
    cb = set(itertools.accumulate((d for d in b if d != 1), operator.mul))
    return ca <= cb or cb <= ca


def _units_only(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two shapes differ by unit axes alone (``(B, 1)`` against ``(B,)``): a broadcast's
    question (``localize._broadcast``), not a layout's."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def candidates(jax_shape: Sequence[int], torch_shape: Sequence[int]) -> list[Layout]:
    """Every layout that reads an array of ``jax_shape`` as one of ``torch_shape``, each reading once
    (size-1 axes permuted read the same), the identity first where it is one."""
    return list(_candidates(tuple(int(d) for d in jax_shape), tuple(int(d) for d in torch_shape)))


@functools.lru_cache(maxsize=256)
def _candidates(jax_shape: tuple[int, ...], torch_shape: tuple[int, ...]) -> tuple[Layout, ...]:
    """``candidates``, made once per pair of shapes (they depend on the shapes alone; each reading is
    told apart by an index array as large as the array)."""
    if math.prod(jax_shape) != math.prod(torch_shape):
        return ()
    if len(jax_shape) > MAX_AXES:
        perms: Any = [tuple(range(len(jax_shape)))]
    else:
        perms = itertools.permutations(range(len(jax_shape)))
    index = np.arange(math.prod(jax_shape)).reshape(jax_shape)
    out, seen = [], set()
    for perm in perms:
        moved = tuple(jax_shape[p] for p in perm)
        if moved != torch_shape and (not _merges(moved, torch_shape) or _units_only(moved, torch_shape)):
            continue
        layout = Layout(tuple(perm), moved, torch_shape)
        key = layout.to_torch(index).tobytes()
        if key not in seen:
            seen.add(key)
            out.append(layout)
    return tuple(out)


def prove(torch: Any, jax: Any, found: Sequence[Layout] | None = None) -> tuple[Layout | None, str]:
    """The layout the values prove for the port's array ``jax`` against the original's ``torch``
    (among ``found``, by default ``candidates``), or None and why not, in words ("" when no layout
    gives the original's shape)."""
    t, j = np.asarray(torch, np.float64), np.asarray(jax, np.float64)
    found = candidates(j.shape, t.shape) if found is None else list(found)
    if len(found) <= 1:
        return (found[0] if found else None), ""
    readings = [layout.to_torch(j) for layout in found]
    scale = float(np.linalg.norm(t)) or 1.0
    distance = [float(np.linalg.norm(r - t)) / scale for r in readings]
    best = int(np.argmin(distance))  # the first on ties: the identity where it is one
    largest = max(float(np.max(np.abs(t), initial=0.0)), float(np.max(np.abs(j), initial=0.0))) or 1.0
    rivals = [
        k
        for k in range(len(found))
        if k != best and float(np.max(np.abs(readings[k] - readings[best]))) > SAME * largest
    ]
    near = [k for k in rivals if distance[best] > NEARER * distance[k]]
    if not near:
        return found[best], ""
    k = near[0]
    return None, (
        f"read {found[best].words()} it is {distance[best]:.3g} (relative) from the original's, "
        f"read {found[k].words()} {distance[k]:.3g}"
    )


def apart(torch: Any, jax: Any, found: Sequence[Layout]) -> str:
    """Where every reading of the port's array ``jax`` (``found``) is at least ``APART`` from the
    original's ``torch``: each reading's distance, in words; "" where one is nearer (or none is found)."""
    t, j = np.asarray(torch, np.float64), np.asarray(jax, np.float64)
    scale = float(np.linalg.norm(t)) or 1.0
    distance = [float(np.linalg.norm(layout.to_torch(j) - t)) / scale for layout in found]
    if not distance or min(distance) < APART:
        return ""
    return ", ".join(f"read {layout.words()} {d:.3g}" for layout, d in zip(found, distance, strict=True))


def read(t: np.ndarray, j: np.ndarray, k: int, memo: dict) -> Layout | str | None:
    """How the port's array ``j`` reads in PyTorch's layout, against PyTorch's ``t`` (array ``k`` of
    their outputs): the layout the values prove (``prove``), kept in ``memo`` by the two shapes; else,
    where they cannot tell (a difference as large as a transposition), the one proven at another module
    of the same shapes (or for the model's output, ``of``), or as it is where that is one. None: no
    layout gives PyTorch's shape (broadcast, or unrelated); a string: why no layout can be told (the
    output is not judged, never guessed)."""
    found = candidates(j.shape, t.shape)
    if not found:
        return None
    proven, why = prove(t, j, found)
    key = (j.shape, t.shape)
    if proven is not None:
        if len(found) > 1:
            memo.setdefault(key, proven)
        return proven
    if key in memo:
        return memo[key]
    if found[0].identity:
        return found[0]
    return (
        f"array {k}: the layout of the port's {j.shape} against PyTorch's {t.shape} cannot be told "
        f"from the values ({why})"
    )


def declared(value: Any, jax_shape: Sequence[int], torch_shape: Sequence[int]) -> Layout | None:
    """A layout the user declared for one array (``Port(output_layout=...)``): a permutation of the
    port's axes into PyTorch's order (``(0, 3, 1, 2)``), ``"NHWC"`` (channels last: the last axis is
    PyTorch's second), or None (the values decide); None where it does not give the original's shape.

    Raises:
        ValueError: ``value`` is none of these, in one line.
    """
    n = len(jax_shape)
    if isinstance(value, str) and value.upper() in ("NHWC", "CHANNELS_LAST"):
        perm = (0, n - 1, *range(1, n - 1)) if n >= 3 else tuple(range(n))
    elif isinstance(value, (tuple, list)) and sorted(value) == list(range(n)):
        perm = tuple(int(p) for p in value)
    else:
        raise ValueError(
            f"`output_layout` {value!r:.40}: give a permutation of the JAX output's {n} axes into "
            f"PyTorch's order (e.g. (0, 3, 1, 2) for NHWC -> NCHW), or 'NHWC'."
        )
    moved = tuple(int(jax_shape[p]) for p in perm)
    torch_shape = tuple(int(d) for d in torch_shape)
    if moved != torch_shape and not (
        math.prod(moved) == math.prod(torch_shape) and _merges(moved, torch_shape)
    ):
        return None
    return Layout(perm, moved, torch_shape)


def per_array(value: Any, count: int) -> list[Any]:
    """A declared ``output_layout`` per floating-point array of the output: one for all, or a list of
    one per array (None: the values decide)."""
    if value is None:
        return [None] * count
    if isinstance(value, list) and not all(isinstance(v, int) for v in value):
        return [*value, *[None] * (count - len(value))][:count]
    return [value] * count


#: How a refusal names the ways to say an output's layout.
SAY_IT = (
    "say it: return PyTorch's layout from `jax_call` (e.g. `model(**inputs).transpose(0, 3, 1, 2)`), or "
    "declare it: `Port(output_layout=(0, 3, 1, 2))` (the JAX output's axes in PyTorch's order; 'NHWC' for "
    "channels last)"
)


def of(
    prepared: Any, example: Callable[[], dict[str, np.ndarray]], leaves: Callable[..., list]
) -> tuple[Layout | None, ...]:
    """Per floating-point array of what the default loss sees (``Port.output``'s pick, else the whole
    output), the layout that reads the port's array in PyTorch's (None: as it is, or no layout relates
    the two), declared (``Port.output_layout``) or proven by the values of one float32 pass of each side
    on the ``example()`` inputs (float32, PyTorch's), the JAX leaves made by ``leaves(prepared, params,
    inputs)`` (``build.jax_leaves``); found once per prepared port.

    Raises:
        ValueError: the values cannot tell the layout (``prove``), or a declared one does not give
            PyTorch's shape, in one line naming the ways to say it.
    """
    cached = prepared.__dict__.get("_layouts")
    if cached is None:
        cached, far = _found(prepared, example(), leaves)
        object.__setattr__(prepared, "_apart", far)
        object.__setattr__(prepared, "_layouts", cached)
    return cached


def differs(prepared: Any) -> tuple[str, ...]:
    """Per array of the model's output that differs from the original's in every layout its shapes allow
    (``apart``), found with its layout (``of``), a line saying so: each a failing comparison of the check
    (empty where none, or where the layouts were not found)."""
    found: dict[int, str] = prepared.__dict__.get("_apart") or {}
    return tuple(found[k] for k in sorted(found))


def known(prepared: Any) -> tuple[Layout | None, ...] | None:
    """The layouts of the model's whole output (``of``), where the default loss found them (None: not
    found, or of what ``Port.output`` picks, not of the whole output)."""
    if prepared.port.output is not None:
        return None
    found: tuple[Layout | None, ...] | None = prepared.__dict__.get("_layouts")
    far = prepared.__dict__.get("_apart") or {}
    # an output apart in every layout proves no layout: its modules' own values decide theirs
    return None if found is None else tuple(None if k in far else r for k, r in enumerate(found))


def _found(
    prepared: Any, example: dict[str, np.ndarray], leaves: Callable
) -> tuple[tuple[Layout | None, ...], dict[int, str]]:
    """The layouts ``of`` finds, and per array apart from the original's in every layout (``apart``),
    the line that says so."""
    port = prepared.port
    torch_out, jax_out = _both(prepared, example, leaves)
    if torch_out is None or jax_out is None:  # a pass that fails: the check runs it again and says why
        return (), {}
    said = per_array(port.output_layout, len(jax_out))
    out: list[Layout | None] = []
    far: dict[int, str] = {}
    for k, (t, j) in enumerate(zip(torch_out, jax_out, strict=False)):
        where = f"port `{port.name}`: the JAX output's array {k}, {j.shape} against PyTorch's {t.shape}"
        if said[k] is not None:
            layout = declared(said[k], j.shape, t.shape)
            if layout is None:
                raise ValueError(
                    f"{where}: `output_layout` {said[k]!r} does not give PyTorch's shape; {SAY_IT}."
                )
        else:
            layout, why = prove(t, j)
            if layout is None and why and t.shape == j.shape and not _converts(prepared):
                layout = Layout(tuple(range(j.ndim)), j.shape, t.shape)  # no layout to suspect: as it is
            elif layout is None and why:
                layout, far[k] = _apart(where, t, j, why)
        out.append(None if layout is None or layout.identity else layout)
    return tuple(out), far


def _apart(where: str, t: np.ndarray, j: np.ndarray, why: str) -> tuple[Layout, str]:
    """An output whose layout the values cannot tell: where it differs from the original's in every
    layout its shapes allow (``apart``), the layout its loss is read in (as it is where the shapes are
    one, else the nearest reading: the check fails whichever) and the line that fails it.

    Raises:
        ValueError: a reading is nearer (``prove``'s ambiguity): the layout must be said.
    """
    found = candidates(j.shape, t.shape)
    far = apart(t, j, found)
    if not far:
        raise ValueError(f"{where}: its layout cannot be told from the values ({why}); {SAY_IT}.")
    nearest = min(found, key=lambda r: float(np.linalg.norm(r.to_torch(j) - t)))
    layout = found[0] if found[0].identity else nearest
    return layout, (
        f"{where}: it differs from the original's in every layout its shapes allow ({far}, relative), "
        f"so it differs whatever its layout; its loss is read {layout.words()}. If it is in a layout none "
        "of these is, declare it: `Port(output_layout=...)`"
    )


def _converts(prepared: Any) -> bool:
    """Whether the port converts layouts itself (its ``jax_inputs``, or a convolution's channels-last
    kernel): an output of PyTorch's shape may then be in another layout of the same shape."""
    leaves = getattr(prepared.jax_side, "leaves", ())
    return prepared.port.jax_inputs is not None or any(leaf.layout == "..IO" for leaf in leaves)


def _both(
    prepared: Any, example: dict[str, np.ndarray], leaves: Callable
) -> tuple[list[np.ndarray] | None, list[np.ndarray] | None]:
    """Both sides' floating-point output arrays (what the loss sees) of one float32 pass on the
    ``example`` inputs, each None where its pass failed."""
    import jax
    import jax.numpy as jnp

    from crosscheck._workloads.port.declare.heads import _outputs
    from crosscheck._workloads.port.sides import torch_side

    port = prepared.port
    pick = port.output or (lambda out: out)
    floats = {
        k: v.astype(np.float32) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in prepared.values.items()
    }
    torch_out = _outputs(
        lambda: pick(
            torch_side.call(prepared.torch_side, torch_side.to_torch(floats), torch_side.to_torch(example))
        )
    )

    def jax_pass() -> object:
        # ``device_put``, not ``jnp.asarray``: JAX lifts an array into its trace by a program per shape
        params = {k: jax.device_put(floats[k]) for k in prepared.parameters}
        tensors = {k: jax.device_put(v) for k, v in floats.items() if k not in prepared.parameters}
        inputs = {k: jax.device_put(v) for k, v in example.items()}
        jax_in = dict(port.jax_inputs(inputs)) if port.jax_inputs is not None else dict(inputs)
        # one compiled pass: an operation at a time, each compiled on its first run, it took 1.5 s of a
        # 2.8 s first check of a four-module port; the mapping's leaves made inside it, as a capture's
        # are (a port's own conversion, as it is written, outside)
        if prepared.conversion is None:
            source = (params, {**inputs, **tensors})
            return pick(prepared.jax_side.compiled(source, jax_in, jnp.float32, made=prepared.made))
        made = leaves(prepared, params, {**inputs, **tensors})
        return pick(prepared.jax_side.compiled(made, jax_in, jnp.float32))

    if not isinstance(jax.device_put(np.zeros((), np.float32)), jax.core.Tracer):  # no trace is open
        return torch_out, _outputs(jax_pass)
    # first asked inside a loss's trace: its values all the same (every operation on values evaluated as
    # it is traced, which outside one would compile each initializer a Flax module's parameter names)
    with jax.ensure_compile_time_eval():
        return torch_out, _outputs(jax_pass)
