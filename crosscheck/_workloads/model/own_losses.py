"""Each candidate's own float64 loss, as the model judge uses it: checked and probed (``own_loss``), its
differences (``difference``), each made once a run; and the anchor of "same function" chosen among them
before the first comparison (``anchor``).

``OwnLosses`` is the run's cache of them: the comparison of a candidate asks for its own differences,
the anchor's, and whether a side's float64 loss keeps float32 steps (the noise probe, which decides its
rounding, ``rerun.rounding``); whoever asks first makes it, the others read it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crosscheck._types import Loaded
from crosscheck._workloads.model.oracle.function import Differences, Differencing, Function, Skip, difference
from crosscheck._workloads.model.oracle.sources import own_loss
from crosscheck._workloads.protocol import Call, Point

#: Why no candidate's own loss is differenced in a workload with a surrogate.
SURROGATE = (
    "the workload has a surrogate: its implementations' gradients are not derivatives of their "
    "losses, so their own losses are not differenced"
)


class OwnLosses:
    """The candidates' own float64 losses at ``point``, differenced as ``chosen`` says (``progress``:
    the oracle's progress), each once; ``surrogate``: the workload has one (none is differenced)."""

    def __init__(
        self,
        point: Point,
        chosen: Differencing,
        progress: Callable[[str, int, int], None],
        *,
        surrogate: bool,
    ) -> None:
        self.point, self.chosen, self.progress, self.surrogate = point, chosen, progress, surrogate
        #: Each candidate's own float64 loss (checked and probed), and its differences, by name.
        self.functions: dict[str, Function | Skip] = {}
        self.differences: dict[str, Differences | Skip] = {}
        #: Per side, whether its float64 loss keeps float32 steps (probed with a backend as reference).
        self.float32_steps: dict[str, bool] = {}

    def function(self, backend: Loaded, name: str, call: Call) -> Function | Skip:
        """``name``'s own float64 loss, checked and probed (``own_loss``), once; its adapter keeps the point
        the probe held on its line for ``differenced``'s differences, which follow at once and release it."""
        if name not in self.functions:
            chosen = self.chosen
            self.functions[name] = own_loss(
                backend,
                name,
                self.point,
                call,
                chosen.clock,
                keep=True,
                cache=chosen.drawn,
                progress=self.progress,
            )
        return self.functions[name]

    def differenced(self, backend: Loaded, name: str, call: Call) -> Differences | Skip:
        """Differences of ``name``'s own float64 loss, or why there are none (once per candidate)."""
        if self.surrogate:
            return Skip(SURROGATE)
        if name in self.differences:
            return self.differences[name]
        function = self.function(backend, name, call)
        if isinstance(function, Skip):
            return function
        found = difference(function, self.point, self.chosen, call, self.progress)
        if isinstance(found, str):
            why = f"finite differences of `{name}`'s own loss failed: {found}"
            self.differences[name] = Skip(why, failure=True)
        else:
            self.differences[name] = found
        return self.differences[name]

    def probed_float32(self, name: str) -> bool:
        """Whether ``name``'s own loss, as the oracle checked it, keeps float32 steps (False: not checked)."""
        return float32(self.functions.get(name))

    def keeps_float32(self, backend: Loaded, side: str, call: Call) -> bool:
        """Whether ``side``'s float64 loss keeps float32 steps (``oracle.precision``'s noise probe: Hugging
        Face's upcasts), once per side; said in the report's notes."""
        if side not in self.float32_steps:
            function = own_loss(backend, side, self.point, call)
            steps = isinstance(function, Function) and function.precision is not None
            self.float32_steps[side] = steps and bool(function.precision.float32)  # type: ignore[union-attr]
        return self.float32_steps[side]

    def steps(self, backend: Loaded, name: str, call: Call, *, oracle: bool) -> bool:
        """Whether ``name``'s float64 loss keeps float32 steps: its own loss's probe (the oracle's,
        shared), else the side's (``keeps_float32``)."""
        if oracle and name in self.functions:
            return float32(self.functions[name])
        return self.keeps_float32(backend, getattr(backend, "name", name), call)

    def difference_each(self, candidates: list[tuple[str, Any]], call: Call) -> tuple[str, Any] | None:
        """Each candidate's own float64 loss checked, probed and differenced, one after the other, and the
        anchor of "same function" (``anchor``) among them."""
        for name, backend in candidates:
            self.differenced(backend, name, call)
        return anchor(candidates, self.functions)


def anchor(
    candidates: list[tuple[str, Any]], functions: dict[str, Function | Skip]
) -> tuple[str, Any] | None:
    """The candidate whose own loss anchors "same function": the first whose loss has no float32 steps,
    else the first that can be differenced (None: none can), so that a port's float64 gradient is judged
    against clean differences, not against float32's noise."""
    usable = [(n, b) for n, b in candidates if isinstance(functions.get(n), Function)]
    clean = [(n, b) for n, b in usable if not float32(functions[n])]
    return (clean or usable)[0] if clean or usable else None


def float32(function: Function | Skip | None) -> bool:
    """Whether ``function`` keeps float32 steps (the noise probe found float32's noise)."""
    return isinstance(function, Function) and function.precision is not None and function.precision.float32
