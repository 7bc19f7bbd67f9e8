"""A Flax linen module's capture: every submodule call of one forward pass, recorded through
``flax.linen.intercept_methods`` (``_interceptor``), in one compiled program of the forward pass
(``programs.Kept``, kept on the side per dtype and traced afresh in each check), each call's values
sent back as it runs (``steps.later``, as a scan's steps are); op by op where ``jax.jit`` cannot trace
the model.

Imported only by the JAX side of a linen port (it imports flax).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._workloads.port.sides import steps
from crosscheck._workloads.port.sides.torch_side import ModuleCall
from crosscheck._workloads.programs import Kept


def capture(
    side: Any,
    values: Any,
    inputs: dict[str, Any],
    dtype: Any,
    *,
    jit: bool,
    made: Callable | None = None,
    numpy: Callable[[Any], Any],
    narrow: Callable[[Any], bool],
) -> list[ModuleCall]:
    """A linen module's calls (``JaxSide.capture``; ``side``: the ``JaxSide``): with ``jit``, in one
    compiled program of the forward pass kept in ``side.passes``, each call's values sent back as it
    runs (``steps.later``), compiled once; without, op by op (each new operation compiled on its own:
    73 of them for one GPT-2 layer). ``numpy`` makes a record's arrays, ``narrow`` says whether a value
    is narrower than float64."""
    import flax.linen as nn

    records: list[ModuleCall] = []
    seen: dict[str, int] = {}
    record, roots = _interceptor(side, narrow)

    arrays, placed, static = steps.traced_inputs(inputs)

    def linen_pass(values: Any, arrays: list) -> None:  # the inputs' arrays traced, the rest as given
        model, variables = side.rebuild(values if made is None else made(values), dtype)
        with nn.intercept_methods(record):
            side.apply(model, variables, placed(arrays))

    key = steps.pass_key(np.dtype(dtype).name, static, made) if jit else None
    run = (side.passes.get(key) or Kept()) if jit else None
    before = side.traced_records
    with steps.sink(functools.partial(_recorded, numpy, records, seen)), steps.indexed():
        if run is None:
            linen_pass(values, arrays)
        else:
            run(linen_pass, values, arrays)
    roots.clear()  # the scopes it traced (the pass is kept)
    if key is not None and run is not None and side.traced_records == before:  # every record from it
        side.passes[key] = run
    elif key is not None:  # a record made while tracing would be missing from its next run
        side.passes.pop(key, None)
    return records


def _interceptor(side: Any, narrow: Callable[[Any], bool]) -> tuple[Callable, list[Any]]:
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
    numpy: Callable[[Any], Any],
    records: list,
    seen: dict,
    name: str,
    kind: str,
    low: bool,
    inputs: Any,
    out: Any,
    step: Any = None,
) -> None:
    """One module call's record (named by ``steps.label``: ``name#k``, in a scan ``name@i#k``), appended."""
    records.append(ModuleCall(steps.label(seen, name, step), kind, numpy(inputs), numpy(out), low))
