"""The JAX adapter's gradient reads the engine's arrays in place (issue 38): the engine hands 64-byte
aligned copies (``dtypes.aligned_copy``: the point's arrays cast for a re-run, and every private copy of
a guarded call), which XLA's CPU client reads without a device copy; the gradient is bit for bit the one
computed from device copies, and a write to the handed arrays is still caught."""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from crosscheck._compare.dtypes import ALIGN, aligned_copy, as_dtype  # noqa: E402
from crosscheck._engine.call import hand  # noqa: E402
from crosscheck._engine.caller import Caller  # noqa: E402
from crosscheck._workloads.model.workload import _framework_backend  # noqa: E402


def _loss(params, inputs):
    import jax.numpy as jnp

    h = jnp.tanh(inputs["x"] @ params["w"] + params["b"])
    return jnp.sum(h * h) + jnp.sum(params["b"] * inputs["ids"].astype(h.dtype)[: h.shape[1]])


def _arrays(dtype=np.float32):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((64, 256)).astype(dtype), "b": rng.standard_normal(256).astype(dtype)}
    inputs = {"x": rng.standard_normal((8, 64)).astype(dtype), "ids": np.arange(256, dtype=np.int32)}
    return params, inputs


def _adapter():
    backend = _framework_backend("jax", _loss)
    return backend, sys.modules[type(backend).__module__]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [None, np.float64, np.float32])
def test_an_aligned_copy_is_aligned_and_holds_what_astype_gives(order, dtype):
    a = np.asarray(np.random.default_rng(1).standard_normal((37, 53)), order=order)
    a[0, 0], a[1, 1] = -0.0, np.nan
    out = aligned_copy(a, dtype)
    want = a.astype(dtype) if dtype is not None else np.array(a, copy=True)  # as the engine copied
    assert out.ctypes.data % ALIGN == 0
    assert out.dtype == want.dtype and out.flags.f_contiguous == want.flags.f_contiguous
    assert out.tobytes(order="A") == want.tobytes(order="A")  # bit for bit, NaN and -0.0 included
    assert not np.shares_memory(out, a)
    strided = aligned_copy(a[::2, ::3])
    assert np.array_equal(strided, a[::2, ::3], equal_nan=True) and strided.ctypes.data % ALIGN == 0


def test_the_engine_hands_aligned_copies():
    params, inputs = _arrays()
    cast = as_dtype(params, "float64")
    assert all(v.ctypes.data % ALIGN == 0 for v in cast.values())
    _, _, handed, _ = hand(({**params, **inputs},), {}, {})
    assert all(v.ctypes.data % ALIGN == 0 for v in handed.values())


def test_an_aligned_array_is_lent_to_the_device_without_a_copy():
    _, module = _adapter()
    params, _ = _arrays(np.float64)
    aligned = aligned_copy(params["w"])
    with jax.enable_x64(True):
        lent = module._lent({"w": aligned})["w"]
        assert lent.dtype == np.float64
        assert np.shares_memory(np.asarray(lent), aligned)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_gradient_of_lent_arrays_is_bit_for_bit_the_one_of_device_copies(dtype):
    backend, _ = _adapter()
    params, inputs = _arrays()
    call = Caller({**params, **inputs})
    p, i = call.cast(params, dtype), call.cast(inputs, dtype)
    got = call(backend.grad, p, i, convert="arrays")
    assert got.ok, got.error
    with jax.enable_x64(dtype == "float64"):
        copies = {k: jax.numpy.array(v, copy=True) for k, v in p.items()}
        want = jax.jit(jax.grad(_loss))(copies, {k: jax.numpy.array(v, copy=True) for k, v in i.items()})
    for k in params:
        assert got.value[k].dtype.name == dtype
        assert got.value[k].tobytes() == np.asarray(want[k]).tobytes(), k


def test_the_arrays_made_for_a_gradient_are_freed_when_it_returns():
    # XLA gives back its reference to an array it read in place only at its garbage collection, run from
    # Python's collector: the adapter and the engine run it (``handed.let_go``), so the float64 re-run's
    # parameters (``Caller.cast(once=True)``) go when the call returns, not at a later collection
    backend, _ = _adapter()
    params, inputs = _arrays()
    call = Caller({**params, **inputs})
    p, i = call.cast(params, "float64", once=True), call.cast(inputs, "float64", once=True)
    # the memory of an aligned copy is its base's, which XLA holds (not the array view handed)
    held = [weakref.ref(v.base) for v in (*p.values(), *i.values())]
    gc.disable()  # no collection of Python's own may run meanwhile
    try:
        got = call(backend.grad, p, i, convert="arrays")
        del p, i
        alive = sum(r() is not None for r in held)
    finally:
        gc.enable()
    assert got.ok, got.error
    assert alive == 0, f"{alive} of {len(held)} arrays made for the call outlived it"


def test_the_point_held_for_a_line_is_read_in_place_and_freed_on_release():
    # The oracle's point and signs for its evaluations along a line (``hold_point``, ``hold_direction``)
    # are the engine's private copies: held without a device copy (issue 38: 1 GB of fresh memory a
    # point on GPT-2 small), and given back when the evaluations are released
    backend, _ = _adapter()
    params, inputs = _arrays(np.float64)
    point = {k: aligned_copy(v) for k, v in params.items()}
    signs = {k: aligned_copy(np.ones(v.shape, np.int8)) for k, v in params.items()}
    backend.hold_point(point, {k: aligned_copy(v) for k, v in inputs.items()})
    backend.hold_direction("d", signs)
    held, _, _ = backend._point
    assert all(np.shares_memory(np.asarray(held[k]), point[k]) for k in params)
    assert all(np.shares_memory(np.asarray(backend._signs["d"][k]), signs[k]) for k in params)
    want = float(backend.loss({k: v + 1e-3 for k, v in params.items()}, inputs))
    assert float(backend.loss_along("d", dict.fromkeys(params, 1e-3))) == want
    bases = [weakref.ref(v.base) for v in (*point.values(), *signs.values())]
    del point, signs, held
    gc.disable()
    try:
        backend.release_evaluations()
        alive = sum(r() is not None for r in bases)
    finally:
        gc.enable()
    assert alive == 0, f"{alive} of {len(bases)} arrays held after the release"
