"""The program a JAX side runs, as JAX traces it (``jax.make_jaxpr``), counted operation by operation:
what its adapters' ``program()`` returns (``crosscheck._backends.program``).

Traced where the run's placement puts the side (the engine calls ``program()`` inside it), so that a port
that branches on where it runs (``jax.default_backend()``, the default device, a kernel only a TPU has)
traces its device path on the device and its host path on the host CPU. Every equation of the jaxpr is
counted by its primitive's name, those of the jaxprs it holds too (a ``jit``, a ``scan``'s body, a
``cond``'s branches, a custom derivative's), with the name of the function, kernel or foreign function it
calls where it has one (``jit:attention``, ``pallas_call:flash``, ``ffi_call:cublas``): a different set
is another program. ``platform_index`` (``lax.platform_dependent``) chooses its branch by the platform
the program is compiled for, so a program that holds it runs other code on the host whatever its trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np

#: Primitives whose branch is chosen by the platform the program is compiled for.
BY_PLATFORM = ("platform_index",)
#: Parameters that name what an equation calls (a function, a kernel, a foreign function).
NAMED_BY = ("name", "target_name", "name_and_src_info", "kernel_name")


def abstract(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, jax.ShapeDtypeStruct]:
    """``jax.ShapeDtypeStruct`` of each array's ``{"shape", "dtype"}`` (``program.specs``)."""
    return {k: jax.ShapeDtypeStruct(tuple(s["shape"]), np.dtype(s["dtype"])) for k, s in specs.items()}


def wide(*groups: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether any array of ``groups`` is float64 (traced under x64, as ``grad`` computes it)."""
    return any(s["dtype"] == "float64" for group in groups for s in group.values())


def traced(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` traced (``args`` abstract), counted: ``{"operations": {name: count},
    "by_platform": [name, ...]}``."""
    counts: Counter[str] = Counter()
    _count(jax.make_jaxpr(fn)(*args).jaxpr, counts)
    return {"operations": dict(counts), "by_platform": [n for n in BY_PLATFORM if n in counts]}


def _count(jaxpr: Any, counts: Counter[str]) -> None:
    for eqn in jaxpr.eqns:
        counts[_named(eqn)] += 1
        for value in eqn.params.values():
            for inner in _jaxprs(value):
                _count(inner, counts)


def _named(eqn: Any) -> str:
    """An equation's primitive, with what it calls by name where a parameter says it."""
    for key in NAMED_BY:
        value = eqn.params.get(key)
        name = getattr(value, "name", value)
        if isinstance(name, str) and name:
            return f"{eqn.primitive.name}:{name}"
    return str(eqn.primitive.name)


def _jaxprs(value: Any) -> Iterator[Any]:
    """The jaxprs a parameter holds: a jaxpr, a closed one's, or those in a tuple (a ``cond``'s branches)."""
    if hasattr(value, "eqns"):
        yield value
    elif hasattr(getattr(value, "jaxpr", None), "eqns"):
        yield value.jaxpr
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _jaxprs(item)
