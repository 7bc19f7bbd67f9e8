"""A port's own conversion, ``Port(convert=fn)``: ``fn(state_dict arrays) -> JAX parameter pytree``.

Imported only when a port has one (it imports jax). When the port is prepared, ``fn`` is

- **steady**: called twice on the PyTorch weights, eagerly, before any other call (``steady``), it must
  give the same leaves bit for bit: a conversion that keeps state (a call counter, a cache) would
  otherwise be judged on the leaves of a later call than the user's own first one;
- **fitted** to the JAX model: ``jax.eval_shape`` of it on the PyTorch weights must give the model's
  leaves, each of its shape, floating-point and in the weights' dtype (one line names the first that
  does not);
- **proved linear**: on random float64 weights ``a``, ``b``, ``fn(a + 2b) == fn(a) + 2 fn(b)`` leaf by
  leaf (a selection, a reshape, a transpose, a concatenation, a scaling are; a constant added, a square,
  a rounding are not), else refused naming the first leaf that is not;
- **traced**, tensor by tensor: ``fn`` of random values in one tensor and zeros elsewhere (linear:
  exactly what that tensor contributes) says which leaves it reaches, the mapping table's rows
  (transform ``convert``). A parameter that reaches no leaf is unmatched, and a leaf no tensor reaches
  is a constant of the conversion: both stop the port, as an unmatched parameter or leaf does.

The check then makes the JAX leaves by calling ``fn`` inside the differentiated function (``leaves``),
so ``jax.grad`` pulls the JAX gradients back through ``fn``'s transpose, in PyTorch's names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._errors import user_call
from crosscheck._types import PyTree
from crosscheck._workloads.port.declare.fields import PortFields
from crosscheck._workloads.port.mapping.matching import CONVERT, UNUSED_BUFFER, Entry, Tensor
from crosscheck._workloads.port.sides.jax_side import key_name

#: The ``how`` of a JAX leaf that no PyTorch tensor reaches.
CONSTANT = (
    "made of no PyTorch tensor: a constant of the conversion (zeros, or a value not computed "
    "from the weights)"
)
#: The user's function, as a message names it.
WHAT = "`convert(torch_arrays)`"
#: How far ``fn(a + 2b)`` may be from ``fn(a) + 2 fn(b)`` in float64, relative to the leaf's largest
#: ``|fn(a)| + 2 |fn(b)|``: rounding of a linear map that sums many terms, far below any nonlinearity.
LINEAR_RTOL = 1e-10


@dataclasses.dataclass(frozen=True)
class Conversion:
    """The user's ``fn`` as the check calls it: ``aliases`` (a tied name -> the listed tensor's name)
    are added to its arguments, and its leaves are read in the JAX model's order (``paths``)."""

    fn: Callable[[dict[str, Any]], Any]
    names: tuple[str, ...]  # every PyTorch tensor listed, by state_dict name
    aliases: Mapping[str, str]
    paths: tuple[tuple[str, ...], ...]
    nnx: bool = False
    #: (PyTorch tensor, JAX leaf path) -> the one index of the leaf's leading axis the tensor fills, where
    #: it fills one of several (a layer of a stacked leaf: the scan's step it feeds; ``layer_of``).
    steps: Mapping[tuple[str, tuple[str, ...]], int] = dataclasses.field(default_factory=dict)

    def arguments(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        given = {k: arrays[k] for k in self.names}
        return {**given, **{alias: given[name] for alias, name in self.aliases.items()}}

    def found(self, tree: Any) -> dict[tuple[str, ...], Any]:
        """The leaves of ``fn``'s result by path (an nnx variable's trailing ``value`` set aside)."""
        out = {}
        for path, value in jax.tree_util.tree_flatten_with_path(tree)[0]:
            tokens = tuple(key_name(k) for k in path)
            if self.nnx and len(tokens) > 1 and tokens[-1] == "value":
                tokens = tokens[:-1]
            out[tokens] = value
        return out

    def leaves(self, arrays: Mapping[str, Any]) -> list[Any]:
        """The JAX leaves, in the model's order, of ``fn`` on ``arrays`` (differentiable: jax ops)."""
        found = self.found(self.fn(self.arguments(arrays)))
        return [found[p] for p in self.paths]

    def back(self, leaves: Sequence[Any], shapes: Mapping[str, Sequence[int]], arrays: Mapping) -> dict:
        """The PyTorch tensors ``shapes`` (name -> shape) read back from JAX ``leaves`` (a trained model's)
        as NumPy arrays: ``fn``'s transpose of the leaves over its transpose of ones, exact for a
        selection (each entry of a tensor copied into the leaves, as it is); a tensor copied twice (a
        tied one) reads back as the mean of its copies. ``arrays``: the other tensors (zeroed: floating
        buffers make no part of the parameters)."""
        rest = {
            k: (v if not jnp.issubdtype(v.dtype, jnp.floating) else jnp.zeros_like(v))
            for k, v in arrays.items()
        }
        dtype = leaves[0].dtype
        primal = {k: jnp.zeros(tuple(shape), dtype) for k, shape in shapes.items()}
        transpose = jax.linear_transpose(lambda params: self.leaves({**rest, **params}), primal)
        (total,) = transpose(list(leaves))
        (copies,) = transpose([jnp.ones_like(v) for v in leaves])
        return {k: np.asarray(total[k] / copies[k]) for k in shapes}

    def invertible(self, shapes: Mapping[str, Sequence[int]], arrays: Mapping[str, Any]) -> str | None:
        """Why ``back`` does not give random float64 weights back from their leaves (None: it does):
        a conversion that scales or sums tensors is not a selection."""
        rng = np.random.default_rng(1)
        with jax.enable_x64(True):
            weights = {k: jnp.asarray(rng.standard_normal(tuple(v))) for k, v in shapes.items()}
            others = {k: jnp.asarray(v) for k, v in arrays.items() if k not in shapes}
            rest = {
                k: jnp.zeros_like(v) if jnp.issubdtype(v.dtype, jnp.floating) else v
                for k, v in others.items()
            }
            try:
                read = self.back(self.leaves({**rest, **weights}), shapes, others)
            except Exception as exc:  # JAX's own: a primitive with no transpose rule, an assertion
                return f"JAX cannot transpose it: {_untransposable(exc)}"
        for name, w in weights.items():
            gap = float(np.max(np.abs(read[name] - np.asarray(w)), initial=0.0))
            if np.isnan(gap):  # read over copies: 0 / 0 where an entry was copied into no leaf
                return f"some entries of `{name}` reach no leaf: the conversion drops or masks them"
            if not gap <= 1e-12 * float(np.max(np.abs(w), initial=1.0)):
                return f"`{name}` read back from its leaves differs from it by {gap:.3g}"
        return None


def steady(port: Any, values: Mapping[str, np.ndarray]) -> None:
    """Raise one line where ``fn``, called twice on the same weights (the port's, floating ones in
    float32 as ``_shapes`` gives them, integer ones as they are; each call a fresh dict), gives other
    leaves the second time.
    The first call ``fn`` ever gets from crosscheck is this one, concrete: the check's later calls
    are traced (``jax.eval_shape``, ``jax.jit``), so a conversion wrong only on its first call (the one
    a user's own script makes) would otherwise never be seen. Each leaf is kept as its digest only."""
    where = f"port `{port.name}`"
    names = aliases(port.torch, tuple(values))
    with jax.enable_x64(True):  # an int64 buffer kept as it is (the floating ones float32), as traced
        arrays = {k: jnp.asarray(v, _shapes({k: v})[k].dtype) for k, v in values.items()}
        arrays.update({alias: arrays[name] for alias, name in names.items()})
        first, second = (_digests(user_call(where, WHAT, port.convert, dict(arrays))) for _ in range(2))
    changed = next((path for path in {**first, **second} if first.get(path) != second.get(path)), None)
    if changed is not None:
        raise ValueError(
            f"{where}: {WHAT} gives another result on its second call with the same weights (leaf "
            f"`{changed}` differs): it keeps state between calls (a counter, a cache), so the leaves the "
            "check would judge are not the ones your own first call makes; a conversion must give the "
            "same result every call (compared bit for bit)"
        )


def _digests(tree: Any) -> dict[str, str]:
    """Each leaf of ``tree`` by path: its shape, dtype and a digest of its bytes."""
    import hashlib

    out = {}
    for path, value in jax.tree_util.tree_flatten_with_path(tree)[0]:
        array = np.asarray(value)
        digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest() if array.size else ""
        out["/".join(key_name(k) for k in path)] = f"{array.shape} {array.dtype} {digest}"
    return out


def _untransposable(exc: Exception) -> str:
    """Why ``jax.linear_transpose`` failed on a conversion, in a clause: the primitive JAX names, else
    what a piecewise conversion is (JAX's assertion on a product of two weights names nothing)."""
    import re

    named = re.search(r"for '(\w+)'", str(exc))
    if named:
        return f"it applies `{named.group(1)}`, a piecewise function with no transpose rule"
    return (
        "it is piecewise or multiplies weights together, as `jnp.abs`, `jnp.sign`, `jnp.maximum` or "
        f"`jnp.clip` do, with no transpose even where the result is linear (JAX raised {type(exc).__name__})"
    )


def aliases(module: Any, listed: Sequence[str]) -> dict[str, str]:
    """The ``state_dict`` names of tied tensors not listed (``lm_head.weight``) -> the listed name."""
    state = module.state_dict(keep_vars=True)
    by_id = {id(state[name]): name for name in listed}
    return {k: by_id[id(v)] for k, v in state.items() if k not in listed and id(v) in by_id}


def prepare(
    port: Any, described: Sequence[Tensor], values: Mapping[str, np.ndarray], side: Any
) -> tuple[Conversion, list[Entry]]:
    """The conversion and its mapping rows (see the module docstring).

    Raises:
        ValueError: ``fn``'s result does not fit the JAX model, or ``fn`` is not linear (one line each);
            ``UserCodeFailed`` where ``fn`` raises.
    """
    where = f"port `{port.name}`"
    conversion = Conversion(
        port.convert,
        tuple(values),
        aliases(port.torch, tuple(values)),
        tuple(j.path for j in side.leaves),
        side.kind == "nnx",
    )
    what = WHAT
    out = user_call(where, what, jax.eval_shape, conversion.fn, conversion.arguments(_shapes(values)))
    fit(where, side.leaves, conversion.found(out), np.float32)
    with jax.enable_x64(True):
        run = jax.jit(conversion.leaves)
        reached, steps = _linear_and_reached(
            where, lambda arrays: user_call(where, what, run, arrays), side.leaves, values
        )
    return dataclasses.replace(conversion, steps=steps), entries(described, side.leaves, reached)


def structure(port: PortFields, values: Mapping[str, np.ndarray]) -> PyTree:
    """``fn``'s result, as shapes (``jax.eval_shape``): a function port's parameter pytree."""
    names = aliases(port.torch, tuple(values))
    shapes = _shapes(values)
    arguments = {**shapes, **{alias: shapes[name] for alias, name in names.items()}}
    return user_call(f"port `{port.name}`", WHAT, jax.eval_shape, port.convert, arguments)


def _shapes(values: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The tensors as ``jax.eval_shape`` takes them, floating ones in float32 (a case's default dtype,
    whatever the PyTorch model stores: the check casts its weights to the case's)."""
    return {
        k: jax.ShapeDtypeStruct(v.shape, np.float32 if np.issubdtype(v.dtype, np.floating) else v.dtype)
        for k, v in values.items()
    }


def _floating(values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in values.items() if np.issubdtype(v.dtype, np.floating)}


def fit(where: str, leaves: Sequence[Tensor], found: Mapping[tuple[str, ...], Any], dtype: Any) -> None:
    """Raise one line naming the first JAX leaf that ``found`` (``fn``'s result) does not give as the
    model has it: missing, another shape, not floating-point, another dtype than the weights'."""
    head = f"{where}: `convert`'s result does not fit the JAX model at leaf"
    for leaf in leaves:
        name = "/".join(leaf.path)
        if leaf.path not in found:
            raise ValueError(f"{head} `{name}`: expected an array of shape {leaf.shape}, found no such leaf.")
        got = found[leaf.path]
        shape, kind = tuple(np.shape(got)), np.dtype(got.dtype)
        if shape != leaf.shape:
            raise ValueError(f"{head} `{name}`: expected shape {leaf.shape}, found {shape}.")
        if not np.issubdtype(kind, np.floating):
            raise ValueError(f"{head} `{name}`: expected a floating-point array, found {kind.name}.")
        if kind != np.dtype(dtype):
            raise ValueError(
                f"{head} `{name}`: expected {np.dtype(dtype).name} (the weights' dtype), found {kind.name}: "
                f"a conversion keeps the weights' dtype (no cast)."
            )
    known = {leaf.path for leaf in leaves}
    extra = next((p for p in found if p not in known), None)
    if extra is not None:
        raise ValueError(
            f"{head} `{'/'.join(extra)}`: expected none (the JAX model has no such leaf), found an array "
            f"of shape {tuple(np.shape(found[extra]))}."
        )


def _linear_and_reached(
    where: str,
    run: Callable[[dict], list],
    leaves: Sequence[Tensor],
    values: Mapping[str, np.ndarray],
) -> tuple[dict[str, list[int]], dict[tuple[str, tuple[str, ...]], int]]:
    """Raise where ``run`` (``fn``'s leaves) is not linear in the floating tensors, or casts them; else
    each floating tensor's name -> the positions of the leaves it reaches, and the index of a leaf's
    leading axis that a tensor alone fills (``layer_of``)."""
    floating = _floating(values)
    rng = np.random.default_rng(0)
    a = {k: rng.standard_normal(v.shape) for k, v in floating.items()}
    b = {k: rng.standard_normal(v.shape) for k, v in floating.items()}
    rest = {k: v for k, v in values.items() if k not in floating}  # integer buffers, as they are
    f_a, f_b = run({**rest, **a}), run({**rest, **b})
    f_ab = run({**rest, **{k: a[k] + 2 * b[k] for k in a}})
    fit(where, leaves, dict(zip([leaf.path for leaf in leaves], f_ab, strict=True)), np.float64)
    for leaf, x, y, xy in zip(leaves, f_a, f_b, f_ab, strict=True):
        x, y, xy = np.asarray(x), np.asarray(y), np.asarray(xy)
        gap = float(np.max(np.abs(xy - (x + 2 * y)), initial=0.0))
        scale = float(np.max(np.abs(x) + 2 * np.abs(y), initial=0.0))
        if gap > LINEAR_RTOL * scale or not np.isfinite(gap):
            raise ValueError(
                f"{where}: `convert` is not linear in the weights at leaf `{'/'.join(leaf.path)}`: "
                f"convert(a + 2b) differs from convert(a) + 2 convert(b) by {gap:.3g} (random float64 "
                f"weights a, b; largest |convert(a)| + 2 |convert(b)| {scale:.3g}); a conversion selects, "
                f"reshapes, transposes, concatenates or scales the weights, it adds no constant and "
                f"applies no nonlinear function"
            )
    zeros = {k: np.zeros(v.shape) for k, v in floating.items()}
    reached, steps = {}, {}
    for name in floating:
        out = run({**rest, **zeros, name: a[name]})
        reached[name] = [i for i, v in enumerate(out) if np.any(np.asarray(v) != 0)]
        for i in reached[name]:
            step = layer_of(np.asarray(out[i]))
            if step is not None:
                steps[(name, leaves[i].path)] = step
    return reached, steps


def layer_of(reached: np.ndarray) -> int | None:
    """The one index of ``reached``'s leading axis (of several) whose slice holds every nonzero entry
    (a tensor's contribution to a leaf, alone: a layer of a stacked leaf), else None."""
    if reached.ndim == 0 or reached.shape[0] < 2:
        return None
    rows = np.flatnonzero(np.any(reached.reshape(reached.shape[0], -1) != 0, axis=1))
    return int(rows[0]) if rows.size == 1 else None


def entries(
    described: Sequence[Tensor], leaves: Sequence[Tensor], reached: Mapping[str, list[int]]
) -> list[Entry]:
    """The mapping's rows: one per (PyTorch tensor, JAX leaf it reaches), then the tensors that reach
    none (a parameter: unmatched), then the leaves no tensor reaches (constants of the conversion)."""
    made: dict[int, int] = {}
    for positions in reached.values():
        for i in positions:
            made[i] = made.get(i, 0) + 1
    out, alone = [], []
    for t in described:
        if t.tied:  # a tied alias (``head.weight``): the conversion sees it, its tensor's rows say it
            continue
        positions = reached.get(t.name, [])
        if not positions:
            how = UNUSED_BUFFER if t.kind == "buffer" else "by convert=: it reaches no JAX leaf"
            alone.append(Entry(t, None, None, how))
        for i in positions:
            reach = f"reaches {len(positions)} of {len(leaves)} leaves"
            share = f"; the leaf is made of {made[i]} tensors" if made[i] > 1 else ""
            out.append(Entry(t, leaves[i], CONVERT, f"by convert=: {reach}{share}"))
    constants = [Entry(None, j, None, CONSTANT) for i, j in enumerate(leaves) if i not in made]
    return out + alone + constants
