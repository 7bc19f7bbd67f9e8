"""The oracle's evaluations along a line, the points formed on the adapter's side (``oracle.line``, issue 38).

Structural: a directional difference hands the adapter the point once and each direction's signs once,
and each evaluation only one number per tensor (counted in bytes through the engine's guarded call);
the answers are the same numbers, to the bit, as when every point is formed here and handed whole
(the JAX and PyTorch adapters on a small model, the noise probe included); an adapter that writes what
it is handed still fails the oracle, and a PyTorch model that writes into its parameter during an
evaluation does not change the next one.
"""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._engine.caller import Caller
from crosscheck._workloads.model.oracle import function as oracle
from crosscheck._workloads.model.oracle import sources
from crosscheck._workloads.model.oracle.entries import read_only
from crosscheck._workloads.protocol import Point

jax = pytest.importorskip("jax")

from crosscheck._workloads.model.workload import _framework_backend  # noqa: E402


def _arrays():
    rng = np.random.default_rng(0)
    params = {
        "w": rng.standard_normal((30, 40)) / 5,
        "b": rng.standard_normal(40),
        "c": np.asarray(0.7),  # 0-d
        "e": np.zeros((0, 3)),  # empty: nothing of it moves
    }
    return params, {"x": rng.standard_normal((5, 30))}


def _jax_loss(p, i):
    import jax.numpy as jnp

    return jnp.sum(jnp.tanh(i["x"] @ p["w"] + p["b"]) ** 2) + p["c"] * p["w"][0, 0] + jnp.sum(p["e"])


def _torch_loss(p, i):
    import torch

    return torch.sum(torch.tanh(i["x"] @ p["w"] + p["b"]) ** 2) + p["c"] * p["w"][0, 0] + torch.sum(p["e"])


def _adapter(name, loss):
    if name == "torch":
        pytest.importorskip("torch")
    return type(_framework_backend(name, loss))(name, loss)


class Counted:
    """The engine's guarded call, counting the bytes of the arrays handed through it."""

    def __init__(self, point: Point) -> None:
        self.caller, self.handed = Caller(point.arrays()), 0

    def __call__(self, fn, *args, **kwargs):
        for a in [*args, *kwargs.values()]:
            for v in a.values() if isinstance(a, dict) else [a]:
                self.handed += v.nbytes if isinstance(v, np.ndarray) else 0
        return self.caller(fn, *args, **kwargs)

    def failure(self, error):
        return self.caller.failure(error)

    def cast(self, arrays, dtype, *, once=False):
        return self.caller.cast(arrays, dtype, once=once)


def _screened(backend, *, line: bool, monkeypatch=None, keep: bool = False):
    """The oracle's directional answer for ``backend``'s own loss (screen mode, 4 directions), the
    function it differenced, and the bytes handed while it did (``keep``: on the point the probe held)."""
    params, inputs = _arrays()
    point = Point(params, inputs, {}, "float64")
    call = Counted(point)
    if not line and monkeypatch is not None:
        monkeypatch.setattr(sources, "line_of", lambda *a: None)
    function = sources.own_loss(backend, "side", point, call, keep=keep)
    assert isinstance(function, oracle.Function), function
    assert (function.line is not None) == line
    before = call.handed
    found = oracle.difference(function, point, oracle.differencing("screen", params, 4), call, None)
    assert isinstance(found, oracle.Differences), found
    return found, function, call.handed - before


@pytest.mark.parametrize(("name", "loss"), [("jax", _jax_loss), ("torch", _torch_loss)])
def test_the_answers_are_the_same_numbers_when_the_adapter_forms_the_points(name, loss, monkeypatch):
    along, on_line, _ = _screened(_adapter(name, loss), line=True)
    whole, handed_whole, _ = _screened(_adapter(name, loss), line=False, monkeypatch=monkeypatch)
    assert along.evaluations == whole.evaluations > 32
    for field in ("value", "error", "unjudgeable", "reason"):
        assert np.array_equal(getattr(along.directions, field), getattr(whole.directions, field)), field
    assert along.directions.scale == whole.directions.scale
    assert on_line.precision == handed_whole.precision  # the noise probe's residual, to the bit
    assert on_line.value == handed_whole.value and on_line.rounding == handed_whole.rounding


@pytest.mark.parametrize(("name", "loss"), [("jax", _jax_loss), ("torch", _torch_loss)])
def test_an_evaluation_hands_no_parameter(name, loss):
    backend = _adapter(name, loss)
    calls = {"loss": 0}
    whole = backend.loss

    def counted(*args):
        calls["loss"] += 1
        return whole(*args)

    backend.loss = counted
    found, function, handed = _screened(backend, line=True)
    params, inputs = _arrays()
    point_bytes = sum(v.nbytes for v in {**params, **inputs}.values())
    signs_bytes = sum(v.size for v in params.values())  # int8: a byte an entry
    line = function.line
    # Once the probe: its point and its line; then the difference: its point and its 4 directions.
    assert line.points == 2 and line.directions == 5
    probe = function.precision.evaluations
    assert line.evaluations == probe + found.evaluations and probe == 9  # a float64 loss: the probe's 9
    assert handed == point_bytes + 4 * signs_bytes  # not a parameter per evaluation
    assert calls["loss"] == 1  # the float32 check only (the float64 one is on the line): no point whole
    assert found.evaluations > 32


@pytest.mark.parametrize(("name", "loss"), [("jax", _jax_loss), ("torch", _torch_loss)])
def test_differences_on_the_point_the_probe_held_hand_it_once_and_give_the_same_numbers(name, loss):
    """Change 38 (issue 38): ``own_loss(keep=True)`` leaves the probe's point held for the differences
    that follow (the judge's order): the point handed once in all, the same answers to the bit, and
    nothing held once the differences release it."""
    kept, function, handed = _screened(_adapter(name, loss), line=True, keep=True)
    again, _, handed_again = _screened(_adapter(name, loss), line=True)
    signs_bytes = sum(v.size for v in _arrays()[0].values())
    params, inputs = _arrays()
    point_bytes = sum(v.nbytes for v in {**params, **inputs}.values())
    assert function.line.points == 1 and function.line.directions == 5
    assert handed == 4 * signs_bytes and handed_again == point_bytes + 4 * signs_bytes
    for field in ("value", "error", "unjudgeable", "reason"):
        assert np.array_equal(getattr(kept.directions, field), getattr(again.directions, field)), field
    assert not function.line.holding  # released by the differences: a later group hands it again


def test_a_kept_point_is_released_when_the_probe_fails():
    """``keep`` keeps only a usable function's point: one whose probe failed on the line is released."""

    class Released(Fake):
        released = 0

        def loss_along(self, name, coefficients):
            raise RuntimeError("off the point")

        def release_evaluations(self):
            self.released += 1

    backend = Released()
    params, inputs = _arrays()
    point = Point(params, inputs, {}, "float64")
    skipped = sources.own_loss(backend, "side", point, Caller(point.arrays()), keep=True)
    assert isinstance(skipped, oracle.Skip) and "off the point" in skipped.reason
    assert backend.point is not None and backend.released == 1


class Fake:
    """A NumPy adapter with a line; ``writes`` names what it writes into: ``point`` or ``signs``."""

    def __init__(self, writes: str = "") -> None:
        self.writes, self.point, self.signs = writes, None, {}

    def loss(self, params, inputs):
        return np.asarray(np.sum(np.tanh(inputs["x"] @ params["w"] + params["b"]) ** 2) + 0 * params["c"])

    def hold_point(self, params, inputs):
        if self.writes == "point":
            params["w"][0, 0] = -params["w"][0, 0]
        self.point = (params, inputs)

    def hold_direction(self, name, signs):
        if self.writes == "signs":
            signs["b"][0] = 0
        self.signs[name] = signs

    def loss_along(self, name, coefficients):
        params, inputs = self.point
        moved = {
            k: v + coefficients[k] * self.signs[name][k] if k in coefficients else v
            for k, v in params.items()
        }
        return self.loss(moved, inputs)


def test_a_numpy_adapter_gives_the_same_answer_along_its_line(monkeypatch):
    along, _, _ = _screened(Fake(), line=True)
    whole, _, _ = _screened(Fake(), line=False, monkeypatch=monkeypatch)
    assert np.array_equal(along.directions.value, whole.directions.value)
    assert np.array_equal(along.directions.error, whole.directions.error)


@pytest.mark.parametrize("writes", ["point", "signs"])
def test_an_adapter_that_writes_what_it_is_handed_fails_the_oracle(writes):
    params, inputs = _arrays()
    point = Point(params, inputs, {}, "float64")
    kept = {k: v.copy() for k, v in params.items()}
    call = Caller(point.arrays())
    skipped = sources.own_loss(Fake(writes), "side", point, call)
    assert isinstance(skipped, oracle.Skip) and skipped.failure
    assert "modified its inputs" in skipped.reason
    assert all(np.array_equal(v, kept[k]) for k, v in params.items())  # the point's own never handed
    assert call.wrote  # the driver fails the backend


def test_a_torch_model_that_writes_into_its_parameter_does_not_move_the_next_point():
    torch = pytest.importorskip("torch")

    def writes(p, i):
        out = _torch_loss(p, i)
        with torch.no_grad():
            p["b"].mul_(2.0)  # in place, into the tensor it was given
        return out

    params, inputs = _arrays()
    backend = _adapter("torch", writes)
    backend.hold_point({k: v.copy() for k, v in params.items()}, read_only(inputs))
    backend.hold_direction("d", {k: np.ones(np.shape(v), np.int8) for k, v in params.items()})
    first = backend.loss_along("d", {"w": 1e-3, "b": 1e-3})
    assert backend.loss_along("d", {"w": 1e-3, "b": 1e-3}) == first
    at = backend.loss_along("d", {})
    assert at == backend.loss_along("d", {}) == _adapter("torch", _torch_loss).loss(params, inputs)
    backend.release_evaluations()
    with pytest.raises(RuntimeError, match="no point held"):
        backend.loss_along("d", {})


def _port():
    """A small PyTorch module and its Flax port (two outputs), as a user checks one."""
    torch = pytest.importorskip("torch")
    nn = pytest.importorskip("flax.linen")
    import crosscheck

    class Torch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 5), torch.nn.Linear(5, 3)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    class Flax(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3, name="b")(jax.numpy.tanh(nn.Dense(5, name="a")(x)))

    torch.manual_seed(0)
    return crosscheck.Port(
        name="small",
        torch=Torch().eval(),
        jax=Flax(),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((2, 4)).astype(dtype)},
    )


def _answers(report) -> tuple:
    """What the oracle answered, without its seconds."""
    found = report.to_dict()
    oracle = {k: v for k, v in found["oracle"].items() if k != "seconds"}
    return report.passed, found["comparisons"], oracle


def test_a_port_gets_the_same_report_in_process_in_workers_and_with_every_point_handed(monkeypatch):
    import crosscheck

    along = crosscheck.run(workload=_port(), oracle_mode="screen", isolate=False)
    assert along.passed, along.problems
    assert along.oracle["evaluations"] and all(n > 32 for n in along.oracle["evaluations"].values())
    from crosscheck._workloads.model.oracle.line import Line

    evaluated = []
    at = Line.at
    monkeypatch.setattr(Line, "at", lambda self, *a: evaluated.append(a) or at(self, *a))
    workers = crosscheck.run(workload=_port(), oracle_mode="screen", isolate=True)
    assert len(evaluated) > 64  # each side's in its worker, along its line
    monkeypatch.setattr(sources, "line_of", lambda *a: None)
    whole = crosscheck.run(workload=_port(), oracle_mode="screen", isolate=False)
    assert _answers(along) == _answers(workers) == _answers(whole)


def test_a_worker_serves_the_line():
    from crosscheck._engine.process.isolate_worker import METHODS, _has
    from crosscheck._workloads.model.oracle.line import METHODS as LINE

    for framework, loss in (("jax", _jax_loss), ("torch", _torch_loss)):
        assert set(LINE) <= {m for m in METHODS if _has(_adapter(framework, loss), m)}


def test_many_directions_of_a_small_model_stay_batched():
    """Batching pays for a small model's many directions (``oracle.batched``): they are batched as
    before, and only the noise probe is evaluated along the adapter's line."""
    params, inputs = _arrays()
    point = Point(params, inputs, {}, "float64")
    call = Caller(point.arrays())
    function = sources.own_loss(_adapter("jax", _jax_loss), "side", point, call)
    probe = function.precision.evaluations  # 9: a float64 loss, beyond doubt from the first points
    assert function.line is not None and function.line.evaluations == probe == 9
    found = oracle.difference(function, point, oracle.differencing("screen", params, 32), call, None)
    assert isinstance(found, oracle.Differences), found
    assert function.line.evaluations == probe and function.fn.calls > 0


def test_the_jax_adapter_forms_the_moved_tensors_as_its_jitted_sum_does_in_buffers_it_keeps():
    # float64 tensors moved along a line are formed on the host (``_formed``) and read in place: the same
    # bits as the sum formed inside a jitted function, and the same buffer each call (issue 38: formed
    # inside XLA, a model's layers were new memory each call, their pages faulted in afresh)
    import sys

    backend = _adapter("jax", _jax_loss)
    module = sys.modules[type(backend).__module__]
    params, inputs = _arrays()
    signs = {
        k: np.sign(np.random.default_rng(1).standard_normal(v.shape)).astype(np.int8)
        for k, v in params.items()
    }
    backend.hold_point(params, inputs)
    backend.hold_direction("d", signs)
    coefficients = {"w": 1e-3, "b": -2.5e-4, "c": 0.125}
    got = backend.loss_along("d", coefficients)
    buffer = backend._buffers["w"]
    again = backend.loss_along("d", {k: 2 * c for k, c in coefficients.items()})
    assert backend._buffers["w"] is buffer  # kept, written again
    with jax.enable_x64(True):
        device = {k: jax.device_put(v) for k, v in params.items()}
        jitted = jax.jit(module._moved(_jax_loss, tuple(coefficients)))
        for c, answer in ((coefficients, got), ({k: 2 * v for k, v in coefficients.items()}, again)):
            moved = {k: np.float64(v) for k, v in c.items()}
            want = jitted(moved, device, {k: jax.device_put(signs[k]) for k in c}, inputs)
            assert np.asarray(want).tobytes() == np.asarray(answer).tobytes()
    assert backend.loss_along("d", {}) == backend.loss(params, inputs)  # the point itself, untouched


def test_the_probes_signs_are_drawn_once_a_run_the_same_signs_as_a_draw_of_its_own():
    """Change 39 (issue 38): the noise probe's signs kept in the run's cache (``Differencing.drawn``) for the
    next side's probe: read-only, the signs a probe without the cache draws, the same answer."""
    params, inputs = _arrays()
    point = Point(params, inputs, {}, "float64")
    handed = []

    class Recorded(Fake):
        def hold_direction(self, name, signs):
            if name == "probe":
                handed.append({k: v.copy() for k, v in signs.items()})
            super().hold_direction(name, signs)

    cache: dict = {}
    first = sources.own_loss(Recorded(), "a", point, Caller(point.arrays()), cache=cache)
    second = sources.own_loss(Recorded(), "b", point, Caller(point.arrays()), cache=cache)
    alone = sources.own_loss(Recorded(), "c", point, Caller(point.arrays()))
    ((key, signs),) = cache.items()
    assert key[0] == "probe" and not any(v.flags.writeable for v in signs.values())
    assert first.precision == second.precision == alone.precision
    assert len(handed) == 3
    for k in params:
        assert np.array_equal(handed[0][k], handed[1][k]) and np.array_equal(handed[0][k], handed[2][k])


@pytest.mark.parametrize(("name", "loss"), [("jax", _jax_loss), ("torch", _torch_loss)])
def test_the_own_loss_check_hands_the_float64_point_once(name, loss):
    """Change 41 (issue 38): the float64 check of an adapter's own loss is its loss at the point on the
    line (``loss_along`` without coefficients), where the probe then holds it: the float64 point handed
    once, not once to ``loss`` and again to ``hold_point``; the float32 check through ``loss``."""
    backend = _adapter(name, loss)
    params, inputs = _arrays()
    call = Counted(Point(params, inputs, {}, "float64"))
    function = sources.own_loss(backend, "side", Point(params, inputs, {}, "float64"), call)
    assert isinstance(function, oracle.Function), function
    point_bytes = sum(v.nbytes for v in {**params, **inputs}.values())
    float32_bytes = point_bytes // 2  # every array a float64 one
    signs_bytes = sum(v.size for v in params.values())  # the probe's line, int8
    assert function.line.points == 1 and function.line.directions == 1
    assert call.handed == point_bytes + float32_bytes + signs_bytes


@pytest.mark.parametrize("where", ["hold_point", "loss_along"])
def test_a_line_that_fails_at_the_point_fails_the_float64_check_and_is_released(where):
    """The float64 check on the line fails as the loss handed whole did: not differenced, a failure of
    the run, its error said, and what the adapter holds released."""
    backend = _adapter("jax", _jax_loss)
    released = []

    def broken(*args):
        raise ValueError(f"no {where} here")

    setattr(backend, where, broken)
    backend.release_evaluations = lambda: released.append(True)
    params, inputs = _arrays()
    point = Point(params, inputs, {}, "float64")
    found = sources.own_loss(backend, "side", point, Counted(point))
    assert isinstance(found, oracle.Skip) and found.failure, found
    assert found.reason.startswith("`side`'s loss failed in float64: ") and f"no {where} here" in found.reason
    assert released


@pytest.mark.parametrize(("name", "loss"), [("jax", _jax_loss), ("torch", _torch_loss)])
def test_a_float32_point_is_cast_to_float64_once_a_side_where_it_is_handed(name, loss, monkeypatch):
    """Change 44 (issue 38): at a float32 point (a case's own), a side's own loss is checked, probed and
    differenced along its line, as the judge runs it (``keep``), with one float64 copy of the parameters
    made in all: the cast the adapter holds (``Line.hold``: ``Call.cast``), not the oracle's own copy
    beside a private copy of it, and another for the differences (three before). The answers are those
    at the same point handed as float64 arrays, to the bit."""
    from crosscheck._compare import dtypes
    from crosscheck._engine import call as engine_call

    made = []
    copy = dtypes.aligned_copy
    adapters = [_adapter(name, loss), _adapter(name, loss)]  # imported first: their own buffers not counted

    def counted(array, dtype=None):
        out = copy(array, dtype)
        made.append(out.nbytes if out.dtype == np.float64 else 0)
        return out

    monkeypatch.setattr(dtypes, "aligned_copy", counted)
    monkeypatch.setattr(engine_call, "aligned_copy", counted)

    def differenced(point):
        made.clear()
        call = Counted(point)
        function = sources.own_loss(adapters.pop(), "side", point, call, keep=True)
        assert isinstance(function, oracle.Function), function
        return oracle.difference(function, point, oracle.differencing("screen", point.params, 4), call, None)

    params, inputs = ({k: v.astype(np.float32) for k, v in arrays.items()} for arrays in _arrays())
    narrow = differenced(Point(params, inputs, {}, "float32"))
    float64_bytes = sum(v.size * 8 for v in params.values())
    inputs_bytes = sum(v.size * 8 for v in inputs.values())  # their cast, and the copy handed with it
    assert sum(made) == float64_bytes + 2 * inputs_bytes
    wide = differenced(
        Point(*({k: v.astype(np.float64) for k, v in a.items()} for a in (params, inputs)), {}, "float32")
    )
    assert narrow.evaluations == wide.evaluations > 32
    for field in ("value", "error", "unjudgeable", "reason"):
        assert np.array_equal(getattr(narrow.directions, field), getattr(wide.directions, field)), field
