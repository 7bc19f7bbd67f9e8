"""How a PyTorch tensor of a port is matched to a JAX leaf: the mapping's entries, before any table.

Pure Python and NumPy (no framework): each side is described by ``Tensor`` records (name tokens,
shape, the type of the module that owns it, when known). A PyTorch tensor is matched to a JAX leaf

- **by name**: the module path, dots against nesting (``h.0.attn`` against ``h/0/attn``, ``layers.0``
  against ``layers_0``), and the leaf's own name through ``LEAF_ALIASES`` (``weight`` against
  ``kernel``, ``scale``, ``embedding``; ``running_mean`` against ``mean``);
- **by layout**: the transform that turns the PyTorch array into the JAX one (``TRANSFORMS``: the
  transpose of a dense kernel, ``OIHW`` against ``HWIO``; ``unit axes`` where the shapes differ only
  by axes of length 1, as Equinox's convolution bias ``(C, 1, 1)`` against PyTorch's ``(C,)``). When
  both modules' layouts are known (``torch.nn.Linear`` against ``flax.linen.Dense``) the layout
  decides even for a square kernel; otherwise the shapes do, and where several transforms fit (a
  square kernel fits as it is and transposed) the entry is **ambiguous**: the table says so, and the
  user decides (``overrides``).

Below both the table (``mapping``) and the overrides (``overrides``), which build on these entries.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

#: The JAX leaf names a PyTorch leaf name may map to (besides itself).
LEAF_ALIASES = {
    "weight": ("kernel", "scale", "embedding", "w"),
    "bias": ("b",),
    "running_mean": ("mean",),
    "running_var": ("var",),
}
#: The transform that adds or drops axes of length 1 (the same entries in the same order: a reshape).
UNIT_AXES = "unit axes"
#: Named transforms: name -> permutation of the PyTorch array's axes (None: as it is; ``UNIT_AXES``:
#: as it is, reshaped to the JAX leaf's shape).
TRANSFORMS: dict[str, tuple[int, ...] | None] = {
    "identity": None,
    UNIT_AXES: None,
    "transpose": (1, 0),
    "OIW->WIO": (2, 1, 0),
    "OIHW->HWIO": (2, 3, 1, 0),
    "OIDHW->DHWIO": (2, 3, 4, 1, 0),
}
#: Layouts of known modules' weights. PyTorch: ``nn.Linear`` (out, in), ``nn.ConvNd`` (O, I, spatial).
#: Hugging Face's ``Conv1D`` (GPT-2's projections, ``transformers.pytorch_utils``) keeps (in, out).
TORCH_LAYOUTS = {
    **{"Linear": "out,in", "Embedding": "rows", "Conv1D": "in,out"},
    **{f"Conv{n}d": "OI.." for n in (1, 2, 3)},
}
#: JAX: Flax `Dense` (in, out), `DenseGeneral` (its input axes, then its output axes: ``(E, H, D)`` for
#: a query's heads, ``(H, D, E)`` for an output projection), `Conv` (spatial, I, O); Equinox `Linear`
#: (out, in), `Conv` (O, I, ..).
JAX_LAYOUTS = {
    **{name: "in,out" for name in ("Dense", "DenseGeneral", "Linear", "LinearGeneral")},
    **{"Conv": "..IO", "Embed": "rows"},
}
EQUINOX_LAYOUTS = {"Linear": "out,in", "Embedding": "rows", **{f"Conv{n}d": "OI.." for n in (1, 2, 3)}}


def layout_of(bases: Sequence[str], table: dict[str, str]) -> tuple[str, str | None]:
    """The owner's type as the table shows it, and its layout, looked up along the class's bases
    (``bases``: the names of its method resolution order, the class first): PyTorch's
    ``NonDynamicallyQuantizableLinear`` (``nn.MultiheadAttention.out_proj``) is a ``Linear``, and
    shows as ``NonDynamicallyQuantizableLinear (a Linear)``."""
    for name in bases:
        if name in table:
            return (name if name == bases[0] else f"{bases[0]} (a {name})"), table[name]
    return (bases[0] if bases else ""), None


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One array of one side: its path (``("h", "0", "ln_1", "weight")``), shape, kind and owner.

    ``kind`` is ``"parameter"`` or ``"buffer"`` on the PyTorch side, the collection (``"params"``,
    ``"batch_stats"``) or ``""`` on the JAX side; ``module_type`` the owning module's class name
    (``"Linear"``), ``layout`` its weight layout when known (``"out,in"``); ``skip`` how many leading
    tokens of ``path`` are not part of the module path (a Flax collection's name); ``tied`` the name of
    the PyTorch tensor this one is (``lm_head.weight`` is ``transformer.wte.weight``: ``state_dict``
    lists both, ``named_parameters`` one), empty for any other.
    """

    path: tuple[str, ...]
    shape: tuple[int, ...]
    kind: str = "parameter"
    module_type: str = ""
    layout: str | None = None
    skip: int = 0
    tied: str = ""

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def module(self) -> tuple[str, ...]:
        return self.path[self.skip : -1]


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row of the mapping table. ``jax`` is None for an unmatched PyTorch tensor; ``transform`` None
    while ambiguous (``choices`` lists what fits)."""

    torch: Tensor | None
    jax: Tensor | None
    transform: str | None
    how: str
    choices: tuple[str, ...] = ()
    #: Left unmapped on purpose (``overrides={name: None}``): not a problem, but not checked either.
    unmapped: bool = False
    #: The part of the PyTorch tensor this row maps, ``(axis, start, stop)`` (one slice of a fused
    #: tensor), or None: all of it. It is taken before ``transform``.
    take: tuple[int, int, int] | None = None
    #: Where the (taken, transformed) tensor lands in the JAX leaf: ``((axis, start, stop), ...)`` (a
    #: layer of a stacked leaf, a slice of a fused one); empty: the whole leaf. The piece is reshaped to
    #: the box's shape (so a stacked layer gains its unit axis, a head axis splits).
    box: tuple[tuple[int, int, int], ...] = ()

    @property
    def status(self) -> str:
        if self.unmapped:
            return "unmapped"
        if self.torch is None or self.jax is None:
            return "unmatched"
        return "ambiguous" if self.transform is None else "mapped"


def canonical(tokens: Sequence[str]) -> tuple[str, ...]:
    """A module path both frameworks spell alike: ``layers_0`` and ``layers.0`` give ``layers, 0``."""
    out: list[str] = []
    for token in tokens:
        found = re.fullmatch(r"(.*\D)_(\d+)", token)
        out.extend(found.groups() if found else (token,))
    return tuple(out)


def loose(tokens: Sequence[str]) -> tuple[str, ...]:
    """A module path with a list's nesting aside: a Flax module ``layer`` that holds the list
    ``self.layer = [...]`` names its items ``layer/layer_0`` where PyTorch has ``layer.0``, and
    ``nn.Sequential`` names them ``layers_0`` where PyTorch's has ``0``: both read ``layer, 0`` or ``0``."""
    out: list[str] = []
    for token in canonical(tokens):
        nested = len(out) > 1 and out[-1] == out[-2] and not out[-1].isdigit()
        if token.isdigit() and out and (out[-1] == "layers" or nested):
            out.pop()
        out.append(token)
    return tuple(out)


#: The transform of a row made by the port's own conversion (``Port(convert=fn)``: ``convert``).
CONVERT = "convert"


#: A buffer the JAX model does not use (``num_batches_tracked``): listed, allowed, and counted.
UNUSED_BUFFER = "a buffer the JAX model does not use"


#: The ``how`` of a tensor left unmapped by an override.
UNMAPPED = "left unmapped by an override: the PyTorch model keeps its value, its gradient is not checked"


Index = dict[tuple[int, tuple[str, ...], str], list[tuple[int, Tensor]]]
#: How a module path is read: as both frameworks spell it (``canonical``), then with a list's nesting
#: aside (``loose``), each with the words the table says.
READINGS = ((0, "by name"), (1, "by name, a list's nesting aside"))


def index_leaves(jax: Sequence[Tensor]) -> Index:
    """JAX leaves by (reading, module path so read, leaf name), each with its position on its side."""
    index: Index = {}
    for position, j in enumerate(jax):
        index.setdefault((0, canonical(j.module), j.path[-1]), []).append((position, j))
        index.setdefault((1, loose(j.module), j.path[-1]), []).append((position, j))
    return index


def match(t: Tensor, index: Index, used: set) -> Entry:
    """The entry of ``t`` matched by name (and layout) among the JAX leaves not ``used`` yet: by its
    module path as both frameworks spell it, else with a list's nesting aside (``loose``)."""
    tokens, names, said = _parametrized(t)
    for reading, how in READINGS:
        module = canonical(tokens) if reading == 0 else loose(tokens)
        how = f"{how}{said}"
        candidates = sorted(item for name in names for item in index.get((reading, module, name), []))
        found = [j for _, j in candidates if j.path not in used and _kind_fits(t, j)]
        if found:
            return _chosen(t, found, how)
    what = UNUSED_BUFFER if t.kind == "buffer" else "no JAX leaf of that name"
    return Entry(t, None, None, what)


#: PyTorch's weight norm (``torch.nn.utils.parametrizations.weight_norm``) keeps ``weight`` as the
#: parametrization's ``original0`` (the magnitude) and ``original1`` (the direction), where the older
#: ``torch.nn.utils.weight_norm`` and Flax ports name them ``weight_g`` and ``weight_v``.
WEIGHT_NORM_LEAVES = {"original0": "g", "original1": "v"}


def _parametrized(t: Tensor) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """The module path and leaf names ``t`` is looked up by, and what the table adds to its ``how``:
    ``conv.parametrizations.weight.original0`` is read as ``conv``'s ``weight_g`` (weight norm)."""
    leaf, module = t.path[-1], t.module
    if leaf in WEIGHT_NORM_LEAVES and len(module) >= 2 and module[-2] == "parametrizations":
        name = f"{module[-1]}_{WEIGHT_NORM_LEAVES[leaf]}"
        return module[:-2], (name,), f" (weight norm: `{leaf}` is `{name}`)"
    return module, tuple(dict.fromkeys((leaf, *LEAF_ALIASES.get(leaf, ())))), ""


def _chosen(t: Tensor, found: list[Tensor], how: str) -> Entry:
    """The entry of ``t`` among the leaves its name ``found``: the one whose shape fits, else none."""
    if len(found) > 1:
        found = [j for j in found if fits(t, j)] or found
    if len(found) > 1:
        paths = ", ".join("/".join(j.path) for j in found)
        return Entry(t, None, None, f"several JAX leaves fit ({paths}); choose one in overrides")
    return layout_entry(t, found[0], how)


def _kind_fits(t: Tensor, j: Tensor) -> bool:
    """A parameter maps to a differentiated leaf (``params`` or a plain pytree), a buffer to any."""
    return t.kind == "buffer" or j.kind in ("params", "")


def fits(t: Tensor, j: Tensor) -> list[str]:
    """The named transforms that turn ``t``'s shape into ``j``'s."""
    return [name for name, perm in TRANSFORMS.items() if transformed(name, perm, t.shape, j.shape) == j.shape]


def transformed(name: str, perm: tuple[int, ...] | None, shape: tuple, target: tuple) -> tuple | None:
    """The shape transform ``name`` (axes ``perm``) makes of ``shape``, towards ``target`` (None: it
    does not apply). ``UNIT_AXES`` applies only where the shapes differ, by axes of length 1 alone."""
    if name == UNIT_AXES:
        return target if shape != target and unit_axes_apart(shape, target) else None
    if perm is None:
        return tuple(shape)
    return tuple(shape[i] for i in perm) if len(perm) == len(shape) else None


def unit_axes_apart(a: tuple, b: tuple) -> bool:
    """Whether shapes ``a`` and ``b`` hold the same entries in the same order, apart from axes of
    length 1 (``(C,)`` and ``(C, 1, 1)``)."""
    return [n for n in a if n != 1] == [n for n in b if n != 1]


def layout_entry(t: Tensor, j: Tensor, matched: str) -> Entry:
    """The entry of a matched pair: the transform the layouts decide, else the one shape that fits."""
    fitting = fits(t, j)
    known = _known_transform(t, j)
    if known is not None and known in fitting:
        return Entry(
            t, j, known, f"{matched}; layout: {t.module_type} ({t.layout}) -> {j.module_type} ({j.layout})"
        )
    if not fitting:
        return Entry(
            t, None, None, f"{matched} `{'/'.join(j.path)}` {j.shape}, but no transform fits the shapes"
        )
    if len(fitting) == 1:
        how = "same shape" if len(t.shape) <= 1 else "the only layout that fits the shapes"
        if fitting[0] == UNIT_AXES:
            how = "the same entries, axes of length 1 apart"
        return Entry(t, j, fitting[0], f"{matched}; {how}")
    return Entry(t, j, None, f"{matched}; {' and '.join(fitting)} both fit the shapes", tuple(fitting))


def _known_transform(t: Tensor, j: Tensor) -> str | None:
    pair = (t.layout, j.layout)
    if None in pair:
        return None
    if pair[0] == pair[1]:
        return "identity"
    rank = len(t.shape)
    if pair in (("out,in", "in,out"), ("in,out", "out,in")):
        return "transpose"
    if pair == ("OI..", "..IO"):
        return {3: "OIW->WIO", 4: "OIHW->HWIO", 5: "OIDHW->DHWIO"}.get(rank)
    return None


#: Said after a transform's name (``"transpose, heads last"``): where the piece's axis splits into
#: head axes, PyTorch's flat index ``h * D + d`` is read with the heads last (a Flax ``DenseGeneral``
#: with ``features=(D, H)``: ``(E, D, H)``), not first (``(E, H, D)``, the default).
HEADS_LAST = "heads last"
#: Said after a transform's name (``"transpose, heads first"``): the default reading, said, so that the
#: values are not asked (an order the values cannot decide is decided so).
HEADS_FIRST = "heads first"


def heads_order(transform: str) -> tuple[str, bool]:
    """A transform's name without its head order, and whether it reads the heads last."""
    base, order = _split_order(transform)
    return base, order == HEADS_LAST


def said_order(transform: str) -> str:
    """The head order a transform's name says (``HEADS_FIRST`` or ``HEADS_LAST``), or ``""``: none."""
    return _split_order(transform)[1]


def _split_order(transform: str) -> tuple[str, str]:
    base, comma, order = transform.rpartition(",")
    if comma and order.strip() in (HEADS_FIRST, HEADS_LAST):
        return base.strip(), order.strip()
    return transform, ""


def permutation(transform: str) -> tuple[int, ...] | None:
    """The axes permutation of a transform name (a named one, or ``"(2, 3, 1, 0)"``; a head order
    after it, ``"transpose, heads last"``, is the reshape's, not the permutation's)."""
    transform = heads_order(transform)[0]
    if transform in TRANSFORMS:
        return TRANSFORMS[transform]
    return tuple(int(i) for i in transform.strip("()").split(",") if i.strip())
