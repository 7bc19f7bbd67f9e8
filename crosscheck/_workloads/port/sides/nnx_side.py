"""A Flax nnx module as the JAX side of a port: its arrays, its rebuild, and its submodules' calls.

Imported only for an nnx module (it imports flax). ``nnx.split`` separates the module into its graph
definition, its floating-point variables (``nnx.Param``: collection ``params``; ``nnx.BatchStat``:
``batch_stats``; other variable types by their class name), which are the leaves the mapping fills,
and the rest (random-number state, integer counters), kept as it is. ``nnx.merge`` rebuilds a fresh
module from mapped leaves inside the differentiated function, so ``jax.grad`` sees them. For the
forward-only capture pass the merged module's submodules are plain Python objects: their classes'
``__call__`` is wrapped for that call only (restored after), recording each submodule call of that
module graph, by its attribute path, with its inputs and output. The capture pass runs as one compiled
program of the module's state (``nnx.split``, merged inside: ``_compiled``; kept on the side for its
next capture in that dtype, traced afresh in each check: ``programs.Kept``), op by op where it cannot be
traced. Inside it and inside ``nnx.scan`` the calls are made on copies of the modules (each carries
its path as an attribute, which the copies keep) and see tracers: each call's values are recorded when
it runs (``steps``), a scan's step named by its index (``@i``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from crosscheck._workloads.port.sides import steps
from crosscheck._workloads.port.sides.torch_side import ModuleCall
from crosscheck._workloads.programs import Kept

#: Module attributes that say a module is in training mode when False (``module.eval()`` sets them).
TRAINING_FLAGS = ("use_running_average", "deterministic")


def _inexact(path: Any, node: Any) -> bool:
    if not isinstance(node, nnx.Variable):
        return False
    value = node.get_value()
    return hasattr(value, "dtype") and bool(jnp.issubdtype(value.dtype, jnp.inexact))


def split(model: Any, *, training: bool = False) -> tuple[Any, tuple[Any, Any]]:
    """The module's floating-point variables (an ``nnx.State``) and what rebuilds the rest.

    Raises:
        ValueError: a submodule is in training mode while the port is not (batch statistics or dropout
            would change the function from call to call, unlike the PyTorch module in eval mode); with
            ``training`` (the PyTorch module in ``.train()``), a dropout that drops at random.
    """
    for path, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Module):
            continue
        flag = next((f for f in TRAINING_FLAGS if getattr(node, f, None) is False), None)
        where = ".".join(map(str, path)) or "the top module"
        if flag is not None and not training:
            raise ValueError(
                f"the Flax nnx module is in training mode (`{where}` ({type(node).__name__}) has "
                f"{flag}=False); call `.eval()` on it first."
            )
        if flag == "deterministic" and (getattr(node, "rate", 0) or 0) > 0:
            raise ValueError(
                f"the Flax nnx module's `{where}` ({type(node).__name__}, rate={node.rate}) drops at random "
                "in training mode, so no two calls agree; make it deterministic: `deterministic=True` on it, "
                "and `.eval()` on the PyTorch dropout (or p=0)."
            )
    graphdef, state, rest = nnx.split(model, _inexact, ...)
    return state, (graphdef, rest)


def again(
    model: Any, treedef: Any, shapes: list[tuple[int, ...]], *, training: bool = False
) -> tuple[Any, Any]:
    """What rebuilds ``model`` now (``split``'s second part), the module split again: the attributes set
    on it since it was first split (they are in its graph definition) are the module's as it is now.

    Raises:
        ValueError: its variables are no longer those the port was prepared with (``treedef``,
            ``shapes``): the mapping was made for those; or a submodule is in training mode.
    """
    state, static = split(model, training=training)
    leaves, now = jax.tree_util.tree_flatten(state)
    if now != treedef or [tuple(jnp.shape(leaf)) for leaf in leaves] != [tuple(s) for s in shapes]:
        raise ValueError(
            "the Flax nnx module's variables changed since the port was prepared (a layer added, "
            "removed or resized): its mapping was made for the old ones; make a new crosscheck.Port."
        )
    return static


def kinds(state: Any) -> dict[tuple[str, ...], str]:
    """Leaf path -> its collection: ``params``, ``batch_stats``, or the variable type's name."""
    out = {}
    for path, variable in nnx.to_flat_state(state):
        if isinstance(variable, nnx.Param):
            kind = "params"
        elif isinstance(variable, nnx.BatchStat):
            kind = "batch_stats"
        else:
            kind = type(variable).__name__
        out[tuple(map(str, path))] = kind
    return out


def owners(model: Any) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Module path -> the names of the submodule's class and its bases (``()`` is the top module)."""
    return {
        tuple(map(str, path)): tuple(c.__name__ for c in type(node).__mro__)
        for path, node in nnx.iter_graph(model)
        if isinstance(node, nnx.Module)
    }


def merge(static: tuple[Any, Any], state: Any) -> Any:
    graphdef, rest = static
    return nnx.merge(graphdef, state, rest)


#: The attribute that carries a module's path in the capture's model: nnx's transforms (``nnx.scan``,
#: ``nnx.vmap``) call copies of the modules, made from the graph with their static attributes.
PATH = "_crosscheck_path"


@contextlib.contextmanager
def _recording(
    model: Any, records: list[ModuleCall], numpy: Callable[[Any], Any], narrow: Callable[[Any], bool]
) -> Iterator[list[int]]:
    """Every ``__call__`` of a module of ``model``'s graph recorded while inside (outermost calls of
    each object only: a subclass's ``super().__call__`` is one call); inside a transform (a scan's
    step, the compiled pass), each step's values when it runs (``steps``). Yields a one-item count of
    the calls recorded as they were made (values no tracers: in a compiled pass, while it is traced)."""
    modules = _marked(model)  # the capture's own merged model: its copies in a transform keep the path
    active: set[int] = set()
    seen: dict[str, int] = {}
    known = [0]

    def done(name: str, kind: str, low: bool, inputs: Any, out: Any, step: Any = None) -> None:
        records.append(ModuleCall(steps.label(seen, name, step), kind, numpy(inputs), numpy(out), low))

    def wrap(original: Callable) -> Callable:
        @functools.wraps(original)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            key, name = id(self), getattr(self, PATH, None)
            if not isinstance(name, str) or key in active:
                return original(self, *args, **kwargs)
            active.add(key)
            try:
                out = original(self, *args, **kwargs)
            finally:
                active.discard(key)
            if steps.traced((args, kwargs, out)):
                steps.later(name, type(self).__name__, narrow(out), (args, kwargs), out)
            elif not steps.traced_at_all((args, kwargs, out)):  # `nnx.vmap`'s tracers: not recorded
                known[0] += 1
                done(name, type(self).__name__, narrow(out), (args, kwargs), out)
            return out

        return call

    # a scan's steps (a cached jitted call's too) are recorded here
    with patched(modules, wrap), steps.sink(done), steps.indexed():
        yield known


def _marked(model: Any) -> list[Any]:
    """The modules of ``model``'s graph, each given its path as the attribute ``PATH``."""
    graph = [(path, node) for path, node in nnx.iter_graph(model) if isinstance(node, nnx.Module)]
    for path, node in graph:
        object.__setattr__(node, PATH, ".".join(map(str, path)))
    return [node for _, node in graph]


@contextlib.contextmanager
def patched(modules: list[Any], wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """While inside, the ``__call__`` of each class of ``modules`` is ``wrap`` of what it was (restored
    on leaving: the class's own, or none, inherited again)."""
    replaced: list[tuple[type, bool, Any]] = []
    try:
        for cls in dict.fromkeys(type(m) for m in modules):
            original = cls.__call__
            replaced.append((cls, "__call__" in cls.__dict__, cls.__dict__.get("__call__")))
            cls.__call__ = wrap(original)
        yield
    finally:
        for cls, owned, original in reversed(replaced):
            if owned:
                cls.__call__ = original
            else:
                del cls.__call__


def labelled(model: Any, static: tuple[Any, Any]) -> tuple[Any, Any]:
    """``static`` (``split``'s second part, for ``model``'s variables) made again from a model whose
    every module carries its path (``PATH``): the modules merged from it, and their copies in a
    transform, say which submodule they are."""
    graphdef, state, _ = nnx.split(model, _inexact, ...)
    merged = merge(static, state)
    _marked(merged)
    graphdef, _, rest = nnx.split(merged, _inexact, ...)
    return graphdef, rest


def capture(
    model: Any,
    call: Callable[[Any, dict], Any],
    inputs: dict[str, Any],
    numpy: Callable[[Any], Any],
    narrow: Callable[[Any], bool],
    passes: dict[Any, Kept] | None = None,
) -> list[ModuleCall]:
    """Every submodule call of one forward pass of ``model`` (a merged, concrete module), in the
    order the calls finished; the top module's output last (recorded from the call when its
    ``__call__`` is not what ``call`` runs). A call inside an nnx transform sees tracers: its values
    are recorded when each step runs (``steps``). With ``passes`` (the side's kept passes), the forward
    pass runs as one compiled program (``_compiled``), every call's values sent back as it runs,
    compiled once per dtype and kept there; op by op where it cannot be traced (Python control flow on
    a value)."""
    records: list[ModuleCall] = []
    with _recording(model, records, numpy, narrow) as known:
        out: Any = _NOTHING
        if passes is not None:
            try:
                out = _compiled(call, model, inputs, passes, known)
            except Exception:  # untraceable: op by op, as before (its error, if any, said there)
                records.clear()
        if out is _NOTHING:
            out = called(call, model, inputs)
    if not any(r.name == "" for r in records):
        records.append(ModuleCall("", type(model).__name__, (), numpy(out), narrow(out)))
    return records


#: No output yet (``capture``): the compiled pass was not run.
_NOTHING = object()


def _compiled(
    call: Callable[[Any, dict], Any], model: Any, inputs: dict[str, Any], passes: dict, known: list[int]
) -> Any:
    """``call(model, inputs)`` as one compiled pass (``Kept``) of the module's state and the inputs'
    arrays (traced; the rest as given), the module merged from its graph (``nnx.split``: its structure
    and static attributes, part of the key the pass is kept under) inside it; the pass is kept in
    ``passes`` unless a call was recorded while it was traced (``known``: run again, the pass would
    leave that record out)."""
    arrays, placed, static = steps.traced_inputs(inputs)
    graphdef, state = nnx.split(model)
    key = steps.pass_key("nnx", static, graphdef)
    run = (passes.get(key) if key is not None else None) or Kept()

    def nnx_pass(state: Any, arrays: list) -> Any:
        return call(nnx.merge(graphdef, state), placed(arrays))

    before = known[0]
    out = run(nnx_pass, state, arrays)
    if key is not None and known[0] == before:
        passes[key] = run
    elif key is not None:
        passes.pop(key, None)
    return out


#: How JAX says that a scan's carry left in another dtype than it came in.
CARRY = "carry input and carry output must have equal types"


def called(call: Callable[[Any, dict], Any], model: Any, inputs: dict[str, Any]) -> Any:
    """``call(model, inputs)``; JAX's scan error on a carry whose dtype changed, where a submodule of
    ``model`` computes narrower than its variables (``pinned``), said in one line naming it."""
    try:
        return call(model, inputs)
    except TypeError as exc:
        found = pinned(model)
        if CARRY not in str(exc) or not found:
            raise
        raise TypeError(_carry(*found[0])) from exc


def pinned(model: Any) -> list[tuple[str, str, str, str]]:
    """``(path, class, dtype, variable)`` of each submodule whose float ``dtype`` attribute is narrower
    than one of its own floating variables (``nnx.Embed`` keeps the dtype its table had when it was
    built: float32 by default, whatever table the check gives it)."""
    out = []
    for path, node in nnx.iter_graph(model):
        fixed = getattr(node, "dtype", None) if isinstance(node, nnx.Module) else None
        if fixed is None or not jnp.issubdtype(fixed, jnp.floating):
            continue
        for name, value in vars(node).items():
            if isinstance(value, nnx.Variable) and _inexact((), value):
                if jnp.dtype(value.get_value().dtype).itemsize > jnp.dtype(fixed).itemsize:
                    where = ".".join(map(str, path)) or "(model)"
                    out.append((where, type(node).__name__, jnp.dtype(fixed).name, name))
                    break
    return out


def _carry(path: str, kind: str, dtype: str, variable: str) -> str:
    return (
        f"an nnx scan's carry changes dtype (JAX: {CARRY}): `{path}` ({kind}) computes in {dtype} whatever "
        f"its variable `{path}.{variable}` holds (its `dtype`, fixed when it was built), so the values it "
        f"passes on are {dtype}: build it with `param_dtype=jnp.float64` under x64, look its table up "
        f"yourself (`jnp.take({path}.{variable}[...], ids, "
        f"axis=0)`), or check in float32 (--dtype float32)"
    )
