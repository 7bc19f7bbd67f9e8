"""A check that failed with the JAX side on an accelerator, classified by controlled re-runs.

A TPU computes a float32 product at JAX's default matmul precision in one bfloat16 pass, and its float32
elementwise functions are approximations; the judges permit that arithmetic as modelled
(``crosscheck._compare.device``), but a difference can still outgrow the model (bfloat16 rounding
compounded through layers of attention). Whether such a failure is the device's or the port's is
answered the way the 16-bit verdict answers it, by re-running what differs, here the whole check:

1. at ``highest`` (float32 products) on the same device: if it passes, the default precision decided,
   and the check is that run's, PASSED, with the default run's failure said beside it
   (``Classification.kind`` ``"precision"``);
2. else with the JAX side on the host CPU: if that passes, the device's arithmetic at ``highest``
   decided (its elementwise functions, or a product pinned below float32 in the code): FAILED, the
   device named, not the port (``"device"``);
3. else the difference stays on the CPU: a real one, FAILED with the CPU run's verdict, which locates
   it (``"port"``).

A check that passed at a precision below ``highest`` is re-run there too: a pass within the device's
arithmetic cannot see a difference smaller than it (a planted layer-norm epsilon or an exact GELU for
the tanh one, on a TPU at the default precision). If the ``highest`` run passes, the check is that run's
(``"confirmed"``); if it fails and the host CPU's run fails too, FAILED with the CPU run's verdict, a
real difference the reduced precision hid (``"hidden"``); if only the CPU run passes, the as-asked pass
stands, the device named (``"device"``).

Each re-run is a full check, the same request with its placement changed (``Placement.at_highest``,
then ``Placement.on_host``: each framework's own values for its highest arithmetic and for the host CPU,
declared in its folder, so that the re-runs name no framework); nothing is widened.

A run on the host CPU clears or explains a device's run only where both ran the same program: each side's
program, traced where it ran (``program()``, ``crosscheck._backends.program``), is compared
(``runs.Run.same``). A port that branches on where it runs (a Pallas or fused kernel, ``if
jax.default_backend() == "tpu"``) takes another path on the host: there its device path is judged on the
device's own runs alone, the as-asked run and a ``highest`` re-run of the same program, and the
classification says so (``"program"``); a ``highest`` re-run whose program differs from the run as asked
(a port that branches on the precision) confirms and explains nothing. A re-run is driven,
never classified again (``again`` runs a request without this step), and each run's record is its own:
where its side said it ran, at what precision, whether it passed, its problems (``Run``). A re-run
whose side does not say it ran where it was asked (a backend that reports the default precision at
``highest``, or a device on the host CPU) was not made as asked: it confirms and explains nothing, and
the classification says so (``"unconfirmed"`` for a pass, ``"unclassified"`` for a failure, each the
as-asked run's verdict). A check that passed at ``highest``, was interrupted or halted, or whose JAX side
ran on a CPU, is returned as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from crosscheck._backends import Placement, as_options
from crosscheck._compare.modelled import beyond
from crosscheck._engine import classes
from crosscheck._engine.classes import Classification
from crosscheck._engine.runs import Run, level, side, who
from crosscheck._report.report import Report

#: The classes of a check with its JAX side on an accelerator (``Classification.kind``).
KINDS = classes.KINDS


def accelerated(report: Report) -> dict[str, str] | None:
    """Where the report's side on an accelerator ran (``runs.side``: JAX's, or PyTorch's on CUDA), when
    it ran on one: its ``info`` (``platform``, ``device_kind``, and ``matmul_precision`` or PyTorch's TF32
    switches)."""
    found = side(report)
    return dict(found.info) if found is not None and found.info.get("platform") not in ("", "cpu") else None


def _implicated(report: Report) -> bool:
    """Whether what failed involves a side on an accelerator (its comparison or its verdict): another
    side's failure (a PyTorch candidate against the oracle) is not the device's to classify."""
    names = {
        r.name
        for r in report.backends.values()
        if r.role == "candidate" and r.info.get("platform") not in (None, "", "cpu")
    }
    failed = any(not c.passed and c.backend in names for c in report.comparisons)
    verdicts = [report.backends[n].verdict for n in names]
    return failed or any(v is not None and v.fails for v in verdicts)


def classified(request: Any, report: Report, again: Callable[[Any], Report]) -> Report:
    """``report``, or, where it failed with the JAX side on an accelerator, the re-runs' classification
    (module doc); ``again(request)`` runs a checked request in this process, never in a worker (the
    chip is held by one program at a time), and never classifies what it ran."""
    where = accelerated(report)
    if report.interrupted or report.halted or where is None:
        return report
    passed = report.passed
    if (passed and level(where) == "highest") or (not passed and not _implicated(report)):
        return report
    runs = [Run.of("as asked", report)]
    tell = _telling(request)
    execution = request.execution
    why = "to see what the reduced precision hides" if passed else "to classify the failure"
    if level(where) != "highest":
        tell(f"{who(where)} at `highest` precision, {why}")
        highest = again(_with(request, execution, Placement.at_highest))
        runs.append(Run.of("highest", highest, runs[0]))
        if highest.interrupted or highest.halted:
            return report if passed else highest
        if highest.passed and runs[-1].made and not runs[-1].differs:
            return _bounded(runs)
    tell(f"the {who(where)} side on the host CPU, {why}")
    cpu = again(_with(request, execution, Placement.on_host))
    runs.append(Run.of("host CPU", cpu, runs[0]))
    return _concluded(runs)


def _bounded(runs: list[Run]) -> Report:
    """A ``highest`` re-run of the same program that passes: the run as asked is the reduced precision's
    only where its difference from float32 is within what the device model of its products makes
    (``modelled.beyond``); a failure as asked needs that model to be explained (``classes.unmodelled``),
    a pass without it is confirmed and says so."""
    first, highest = runs
    if first.model is not None:
        over = beyond(first.model.get("parameters", {}))
        if over:
            return _attach(*classes.beyond(runs, over))
    elif not first.passed:
        return _attach(*classes.unmodelled(runs))
    return _attach(highest.report, (classes.confirmed if first.passed else classes.precision)(runs))


def _concluded(runs: list[Run]) -> Report:
    """The report a classification ends on, once the host CPU's run is made: the device named where
    only that run passes, the CPU run's verdict where it fails too, each only where the host ran the
    device's program (else the device's own runs decide: ``classes.other_program``); the as-asked
    verdict, unclassified, where no re-run ran as asked."""
    first, cpu = runs[0], runs[-1]
    if not cpu.made:
        return _attach(*classes.unmade(runs))
    if not cpu.same:
        return _attach(*classes.other_program(runs))
    if cpu.report.passed:
        return _attach(first.report, classes.device(runs))
    return _attach(cpu.report, (classes.hidden if first.report.passed else classes.port)(runs))


def _with(request: Any, execution: Any, change: Callable[[Placement], Placement]) -> Any:
    """``request`` with each side's placement changed by ``change`` (run by ``again`` in this process:
    no second worker); the settings are ``Execution``'s fields, by the names a user gives them."""
    placement = as_options(change(record) for record in execution.placement)
    execution = dataclasses.replace(execution, **placement)
    return dataclasses.replace(request, execution=execution, announce=None, programs=True)


def _telling(request: Any) -> Callable[[str], None]:
    """Progress of a re-run (the request's ``progress``), so a long one is not silent."""
    progress = getattr(request, "progress", None)
    if progress is None:
        return lambda what: None
    return lambda what: progress(f"re-running: {what}", 0, 1)


def _attach(report: Report, found: Classification) -> Report:
    return dataclasses.replace(report, classification=found.to_dict())
