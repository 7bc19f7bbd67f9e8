"""The JAX side of a port: a Flax linen or nnx module, an Equinox module, or a function of a pytree.

Imported only when a port is used (it imports jax). Each kind is described the same way: its leaves
(``mapping.Tensor``, with the owning module's class where it can be known), how to rebuild the model
from leaf values, and how to call it; a linen module also reports every submodule call (its inputs
and outputs, through ``flax.linen.intercept_methods``: ``linen_side``) for the module-by-module
comparison, an nnx module too (its submodules' ``__call__`` wrapped for the capture pass:
``nnx_side``); an Equinox module or a function reports the intermediates its call returns for the
PyTorch modules listed in ``Port(jax_intermediates=...)`` (checked by ``intermediates``; a stacked
``layers.*.X`` split per layer), its call run as one compiled program kept per dtype, as a linen
capture's pass is.
A linen submodule called inside ``nn.scan`` (or ``nn.remat``) sees tracers: each step's values are
recorded when the step runs (``steps``), with its step's index: ``path@i`` (``steps.label``). A linen
module's whole capture runs as one compiled program of its forward pass, every call's values recorded
that way (compiled once per dtype, not an operation at a time, and kept for the side's next capture in
that dtype: a check's repeat runs it again; op by op where ``jax.jit`` cannot trace it),
the leaves made from the PyTorch tensors inside it where the mapping makes them (``capture``'s ``made``).
A kept pass is traced afresh in each check (``renew``; ``programs.Kept``): the model's code as it is
then, its compiled program run again only where the new trace is the same program.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._errors import user_call
from crosscheck._types import PyTree
from crosscheck._workloads.port.mapping.matching import EQUINOX_LAYOUTS, JAX_LAYOUTS, Tensor, layout_of
from crosscheck._workloads.port.mapping.stacked import spread
from crosscheck._workloads.port.sides import steps
from crosscheck._workloads.port.sides.torch_side import ModuleCall
from crosscheck._workloads.programs import Kept

Call = Callable[[Any, dict], Any]


def kind_of(model: Any) -> str:
    """``"nnx"``, ``"linen"``, ``"equinox"`` or ``"function"`` (raises ``TypeError`` for anything else).

    A framework is looked up only where it is already imported: a model of it means it is."""
    for module_name, kind in (("flax.nnx", "nnx"), ("flax.linen", "linen"), ("equinox", "equinox")):
        base = getattr(sys.modules.get(module_name), "Module", None)
        if isinstance(base, type) and isinstance(model, base):
            return kind
    if callable(model):
        return "function"
    raise TypeError(
        f"`jax` of a Port must be a Flax linen or nnx module, an Equinox module or a function of a "
        f"parameter pytree, found {type(model).__name__}."
    )


def key_name(key: Any) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


class JaxSide:
    """One JAX model: ``leaves`` (described), ``forward(values, inputs)`` and ``capture(values, inputs)``.

    ``where`` names the port in messages: a linen module's ``init`` (its ``setup`` and ``__call__``)
    runs here, and whatever it raises is a ``UserCodeFailed`` that names it.
    """

    def __init__(
        self,
        model: Any,
        params: Any,
        call: Call | None,
        example: dict[str, Any],
        listed: Sequence[str] = (),
        *,
        where: str = "port",
        training: Callable[[], bool] = lambda: False,
    ) -> None:
        self.kind = kind_of(model)
        self.model, self.call = model, call or (lambda m, inputs: m(**inputs))
        #: Whether the port is checked in training mode (its PyTorch module's mode, read at each call).
        self.training = training
        #: A linen module's collections other than ``params`` (``batch_stats``): mutable in training mode.
        self.mutable: list[str] = []
        self.listed = tuple(listed)  # the user-listed intermediates the call returns beside its output
        self.types: dict[tuple[str, ...], tuple[str, ...]] = {}  # module path -> its class's bases' names
        self.passes: dict[Any, Kept] = {}  # the captures' compiled passes, by ``steps.pass_key``
        self.traced_records = 0  # records a linen capture made while tracing (its values no tracers)
        self.kinds: dict[tuple[str, ...], str] = {}
        if self.kind == "linen":  # Flax runs the user's `setup` and `__call__` (traced) here
            tree = user_call(
                where, "the Flax module's `init` (its `setup` and `__call__`)", self._linen_shapes, example
            )
            self.static = None
            self.mutable = [c for c in tree if c != "params"]
        elif self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            tree, self.static = nnx_side.split(model, training=self.training())
            self.types, self.kinds = nnx_side.owners(model), nnx_side.kinds(tree)
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
            self.types.setdefault(tuple(context.module.path), bases(type(context.module)))
            return next_fun(*args, **kwargs)

        def init(call: Call) -> PyTree:
            with nn.intercept_methods(record):
                return nn.init(call, self.model)(jax.random.key(0), example)

        if self.training():  # crosscheck's own initialisation: the module's plain call, not the training one
            try:
                return jax.eval_shape(lambda: init(lambda m, inputs: m(**inputs)))
            except Exception:  # a module that cannot be called so (a required `train` argument)
                self.types.clear()
        return jax.eval_shape(lambda: init(self.call))

    def renew(self) -> None:
        """A new check: each kept capture pass is traced afresh at its next run (``Kept.renew``), so that
        what the model's code reads when traced (a module-level flag, a closure's variable) is read as it
        is now; a program compiled in an earlier check runs again only where it is the same program. An
        nnx module is split again: an attribute set on it since (``model.scale = 2.0``) is in its graph,
        which the model is rebuilt from (``nnx_side.again``)."""
        for kept in self.passes.values():
            kept.renew()
        if self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            shapes = [leaf.shape for leaf in self.leaves]
            self.static = nnx_side.again(self.model, self.treedef, shapes, training=self.training())

    def _describe(self, path: Sequence[Any], leaf: Any) -> Tensor:
        tokens = tuple(key_name(k) for k in path)
        shape = tuple(int(d) for d in np.shape(leaf))
        if self.kind == "linen":
            owner, layout = layout_of(self.types.get(tokens[1:-1], ()), JAX_LAYOUTS)
            layout = layout if tokens[-1] in ("kernel", "embedding") else None
            return Tensor(tokens, shape, tokens[0], owner, layout, skip=1)
        if self.kind == "nnx":  # an nnx.State leaf: its path, then the variable's `value`
            tokens = tokens[:-1] if len(tokens) > 1 and tokens[-1] == "value" else tokens
            owner, layout = layout_of(self.types.get(tokens[:-1], ()), JAX_LAYOUTS)
            layout = layout if tokens[-1] in ("kernel", "embedding") else None
            return Tensor(tokens, shape, self.kinds.get(tokens, ""), owner, layout)
        if self.kind != "equinox":
            return Tensor(tokens, shape, "", "", None)
        owner, layout = layout_of(bases(_owner(self.model, path)), EQUINOX_LAYOUTS)
        return Tensor(tokens, shape, "", owner, layout if tokens[-1] == "weight" else None)

    def rebuild(self, values: Sequence[Any], dtype: Any) -> Any:
        """The model (a bound-ready linen module and its variables, an Equinox module, or the function
        with its parameters) from leaf values in ``leaves`` order."""
        tree = jax.tree_util.tree_unflatten(self.treedef, list(values))
        if self.kind == "linen":
            return _in_dtype(self.model, dtype), tree
        if self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            return nnx_side.merge(self.static, tree), None  # type: ignore[arg-type]
        if self.kind == "equinox":
            import equinox as eqx

            return eqx.combine(tree, self.static), None
        return functools.partial(self.model, tree), None

    def run(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> Any:
        """What the call returns (with ``listed``: ``(output, {name: array})``)."""
        model, variables = self.rebuild(values, dtype)
        if self.kind == "linen":
            return self.apply(model, variables, inputs)[0]
        if self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            return nnx_side.called(self.call, model, inputs)  # a pinned submodule named, not a raw scan error
        return self.call(model, inputs)

    def apply(self, model: Any, variables: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
        """A linen module's call and its updated collections (``{}`` but in training mode, where its
        collections other than ``params`` are mutable: a BatchNorm's ``batch_stats``)."""
        import flax.linen as nn

        if self.training() and self.mutable:
            return nn.apply(self.call, model, mutable=self.mutable)(variables, inputs)
        return nn.apply(self.call, model)(variables, inputs), {}

    def updated(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> list[Any]:
        """The leaf values after one call of the model in training mode: ``values`` with what the call
        updated (the running statistics: a linen module's mutable collections, an nnx module's
        ``BatchStat`` variables, updated in place) in their place."""
        if self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            model = self.rebuild(values, dtype)[0]
            nnx_side.called(self.call, model, inputs)
            return jax.tree_util.tree_leaves(nnx_side.split(model, training=True)[0])
        model, variables = self.rebuild(values, dtype)
        updates = self.apply(model, variables, inputs)[1]
        return self.treedef.flatten_up_to({**variables, **updates})

    def forward(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> Any:
        return self.split(self.run(values, inputs, dtype))[0]

    def compiled(
        self,
        values: Any,
        inputs: dict[str, Any],
        dtype: Any,
        *,
        made: Callable[[Any], Sequence[Any]] | None = None,
    ) -> PyTree:
        """``forward``'s output, of one compiled pass (``_returned``: kept per dtype, run as written where
        ``jax.jit`` cannot trace it), not an operation at a time; with ``made``, of the leaves
        ``made(values)``, made inside the pass (``capture``'s)."""
        return self.split(self._returned(values, inputs, dtype, made))[0]

    def split(self, got: Any) -> tuple[Any, Mapping[str, Any]]:
        """The output and the listed intermediates of what the call returned (raises when they are not
        the pair ``jax_intermediates`` promises, with exactly the names it lists)."""
        if not self.listed:
            return got, {}
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], Mapping)):
            raise TypeError(
                f"with `jax_intermediates`, the JAX call must return (output, {{PyTorch module name: "
                f"array}}), found {shape_of(got)}"
            )
        missing = [n for n in self.listed if n not in got[1]]
        extra = [str(n) for n in got[1] if n not in self.listed]
        if missing or extra:
            raise ValueError(
                f"the JAX call returned intermediates {sorted(map(str, got[1]))}; `jax_intermediates` "
                f"lists {list(self.listed)}"
            )
        return got

    def capture(
        self,
        values: Any,
        inputs: dict[str, Any],
        dtype: Any,
        *,
        made: Callable[[Any], Sequence[Any]] | None = None,
    ) -> list[ModuleCall]:
        """Every linen or nnx submodule call of one forward pass, in the order the calls finished (other
        kinds: the listed intermediates, then the output). ``values``: the leaf values, or with ``made``
        what ``made(values)`` makes them from (inside a linen model's compiled pass: a leaf the mapping
        transposes or reshapes is no array of its own there)."""
        if made is not None and self.kind != "linen":
            values, made = made(values), None
        if self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            model = self.rebuild(values, dtype)[0]
            return nnx_side.capture(model, self.call, inputs, _numpy, narrow, self.passes)
        if self.kind != "linen":
            out, found = self.split(self._returned(values, inputs, dtype))
            listed = [
                ModuleCall(k, "", (), _numpy(v), narrow(v))
                for n in self.listed
                for k, v in spread(n, found[n])
            ]
            return [*listed, ModuleCall("", type(self.model).__name__, (), _numpy(out), narrow(out))]
        from crosscheck._workloads.port.sides import linen_side

        def linen(jit: bool) -> list[ModuleCall]:
            return linen_side.capture(
                self, values, inputs, dtype, jit=jit, made=made, numpy=_numpy, narrow=narrow
            )

        try:  # one compiled forward pass, each call's values sent back as it runs
            return linen(True)
        except Exception:  # a model jax.jit cannot trace (Python control flow on values): op by op
            try:
                return linen(False)
            except TRACED:  # under `nn.vmap` a submodule's values are batched tracers: the output alone
                out = self.split(self.run(made(values) if made else values, inputs, dtype))[0]
                return [
                    ModuleCall("", type(self.model).__name__, (), _numpy(out), narrow(out), note=UNCAPTURED)
                ]

    def _returned(
        self,
        values: Sequence[Any],
        inputs: dict[str, Any],
        dtype: Any,
        made: Callable[[Any], Sequence[Any]] | None = None,
    ) -> Any:
        """What the call returns (``run``), as one ``jax.jit`` kept per dtype (``passes``): compiled once,
        not an operation at a time; run as it is written where ``jax.jit`` cannot trace it. ``made``:
        the leaves are ``made(values)``, made inside the pass (``capture``'s)."""
        arrays, placed, static = steps.traced_inputs(inputs)
        key = steps.pass_key("returned", np.dtype(dtype).name, static, made)
        run = (self.passes.get(key) if key is not None else None) or Kept()

        def returned(values: list, arrays: list) -> Any:  # the inputs' arrays traced, the rest as given
            return self.run(made(values) if made else values, placed(arrays), dtype)

        try:
            got = run(returned, list(values), arrays)
        except Exception:  # Python control flow on a value, a non-array returned: as it is written
            return self.run(made(values) if made else values, inputs, dtype)
        if key is not None:
            self.passes[key] = run
        return got


def _numpy(value: Any) -> tuple[np.ndarray, ...]:
    out = []
    for leaf in jax.tree_util.tree_leaves(value):
        if isinstance(leaf, (jax.Array, np.ndarray)):
            a = np.asarray(leaf)
            out.append(a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a.copy())
    return tuple(out)


#: Why a linen model's submodule calls were not captured (``ModuleCall.note``), said in its verdict.
UNCAPTURED = (
    "only the output is compared: the linen model's submodule calls could not be captured (under a "
    "transform such as `nn.vmap` their values are batched tracers, which cannot be read as they run), so "
    "module by module is left out"
)
#: The errors of reading a traced value as an array (``capture``'s fallback to the output alone).
TRACED = (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError)


def narrow(value: Any) -> bool:
    """Whether a floating array of ``value`` is narrower than float64 (float32 in a float64 run)."""
    return any(
        jnp.issubdtype(leaf.dtype, jnp.floating) and leaf.dtype.itemsize < 8
        for leaf in jax.tree_util.tree_leaves(value)
        if isinstance(leaf, (jax.Array, np.ndarray))
    )


def _in_dtype(module: Any, dtype: Any) -> Any:
    """A linen module that computes in ``dtype``: one with a ``dtype`` field set to a float type (Hugging
    Face's default ``float32``) is cloned with the case's dtype (the case says so: ``notes.case_notes``'s
    ``jax_dtype``); ``None`` already follows its inputs."""
    current = getattr(module, "dtype", None)
    if current is None or not jnp.issubdtype(current, jnp.floating) or current == dtype:
        return module
    return module.clone(dtype=dtype)


def bases(cls: type) -> tuple[str, ...]:
    """The names of a class's method resolution order, the class first (layouts are looked up along
    it: a subclass of Flax's ``Dense`` has ``Dense``'s layout)."""
    return tuple(c.__name__ for c in cls.__mro__)


def _owner(model: Any, path: Sequence[Any]) -> type:
    """The class of the object holding the leaf at ``path`` inside ``model`` (Equinox)."""
    node = model
    for key in path[:-1]:
        if hasattr(key, "name"):
            node = getattr(node, key.name, None)
        elif hasattr(key, "idx"):
            node = node[key.idx]
        elif hasattr(key, "key"):
            node = node[key.key]
    return type(node)


def shape_of(value: Any) -> str:
    """A short description of a returned value: ``a tuple of 3``, ``an array of shape (5, 2)``."""
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def to_jax(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """JAX arrays of ``arrays`` (a NumPy array copied with ``jax.device_put``, in about half
    ``jnp.asarray``'s time on the CPU, to the same dtype under the same x64 flag; anything else through
    ``jnp.asarray``). The arrays may share memory with ``arrays`` (``device_put`` sometimes does): the
    capture only reads them while it runs."""
    return {k: jax.device_put(v) if isinstance(v, np.ndarray) else jnp.asarray(v) for k, v in arrays.items()}
