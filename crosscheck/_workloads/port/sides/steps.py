"""Module outputs from inside a scan: each step's values shipped out of the trace, in step order.

Inside ``nn.scan``, ``nnx.scan``, ``jax.lax.scan`` (and ``jax.checkpoint``) a submodule's inputs and
outputs are tracers, even under ``jax.disable_jit``: the capture cannot read them where the call
returns. ``jax.debug.callback(..., ordered=True)`` (public API) calls back once per step, with
concrete values, in the order the steps run; the k-th call back of a module path is its k-th call,
which a stacked port's layer ``k - 1`` is (``stacked.module_pairs`` pairs ``layers.2.linear`` with
``layers.linear#3``). Imported only by the JAX side (it imports jax).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np


def traced(value: Any) -> bool:
    """Whether ``value``'s arrays are those of a traced body (a scan's step, a checkpointed or jitted
    function): a tracer, and none of ``jax.vmap``'s, whose call back would run once per batch element,
    not once per call (such a call is left as before: not recorded by nnx, a failed capture in linen)."""
    tracers = [leaf for leaf in jax.tree_util.tree_leaves(value) if isinstance(leaf, jax.core.Tracer)]
    # JAX exports no name for vmap's tracer class (jax.interpreters.batching.BatchTracer is gone)
    return bool(tracers) and not any(type(leaf).__name__ == "BatchTracer" for leaf in tracers)


def traced_at_all(value: Any) -> bool:
    """Whether any array of ``value`` is a tracer (of any transform)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(value))


def _arrays(value: Any) -> list[Any]:
    return [leaf for leaf in jax.tree_util.tree_leaves(value) if isinstance(leaf, (jax.Array, np.ndarray))]


#: The capture running now: where the call backs go. A call back belongs to the computation it was
#: traced into, which ``jax.jit`` caches: a jitted call traced in an earlier capture calls back again in
#: this one, and its values are this capture's.
_SINKS: list[Callable[[str, str, bool, Any, Any], None]] = []


@contextlib.contextmanager
def sink(record: Callable[[str, str, bool, Any, Any], None]) -> Iterator[None]:
    """While inside, each step's values go to ``record(name, kind, narrow, inputs, output)``; on leaving,
    every call back of the computations run has happened (``jax.effects_barrier``)."""
    _SINKS.append(record)
    try:
        yield
        jax.effects_barrier()
    finally:
        _SINKS.pop()


def later(name: str, kind: str, low: bool, inputs: Any, output: Any) -> None:
    """Record module ``name``'s call (class ``kind``, ``low``: narrower than float64) when it runs, once
    per step, with its concrete arrays (of ``inputs`` and ``output``, as lists), in the capture running
    then (none: a forward pass outside a capture, nothing is recorded)."""

    ins, outs = _arrays(inputs), _arrays(output)
    kinds = [_kind(a) for a in (*ins, *outs)]

    def back(ins: list, outs: list) -> None:
        if _SINKS:
            got = [_unwired(a, k) for a, k in zip((*ins, *outs), kinds, strict=True)]
            _SINKS[-1](name, kind, low, got[: len(ins)], got[len(ins) :])

    jax.debug.callback(back, [_wired(a) for a in ins], [_wired(a) for a in outs], ordered=True)


def _kind(array: Any) -> tuple[np.dtype, tuple[int, ...]] | None:
    """The dtype and shape of a JAX array of 8-byte floats or integers (None for any other): the call
    back gets it as pairs of ``uint32`` (``_wired``), its bits intact."""
    if isinstance(array, np.ndarray) or np.dtype(array.dtype).itemsize != 8:
        return None
    dtype = np.dtype(array.dtype)
    return (dtype, tuple(array.shape)) if dtype.kind in "fiu" else None


def _wired(array: Any) -> Any:
    """``array`` as the call back is handed it: an 8-byte float or integer bitcast to ``uint32`` pairs.
    JAX puts a call back's arguments on the device again (``device_put``) in the thread that runs it,
    where x64 may be off: a float64 array would arrive rounded to float32 (a jitted capture's does)."""
    if _kind(array) is None:
        return array
    return jax.lax.bitcast_convert_type(array, np.uint32)


def _unwired(array: Any, kind: tuple[np.dtype, tuple[int, ...]] | None) -> Any:
    """What ``_wired`` made, back to its dtype and shape (the same bits)."""
    if kind is None:
        return array
    return np.ascontiguousarray(np.asarray(array)).view(kind[0]).reshape(kind[1])
