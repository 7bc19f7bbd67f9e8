"""The forward check of a port (``quantity="output"``): the model's output and every module's output of
the JAX port against PyTorch's forward, with the gradient check's measured tolerances and its verdict
(the first module that differs), and no gradient and no oracle: seconds where the full check takes
minutes.

It is the port's module comparison (``gradient.PortJudge.modules``) on its own. The reference is
PyTorch's forward (``torch``): its own proof first (``own.prove``: a module that keeps state between
calls is the PyTorch side's failure), then its module records at the case's dtype and re-run in the
other (``capture.runs``). The candidate is the port (``jax``): its records at the case's dtype are
its value (each module's outputs, by row label, which ``repeat`` calls again and compares within the
port's measured rounding), its re-run in the other dtype is made when it is compared. In a float64 case
each side's float64 loss is probed for float32 steps (the noise probe the gradient check uses), so that
module outputs carrying float32's rounding are compared within it, as there. A run in which nothing was
compared fails: a side whose capture fails is a failed backend, and the port's verdict is the run's.

What it cannot see: a bug only in the backward pass (a custom VJP, a wrong ``stop_gradient``, a
straight-through estimator); its verdict that finds no difference says so. In 16 bits, as the gradient
check's (``low.text``): a difference smaller than the dtype's rounding; and a side that computed in
float32 is named, a check in which neither computed in the dtype fails (``wide``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from crosscheck._compare import low
from crosscheck._compare.device import arithmetic
from crosscheck._compare.dtypes import is_float, numpy_dtype
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._types import Loaded
from crosscheck._workloads.port.judge import capture, localize, own, wide
from crosscheck._workloads.port.judge.gradient import PortJudge
from crosscheck._workloads.port.mapping.table import MAPPING
from crosscheck._workloads.protocol import Call, Outcome, Reference

#: The case's ``oracle_differentiates`` of a forward check (the table's title says it).
NO_ORACLE = "nothing: a forward check (quantity output) computes no gradient"


class OutputJudge(PortJudge):
    """The module outputs of a port's ``jax`` candidate against PyTorch's forward (see the module)."""

    signature = "the port's module outputs, captured from its two models"
    budgeted = False
    forward = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Each port candidate's records at the case's dtype, by backend id, until it is compared.
        self.captured: dict[int, Any] = {}

    def prepare(self, candidates: list[tuple[str, Any]], call: Call) -> None:
        """Nothing to prepare: no oracle, so no anchor of "same function"."""

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        if id(backend) not in self.workload.torches:
            return call.failure("the forward check's reference is PyTorch's forward, `torch`")
        start = time.perf_counter()
        self.proof = own.prove(self.workload.prepared, self.point, call)
        if self.proof.problem is not None:
            return call.failure(self.proof.problem)
        runs = self._runs(call, torch=True)
        if isinstance(runs, str):
            return call.failure(f"the module outputs were not captured: {runs}")
        self.designed(runs)
        self._probe(backend, "torch", call)
        notes = {"compares": "module outputs, captured at the case's dtype and re-run in the other"}
        reference = Reference(None, self.dtype, notes, runs)
        return _done(call, reference, time.perf_counter() - start)

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        if id(backend) not in self.workload.ports:
            return call.failure(
                "the forward check compares the port (`jax`) with PyTorch's forward; this backend is "
                "neither, and crosscheck captures module outputs only from the port's own two models"
            )
        prepared, point = self.workload.prepared, self.point
        got = call(capture.jax_capture, prepared, dict(point.params), dict(point.inputs))
        if got.error is not None:
            return dataclasses.replace(got, error=f"JAX forward in {self.dtype}: {got.error}")
        self.captured[id(backend)] = got.value
        return dataclasses.replace(got, value=_outputs(got.value, self.dtype))

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        runs = (reference.data, self._runs(call, torch=False, main=self.captured.pop(id(backend))))
        self._probe(backend, name, call)
        located = self.modules(name, call, [], arithmetic(backend, call), runs=runs)
        modules = _with_rounding(located.comparisons, runs[1])
        if low.hides(self.dtype) and low.agrees(modules):  # what a pass hides, as the gradients' says
            self.inner.verdicts[name] = Verdict(_low_text(runs[1], self.dtype))
        self.record(name, dataclasses.replace(located, comparisons=modules), reference.name)
        return self.running(name, call) + modules + self.apart(name, reference.name)

    def _probe(self, backend: Loaded, name: str, call: Call) -> None:
        """In a float64 case, whether the side's float64 loss keeps float32 steps (the gradient check's
        noise probe, ``OwnLosses.keeps_float32``): its module outputs are then compared within float32's
        rounding."""
        if self.dtype == "float64":
            self.inner.own.keeps_float32(backend, getattr(backend, "name", name), call)

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        self.point.case["oracle_differentiates"] = NO_ORACLE
        wide.merge(self.inner, self.wide, self.dtype)
        said = low.unchecked(self.inner.wide_only, self.dtype)  # no side computed in the 16-bit dtype
        verdicts = {
            k: Verdict(f"{said[0]}; {v.text}", fails=True) if said else v for k, v in self.verdicts.items()
        }
        return {"quantity": "output", "verdicts": verdicts, "sections": (MAPPING,)}


def _done(call: Call, value: Any, seconds: float) -> Outcome:
    """An outcome of ``value`` that took ``seconds`` (several guarded calls made it; each was guarded)."""
    return dataclasses.replace(call.failure(""), value=value, error=None, seconds=seconds)


def _outputs(records: Any, dtype: str | None = None) -> dict[str, np.ndarray]:
    """Each module's outputs by row label (``h.0 (output)``, then ``h.0 (output) #1`` for a second); the
    records' float64 copies back in ``dtype`` where that is exact (they were computed in it; an output
    that is not, float32 in a 16-bit case, keeps its float64 copy)."""
    out = {}
    for r in records:
        for i, array in enumerate(r.outputs):
            value = np.asarray(array)
            if dtype is not None and np.issubdtype(value.dtype, np.floating):
                narrow = value.astype(numpy_dtype(dtype))
                value = narrow if np.array_equal(narrow.astype(value.dtype), value, equal_nan=True) else value
            out[localize.output_label(r.name) + (f" #{i}" if i else "")] = value
    return out


def _low_text(jax_runs: Any, dtype: str) -> str:
    """The 16-bit pass's words (``low.text``) on the module outputs, with the port's measured rounding
    of them (its outputs at the case's dtype against its re-run in float32) relative to each output."""
    main, other = _outputs(jax_runs.main), _outputs(jax_runs.other)
    found = {k: v for k, v in main.items() if is_float(v) and k in other and other[k].shape == v.shape}
    rounding = {
        k: np.abs(np.asarray(v, np.float64) - np.asarray(other[k], np.float64)) for k, v in found.items()
    }
    relative = low.noise(rounding, found)
    return low.text(dtype, relative, moves="the module outputs", measured=bool(rounding))


def _with_rounding(modules: list[Comparison], jax_runs: Any) -> list[Comparison]:
    """The comparisons, the first carrying the port's measured rounding of each output (``arrays
    ["rounding"]``: what a repeated call may differ by, ``driver._repeats``): the difference between
    its outputs at the case's dtype and re-run in the other (none measured: 0, bit for bit)."""
    if not modules or isinstance(jax_runs, str):
        return modules
    main, other = _outputs(jax_runs.main), _outputs(jax_runs.other)
    rounding = {}
    for label, a in main.items():
        b = other.get(label)
        if b is not None and b.shape == a.shape and np.issubdtype(a.dtype, np.floating):
            with np.errstate(invalid="ignore", over="ignore"):
                rounding[label] = np.abs(a.astype(np.float64) - b.astype(np.float64))
    first = modules[0]
    return [dataclasses.replace(first, arrays={**first.arrays, "rounding": rounding}), *modules[1:]]
