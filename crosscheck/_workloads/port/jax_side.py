"""The JAX side of a port: a Flax linen module, an Equinox module, or a function of a parameter pytree.

Imported only when a port is used (it imports jax). Each kind is described the same way: its leaves
(``mapping.Tensor``, with the owning module's class where it can be known), how to rebuild the model
from leaf values, and how to call it; a linen module also reports every submodule call (its inputs
and outputs, through ``flax.linen.intercept_methods``) for the module-by-module comparison.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._workloads.port.mapping import EQUINOX_LAYOUTS, JAX_LAYOUTS, Tensor
from crosscheck._workloads.port.torch_side import Record

Call = Callable[[Any, dict], Any]


def kind_of(model: Any) -> str:
    """``"linen"``, ``"equinox"`` or ``"function"`` (raises ``TypeError`` for anything else)."""
    for module_name, kind in (("flax.linen", "linen"), ("equinox", "equinox")):
        base = _class(module_name, "Module")
        if base is not None and isinstance(model, base):
            return kind
    if callable(model):
        return "function"
    raise TypeError(
        f"`jax` of a Port must be a Flax linen module, an Equinox module or a function of a parameter "
        f"pytree, found {type(model).__name__}."
    )


def _class(module_name: str, name: str) -> Any:
    import importlib
    import sys

    root = module_name.split(".")[0]
    if root not in sys.modules:
        try:
            importlib.import_module(module_name)
        except ImportError:
            return None
    return getattr(importlib.import_module(module_name), name, None)


def key_name(key: Any) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


class JaxSide:
    """One JAX model: ``leaves`` (described), ``forward(values, inputs)`` and ``capture(values, inputs)``."""

    def __init__(self, model: Any, params: Any, call: Call | None, example: dict[str, Any]) -> None:
        self.kind = kind_of(model)
        self.model, self.call = model, call or (lambda m, inputs: m(**inputs))
        self.types: dict[tuple[str, ...], str] = {}
        if self.kind == "linen":
            tree, self.static = self._linen_shapes(example), None
        elif self.kind == "equinox":
            import equinox as eqx

            tree, self.static = eqx.partition(model, eqx.is_inexact_array)
        else:
            if params is None:
                raise ValueError("a Port whose `jax` is a function needs `jax_params`: its parameter pytree.")
            tree, self.static = params, None
        flat, self.treedef = jax.tree_util.tree_flatten_with_path(tree)
        self.leaves = [self._describe(path, leaf) for path, leaf in flat]

    def _linen_shapes(self, example: dict[str, Any]) -> Any:
        import flax.linen as nn

        def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
            self.types.setdefault(tuple(context.module.path), type(context.module).__name__)
            return next_fun(*args, **kwargs)

        def init() -> Any:
            with nn.intercept_methods(record):
                return nn.init(self.call, self.model)(jax.random.key(0), example)

        return jax.eval_shape(init)

    def _describe(self, path: Sequence[Any], leaf: Any) -> Tensor:
        tokens = tuple(key_name(k) for k in path)
        shape = tuple(int(d) for d in np.shape(leaf))
        if self.kind == "linen":
            owner = self.types.get(tokens[1:-1], "")
            layout = JAX_LAYOUTS.get(owner) if tokens[-1] in ("kernel", "embedding") else None
            return Tensor(tokens, shape, tokens[0], owner, layout, skip=1)
        owner = _owner(self.model, path) if self.kind == "equinox" else ""
        layout = EQUINOX_LAYOUTS.get(owner) if self.kind == "equinox" and tokens[-1] == "weight" else None
        return Tensor(tokens, shape, "", owner, layout)

    def rebuild(self, values: Sequence[Any], dtype: Any) -> Any:
        """The model (a bound-ready linen module and its variables, an Equinox module, or the function
        with its parameters) from leaf values in ``leaves`` order."""
        tree = jax.tree_util.tree_unflatten(self.treedef, list(values))
        if self.kind == "linen":
            return _in_dtype(self.model, dtype), tree
        if self.kind == "equinox":
            import equinox as eqx

            return eqx.combine(tree, self.static), None
        return functools.partial(self.model, tree), None

    def forward(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> Any:
        model, variables = self.rebuild(values, dtype)
        if self.kind == "linen":
            import flax.linen as nn

            return nn.apply(self.call, model)(variables, inputs)
        return self.call(model, inputs)

    def capture(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> list[Record]:
        """Every linen submodule call of one forward pass, in the order the calls finished (other kinds:
        the output only)."""
        if self.kind != "linen":
            return [
                Record("", type(self.model).__name__, (), tuple(_numpy(self.forward(values, inputs, dtype))))
            ]
        import flax.linen as nn

        records: list[Record] = []
        seen: dict[str, int] = {}

        def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
            out = next_fun(*args, **kwargs)
            if context.method_name == "__call__":
                name = ".".join(context.module.path)
                seen[name] = seen.get(name, 0) + 1
                label = name if seen[name] == 1 else f"{name}#{seen[name]}"
                arrays = (_numpy((args, kwargs)), _numpy(out))
                records.append(Record(label, type(context.module).__name__, *arrays))
            return out

        model, variables = self.rebuild(values, dtype)
        with nn.intercept_methods(record):
            nn.apply(self.call, model)(variables, inputs)
        return records


def _numpy(value: Any) -> tuple[np.ndarray, ...]:
    out = []
    for leaf in jax.tree_util.tree_leaves(value):
        if isinstance(leaf, (jax.Array, np.ndarray)):
            a = np.asarray(leaf)
            out.append(a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a.copy())
    return tuple(out)


def _in_dtype(module: Any, dtype: Any) -> Any:
    """A linen module that computes in ``dtype``: one with a ``dtype`` field set to a float type (Hugging
    Face's default ``float32``) is cloned with the case's dtype; ``None`` already follows its inputs."""
    current = getattr(module, "dtype", None)
    if current is None or not jnp.issubdtype(current, jnp.floating) or current == dtype:
        return module
    return module.clone(dtype=dtype)


def _owner(model: Any, path: Sequence[Any]) -> str:
    """The class name of the object holding the leaf at ``path`` inside ``model`` (Equinox)."""
    node = model
    for key in path[:-1]:
        if hasattr(key, "name"):
            node = getattr(node, key.name, None)
        elif hasattr(key, "idx"):
            node = node[key.idx]
        elif hasattr(key, "key"):
            node = node[key.key]
    return type(node).__name__


def to_jax(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    return {k: jnp.asarray(v) for k, v in arrays.items()}
