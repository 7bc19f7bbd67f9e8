"""A candidate's re-run in the other precision, which measures its rounding (``rounding.measure``).

On an accelerator without every float64 operation (a TPU has no float64 max-pooling gradient, XLA's
``select_and_scatter``), the float64 re-run fails there; it is then made with the JAX side on the host
CPU, the same computation in IEEE float64 (``Call.on_host``), and either way the failure is said: a
re-run that did not happen is never hidden behind the fallback bound. On a device whose float64 is
emulated (a TPU: ``Arithmetic.float64_on_host``), the float64 re-run is made on the host CPU from the
start, and said: it is the reference the device's float32 results are measured against.
"""

from __future__ import annotations

from typing import Any

from crosscheck._compare.device import Arithmetic, arithmetic
from crosscheck._errors import one_line
from crosscheck._workloads.protocol import Call, Point


def rerun(
    backend: Any, point: Point, other: str, name: str, call: Call
) -> tuple[Any, str | None, Arithmetic | None]:
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


def _grad(backend: Any, point: Point, other: str, call: Call) -> Any:
    params = call.cast(point.params, other, once=True)
    inputs = call.cast(point.inputs, other, once=True)
    return call(backend.grad, params, inputs, convert="arrays")
