"""Arrays made for one call (``Caller.cast``, issue 38): the point's arrays cast for a re-run in the
other dtype are handed without a second copy, and a backend that writes to one is still caught, put
back and failed (design.md "Trust")."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import crosscheck
from crosscheck._engine.call import Cast
from crosscheck._engine.caller import Caller


def _point(order: str = "C") -> dict[str, np.ndarray]:
    w = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    return {"w": np.asarray(w, order=order), "steps": np.arange(4)}


def test_a_cast_array_is_handed_as_it_is_and_compared_a_block_at_a_time(monkeypatch):
    monkeypatch.setattr(Cast, "BLOCK", 1 << 14)  # 16k entries: a sixteenth of `w`
    point = _point()
    call = Caller(point)
    fresh = call.cast(point, "float64")
    seen: dict[str, np.ndarray] = {}
    tracemalloc.start()
    try:
        out = call(lambda params: seen.update(params) or 1.0, fresh)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.ok, out.error
    assert seen["w"] is fresh["w"] and seen["w"].dtype == np.float64
    assert np.array_equal(fresh["w"], point["w"].astype(np.float64))
    # no copy of `w` (2 MiB in float64) to hand it, nor to compare it afterwards
    assert peak < fresh["w"].nbytes / 4, peak
    again: dict[str, np.ndarray] = {}
    call(lambda params: again.update(params) or 1.0, fresh)  # handed once: a later call gets a copy
    assert again["w"] is not fresh["w"] and not np.shares_memory(again["w"], fresh["w"])


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_backend_that_writes_to_a_cast_input_is_caught_and_it_is_put_back(order):
    point = _point(order)
    call = Caller(point)
    fresh = call.cast(point, "float64")

    def writes(params):
        params["w"][3, 5] = -0.0 if params["w"][3, 5] == 0 else 0.0
        return 1.0

    out = call(writes, fresh)
    assert out.error == "modified its inputs (`w`); backends must not write to them"
    assert np.array_equal(fresh["w"], point["w"].astype(np.float64))  # put back from its source
    assert [error for _, _, error in call.wrote] == [out.error]


def _linear() -> crosscheck.Workload:
    return crosscheck.Workload(name="linear", parameters={"w": (3, 2), "b": (2,)}, inputs={"x": (5, 3)})


def _grad(params, inputs):
    r = 2 * (inputs["x"] @ params["w"] + params["b"])
    return {"w": inputs["x"].T @ r, "b": r.sum(axis=0)}


def test_a_backend_that_writes_to_its_inputs_only_in_the_re_run_fails_the_run():
    """The re-run in float64 only measures rounding: its judge sets a failed re-run aside (modelled
    rounding instead). A write to its inputs there is still the backend's failure, not a pass."""

    def writes_in_float64(params, inputs):
        if params["w"].dtype == np.float64:
            params["w"][0, 0] = 5.0
        return _grad(params, inputs)

    report = crosscheck.run(workload=_linear(), backends=[_grad, writes_in_float64], dtype="float32", seed=4)
    assert not report.passed
    assert report.backends["_grad"].status == "ok"
    failed = report.backends["writes_in_float64"]
    assert failed.status == "failed"
    assert failed.error == "modified its inputs (`w`); backends must not write to them"


class _Late:
    """A result whose conversion (``to_array``) records which of ``refs`` (the handed arrays) still live."""

    def __init__(self, value: np.ndarray, refs: list, alive: list) -> None:
        self.value, self.refs, self.alive = value, refs, alive

    def __array__(self, dtype=None, copy=None):
        self.alive.append([r() is not None for r in self.refs])
        return self.value


def _recording(alive: list):
    import weakref

    def grad(params):
        refs = [weakref.ref(v) for v in params.values() if isinstance(v, np.ndarray)]
        return {"w": _Late(np.ones((4, 4)), refs, alive)}

    return grad


def test_arrays_cast_once_are_gone_before_the_result_is_converted():
    """``Caller.cast(once=True)`` (issue 38): the call empties the dict when it returns, so its arrays are
    freed before the result is copied out (a float64 re-run's parameters beside its float64 gradient);
    the result is converted as before. Without ``once`` the caller keeps them (a later call copies)."""
    import gc

    point = _point()
    call = Caller(point)
    alive: list = []
    gc.disable()  # freed when the call returns, not when the collector runs
    try:
        fresh = call.cast(point, "float64", once=True)
        out = call(_recording(alive), fresh, convert="arrays")
        kept = call.cast(point, "float64")
        call(_recording(alive), kept, convert="arrays")
    finally:
        gc.enable()
    assert out.ok and np.array_equal(out.value["w"], np.ones((4, 4))), out.error
    assert fresh == {} and alive[0] == [False, False]
    assert alive[1] == [True, True] and kept["w"].dtype == np.float64  # not once: the caller's to keep


def test_a_guarded_calls_private_copies_go_when_it_returns():
    """The copies a guarded call hands a backend are freed when it returns, not when the garbage
    collector runs (issue 38: ``walk_arrays`` called itself through a closure, a reference cycle that
    held them; a float32 model's worth of copies past each call)."""
    import gc

    point = _point()
    call = Caller(point)
    alive: list = []
    gc.disable()
    try:
        out = call(_recording(alive), point, convert="arrays")
    finally:
        gc.enable()
    assert out.ok, out.error
    assert alive == [[False, False]]
