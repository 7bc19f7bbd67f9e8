"""One forward pass of each side of a port, every module's inputs and outputs recorded (a ``ModuleCall``
each): PyTorch's (``torch_side.capture``) and the JAX port's (``JaxSide.capture``), at the dtype of the
arrays given.
The module comparison (``gradient.PortJudge``) and the forward check (``forward``) call them through the
engine's guarded call, each side at the case's dtype and re-run in the other (``runs``); the module
comparison takes them early (``Early``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._compare.constants import OTHER_DTYPE
from crosscheck._compare.device import arithmetic
from crosscheck._workloads.port.declare.build import Prepared, jax_leaves
from crosscheck._workloads.port.judge import localize


def torch_capture(prepared: Prepared, params: dict, inputs: dict) -> list:
    """The PyTorch module's records of one forward pass at ``params`` and ``inputs`` (PyTorch's names).

    The arrays are the engine's private copies (a guarded call's arguments): the tensors share their
    memory (``torch_side.shared``) rather than copy the model once more."""
    from crosscheck._workloads.port.sides import torch_side

    state = torch_side.shared({**params, **prepared.torch_state(inputs)})
    return torch_side.capture(prepared.torch_side, state, torch_side.shared(prepared.user_inputs(inputs)))


def jax_capture(prepared: Prepared, params: dict, inputs: dict) -> list:
    """The JAX port's records of one forward pass at PyTorch's ``params`` (mapped to the port's leaves)
    and ``inputs`` (through the port's ``jax_inputs``), in float64 under x64 when the arrays are."""
    import jax

    from crosscheck._workloads.port.sides import jax_side

    wide = any(v.dtype == np.float64 for v in params.values())
    with jax.enable_x64(wide):
        i = jax_side.to_jax(inputs)
        # the dtype ``jax.device_put`` gives the first parameter (its canonical dtype under this x64 flag)
        dtype = jax.dtypes.canonicalize_dtype(np.asarray(next(iter(params.values()))).dtype)
        # each tensor read in place (the engine's private, aligned copies; the capture only reads them)
        lent = {k: jax.device_put(np.asarray(v), may_alias=True) for k, v in params.items()}
        jax_in = (
            prepared.port.jax_inputs(prepared.user_inputs(i))
            if prepared.port.jax_inputs
            else prepared.user_inputs(i)
        )
        if prepared.conversion is not None:  # the port's own conversion, run as it is written (eagerly)
            return prepared.jax_side.capture(jax_leaves(prepared, lent, i), dict(jax_in), dtype)
        # the mapping's leaves made inside the capture's compiled pass: a transposed or reshaped tensor is
        # no array of its own there (made one at a time, 96 transposes of GPT-2 small's layers took 3.3 s
        # of the two captures, a model's size of new memory); one function a port, so that the pass
        # compiled for a dtype is run again by the next capture in it, not compiled anew
        return prepared.jax_side.capture((lent, i), dict(jax_in), dtype, made=prepared.made)


def home(workload: Any, call: Any, *, torch: bool, dtype: str, case: str) -> tuple[Any, str]:
    """Where a side's capture in ``dtype`` is made: ``(context, said)``. The JAX side's float64 re-run of
    a float32 case (the reference its float32 records are measured against) is made on the host CPU
    when its device's float64 is emulated (``Arithmetic.float64_on_host``), and said; anything else
    where the side runs (``workload``: the port's, ``PortWorkload``)."""
    if torch or dtype != "float64" or case == "float64":
        return contextlib.nullcontext(), ""
    device = arithmetic(workload.jax_backend(), call)
    if device is None or not device.float64_on_host:
        return contextlib.nullcontext(), ""
    return call.on_host(), f"JAX's float64 re-run made on the host CPU: {device.float64_on_host}"


def side(call: Any, workload: Any, point: Any, *, torch: bool, dtype: str, case: str) -> tuple[Any, str]:
    """One side's records of a forward pass at ``point`` cast to ``dtype``, through the guarded ``call``:
    ``(outcome, said)``, ``said`` naming where it was made when not where the side runs (``home``)."""
    params, inputs = call.cast(point.params, dtype), call.cast(point.inputs, dtype)
    place, said = home(workload, call, torch=torch, dtype=dtype, case=case)
    with place:
        return call(torch_capture if torch else jax_capture, workload.prepared, params, inputs), said


def runs(call: Any, workload: Any, point: Any, *, torch: bool, main: Any = None) -> localize.Runs | str:
    """One side's module records at the case's dtype and in the other: a ``str`` when the call at the
    case's dtype failed; a failed re-run leaves ``other`` empty and says why (``Runs.problem``).
    ``main``: the records at the case's dtype, captured already (then only the re-run is made)."""
    made: list[Any] = [] if main is None else [main]
    said = ""
    for dtype in (point.dtype, OTHER_DTYPE[point.dtype])[len(made) :]:
        got, said = side(call, workload, point, torch=torch, dtype=dtype, case=point.dtype)
        if got.error is not None:  # the re-run only measures rounding: without it the other side's does
            problem = f"{'PyTorch' if torch else 'JAX'} forward in {dtype}: {got.error}"
            return localize.Runs(made[0], (), f"{said}; {problem}" if said else problem) if made else problem
        made.append(got.value)
    return localize.Runs(made[0], made[1], home=said)


@dataclasses.dataclass
class Early:
    """The module captures of a port check (both sides' records, ``runs``), taken before the
    reference's gradients, while only the models and the case are held (taken when the port
    candidate is compared, after every gradient, rounding and per-entry comparison, they made the run's
    peak memory). Their records are small (module inputs and outputs). The first port candidate's
    comparison uses them (``use``; another captures its own); a write to a capture's inputs is owed to
    that candidate, as if they were taken when it is compared."""

    runs: tuple[Any, Any] | None = None
    #: The writes to their inputs the captures made (the engine's ``Caller.wrote`` entries).
    writes: list[Any] = dataclasses.field(default_factory=list)

    def take(self, runs: Callable[..., Any], call: Any, *, wanted: bool) -> None:
        """``runs(call, torch=...)`` for each side, when ``wanted`` (a port among the candidates)."""
        if not wanted:
            return
        wrote: list[Any] = getattr(call, "wrote", [])  # set aside until the candidate uses them
        start = len(wrote)
        self.runs = (runs(call, torch=True), runs(call, torch=False))
        self.writes = wrote[start:]
        del wrote[start:]

    def use(self, call: Any) -> tuple[Any, Any] | None:
        """The captures, once, their writes owed to the record being filled now (``Caller.phase``)."""
        runs, self.runs = self.runs, None
        if runs is not None:
            phase = getattr(call, "phase", None)
            getattr(call, "wrote", []).extend((owner, phase, error) for owner, _, error in self.writes)
        self.writes = []
        return runs
