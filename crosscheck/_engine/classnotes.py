"""What a candidate records for a classification of its check (``classify``), in its backend's notes: the
program it traced where it ran (``program``: a host run clears a device run only when it ran the same
one) and, where it ran on a device at a reduced precision, the device model of its products on the case
(``device_model``: what that precision may explain).

Each is a method the candidate may have (``program``, ``modelled``: the JAX side's adapters), called
through the guarded call; one that fails is noted, and the classification counts what it would have
said as unknown.
"""

from __future__ import annotations

from typing import Any

from crosscheck._backends.program import Program, specs
from crosscheck._compare.device import arithmetic
from crosscheck._compare.modelled import summary
from crosscheck._report.report import BackendResult


def program(plan: Any, call: Any, backend: Any, result: BackendResult) -> dict[str, Any]:
    """The program the candidate ran (``program()``, traced where the run placed it), where a
    classification may compare it: the candidate ran on a device, or the plan asks (``Plan.programs``:
    a classification's re-run)."""
    traced = getattr(backend, "program", None)
    device = result.info.get("platform") not in (None, "", "cpu")
    if not callable(traced) or not (device or plan.programs):
        return {}
    point = plan.point
    out = call(traced, specs(point.params), specs(point.inputs))
    found = Program.of(out.value) if out.error is None else None
    if found is None:
        return {
            "program_error": out.error or f"`program()` returned {type(out.value).__name__}, not a program"
        }
    return {"program": found.to_data()}


def device_model(plan: Any, call: Any, backend: Any, value: Any) -> dict[str, Any]:
    """Where the candidate's float32 gradient ``value`` was made on a device at a reduced precision (its
    ``arithmetic()``: ``Arithmetic.products``), the device model of its products on the case
    (``modelled.summary``): its ``modelled(params, inputs, unit)`` made on the host CPU, rounded to the
    device's unit and unrounded. Another quantity or dtype on such a device is noted as not modelled."""
    device = arithmetic(backend, call)
    unit = device.products if device is not None else None
    if unit is None:
        return {}
    point = plan.point
    if plan.quantity.name != "grad" or point.dtype != "float32":
        what = f"a {point.dtype} `{plan.quantity.name}` check"
        return {"device_model_error": f"the model is made for a float32 gradient, not {what}"}
    modelled = getattr(backend, "modelled", None)
    if not callable(modelled) or not isinstance(value, dict):
        return {}
    with call.on_host():
        made = call(modelled, point.params, point.inputs, unit, convert="arrays")
        exact = (
            call(modelled, point.params, point.inputs, None, convert="arrays") if made.error is None else made
        )
    if made.error is not None or exact.error is not None:
        return {"device_model_error": made.error or exact.error}
    return {"device_model": {"unit": unit, "parameters": summary(value, made.value, exact.value, unit)}}
