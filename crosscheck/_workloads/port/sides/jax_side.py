"""The JAX side of a port: a Flax linen or nnx module, an Equinox module, or a function of a pytree.

Imported only when a port is used (it imports jax). Each kind is described the same way: its leaves
(``mapping.Tensor``, with the owning module's class where it can be known), how to rebuild the model
from leaf values, and how to call it; a linen module also reports every submodule call (its inputs
and outputs, through ``flax.linen.intercept_methods``) for the module-by-module comparison, an nnx
module too (its submodules' ``__call__`` wrapped for the capture pass: ``nnx_side``); an Equinox
module or a function reports the intermediates its call returns for the PyTorch modules listed in
``Port(jax_intermediates=...)`` (checked by ``intermediates``; a stacked ``layers.*.X`` split per layer),
its call run as one ``jax.jit`` kept per dtype, as a linen capture's pass is.
A linen submodule called inside ``nn.scan`` (or ``nn.remat``) sees tracers: each step's values are
recorded when the step runs (``steps``), with its step's index: ``path@i`` (``steps.label``). A linen
module's whole capture runs as one ``jax.jit`` of its forward pass, every call's values recorded that
way (compiled once per dtype, not an operation at a time, and kept for the side's next capture in that
dtype: a check's repeat runs it again; op by op where ``jax.jit`` cannot trace it),
the leaves made from the PyTorch tensors inside it where the mapping makes them (``capture``'s ``made``).
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
from crosscheck._workloads.port.mapping.matching import EQUINOX_LAYOUTS, JAX_LAYOUTS, Tensor, layout_of
from crosscheck._workloads.port.mapping.stacked import spread
from crosscheck._workloads.port.sides import steps
from crosscheck._workloads.port.sides.torch_side import ModuleCall

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
    ) -> None:
        self.kind = kind_of(model)
        self.model, self.call = model, call or (lambda m, inputs: m(**inputs))
        self.listed = tuple(listed)  # the user-listed intermediates the call returns beside its output
        self.types: dict[tuple[str, ...], tuple[str, ...]] = {}  # module path -> its class's bases' names
        self.passes: dict[Any, Callable] = {}  # the captures' compiled passes, by ``steps.pass_key``
        self.traced_records = 0  # records a linen capture made while tracing (its values no tracers)
        self.kinds: dict[tuple[str, ...], str] = {}
        if self.kind == "linen":  # Flax runs the user's `setup` and `__call__` (traced) here
            tree = user_call(
                where, "the Flax module's `init` (its `setup` and `__call__`)", self._linen_shapes, example
            )
            self.static = None
        elif self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            tree, self.static = nnx_side.split(model)
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

        def init() -> Any:
            with nn.intercept_methods(record):
                return nn.init(self.call, self.model)(jax.random.key(0), example)

        return jax.eval_shape(init)

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
            import flax.linen as nn

            return nn.apply(self.call, model)(variables, inputs)
        if self.kind == "nnx":
            from crosscheck._workloads.port.sides import nnx_side

            return nnx_side.called(self.call, model, inputs)  # a pinned submodule named, not a raw scan error
        return self.call(model, inputs)

    def forward(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> Any:
        return self.split(self.run(values, inputs, dtype))[0]

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
        try:  # one compiled forward pass, each call's values sent back as it runs
            return self._linen_capture(values, inputs, dtype, jit=True, made=made)
        except Exception:  # a model jax.jit cannot trace (Python control flow on values): op by op
            try:
                return self._linen_capture(values, inputs, dtype, jit=False, made=made)
            except TRACED:  # under `nn.vmap` a submodule's values are batched tracers: the output alone
                out = self.split(self.run(made(values) if made else values, inputs, dtype))[0]
                return [
                    ModuleCall("", type(self.model).__name__, (), _numpy(out), narrow(out), note=UNCAPTURED)
                ]

    def _returned(self, values: Sequence[Any], inputs: dict[str, Any], dtype: Any) -> Any:
        """What the call returns (``run``), as one ``jax.jit`` kept per dtype (``passes``): compiled once,
        not an operation at a time; run as it is written where ``jax.jit`` cannot trace it."""
        arrays, placed, static = steps.traced_inputs(inputs)
        key = steps.pass_key("returned", np.dtype(dtype).name, static)
        run = self.passes.get(key) if key is not None else None
        if run is None:

            def returned(values: list, arrays: list) -> Any:  # the inputs' arrays traced, the rest as given
                return self.run(values, placed(arrays), dtype)

            run = jax.jit(returned)
        try:
            got = run(list(values), arrays)
        except Exception:  # Python control flow on a value, a non-array returned: as it is written
            return self.run(values, inputs, dtype)
        if key is not None:
            self.passes[key] = run
        return got

    def _linen_capture(
        self, values: Any, inputs: dict[str, Any], dtype: Any, *, jit: bool, made: Callable | None = None
    ) -> list[ModuleCall]:
        """A linen module's calls (``capture``): with ``jit``, in one ``jax.jit`` of the forward pass,
        each call's values sent back as it runs (``steps.later``, as a scan's steps are), compiled once;
        without, op by op (each new operation compiled on its own: 73 of them for one GPT-2 layer)."""
        import flax.linen as nn

        records: list[ModuleCall] = []
        seen: dict[str, int] = {}
        record, roots = _interceptor(self)

        arrays, placed, static = steps.traced_inputs(inputs)

        def linen_pass(values: Any, arrays: list) -> None:  # the inputs' arrays traced, the rest as given
            model, variables = self.rebuild(values if made is None else made(values), dtype)
            with nn.intercept_methods(record):
                nn.apply(self.call, model)(variables, placed(arrays))

        key = steps.pass_key(np.dtype(dtype).name, static, made) if jit else None
        run = (self.passes.get(key) or jax.jit(linen_pass)) if jit else linen_pass
        before = self.traced_records
        with steps.sink(functools.partial(_recorded, records, seen)), steps.indexed():
            run(values, arrays)
        roots.clear()  # the scopes it traced (the pass is kept)
        if key is not None and self.traced_records == before:  # every record comes from the pass: kept
            self.passes[key] = run
        elif key is not None:  # a record made while tracing would be missing from its next run
            self.passes.pop(key, None)
        return records


def _interceptor(side: JaxSide) -> tuple[Callable, list[Any]]:
    """A linen capture's ``nn.intercept_methods`` interceptor, each submodule's ``__call__`` recorded once
    (``steps.later`` when its values are traced, ``steps.now`` when they are known: counted in
    ``side.traced_records``), and the model's scopes it has seen."""
    depth = {"calls": 0, "inner": 0}  # methods running; of them, separate applies inside the model
    roots: list[Any] = []  # the model's own scope (its methods call one another at path ())
    calling: list[int | None] = []  # the modules whose `__call__` is running (others: None)

    def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
        # a module at path () of another scope, inside the model's call, is applied on its own (Hugging
        # Face's weight-norm conv runs `nn.Conv(...).apply(...)`): its paths are not the model's
        scope = context.module.scope
        if not context.module.path and depth["calls"] == 0:
            roots.append(scope)
        inner = int(not context.module.path and depth["calls"] > 0 and all(scope is not r for r in roots))
        # a `__call__` inside the same module's own `__call__` (a subclass's `super().__call__`) is
        # one call of the module: the outermost is recorded (a scan's step counts its calls)
        again = context.method_name == "__call__" and id(context.module) in calling
        calling.append(id(context.module) if context.method_name == "__call__" else None)
        depth["calls"] += 1
        depth["inner"] += inner
        try:
            out = next_fun(*args, **kwargs)
        finally:
            depth["calls"] -= 1
            depth["inner"] -= inner
            calling.pop()
        if context.method_name == "__call__" and not inner and not depth["inner"] and not again:
            name, kind = ".".join(context.module.path), type(context.module).__name__
            if steps.traced((args, kwargs, out)):  # compiled, or in a scan: its values when it runs
                steps.later(name, kind, narrow(out), (args, kwargs), out)
            else:  # known as it is traced (no array of the pass): recorded now, not by the compiled pass
                side.traced_records += 1
                steps.now(name, kind, narrow(out), (args, kwargs), out)
        return out

    return record, roots


def _recorded(
    records: list, seen: dict, name: str, kind: str, low: bool, inputs: Any, out: Any, step: Any = None
) -> None:
    """One module call's record (named by ``steps.label``: ``name#k``, in a scan ``name@i#k``), appended."""
    records.append(ModuleCall(steps.label(seen, name, step), kind, _numpy(inputs), _numpy(out), low))


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
    Face's default ``float32``) is cloned with the case's dtype (the case says so: ``build.case_notes``'s
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
