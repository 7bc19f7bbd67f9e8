"""Each run of a classification (``classify``), as its own report says it: where its JAX side said it ran,
at what precision, whether it passed, its problems, the program it traced, and whether a re-run was made
as asked and ran the same program as the run it is to confirm or explain (``Run``).

A re-run asked at ``highest`` whose side says another precision, or one asked on the host CPU whose
side says a device, was not made as asked, and confirms or explains nothing. A run on the host CPU
clears or explains a device's run only where both are shown to be the same program (``Run.same``: each
side's traced program, ``crosscheck._backends.program``, recorded in its notes); a ``highest`` re-run on
the same device confirms or explains the run as asked unless its program is shown to differ (a port
that branches on the precision).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._backends.program import Program
from crosscheck._report.report import BackendResult, Report


def framework(info: dict[str, str]) -> str:
    """Whose side ``info`` is: ``torch`` where it names PyTorch's TF32 switch for products, else ``jax``."""
    return "torch" if "matmul_tf32" in info else "jax"


def who(info: dict[str, str]) -> str:
    """Whose side ``info`` is, in words: ``PyTorch`` or ``JAX``."""
    return "PyTorch" if framework(info) == "torch" else "JAX"


def side(report: Report, of: str | None = None) -> BackendResult | None:
    """The side a classification follows: the candidate on an accelerator whose ``info`` names the
    precision of its products (JAX's matmul precision, PyTorch's TF32 switches), else the JAX side; with
    ``of`` (a framework: a re-run's), that framework's side. None: none."""
    found = [
        r
        for r in report.backends.values()
        if r.role == "candidate" and ("matmul_precision" in r.info or "matmul_tf32" in r.info)
    ]
    if of is not None:
        return next((r for r in found if framework(r.info) == of), None)
    on_device = (r for r in found if r.info.get("platform") not in (None, "", "cpu"))
    return next(on_device, next((r for r in found if framework(r.info) == "jax"), None))


def level(info: dict[str, str]) -> str:
    """The precision level of the side's products ``info`` names (``default``, ``high``, ``highest``):
    JAX's matmul precision; PyTorch's TF32 switches, both off being its ``highest``."""
    from crosscheck._compare.device import level as named

    if framework(info) == "torch":
        return "default" if "on" in (info["matmul_tf32"], info.get("cudnn_tf32")) else "highest"
    return named(info.get("matmul_precision"))


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a classification: its ``label`` (``as asked``, ``highest``, ``host CPU``), its
    ``report``, ``where`` its own JAX side said it ran (``side``; empty where it said nothing), the
    ``program`` that side traced (None: not said), ``made`` (whether it ran where and how it was asked;
    the as-asked run always) and ``differs``: how its program differs from the as-asked run's (empty:
    the same, or not shown to differ; ``same`` says which)."""

    label: str
    report: Report
    where: dict[str, str]
    program: Program | None
    made: bool = True
    differs: tuple[str, ...] = ()
    #: Whether its program is shown to be the as-asked run's (both traced, no difference).
    same: bool = True
    #: The device model of its products on the case (``crosscheck._compare.modelled.summary``), where
    #: its side ran on a device at a reduced precision and modelled it; else None, and why in ``unmodelled``.
    model: dict[str, Any] | None = None
    unmodelled: str = ""

    @classmethod
    def of(cls, label: str, report: Report, asked: Run | None = None) -> Run:
        """The run ``label`` of ``report``; ``asked``: the as-asked run (None: this is it)."""
        found = side(report, None if asked is None else framework(asked.where))
        where = dict(found.info) if found is not None else {}
        notes = found.notes if found is not None else {}
        program = Program.of(notes.get("program"))
        if asked is None:
            model = notes.get("device_model")
            why = str(notes.get("device_model_error") or "its backend does not model them (`modelled()`)")
            return cls(
                label,
                report,
                where,
                program,
                model=model if isinstance(model, dict) else None,
                unmodelled=why,
            )
        if label == "highest":
            made = level(where) == "highest" and where.get("platform") == asked.where.get("platform")
            here, there = f"at the {level(asked.where)} precision", "at `highest`"
        else:
            made, here, there = where.get("platform") == "cpu", "on the device", "on the host CPU"
        if asked.program is None or program is None:
            return cls(label, report, where, program, made, (), False)
        differs = tuple(asked.program.differences(program, here, there))
        return cls(label, report, where, program, made, differs, not differs)

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def first(self) -> str | None:
        """The first module or parameter that differs in this run (None: none, or none named)."""
        return next((c.module or c.parameter for c in self.report.comparisons if not c.passed), None)

    def to_dict(self) -> dict[str, Any]:
        found = {
            "run": self.label,
            "platform": self.where.get("platform", ""),
            "device_kind": self.where.get("device_kind", ""),
            "matmul_precision": self.where.get("matmul_precision", ""),
            "made": self.made,
            "same_program": self.same if self.label != "as asked" else None,
            "passed": self.passed,
            "first": self.first,
            "problems": self.report.problems,
        }
        return {**found, "device_model": self.model} if self.model is not None else found
