"""Projections a block at a time (``oracle.sums``, change 27 of issue 38): the same numbers, to the bit, as
the whole-array formulas they replace (``np.sum`` of the product of the model's size, a group's vector
made by ``Group.flat``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crosscheck._compare.record import Made
from crosscheck._workloads.model.oracle import directions as directions_module
from crosscheck._workloads.model.oracle import sums
from crosscheck._workloads.model.oracle.directions import (
    Direction,
    every_norm,
    make_directions,
    norm,
    project,
    project_quadrature,
)
from crosscheck._workloads.model.oracle.groups import JOINT, Group

#: Odd shapes: runs that straddle tensors, lengths not multiples of 8, a tensor of one entry, an empty one.
SHAPES = {"a": (37, 129), "b": (1,), "c": (0, 3), "d": (3, 5, 701), "e": (2049,), "f": (4, 1)}


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 256 entries (``BLOCK`` is 65,536): many splits on these small tensors."""
    monkeypatch.setattr(sums, "BLOCK", 256)
    monkeypatch.setattr(sums.pairwise, "__defaults__", (256,))


def _bits(x) -> bytes:
    return np.asarray(x, np.float64).tobytes()


@pytest.mark.parametrize("size", [0, 1, 7, 128, 129, 255, 256, 257, 1000, 65_537, 300_001])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pairwise_is_numpys_sum_to_the_bit(size, dtype):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 10.0 ** rng.integers(-8, 8, size)).astype(dtype)
    for block in (128, 136, 1000, sums.BLOCK):
        got = sums.pairwise(size, lambda a, b: np.array([np.sum(x[a:b]), np.sum(-x[a:b])]), block)
        assert got.dtype == np.sum(x).dtype
        assert got[0].tobytes() == np.sum(x).tobytes() and got[1].tobytes() == np.sum(-x).tobytes()


def test_pairwise_of_negative_zeros_is_numpys_zero():
    x = np.full(1000, -0.0)
    got = sums.pairwise(x.size, lambda a, b: np.array([np.sum(x[a:b])]), 128)
    assert got[0].tobytes() == np.sum(x).tobytes()


def test_pairwise_refuses_a_block_under_numpys():
    with pytest.raises(ValueError, match="at least 128"):
        sums.pairwise(10, lambda a, b: np.zeros(1), 64)


def _old_project(gradient, dirs):
    return np.array(
        [float(np.sum(np.asarray(gradient[d.parameter], np.float64) * d.signs * d.step)) for d in dirs]
    )


def _old_quadrature(term, dirs):
    return np.array(
        [
            math.sqrt(float(np.sum(np.square(np.broadcast_to(term[d.parameter], d.signs.shape) * d.step))))
            for d in dirs
        ]
    )


def _arrays(rng, dtype=np.float32):
    return {
        k: (rng.standard_normal(s) * 10.0 ** rng.integers(-3, 3, s)).astype(dtype) for k, s in SHAPES.items()
    }


@pytest.mark.parametrize("block", ["small", "default"])
def test_a_groups_projections_equal_the_flat_vectors_to_the_bit(block, request):
    if block == "small":
        request.getfixturevalue("small_blocks")
    rng = np.random.default_rng(0)
    group = Group.of(list(SHAPES), SHAPES)
    params = _arrays(rng, np.float64)
    dirs = group.directions(params, 4)
    gradient, delta = _arrays(rng), _arrays(rng, np.float64)
    made = {k: Made(v, lambda d: np.sqrt(np.abs(d)) * 3.0) for k, v in delta.items()}  # made when read
    floors = {k: np.asarray(float(np.max(np.abs(v), initial=0.0)) * 1e-7) for k, v in gradient.items()}

    flat = {JOINT: group.flat(gradient)}
    assert _bits(project({JOINT: group.joint(gradient)}, dirs)) == _bits(_old_project(flat, dirs))
    assert _bits(project({JOINT: group.joint(delta)}, dirs)) == _bits(
        _old_project({JOINT: group.flat(delta)}, dirs)
    )
    for term in (delta, made, floors):
        old = _old_quadrature({JOINT: group.flat(term)}, dirs)
        assert _bits(project_quadrature({JOINT: group.joint(term)}, dirs)) == _bits(old)
    assert np.asarray(group.joint(made)).tobytes() == group.flat(made).tobytes()  # read whole: flat's
    assert (
        every_norm(dirs).tobytes()
        == np.array([math.sqrt(float(np.sum(np.square(d.step)))) for d in dirs]).tobytes()
    )


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_tensors_own_projections_equal_the_whole_formula_to_the_bit(dtype):
    rng = np.random.default_rng(1)
    params = _arrays(rng, np.float64)
    dirs = make_directions(params, 3)  # each tensor's own, a number as its step
    gradient, term = _arrays(rng, dtype), _arrays(rng, dtype)
    made = {k: Made(v, lambda d: np.abs(d) * 2.0) for k, v in term.items()}
    scalars = {k: np.asarray(dtype(0.5)) for k in SHAPES}  # a floor: one number, broadcast
    assert _bits(project(gradient, dirs)) == _bits(_old_project(gradient, dirs))
    assert _bits(project(made, dirs)) == _bits(
        _old_project({k: np.asarray(v) for k, v in made.items()}, dirs)
    )
    for t in (term, scalars):
        assert _bits(project_quadrature(t, dirs)) == _bits(_old_quadrature(t, dirs))
    whole = {k: np.asarray(v) for k, v in made.items()}
    assert _bits(project_quadrature(made, dirs)) == _bits(_old_quadrature(whole, dirs))
    assert _bits(every_norm(dirs)) == _bits([norm(d) for d in dirs])


def test_a_shape_it_cannot_read_a_block_at_a_time_takes_the_whole_formula():
    rng = np.random.default_rng(3)
    signs = (rng.integers(0, 2, (4, 6)) * 2 - 1).astype(np.int8)
    dirs = [Direction("w", signs, 0.25), Direction("w", signs, np.full((4, 6), 0.5))]
    for x in (rng.standard_normal((4, 1)), rng.standard_normal(6)):  # broadcast along an axis
        assert _bits(project({"w": x}, dirs)) == _bits(_old_project({"w": x}, dirs))
        assert _bits(project_quadrature({"w": x}, dirs)) == _bits(_old_quadrature({"w": x}, dirs))
    assert not directions_module._blockwise(rng.standard_normal((4, 1)), dirs[0])


@pytest.mark.usefixtures("small_blocks")
def test_each_tensors_own_part_in_a_group_is_the_whole_formulas_to_the_bit():
    """``model.groups._zeros``: each tensor's part of the projections, a block at a time, the numbers of
    ``np.sum(value * part)`` with ``part`` cut from ``signs * step`` of the whole group; its verdicts."""
    from crosscheck._workloads.model import groups as model_groups

    rng = np.random.default_rng(5)
    group = Group.of(list(SHAPES), SHAPES)
    dirs = group.directions(_arrays(rng, np.float64), 4)
    value = _arrays(rng)
    parts = [group.pieces(d.signs * d.step) for d in dirs]
    for k, shape in SHAPES.items():
        old = np.array([float(np.sum(np.asarray(value[k], np.float64) * part[k])) for part in parts])
        pieces = [(group.pieces(d.signs)[k].reshape(-1), group.pieces(d.step)[k].reshape(-1)) for d in dirs]
        assert _bits(model_groups._own(value[k], shape, pieces)) == _bits(old)
        if k == "a":  # a row broadcast to the tensor: the whole formula, as it was
            row = value[k][0]
            whole = [float(np.sum(np.asarray(row, np.float64) * part[k])) for part in parts]
            assert _bits(model_groups._own(row, shape, pieces)) == _bits(whole)
        own = old
        for bound in (np.abs(own) * 1.5, np.abs(own) * 0.5):  # zeros pass, then fail where nonzero
            row = {
                "terms": {"rounding": bound, "reference": 0 * bound, "floor": 0 * bound},
                "judged": np.ones(4, bool),
            }
            passes = model_groups._zeros(Group.of([k], {k: shape}), {k: value[k]}, row, _cut(dirs, group, k))
            assert passes[k] == bool(np.all(np.abs(own) <= bound))


def _cut(dirs, group, k):
    """``dirs`` restricted to tensor ``k`` of ``group``: the same signs and steps there."""
    return [
        Direction(JOINT, group.pieces(d.signs)[k].reshape(-1), group.pieces(d.step)[k].reshape(-1))
        for d in dirs
    ]


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_base_steps_are_the_whole_formulas_to_the_bit(dtype):
    """``entries.base_steps``: each tensor's sum of squares once, a block at a time, for its RMS and the
    overall one: the numbers of ``np.mean(np.square(v))`` and ``np.sum(np.square(v))`` of ``v`` in
    float64. A float32 point gives the numbers of its float64 cast, cast a block at a time (the oracle
    hands it the point's own parameters, with no float64 copy of them: issue 38)."""
    from crosscheck._workloads.model.oracle.entries import base_steps

    rng = np.random.default_rng(6)
    params = _arrays(rng, dtype)
    params["z"] = np.zeros((3, 300), dtype)  # all zero: the overall RMS
    params["t"] = np.asarray(rng.standard_normal((300, 7)), dtype).T  # not contiguous
    wide = {k: v.astype(np.float64) for k, v in params.items()}
    rms = {k: math.sqrt(float(np.mean(np.square(v)))) if v.size else 0.0 for k, v in wide.items()}
    sizes = sum(v.size for v in wide.values())
    overall = math.sqrt(sum(float(np.sum(np.square(v))) for v in wide.values()) / max(sizes, 1))
    old = {k: r if r > 0 else (overall if overall > 0 else 1.0) for k, r in rms.items()}
    got = base_steps(params)
    assert list(got) == list(old) and _bits(list(got.values())) == _bits(list(old.values()))
    assert _bits(list(base_steps(wide).values())) == _bits(list(got.values()))
    assert got["z"] == overall and got["c"] == overall  # all zero, empty


def test_the_draws_made_in_place_are_the_whole_formulas_to_the_bit(monkeypatch):
    """``Group.directions`` (steps repeated, signs made in the draw's array; from the point's float32
    parameters or their float64 casts alike) and the noise probe's signs (``precision._signs``, drawn a
    few entries at a time here: the generator's stream does not depend on how a draw is cut): the
    numbers of the formulas with their temporaries, and the generator left where they leave it."""
    import zlib

    from crosscheck._workloads.model.oracle import precision
    from crosscheck._workloads.model.oracle.directions import SEED
    from crosscheck._workloads.model.oracle.entries import base_steps

    rng = np.random.default_rng(7)
    group = Group.of(list(SHAPES), SHAPES)
    params = _arrays(rng, np.float64)
    steps = base_steps(params)
    step = np.concatenate([np.full(n, steps[k]) for k, n in zip(group.names, group.sizes, strict=True)])
    draw = np.random.default_rng([SEED, zlib.crc32("\0".join(group.names).encode())])
    old = [(draw.integers(0, 2, size=step.size, dtype=np.int8) * 2 - 1).astype(np.int8) for _ in range(3)]
    got = group.directions(params, 3)
    for d, signs in zip(got, old, strict=True):
        assert d.signs.dtype == np.int8 and d.signs.tobytes() == signs.tobytes()
        assert np.asarray(d.step).dtype == np.float64 and np.asarray(d.step).tobytes() == step.tobytes()
    narrow = {k: v.astype(np.float32) for k, v in params.items()}
    wide = {k: v.astype(np.float64) for k, v in narrow.items()}
    for d, e in zip(group.directions(narrow, 2), group.directions(wide, 2), strict=True):
        assert d.signs.tobytes() == e.signs.tobytes()
        assert np.asarray(d.step).tobytes() == np.asarray(e.step).tobytes()
    monkeypatch.setattr(precision, "DRAW", 7)  # every tensor's draw cut, at odd places
    a, b = np.random.default_rng(8), np.random.default_rng(8)
    for shape in SHAPES.values():
        want = (a.integers(0, 2, size=shape) * 2 - 1).astype(np.int8)
        have = precision._signs(b, shape)
        assert have.dtype == np.int8 and have.shape == want.shape and have.tobytes() == want.tobytes()
    assert a.integers(0, 2**62) == b.integers(0, 2**62)


@pytest.mark.usefixtures("small_blocks")
def test_a_groups_steps_are_one_number_a_tensor_and_read_as_the_whole_array():
    """``sums.Steps`` (issue 38: a group's step per entry held as one number a tensor): its entries, read
    a run at a time or whole, are the array ``Group.directions`` filled before, and each consumer's
    numbers (a tensor's own part of the projections, the steps handed to an adapter's line) are those
    of that array, to the bit."""
    from crosscheck._workloads.model import groups as model_groups
    from crosscheck._workloads.model.oracle.line import _steps

    rng = np.random.default_rng(9)
    group = Group.of(list(SHAPES), SHAPES)
    dirs = group.directions(_arrays(rng, np.float64), 3)
    step = dirs[0].step
    assert isinstance(step, sums.Steps) and step.values.size == len(SHAPES)
    assert not step.values.flags.writeable
    whole = np.asarray(step)
    assert whole.shape == step.shape == (group.flat(_arrays(rng)).size,)
    ends = np.cumsum([0, *group.sizes])
    for a, b in [(0, 1), (0, 37 * 129), (10, 4800), (4772, 4774), (4773, 15_000), (0, whole.size)]:
        assert step.block(a, b).tobytes() == whole[a:b].tobytes()
        inside = np.searchsorted(ends, a, side="right") == np.searchsorted(ends, b - 1, side="right")
        over = step.over(a, b)
        assert np.ndim(over) == (0 if inside else 1) and np.all(over == whole[a:b])
    arrays = [Direction(JOINT, d.signs, np.asarray(d.step)) for d in dirs]  # the array, as before
    value = _arrays(rng)
    for d, old in zip(dirs, arrays, strict=True):
        assert _steps(group.pieces, d) == _steps(group.pieces, old)
    bound = np.abs(project({JOINT: group.joint(value)}, dirs))
    for scale in (0.5, 1.5):
        row = {"terms": {"rounding": bound * scale, "reference": 0 * bound, "floor": 0 * bound}}
        row["judged"] = np.ones(3, bool)
        assert model_groups._zeros(group, value, row, dirs) == model_groups._zeros(group, value, row, arrays)
    for k, shape in SHAPES.items():
        new = [(group.pieces(d.signs)[k].reshape(-1), model_groups._pieces(group, d.step)[k]) for d in dirs]
        old = [(group.pieces(d.signs)[k].reshape(-1), group.pieces(d.step)[k].reshape(-1)) for d in arrays]
        got, want = model_groups._own(value[k], shape, new), model_groups._own(value[k], shape, old)
        assert _bits(got) == _bits(want)
