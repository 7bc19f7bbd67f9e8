"""The oracle releases what an adapter holds of its loss evaluations (``Resident``) once it is done with
that side's differences (issue 38): one side's float64 copy of the model is not held while the other
side's own loss is differenced. Structural: the arrays held are counted, no memory is timed."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._engine.caller import Caller
from crosscheck._workloads.model.oracle.function import difference, differencing, screen_group
from crosscheck._workloads.model.oracle.groups import Group
from crosscheck._workloads.model.oracle.sources import own_loss
from crosscheck._workloads.model.workload import GenericWorkload, kept_adapter

sys.path.insert(0, str(ROOT))  # the examples/ package of the repository

from examples.no_reference import mlp

needs_frameworks = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or importlib.util.find_spec("torch") is None,
    reason="the stand-in models need jax and torch",
)
SMALL = (4, 8, 3)


def _spied(backend, seen: list[int], other):
    """``backend``'s ``loss`` and ``losses``, each call noting how many arrays ``other`` holds."""
    loss, losses = backend.loss, backend.losses

    def one(*args):
        seen.append(other.resident.held)
        return loss(*args)

    def many(*args):
        seen.append(other.resident.held)
        return losses(*args)

    return one, many


@needs_frameworks
def test_no_side_holds_its_arrays_while_the_other_side_is_differenced(monkeypatch):
    workload = mlp(SMALL, 6)
    sides = {k: kept_adapter(workload, k) for k in ("torch", "jax")}  # the adapters the run uses
    held: dict[str, list[int]] = {"torch": [], "jax": []}
    for name, other in (("torch", "jax"), ("jax", "torch")):
        one, many = _spied(sides[name], held[other], sides[other])
        monkeypatch.setattr(sides[name], "loss", one)
        monkeypatch.setattr(sides[name], "losses", many)
    report = crosscheck.run(workload=workload, dtype="float32", seed=3, isolate=False)
    assert report.passed, report.problems
    assert held["torch"] and held["jax"]  # each side evaluated while the other had been
    assert max(held["torch"]) == 0 and max(held["jax"]) == 0
    assert sides["torch"].resident.held == sides["jax"].resident.held == 0


@needs_frameworks
def test_each_side_is_handed_its_point_once_for_its_probe_and_its_differences(monkeypatch):
    """Change 38: the judge differences a side's own loss right after its noise probe, on the point the
    probe held (``own_loss(keep=True)``): one ``hold_point`` a side in a whole run, not two."""
    workload = mlp(SMALL, 6)
    sides = {k: kept_adapter(workload, k) for k in ("torch", "jax")}  # the adapters the run uses
    held = {"torch": 0, "jax": 0}
    for name, side in sides.items():
        hold = side.hold_point

        def counted(*args, _hold=hold, _name=name):
            held[_name] += 1
            return _hold(*args)

        monkeypatch.setattr(side, "hold_point", counted)
    report = crosscheck.run(workload=workload, dtype="float32", seed=3, isolate=False, oracle_mode="screen")
    assert report.passed, report.problems
    assert held == {"torch": 1, "jax": 1}


@needs_frameworks
@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("mode", ["full", "screen"])
def test_after_the_differences_of_a_side_its_adapter_holds_nothing(framework, mode):
    workload = GenericWorkload(mlp(SMALL, 6))
    point = workload.point(dtype="float32", seed=0)
    backend = type(workload.resolve(framework))(framework, workload.workload.implementations[framework])
    call = Caller(point.arrays())
    function = own_loss(backend, framework, point, call)
    assert backend.resident.held == 0  # the probe's arrays, released
    chosen = differencing(mode, point.params, 2)
    found = difference(function, point, chosen, call, None)
    assert not isinstance(found, str), found
    assert backend.resident.held == 0
    if mode == "screen":
        every = Group.of(["w0"], {"w0": point.params["w0"].shape})
        assert not isinstance(screen_group(found, every, point, 2, call, None), str)
        assert backend.resident.held == 0


@needs_frameworks
def test_a_backend_in_a_worker_process_is_not_released_and_the_run_is_the_same():
    workload = mlp(SMALL, 6)
    inside = crosscheck.run(workload=workload, dtype="float32", seed=3, isolate=False)
    apart = crosscheck.run(workload=workload, dtype="float32", seed=3, isolate=True)
    assert apart.passed and inside.passed, apart.problems
    assert [c.passed for c in apart.comparisons] == [c.passed for c in inside.comparisons]
    assert [c.max_abs_diff for c in apart.comparisons] == [c.max_abs_diff for c in inside.comparisons]


def test_a_backend_without_a_release_is_left_alone():
    from crosscheck._workloads.model.oracle.function import release
    from crosscheck._workloads.model.oracle.sources import releaser

    class Plain:
        def loss(self, params, inputs):
            return np.float64(0.0)

    assert releaser(Plain(), lambda fn: fn()) is None
    release(None)  # nothing to do, nothing raised


@needs_frameworks
def test_both_sides_are_differenced_along_one_draw_of_the_directions_equal_to_a_fresh_draw():
    """Change 27 (issue 38): each group's directions drawn once a run (``Differencing.drawn``), not once a
    function: both sides' differences hold the same arrays, read-only, the numbers a draw per function
    made (the same seed); a point of other parameters draws its own."""
    from crosscheck._compare.dtypes import as_dtype
    from crosscheck._workloads.model.oracle.groups import drawn

    workload = GenericWorkload(mlp(SMALL, 6))
    point = workload.point(dtype="float32", seed=0)
    call = Caller(point.arrays())
    chosen = differencing("screen", point.params, 3)
    found = {}
    for framework in ("torch", "jax"):
        backend = type(workload.resolve(framework))(framework, workload.workload.implementations[framework])
        found[framework] = difference(own_loss(backend, framework, point, call), point, chosen, call, None)
        assert not isinstance(found[framework], str), found[framework]
    params = as_dtype(point.params, "float64")
    every = Group.of(list(params), {k: v.shape for k, v in params.items()})
    torch_dirs, jax_dirs = found["torch"].groups[every][0], found["jax"].groups[every][0]
    assert torch_dirs is jax_dirs
    fresh = every.directions(params, 3)
    for d, f in zip(torch_dirs, fresh, strict=True):
        assert (
            d.signs.tobytes() == f.signs.tobytes()
            and np.asarray(d.step).tobytes() == np.asarray(f.step).tobytes()
        )
        assert not d.signs.flags.writeable and not d.step.values.flags.writeable
    other = {k: 2 * v for k, v in params.items()}
    again = drawn(chosen.drawn, every, other, 3, other)
    assert again is not torch_dirs
    assert np.asarray(again[0].step).tobytes() == np.asarray(every.directions(other, 3)[0].step).tobytes()
