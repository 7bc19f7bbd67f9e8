"""The one driver every path runs: the reference, then each candidate, through the guarded call.

``drive(plan)`` loads the reference and lets the workload's judge estimate the quantity with it; then
for each candidate: load it, evaluate it (guarded), call it again (``repeat``) and fail it when the
second result differs beyond its own rounding, compare it (the judge), and record it (a judge with a
``prepare`` sees every loaded candidate before the first comparison). A candidate that
produced no comparison is a failure, never a pass. A real Ctrl-C stops the loop: what finished is
reported, the rest is recorded as not run, and the report says it was interrupted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._backends import as_options
from crosscheck._backends.handed import same_bits
from crosscheck._backends.protocol import BackendSpec
from crosscheck._compare.record import Comparison
from crosscheck._engine.call import unique, user_interrupts
from crosscheck._engine.caller import Caller
from crosscheck._engine.classnotes import device_model, program
from crosscheck._engine.load import load, spec_name
from crosscheck._engine.plan import Plan
from crosscheck._engine.process.isolate import (
    Worker,
    in_process_reason,
    load_isolated,
    start_workers,
)
from crosscheck._errors import Interrupted
from crosscheck._report.environment import environment
from crosscheck._report.report import BackendResult, Report
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Judge, Outcome, Reference


@dataclasses.dataclass
class _Run:
    plan: Plan
    judge: Judge
    call: Caller
    results: dict[str, BackendResult] = dataclasses.field(default_factory=dict)
    comparisons: list[Comparison] = dataclasses.field(default_factory=list)
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    reference: Reference | None = None
    interrupted: bool = False
    #: Worker processes by position (``"reference"``, or a candidate's index), with ``isolate``.
    workers: dict[str | int, Worker] = dataclasses.field(default_factory=dict)
    #: Each loaded backend and its record's name (whose record a write to its inputs fails).
    loaded: list[tuple[Loaded, str]] = dataclasses.field(default_factory=list)


def drive(plan: Plan) -> Report:
    """Run ``plan`` and return its report (never raises for anything a backend does)."""
    with user_interrupts() as interrupts:
        call = Caller(
            plan.point.arrays(), timeout=plan.timeout, interrupts=interrupts, placement=plan.placement
        )
        run = _Run(plan, plan.judge, call)
        try:
            run.workers = start_workers(plan)  # they load their backends while the reference runs
            _reference(run)
            _candidates(run)
        except Interrupted:
            run.interrupted = True
        finally:  # after a Ctrl-C, at once: a worker may be stuck in its backend
            for worker in run.workers.values():
                if run.interrupted:
                    worker.stop("interrupted")
                else:
                    worker.close()
    _writers(run)
    return _report(run)


def _load(
    run: _Run, key: str | int, spec: BackendSpec, *, required: bool
) -> tuple[Loaded | None, BackendResult]:
    """Load ``spec`` in its worker (``isolate``) or here; a note says why one that could not be sent
    to a worker ran here."""
    worker = run.workers.get(key)
    if worker is not None:
        return load_isolated(worker, required=required)
    backend, result = load(
        run.plan.workload,
        spec,
        required=required,
        interrupts=run.call.interrupts,
        placement=run.plan.placement,
    )
    why = in_process_reason(run.plan, spec, reference=key == "reference")
    if why and backend is not None and run.plan.isolate is True:
        result = dataclasses.replace(result, notes={**result.notes, "isolated": why})
    return backend, result


def _reference(run: _Run) -> None:
    backend, result = _load(run, "reference", run.plan.reference, required=True)
    result = dataclasses.replace(result, role="reference")
    run.results[result.name] = result  # recorded first: an interrupt below still reports it
    if backend is not None:
        run.loaded.append((backend, result.name))
        run.call.phase = result.name
        out = run.judge.reference(backend, run.call)
        result = _record(result, out)
        if out.error is None:
            reference = dataclasses.replace(out.value, name=result.name)
            run.reference = reference
            notes = {**result.notes, **reference.notes}
            result = dataclasses.replace(result, dtype=reference.dtype, notes=notes)
            if reference.value is not None:
                run.values[result.name] = reference.value
    run.results[result.name] = result


def _candidates(run: _Run) -> None:
    """Each candidate in turn; a judge with a ``prepare(candidates, call)`` method (the model oracle's:
    it picks which candidate's loss the others are judged against) gets every loaded candidate first."""
    prepare = getattr(run.judge, "prepare", None)
    if not callable(prepare):
        for index, spec in enumerate(run.plan.candidates):
            admitted = _admit(run, spec, index)
            if admitted is not None:
                _candidate(run, *admitted)
        return
    loaded = [_admit(run, spec, index) for index, spec in enumerate(run.plan.candidates)]
    ready = [a for a in loaded if a is not None]
    prepare([(name, backend) for name, backend, _ in ready], run.call)
    for admitted in ready:
        _candidate(run, *admitted)


def _admit(run: _Run, spec: BackendSpec, index: int) -> tuple[str, Loaded, BackendResult] | None:
    """Load candidate ``spec``: ``(name, backend, record)``, or None when it is not checked (recorded)."""
    backend, result = _load(run, index, spec, required=run.plan.explicit)
    name = unique(result.name, run.results)
    run.results[name] = result  # recorded first: an interrupt below still reports it
    if backend is None:
        return None
    run.loaded.append((backend, name))
    if run.reference is None:
        run.results[name] = dataclasses.replace(
            result, status="skipped", error="not run: the reference did not run"
        )
        return None
    method = run.plan.quantity.method  # None: the judge computes the quantity, no backend method
    if method is not None and not callable(getattr(backend, method, None)):
        status = "failed" if result.required else "skipped"
        error = (
            f"has no `{run.judge.signature}` method, so it cannot be checked with quantity "
            f"'{run.plan.quantity.name}'"
        )
        run.results[name] = dataclasses.replace(result, status=status, error=error)
        return None
    return name, backend, result


def _candidate(run: _Run, name: str, backend: Loaded, result: BackendResult) -> None:
    run.call.phase = name
    out = run.judge.evaluate(backend, run.call)
    result = _record(result, out)
    run.results[name] = result
    if out.error is not None:
        return
    run.values[name] = out.value
    assert run.reference is not None  # ``_admit`` admits no candidate before the reference answered
    found = run.judge.compare(backend, out.value, name, run.reference, run.call)
    notes = {**result.notes, **run.judge.notes.get(name, {})}
    problem, more = _repeats(run, backend, out.value, found)
    noted = {
        **program(run.plan, run.call, backend, result),
        **device_model(run.plan, run.call, backend, out.value),
    }
    run.results[name] = dataclasses.replace(result, notes={**notes, **more, **noted})
    if problem:
        run.results[name] = dataclasses.replace(run.results[name], status="failed", error=problem)
        return
    run.comparisons.extend(_spent(found))


def _writers(run: _Run) -> None:
    """Each backend that wrote to its inputs in any call fails, with the first such call's error, even
    where its judge set that call's outcome aside (a re-run that only measures rounding): a write to
    an input is never passed. A write in a call of no backend's method is owed to the record being
    filled then (``Caller.phase``)."""
    for owner, phase, error in run.call.wrote:
        name = next((n for b, n in run.loaded if b is owner), phase) if owner is not None else phase
        result = run.results.get(name) if name is not None else None
        if name is not None and result is not None and result.status not in ("failed", "skipped"):
            run.results[name] = dataclasses.replace(result, status="failed", error=error)


def _spent(found: list[Comparison]) -> list[Comparison]:
    """The comparisons as the report keeps them: without ``arrays["rounding"]``, the per-entry bounds that
    only the repeat check reads (an array as large as the gradient per candidate); the arrays a
    plot draws stay."""
    return [
        dataclasses.replace(c, arrays={k: v for k, v in c.arrays.items() if k != "rounding"})
        if "rounding" in c.arrays
        else c
        for c in found
    ]


def _record(result: BackendResult, out: Outcome) -> BackendResult:
    """The backend's record after a guarded call: ``ok`` (with its dtype) or ``failed`` with the reason."""
    notes = {**result.notes, **out.notes}
    if out.error is not None:
        return dataclasses.replace(result, status="failed", error=out.error, seconds=out.seconds, notes=notes)
    return dataclasses.replace(
        result, status="ok", seconds=out.seconds, dtype=_dtypes(out.value), notes=notes
    )


def _dtypes(value: Any) -> str | None:
    arrays = value.values() if isinstance(value, dict) else []
    return ",".join(sorted({a.dtype.name for a in arrays if hasattr(a, "dtype")})) or None


def _repeats(run: _Run, backend: Loaded, first: dict[str, np.ndarray], found: list[Comparison]):
    """Call the candidate again (``repeat - 1`` times): ``(failure or None, notes)``.

    A second result beyond the candidate's own rounding (each comparison's ``arrays["rounding"]``) is a
    stateful or nondeterministic backend, e.g. a port that never zeroes ``.grad``; bitwise differences
    within rounding are noted as nondeterminism.
    """
    bounds: dict[str, Any] = {}  # an array, or what `np.asarray` makes one of when read (`measured.Bound`)
    for c in found:
        bounds.update(c.arrays.get("rounding", {}))
    notes: dict[str, Any] = {}
    for attempt in range(2, run.plan.repeat + 1):
        again = run.judge.evaluate(backend, run.call)
        if again.error is not None:
            return f"call {attempt} failed: {again.error}", notes
        differs = _differences(first, again.value, bounds)
        if differs is None:
            continue
        beyond, changed, where = differs
        if beyond:
            return f"the second call differs: stateful or nondeterministic ({where})", notes
        notes["nondeterministic"] = (
            f"call {attempt} differs from the first in {changed} entries, within rounding"
        )
    if run.plan.repeat > 1:
        notes["repeat"] = run.plan.repeat
    return None, notes


def _differences(first: dict, again: Any, bounds: dict) -> tuple[bool, int, str] | None:
    """None when ``again`` is ``first`` bit for bit; else (beyond rounding?, entries changed, where)."""
    if not isinstance(again, dict) or set(again) != set(first):
        return True, 0, f"it returned parameters {sorted(again or {})} after {sorted(first)}"
    beyond, changed, where = False, 0, ""
    for key, a in first.items():
        b = again[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            return True, 0, f"`{key}` came back as {b.dtype.name}{b.shape} after {a.dtype.name}{a.shape}"
        if same_bits(a, b):  # a block at a time: no two copies of the tensor as bytes
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        changed += int(np.count_nonzero(diff))
        over = ~(diff <= np.broadcast_to(np.asarray(bounds.get(key, 0.0)), diff.shape))  # one at a time
        if over.any() and not beyond:
            beyond, where = True, _where(key, over, diff, a, b)
    return (beyond, changed, where) if changed or beyond else None


def _where(key: str, over: np.ndarray, diff: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    flat = int(np.argmax(np.where(over, diff, -1.0)))
    index = tuple(int(i) for i in np.unravel_index(flat, diff.shape))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        scale = float(np.sqrt(np.mean(np.square(a.astype(np.float64)))))
        relative = float(np.sqrt(np.mean(np.square(diff)))) / scale if scale else float("inf")
    return (
        f"the two calls differ by {relative:.2g} relative (RMS) in `{key}`; "
        f"{int(over.sum())} of {diff.size} entries of `{key}` beyond its rounding; at {index} the first "
        f"call gave {float(a[index]):.9g}, the second {float(b[index]):.9g}"
    )


def _report(run: _Run) -> Report:
    results = dict(run.results)
    if run.interrupted:
        for name, result in results.items():
            if result.status == "pending":
                results[name] = dataclasses.replace(result, status="skipped", error="interrupted (Ctrl-C)")
        for spec in run.plan.candidates[max(0, len(results) - 1) :]:
            name = unique(spec_name(spec), results)
            results[name] = BackendResult(name=name, status="skipped", error="not run: interrupted (Ctrl-C)")
    if run.reference is not None and run.reference.name in results:  # notes the judge added since
        ref = results[run.reference.name]
        results[run.reference.name] = dataclasses.replace(ref, notes={**ref.notes, **run.reference.notes})
    extras = run.judge.extras(run.reference)
    for name, verdict in extras.get("verdicts", {}).items():  # a workload's verdict on a candidate
        results[name] = dataclasses.replace(results[name], verdict=verdict)
    return Report(
        case=run.plan.point.case,
        backends=results,
        comparisons=run.comparisons,
        reference=next(iter(results)),
        strict=run.plan.options.strict,
        environment=environment(),
        placement=as_options(run.plan.placement),
        explain=run.plan.options.explain,
        inputs=(run.plan.point.params, run.plan.point.inputs),
        gradients=run.values,
        quantity=run.plan.quantity.name,
        sections=tuple(extras.get("sections", ())),
        **{field: extras[field] for field in run.plan.quantity.extras if field in extras},
        interrupted=run.interrupted,
    )
