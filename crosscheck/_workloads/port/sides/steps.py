"""Module outputs from inside a scan: each step's values shipped out of the trace, with the step's index.

Inside ``nn.scan``, ``nnx.scan``, ``jax.lax.scan`` (and ``jax.checkpoint``) a submodule's inputs and
outputs are tracers, even under ``jax.disable_jit``: the capture cannot read them where the call
returns. ``jax.debug.callback(..., ordered=True)`` (public API) calls back once per step, with
concrete values, in the order the steps run. The order is not the layer: a step that calls a
submodule twice calls back twice, a ``reverse=True`` scan runs its last layer first. So while a capture
runs (``indexed``), every ``jax.lax.scan`` (Flax's and nnx's scans call it) also carries its step's
index, the index of the slice of ``xs`` the step gets (under ``reverse=True`` too), and each call back
says it: a stacked port's layer ``i`` is the step of index ``i`` (``stacked.module_pairs`` pairs
``layers.2.linear`` with ``layers.linear@2``), a second call in that step ``layers.linear@2#2``.
Imported only by the JAX side (it imports jax).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._workloads.programs import MARK


def traced(value: Any) -> bool:
    """Whether ``value``'s arrays are those of a traced body (a scan's step, a checkpointed or jitted
    function): a tracer, and none of ``jax.vmap``'s, whose call back would run once per batch element,
    not once per call (such a call is left as before: not recorded by nnx, a failed capture in linen)."""
    tracers = [leaf for leaf in jax.tree_util.tree_leaves(value) if isinstance(leaf, jax.core.Tracer)]
    return bool(tracers) and not vmapped(tracers)


def traced_at_all(value: Any) -> bool:
    """Whether any array of ``value`` is a tracer (of any transform)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(value))


def _arrays(value: Any) -> list[Any]:
    return [leaf for leaf in jax.tree_util.tree_leaves(value) if isinstance(leaf, (jax.Array, np.ndarray))]


#: The capture running now: where the call backs go. A call back belongs to the computation it was
#: traced into, which ``jax.jit`` caches: a jitted call traced in an earlier capture calls back again in
#: this one, and its values are this capture's.
_SINKS: list[Callable[[str, str, bool, Any, Any, tuple[int, ...] | None], None]] = []

#: The step indices (traced) of the scans whose body is being traced now, the outermost first.
_STEPS: list[Any] = []
#: The lengths of those scans, in the same order.
_LENGTHS: list[int] = []


#: How the device of the capture running now hands 8-byte values over as ``uint32`` pairs (``_wired``),
#: per kind (``"f"`` floats, ``"i"`` integers), as ``_decoding`` found it: ``"ieee"`` (the value's own
#: bits: CPUs, GPUs), ``"pair"`` (a TPU's float64 is two float32 words, ``high + low``, and a bitcast
#: gives those words) or ``"swapped"`` (the two 32-bit words the other way round). A capture begun
#: without x64 has its platform's name there: it makes no 8-byte value, and one that arrives all the
#: same is read once its platform is probed.
_DECODES: list[dict[str, str] | str] = []
#: What ``_decoding`` sends over: a third (no short binary form), large and small floats, one whose low
#: bits only float64 holds; integers beyond 32 bits.
PROBE = (1.0 / 3.0, -1.0e30, 2.5e-20, 1.0 + 2.0**-40, 123456.789)
PROBE_INTS = (2**60 + 1, -(2**62), 5, -1)
#: A decoding is the device's value when it is within this of the probe: the device's float64 may
#: itself be narrower than IEEE's (a TPU's two float32 words hold about 48 bits), never by more.
PROBE_RTOL = 2.0**-40


@contextlib.contextmanager
def indexed() -> Iterator[None]:
    """While inside, ``jax.lax.scan`` carries each step's index (``arange(length)`` scanned beside
    ``xs``: under ``reverse=True`` the step of ``xs[i]`` gets ``i``) for ``later`` to say; the values it
    computes are unchanged. ``jax.lax.scan`` is restored on leaving."""
    original = jax.lax.scan

    def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, **rest: Any) -> Any:
        leaves = jax.tree_util.tree_leaves(xs)
        n = length if length is not None else (leaves[0].shape[0] if leaves else None)
        if n is None:  # nothing to index by: JAX's own error, as it is
            return original(f, init, xs, length, **rest)

        def body(carry: Any, x: Any) -> Any:
            _STEPS.append(x[1])
            _LENGTHS.append(n)
            try:
                return f(carry, x[0])
            finally:
                _STEPS.pop()
                _LENGTHS.pop()

        return original(body, init, (xs, jnp.arange(n)), length, **rest)

    jax.lax.scan = scan
    try:
        yield
    finally:
        jax.lax.scan = original


def scanning() -> bool:
    """Whether a scan's body is being traced now, inside ``indexed``."""
    return bool(_STEPS)


def where() -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """The step indices (traced) and the lengths of the scans whose body is being traced now, inside
    ``indexed``, the outermost first (empty outside any)."""
    return tuple(_STEPS), tuple(_LENGTHS)


def vmapped(value: Any) -> bool:
    """Whether an array of ``value`` is one of ``jax.vmap``'s tracers (a call of one batch element)."""
    # JAX exports no name for vmap's tracer class (jax.interpreters.batching.BatchTracer is gone)
    leaves = jax.tree_util.tree_leaves(value)
    return any(isinstance(leaf, jax.core.Tracer) and type(leaf).__name__ == "BatchTracer" for leaf in leaves)


@contextlib.contextmanager
def sink(record: Callable[[str, str, bool, Any, Any, tuple[int, ...] | None], None]) -> Iterator[None]:
    """While inside, each step's values go to ``record(name, kind, narrow, inputs, output, step)``
    (``step``: the indices of the scans the call ran in, outermost first; None outside an ``indexed``
    scan); on leaving, every call back of the computations run has happened (``jax.effects_barrier``).
    The device's decoding of 8-byte words is probed on entering under x64 (without, no value is 8 bytes
    wide: nothing is probed, nothing compiled for it).

    Raises:
        RuntimeError: the default device hands back 8-byte words that no known decoding reads (the
            module records of a float64 capture would be garbage: said, never used).
    """
    _SINKS.append(record)
    wide = jax.dtypes.canonicalize_dtype(np.int64).itemsize == 8
    _DECODES.append(_decoding(_platform()) if wide else _platform())
    try:
        yield
        jax.effects_barrier()
    finally:
        _SINKS.pop()
        _DECODES.pop()


def _platform() -> str:
    """The platform a computation runs on now: the default device's (``jax.default_device``)."""
    device = jax.config.jax_default_device
    if isinstance(device, str):
        return device
    return (device or jax.devices()[0]).platform


#: Each platform's decodings, found once a process (``_decoding``).
_FOUND: dict[str, dict[str, str]] = {}


def _decoding(platform: str) -> dict[str, str]:
    """How ``platform``'s ``_wired`` words read back, per kind: the first decoding that gives the probe
    back (``PROBE``, ``PROBE_INTS``), sent through the same bitcast in a compiled pass (once a process
    and platform)."""
    if platform not in _FOUND:
        found = {}
        for kind, values, rtol in (("f", PROBE, PROBE_RTOL), ("i", PROBE_INTS, 0.0)):
            probe = np.array(values, np.float64 if kind == "f" else np.int64)
            with jax.enable_x64(True):
                words = np.asarray(jax.jit(_wired)(probe))
            found[kind] = next(
                (
                    decoding
                    for decoding in DECODINGS
                    if _close(_decode(words, decoding, probe.dtype, probe.shape), probe, rtol)
                ),
                "",
            )
            if not found[kind]:
                raise RuntimeError(
                    f"8-byte {'floats' if kind == 'f' else 'integers'} cannot be read back from a "
                    f"`{platform}` device: its words for {values[:2]} read as none of "
                    f"{', '.join(DECODINGS)} (the module by module comparison in float64 is left out; "
                    "with the JAX side on the host CPU it is made)"
                )
        _FOUND[platform] = found
    return _FOUND[platform]


#: The decodings ``_decoding`` tries, in order.
DECODINGS = ("ieee", "pair", "swapped")


def _close(got: np.ndarray, want: np.ndarray, rtol: float) -> bool:
    if got.dtype.kind == "f":
        with np.errstate(invalid="ignore", over="ignore"):
            return bool(np.all(np.abs(got - want) <= rtol * np.abs(want)))
    return bool(np.array_equal(got, want))


def _decode(words: np.ndarray, decoding: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The 8-byte values of ``_wired`` words, read as ``decoding`` says (``_decoding``)."""
    words = np.ascontiguousarray(np.asarray(words, np.uint32)).reshape(-1, 2)
    if decoding == "pair" and dtype.kind == "f":  # two float32 words, high first: their exact sum
        pairs = words.view(np.float32).astype(np.float64)
        return (pairs[:, 0] + pairs[:, 1]).astype(dtype).reshape(shape)
    if decoding == "swapped":
        words = np.ascontiguousarray(words[:, ::-1])
    elif decoding == "pair":  # integers are no float pairs
        return np.zeros(shape, dtype) + np.iinfo(np.int64).min
    return words.view(dtype).reshape(shape)


def later(name: str, kind: str, low: bool, inputs: Any, output: Any) -> None:
    """Record module ``name``'s call (class ``kind``, ``low``: narrower than float64) when it runs, once
    per step, with its concrete arrays (of ``inputs`` and ``output``, as lists) and the step's index
    (``indexed``), in the capture running then (none: a forward pass outside a capture, nothing is
    recorded).

    The call back is one module-level function (``_called_back``) that reads everything it says from
    its arguments: ``programs.MARK``, then the call's description as bytes (``_said``), which the
    program holds as a constant. Two programs of the same text then call back the same way, so a
    program compiled in an earlier check may run again (``programs.Kept``); a call back that closed over
    its name would say the earlier trace's."""

    ins, outs = _arrays(inputs), _arrays(output)
    kinds = [_kind(a) for a in (*ins, *outs)]
    where = list(_STEPS)
    said = _said(name, kind, low, kinds, len(ins), len(where))
    wired = ([_wired(a) for a in ins], [_wired(a) for a in outs])
    jax.debug.callback(_called_back, MARK, said, *wired, where, ordered=True)


def _said(name: str, kind: str, low: bool, kinds: list, ins: int, steps: int) -> np.ndarray:
    """What ``later``'s call back says of a call, as bytes (JSON): its name, class, ``low``, the number
    of its inputs and scan indices, and each array's dtype and shape (``_kind``) where it is sent as
    words."""
    shapes = [None if k is None else [k[0].str, list(k[1])] for k in kinds]
    text = json.dumps([name, kind, bool(low), ins, steps, shapes])
    return np.frombuffer(text.encode(), np.uint8).copy()


def _called_back(mark: Any, said: Any, ins: list, outs: list, where: list) -> None:
    """One call of ``later``'s, as it runs: its values to the capture running now (``_SINKS``)."""
    if not _SINKS:
        return
    name, kind, low, _, _, shapes = json.loads(np.asarray(said).tobytes())
    kinds = [None if k is None else (np.dtype(k[0]), tuple(k[1])) for k in shapes]
    decodes = _DECODES[-1]
    if isinstance(decodes, str):  # begun without x64: probed only if an 8-byte value came
        decodes = _decoding(decodes) if any(k is not None for k in kinds) else {}
    got = [_unwired(a, k, decodes) for a, k in zip((*ins, *outs), kinds, strict=True)]
    step = tuple(int(np.asarray(i)) for i in where) if where else None
    _SINKS[-1](name, kind, low, got[: len(ins)], got[len(ins) :], step)


def traced_inputs(inputs: Any) -> tuple[list[Any], Callable[[list[Any]], Any], tuple[Any, ...]]:
    """How a capture's compiled pass takes ``inputs``: their arrays (traced), a function that puts
    arrays back in their places (the rest as given; it holds none of these arrays, so a pass kept for
    the next capture keeps none), and what the pass is traced from beyond the arrays' shapes (the
    structure and the values that are no arrays: part of the key a pass is kept under, ``pass_key``)."""
    flat, tree = jax.tree_util.tree_flatten(inputs)
    where = [i for i, leaf in enumerate(flat) if isinstance(leaf, (jax.Array, np.ndarray))]
    fixed = [None if i in where else leaf for i, leaf in enumerate(flat)]

    def placed(arrays: list[Any]) -> Any:
        leaves = list(fixed)
        for i, array in zip(where, arrays, strict=True):
            leaves[i] = array
        return jax.tree_util.tree_unflatten(tree, leaves)

    static = (tree, tuple((type(leaf), leaf) for i, leaf in enumerate(fixed) if i not in where))
    return [flat[i] for i in where], placed, static


def pass_key(*parts: Any) -> tuple[Any, ...] | None:
    """The key a compiled pass is kept under (``JaxSide.passes``): ``parts``, or None when one is
    unhashable (the pass is then compiled for its capture alone)."""
    try:
        hash(parts)
    except TypeError:
        return None
    return parts


def now(name: str, kind: str, low: bool, inputs: Any, output: Any) -> None:
    """Record module ``name``'s call as ``later`` does, with the values it has now (concrete: no traced
    pass calls back), in the capture running now (none: nothing is recorded)."""
    if _SINKS:
        _SINKS[-1](name, kind, low, inputs, output, None)


def label(seen: dict[str, int], name: str, step: tuple[int, ...] | None) -> str:
    """A call's record name: a module path's ``k``-th call ``name#k`` (the first: ``name``); in a scan,
    the ``k``-th call of the step of index ``i``, ``name@i#k`` (``name@i`` the first; nested scans:
    ``name@i.j``). ``seen`` counts the calls."""
    base = name if step is None else f"{name}@{'.'.join(map(str, step))}"
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base}#{seen[base]}"


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
    where x64 may be off: a float64 array would arrive rounded to float32 (a jitted capture's does).
    The words are the device's own: read back by its decoding (``_decoding``)."""
    if _kind(array) is None:
        return array
    return jax.lax.bitcast_convert_type(array, np.uint32)


def _unwired(array: Any, kind: tuple[np.dtype, tuple[int, ...]] | None, decodings: dict | None = None) -> Any:
    """What ``_wired`` made, back to its dtype and shape: the device's values (``_decode``; the device's
    ``decodings`` per kind, ``_decoding``; none: the values' own bits)."""
    if kind is None:
        return array
    decoding = (decodings or {}).get("f" if kind[0].kind == "f" else "i", "ieee")
    return _decode(np.asarray(array), decoding, *kind)
