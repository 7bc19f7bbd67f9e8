"""An implementation's own float64 loss along a line through the point, the points formed on its side.

Along a direction (``directions``, a group's: ``groups``) and on the noise probe's line (``precision``)
every evaluation moves every tensor of the line at once. Handing the loss every float64 parameter for
each cost a copy of the model and its conversion into the framework's arrays, per evaluation: several
forward passes' worth on GPT-2 small. An adapter with the three methods

- ``hold_point(params, inputs)``: keep the point (float64), as its own arrays (JAX: on the device;
  PyTorch: tensors over the arrays handed), until ``release_evaluations()``;
- ``hold_direction(name, signs)``: keep a line's signs, ``{tensor: +-1 int8 array}`` for the tensors it
  moves, under ``name`` (a string), until ``release_evaluations()``;
- ``loss_along(name, coefficients)``: the loss at ``base_k + c_k * signs_k`` for each tensor ``k`` of
  ``coefficients`` (``{tensor: float}``, tensors of the signs held as ``name``; the others at the
  point; no coefficients: the point itself), as a 0-d float64 array (JAX: the sum inside the jitted
  loss; PyTorch: into a buffer it keeps, under no_grad)

is handed the point once per difference and each direction's signs once (both through the engine's
guarded call: private copies, compared bit for bit after the call, so an adapter that writes them fails
as before); an evaluation hands it one number per tensor. A point the adapter holds still is not handed
again (``Line.holding``): the judge differences a side's loss on the point its noise probe held
(``sources.own_loss``'s ``keep``), which saves a copy of the model handed and each adapter's buffers
made afresh, a side; and the float64 check of that loss before the probe reads its value at
the point on the line (``at_point``), the point handed there once, not once more to ``loss``.

The points are the oracle's own, to the bit: ``c_k = t * step_k`` is rounded as the oracle's NumPy
rounds ``t * step`` (the same float64 product), ``c_k * signs_k`` is exact (signs are +-1), and the sum
is rounded once, as ``signs * (t * step) + base`` is. So are the answers, up to the loss's own rounding
where a framework compiles the loss with the sum inside it differently (JAX may fuse the sum into the
model's first operations): far below any error bar, and equal to the bit on the tests' models
(``tests/workloads/model/oracle/test_line.py``). The stencil, its steps and its error bars are
unchanged (``directions.along``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.dtypes import casts
from crosscheck._types import Loaded
from crosscheck._workloads.model.oracle.batched import BYTES, FROM_EVALUATIONS, Batched, evaluate_one
from crosscheck._workloads.model.oracle.directions import (
    EVALUATIONS_PER_DIRECTION,
    Direction,
    DirectionalEstimate,
    along,
)
from crosscheck._workloads.model.oracle.entries import OracleFailed
from crosscheck._workloads.model.oracle.sums import Steps
from crosscheck._workloads.protocol import Call, Outcome, Point

#: The adapter's methods (all three, or the oracle hands it every parameter each evaluation).
METHODS = ("hold_point", "hold_direction", "loss_along")


@dataclasses.dataclass
class Line:
    """An adapter's ``hold_point``, ``hold_direction`` and ``loss_along`` (``methods``), the guarded
    ``call`` they are handed arrays through, and the float64 ``inputs`` of the point."""

    methods: dict[str, Callable[..., Any]]
    call: Call
    inputs: dict[str, np.ndarray]
    #: Arrays handed: points (``hold_point``) and directions (``hold_direction``), and evaluations.
    points: int = 0
    directions: int = 0
    evaluations: int = 0
    #: Whether the adapter holds the point now: from ``hold`` until its release (``releasing``).
    holding: bool = False

    def _hand(self, method: str, *args: Any) -> None:
        out = self.call(self.methods[method], *args)
        if out.error:
            raise OracleFailed(out.error)

    def hold(self, params: dict[str, np.ndarray]) -> None:
        """The point ``params`` handed once in float64, with the inputs; not again while the adapter
        holds it (``holding``: a line is a function's, at the one point of its case). ``params`` may be
        in any float dtype (the point's own, float32, say): the adapter is handed a float64 cast made for
        this call (``Call.cast``), its private copy, not a copy of a float64 copy: one float64 copy of
        the model a side, not two, compared with ``params`` cast after the call."""
        if self.holding:
            return
        self._hand("hold_point", self.call.cast(params, "float64", once=True), dict(self.inputs))
        self.points += 1
        self.holding = True

    def releasing(self, let_go: Callable[[], Any] | None) -> Callable[[], Any]:
        """``let_go`` (what drops what the adapter holds: None where it has none), after which the point
        is handed again (``hold``)."""

        def release() -> object:
            self.holding = False
            return None if let_go is None else let_go()

        return release

    def direct(self, name: str, signs: dict[str, np.ndarray]) -> None:
        """A line's ``signs`` (``{tensor: +-1}``) handed once, as int8, under ``name``."""
        self._hand("hold_direction", name, {k: np.asarray(v, np.int8) for k, v in signs.items()})
        self.directions += 1

    def at(self, name: str, coefficients: dict[str, float]) -> float:
        """The loss at the held point moved by ``coefficients`` along the signs held as ``name`` (the
        point itself without coefficients; NaN off its domain, as ``batched.evaluate_one``)."""
        self.evaluations += 1
        loss = self.methods["loss_along"]
        return evaluate_one(lambda _: loss(name, coefficients), {})


def line_of(
    backend: Loaded, call: Call, inputs: dict[str, np.ndarray], params: dict[str, np.ndarray]
) -> Line | None:
    """``backend``'s ``Line``, or None where it lacks one of ``METHODS`` or a parameter is not a float
    (``params``: the point's own or their float64 casts; a line moves floating-point tensors only, held
    in float64: the oracle's own path then)."""
    methods = {}
    for name in METHODS:
        try:
            method = getattr(backend, name, None)
        except Exception:  # a property that raises: no line
            method = None
        if not callable(method):
            return None
        methods[name] = method
    if not all(casts(np.asarray(v)) for v in params.values()):
        return None
    return Line(methods, call, inputs)


def at_point(line: Line | None, loss: Callable[..., Any], point: Point, call: Call) -> Outcome:
    """The guarded outcome of the float64 loss at ``point`` (its parameters cast to float64 where they
    are handed; ``convert="array"``, as ``loss``'s): on the adapter's ``line`` where there is one, the
    point held there (``Line.hold``) for the noise probe and the differences that follow, and its loss
    without coefficients (``loss_along``, the point itself: the same computation as ``loss``'s); else
    ``loss`` handed float64 casts of the point made for the call. Handing the point once, not once for
    this value and again to hold it, saves a copy of the model in float64 a side, and in a worker
    process its receipt and the copy its call is checked against."""
    if line is None:
        p, i = call.cast(point.params, "float64", once=True), call.cast(point.inputs, "float64", once=True)
        return call(loss, p, i, convert="array")
    try:
        line.hold(point.params)
    except OracleFailed as exc:
        return call.failure(str(exc))
    return call(line.methods["loss_along"], "", {}, convert="array")


def on_line(fn: Any, sizes: Sequence[int], count: int) -> bool:
    """Whether ``count`` directions of a group of tensors of ``sizes`` entries are evaluated along the
    adapter's line, for a function ``fn`` that has one: unless they would be batched (``oracle.batched``:
    many directions of a small model, where one call for 8 points pays more than forming each point on
    the adapter's side)."""
    if not isinstance(fn, Batched) or fn.fallback is not None:
        return True
    per = BYTES // max(1, 8 * sum(sizes))  # as ``Batched.evaluate``: stacked float64 vectors
    return EVALUATIONS_PER_DIRECTION * count < FROM_EVALUATIONS or per <= 1


class Walker:
    """Evaluations along lines through a held point, in batches through ``guard``, counted (as
    ``entries.Evaluator``): each line's signs handed once, before the first batch that needs them."""

    def __init__(self, line: Line, params: dict[str, np.ndarray], *, guard, progress, expected: int) -> None:
        self.line, self.guard, self.progress = line, guard, progress
        self.expected, self.count = expected, 0
        self.held: set[str] = set()
        line.hold(params)

    def at_base(self) -> float:
        self.count += 1
        return float(self.guard(lambda: self.line.at("", {})))

    def batch(
        self,
        shape: tuple[int, ...],
        key: Callable[[tuple[int, ...]], str],
        signs: Callable[[str], dict[str, np.ndarray]],
        coefficients: Callable[[tuple[int, ...]], dict[str, float]],
    ) -> np.ndarray:
        """The loss at every point ``pos`` of ``shape``: on line ``key(pos)`` (its ``signs(key)``), moved
        by ``coefficients(pos)``."""
        positions = list(np.ndindex(shape))
        for which in dict.fromkeys(key(pos) for pos in positions):
            if which not in self.held:
                self.line.direct(which, signs(which))
                self.held.add(which)
        values = self.guard(lambda: [self.line.at(key(pos), coefficients(pos)) for pos in positions])
        out = np.empty(shape)
        for pos, value in zip(positions, values, strict=True):
            out[pos] = value
        self.count += len(positions)
        self.expected = max(self.expected, self.count)
        if self.progress is not None:
            self.progress(self.count, self.expected)
        return out


def directional(
    line: Line,
    params: dict[str, np.ndarray],
    pieces: Callable[[np.ndarray], dict[str, np.ndarray]],
    directions: Sequence[Direction],
    *,
    guard,
    progress,
    noise: float,
    float32: bool,
) -> DirectionalEstimate:
    """``directions.directional`` of ``line``'s loss at ``params``, each direction ``signs * step`` over
    the vector ``pieces`` cuts into the tensors it moves (a group's: ``Group.pieces``; the step constant
    on each tensor, by construction: each entry its tensor's RMS)."""
    walker = Walker(
        line, params, guard=guard, progress=progress, expected=EVALUATIONS_PER_DIRECTION * len(directions)
    )
    steps = [_steps(pieces, d) for d in directions]

    def evaluate(t: np.ndarray, which: np.ndarray) -> np.ndarray:
        which = np.broadcast_to(which, t.shape)
        return walker.batch(
            t.shape,
            lambda pos: str(int(which[pos])),
            lambda j: pieces(directions[int(j)].signs),
            lambda pos: {k: float(t[pos] * s) for k, s in steps[int(which[pos])].items()},
        )

    loss0 = walker.at_base()
    return along(evaluate, loss0, lambda: walker.count, directions, noise=noise, float32=float32)


def _steps(pieces: Callable[[np.ndarray], dict[str, np.ndarray]], d: Direction) -> dict[str, np.float64]:
    """Each tensor's step of direction ``d`` (the number the oracle's NumPy multiplies ``t`` by); an
    empty tensor has none (nothing of it moves)."""
    if np.ndim(d.step) == 0:
        return {k: np.float64(d.step) for k, v in pieces(d.signs).items() if v.size}
    if isinstance(d.step, Steps):  # a group's: one number a tensor, in the group's order
        return {k: n for (k, v), n in zip(pieces(d.signs).items(), d.step.values, strict=True) if v.size}
    return {k: v.reshape(-1)[0] for k, v in pieces(np.asarray(d.step, np.float64)).items() if v.size}
