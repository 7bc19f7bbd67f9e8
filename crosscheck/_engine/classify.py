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
declared in its folder, so that the re-runs name no framework); nothing is widened. A check that passed
at ``highest``, was interrupted or halted, or whose JAX side ran on a CPU, is returned as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from crosscheck._backends import Placement, as_options
from crosscheck._report.report import Report

#: The classes of a failure on an accelerator (``Classification.kind``).
KINDS = ("precision", "device", "port", "confirmed", "hidden")


@dataclasses.dataclass(frozen=True)
class Classification:
    """What the controlled re-runs of a failure on an accelerator found: ``kind`` (one of ``KINDS``),
    ``text`` (the sentence printed before the verdict line) and ``runs`` (each run: where its JAX side
    ran, at what precision, whether it passed, and its problems)."""

    kind: str
    text: str
    runs: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "runs": [dict(r) for r in self.runs]}


def accelerated(report: Report) -> dict[str, str] | None:
    """Where the report's JAX side ran, when that is an accelerator (a candidate whose ``info`` names a
    platform other than the CPU): its ``platform``, ``device_kind`` and ``matmul_precision``."""
    for result in report.backends.values():
        platform = result.info.get("platform")
        if (
            result.role == "candidate"
            and platform
            and platform != "cpu"
            and ("matmul_precision" in result.info or "matmul_tf32" in result.info)
        ):
            return dict(result.info)
    return None


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
    chip is held by one program at a time)."""
    where = accelerated(report)
    if report.interrupted or report.halted or where is None:
        return report
    passed = report.passed
    if (passed and _level(where) == "highest") or (not passed and not _implicated(report)):
        return report
    runs = [_run("as asked", report, where)]
    tell = _telling(request)
    execution = request.execution
    why = "to see what the reduced precision hides" if passed else "to classify the failure"
    if _level(where) != "highest":
        tell(f"{_who(where)} at `highest` precision, {why}")
        highest = again(_with(request, execution, Placement.at_highest))
        ran = accelerated(highest)
        runs.append(_run("highest", highest, ran or {}))
        if highest.passed and ran is not None and _level(ran) == "highest":
            return _attach(highest, (_confirmed if passed else _precision)(where, report, runs))
        if highest.interrupted or highest.halted:
            return report if passed else highest
    tell(f"the {_who(where)} side on the host CPU, {why}")
    cpu = again(_with(request, execution, Placement.on_host))
    runs.append(_run("host CPU", cpu, _cpu_info(cpu)))
    if cpu.passed:
        return _attach(report, _device(where, runs))
    return _attach(cpu, (_hidden if passed else _port)(where, runs))


def _who(where: dict[str, str]) -> str:
    """Whose side is on the accelerator, in words (its info names PyTorch's TF32 switches, or not)."""
    return "PyTorch" if "matmul_tf32" in where else "JAX"


def _with(request: Any, execution: Any, change: Callable[[Placement], Placement]) -> Any:
    """``request`` with each side's placement changed by ``change`` (run by ``again`` in this process:
    no second worker); the settings are ``Execution``'s fields, by the names a user gives them."""
    placement = as_options(change(record) for record in execution.placement)
    execution = dataclasses.replace(execution, **placement)
    return dataclasses.replace(request, execution=execution, announce=None)


def _telling(request: Any) -> Callable[[str], None]:
    """Progress of a re-run (the request's ``progress``), so a long one is not silent."""
    progress = getattr(request, "progress", None)
    if progress is None:
        return lambda what: None
    return lambda what: progress(f"re-running: {what}", 0, 1)


def _level(info: dict[str, str]) -> str:
    from crosscheck._compare.device import level

    if "matmul_tf32" in info:  # PyTorch on CUDA: TF32 off for products and convolutions is its highest
        return "default" if "on" in (info["matmul_tf32"], info.get("cudnn_tf32")) else "highest"
    return level(info.get("matmul_precision"))


def _cpu_info(report: Report) -> dict[str, str]:
    for result in report.backends.values():
        if result.role == "candidate" and "matmul_precision" in result.info:
            return dict(result.info)
    return {}


def _run(label: str, report: Report, info: dict[str, str]) -> dict[str, Any]:
    return {
        "run": label,
        "platform": info.get("platform", ""),
        "device_kind": info.get("device_kind", ""),
        "matmul_precision": info.get("matmul_precision", ""),
        "passed": report.passed,
        "first": next((c.module or c.parameter for c in report.comparisons if not c.passed), None),
        "problems": report.problems,
    }


def _device_words(where: dict[str, str]) -> str:
    kind = f" ({where['device_kind']})" if where.get("device_kind") else ""
    return f"a {where.get('platform', '').upper()}{kind}"


def _first(run: dict[str, Any]) -> str:
    """Where a run first differed, in a phrase (its problems are the JSON report's)."""
    where = run.get("first")
    return f"first at `{where}`" if where else "its problems are the JSON report's"


def _precision(where: dict[str, str], report: Report, runs: list[dict[str, Any]]) -> Classification:
    at = _level(where)
    text = (
        f"the JAX side on {_device_words(where)} at JAX's {at} matmul precision differs beyond what that "
        f"arithmetic is modelled to permit ({_first(runs[0])}); re-run at `highest` (float32 products) on "
        "the same device it agrees: the device's reduced-precision products decided, not the port; the "
        f"check is the `highest` run's. A model run at the {at} precision there differs from float32 by "
        "that much"
    )
    return Classification("precision", text, tuple(runs))


def _confirmed(where: dict[str, str], report: Report, runs: list[dict[str, Any]]) -> Classification:
    at = _level(where)
    text = (
        f"the check passed with the JAX side on {_device_words(where)} at JAX's {at} matmul precision, "
        "within what that arithmetic hides; re-run at `highest` (float32 products) on the same device it "
        "passes too, so the reduced precision hid no difference larger than float32's arithmetic there "
        "permits; the check is the `highest` run's"
    )
    return Classification("confirmed", text, tuple(runs))


def _hidden(where: dict[str, str], runs: list[dict[str, Any]]) -> Classification:
    at = _level(where)
    text = (
        f"the check passed with the JAX side on {_device_words(where)} at JAX's {at} matmul precision, "
        f"within what that arithmetic hides; at `highest` it differs ({_first(runs[1])}), and with the "
        "JAX side on the host CPU too: a real difference of the port, smaller than the reduced "
        "precision can see; the verdict is the CPU run's"
    )
    return Classification("hidden", text, tuple(runs))


def _device(where: dict[str, str], runs: list[dict[str, Any]]) -> Classification:
    passed = runs[0]["passed"]  # a pass below `highest`, re-run: the pass stands, the device named
    text = (
        f"the JAX side on {_device_words(where)} differs at `highest` precision{'' if passed else ' too'} "
        f"({_first(runs[-2] if len(runs) > 2 else runs[0])}), and with the JAX side on the host CPU it "
        "agrees: the device's arithmetic decided (its float32 elementwise functions, or a product the "
        "code pins below float32 with an explicit `precision=`), not the port's math"
        + ("; the check as asked passed, and stands" if passed else "")
    )
    return Classification("device", text, tuple(runs))


def _port(where: dict[str, str], runs: list[dict[str, Any]]) -> Classification:
    text = (
        f"the difference found with the JAX side on {_device_words(where)} stays with the JAX side on the "
        "host CPU: a real difference of the port, not the device's arithmetic; the verdict is the CPU "
        "run's"
    )
    return Classification("port", text, tuple(runs))


def _attach(report: Report, found: Classification) -> Report:
    return dataclasses.replace(report, classification=found.to_dict())
