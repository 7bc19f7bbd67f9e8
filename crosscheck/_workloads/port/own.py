"""The PyTorch side's own proof, before anything is judged against it: its forward leaves its inputs,
parameters and buffers as they were, and gives the same loss on a second call (``torch_side.proof``).

A PyTorch module that fails it is the PyTorch side's failure, named as such: the ``torch`` backend
fails with what the module did, and the port's module comparison says it did not happen because of
the PyTorch side, never that the JAX port differs.
"""

from __future__ import annotations

from typing import Any

from crosscheck._compare.compare import Comparison
from crosscheck._workloads.port.build import Prepared, torch_implementation
from crosscheck._workloads.port.verdict import Verdict
from crosscheck._workloads.protocol import Call, Point

#: How ``describe`` starts the one line of a ``torch_side.Misbehaved``.
PREFIX = "Misbehaved: "


def prove(prepared: Prepared, point: Point, call: Call) -> str | None:
    """What the PyTorch module did wrong at the point, in one line; None when nothing (or when its
    forward fails outright: its backend's own calls report that, as for any backend)."""
    from crosscheck._workloads.port import torch_side

    loss = torch_implementation(prepared)
    out = call(torch_side.proof, loss, dict(point.params), dict(point.inputs))
    if out.error is None or not out.error.startswith(PREFIX):
        return None
    return out.error.removeprefix(PREFIX)


def not_compared(name: str, text: str) -> tuple[list[Comparison], Verdict]:
    """Candidate ``name``'s module comparison that did not happen (``text`` says why), failed, and the
    verdict that says so."""
    failed = Comparison(
        backend=name,
        reference="torch",
        passed=False,
        status="invalid",
        total=1,
        parameter="(modules)",
        message=text,
    )
    return [failed], Verdict("unknown", None, None, (), text)


def blame(name: str, problem: str) -> str:
    """Why candidate ``name``'s modules were not compared: the PyTorch side failed its proof."""
    return (
        f"the module by module comparison did not happen: the PyTorch side failed its own check ({problem}); "
        f"`{name}` is not judged against it"
    )


def candidates(pairs: list[tuple[str, Any]], torches: set[int], problem: str | None) -> list[tuple[str, Any]]:
    """The candidates whose loss may anchor "same function": not a PyTorch side that failed its proof."""
    return [(n, b) for n, b in pairs if problem is None or id(b) not in torches]
