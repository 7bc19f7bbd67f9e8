"""A candidate's re-run in the other precision, and the rounding it measures (``rounding``, through
``rounding.measure``).

On an accelerator without every float64 operation (a TPU has no float64 max-pooling gradient, XLA's
``select_and_scatter``), the float64 re-run fails there; it is then made with the JAX side on the host
CPU, the same computation in IEEE float64 (``Call.on_host``), and either way the failure is said: a
re-run that did not happen is never hidden behind the fallback bound. On a device whose float64 is
emulated (a TPU: ``Arithmetic.float64_on_host``), the float64 re-run is made on the host CPU from the
start, and said: it is the reference the device's float32 results are measured against.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from crosscheck._compare.constants import OTHER_DTYPE, WIDEN
from crosscheck._compare.device import Arithmetic, arithmetic
from crosscheck._errors import one_line
from crosscheck._types import Loaded
from crosscheck._workloads.model.measured import Divided
from crosscheck._workloads.model.own_losses import OwnLosses
from crosscheck._workloads.model.rounding import Rounding, measure
from crosscheck._workloads.protocol import Call, Outcome, Point


def rerun(
    backend: Loaded, point: Point, other: str, name: str, call: Call
) -> tuple[Outcome, str | None, Arithmetic | None]:
    """``backend``'s gradient at ``point`` in the dtype ``other``: ``(outcome, said, device)``, where
    ``said`` names a failed re-run (and where it was made instead) or a float64 re-run made on the host
    CPU by design, and ``device`` is where the backend computes (``device.arithmetic``). The re-run's
    arrays go when its call returns, before its gradient is copied out of the backend (``once``: the
    float64 parameters are not held beside it)."""
    device = arithmetic(backend, call)
    if other == "float64" and device is not None and device.float64_on_host:
        with call.on_host():
            outcome = _grad(backend, point, other, call)
        said = f"`{name}`'s float64 re-run made on the host CPU: {device.float64_on_host}"
        if outcome.ok:
            return outcome, said, device
        return outcome, f"{said}; it failed there: {one_line(str(outcome.error), 240)}", device
    outcome = _grad(backend, point, other, call)
    if outcome.ok:
        return outcome, None, device
    failed = f"`{name}`'s {other} re-run failed: {one_line(str(outcome.error), 240)}"
    if device is None or device.platform == "cpu":
        return outcome, failed, device
    with call.on_host():  # the same computation on the host CPU, whose float64 is IEEE's
        outcome = _grad(backend, point, other, call)
    if outcome.ok:
        return outcome, f"{failed}; re-run on the host CPU instead", device
    return outcome, f"{failed}; on the host CPU too: {one_line(str(outcome.error), 240)}", device


def _grad(backend: Loaded, point: Point, other: str, call: Call) -> Outcome:
    params = call.cast(point.params, other, once=True)
    inputs = call.cast(point.inputs, other, once=True)
    return call(backend.grad, params, inputs, convert="arrays")


def rounding(
    backend: Loaded,
    value: dict[str, np.ndarray],
    name: str,
    call: Call,
    *,
    point: Point,
    shapes: dict[str, tuple[int, ...]],
    own: OwnLosses,
    oracle: bool,
    by_design: bool = False,
) -> Rounding:
    """The ``rounding`` term of every parameter of ``name``'s gradient ``value`` at ``point``, and how it
    was obtained (``rounding.measure``, from the re-run); ``own``: the run's own losses, whose noise probe
    says whether a float64 loss keeps float32 steps; ``oracle``: the oracle is the reference;
    ``by_design``: the workload computes a part in float32 by design, so its float64 rounding is
    float32's wherever that part reaches."""
    dtype = point.dtype
    outcome, failed, device = rerun(backend, point, OTHER_DTYPE[dtype], name, call)
    again = outcome.value
    # |g32 - g64| is two float32 roundings, not the float32 run's alone, where the float64 loss
    # keeps float32 steps (probed lazily: only for a parameter beyond the permit); the re-run's
    # arrays are the engine's copies, read by no one after: the difference is made in them
    steps = functools.partial(own.steps, backend, name, call, oracle=oracle)
    found = measure(
        value, again, shapes=shapes, dtype=dtype, name=name, steps=steps, consume=True, device=device
    )
    del again
    if failed:  # said wherever the rounding is: a re-run that did not happen is not hidden
        found = dataclasses.replace(found, how=f"{failed}; {found.how}", honest=outcome.ok)
    if dtype != "float64" or found.delta is None:
        return found
    side = getattr(backend, "name", name)
    if by_design:
        how = f"{found.how}; a part computed in float32 by design: float32's rounding"
        return dataclasses.replace(
            found, term=Divided(found.term, WIDEN), delta=Divided(found.delta, WIDEN), how=how
        )
    if oracle:  # probed before the first comparison (``prepare``), where it was
        # (its own loss's differences carry its noise; another's clean ones do not)
        if not own.probed_float32(name):
            return found
    elif not own.keeps_float32(backend, side, call):
        return found
    # Its float64 run keeps float32 steps: its rounding is float32's, |g64 - g32| unscaled.
    how = f"{found.how}; `{side}`'s float64 loss keeps float32 steps (noise probe): float32's rounding"
    term, delta = Divided(found.term, WIDEN), Divided(found.delta, WIDEN)  # each made when read
    return dataclasses.replace(found, term=term, delta=delta, how=how)
