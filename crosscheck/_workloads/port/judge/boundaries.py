"""Modules cut apart differently: a module output that differs while the model's output and every
gradient agree.

Hugging Face's PyTorch XGLM scales its embedding by ``sqrt(d_model)`` inside its embedding module, its
Flax port right after ``nn.Embed``: the two module outputs differ by exactly that factor, and the next
module's input agrees again. The two implementations compute the same function; they put a step on
different sides of a module's edge. Where the model's output agrees and so does every gradient (each
comparison judged and passed), a module output that differs is such an edge: its row says so (status
``boundary``, not a failure), with the factor between the two outputs when they differ by one (PyTorch's
= the port's x factor, and ``sqrt(n)`` when the factor is one), and the verdict lists the edges. A
difference that reaches the model's output, or any gradient, is not an edge: the run fails and the
verdict locates it as always.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from crosscheck._compare.constants import BOUNDARY
from crosscheck._compare.record import Comparison
from crosscheck._report.report import FORWARD_ONLY
from crosscheck._workloads.port.judge.verdict import Origin

#: How close two outputs must be to one multiple of each other to be said to differ by a factor
#: (relative to the larger output's largest entry): a description, not a tolerance of any verdict.
FACTOR_FIT = 1e-4


def agree_elsewhere(
    outputs: dict[str, bool | None], gradients: Sequence[Comparison], *, forward: bool = False
) -> bool:
    """Whether the model's output agrees and every gradient was judged and agrees (there is one); in a
    forward check (``forward``: no gradient computed), whether the model's output agrees."""
    agree = all(c.passed and c.status == "ok" for c in gradients)
    return outputs.get("") is True and (forward or (bool(gradients) and agree))


def _elsewhere(forward: bool) -> str:
    """What agrees where a module output that differs is an edge, in words."""
    return (
        "the model's output agrees (a forward check)"
        if forward
        else "the model's output and every gradient agree"
    )


def factor(torch: np.ndarray, jax: np.ndarray) -> float | None:
    """The ``f`` with ``torch = f x jax`` entry by entry (least squares, then checked), or None."""
    t, j = np.asarray(torch, np.float64).ravel(), np.asarray(jax, np.float64).ravel()
    if t.shape != j.shape or not np.any(j):
        return None
    f = float(np.dot(t, j) / np.dot(j, j))
    scale = max(float(np.max(np.abs(t))), float(np.max(np.abs(j))))
    return f if f and float(np.max(np.abs(t - f * j))) <= FACTOR_FIT * scale else None


def said(f: float) -> str:
    """A factor in words: ``2.83 (sqrt(8))`` where its square is an integer, else ``2.83``."""
    square = round(f * f)
    root = f" (sqrt({square}))" if f > 0 and square > 1 and abs(f * f - square) <= 1e-4 * f * f else ""
    return f"{f:.6g}{root}"


def mark(
    comparisons: list[Comparison], arrays: dict[str, tuple[np.ndarray, np.ndarray]], *, forward: bool = False
) -> tuple[list[Comparison], list[str]]:
    """The module rows with each failed output row turned into a ``boundary`` row (not a failure), and
    one phrase per such module for the verdict. ``arrays`` is each module's first output, PyTorch's
    and the port's."""
    out, edges = [], []
    for c in comparisons:
        if c.passed or c.status != "mismatch" or c.module is None or c.module == "":
            out.append(c)
            continue
        t, j = arrays.get(c.module, (None, None))
        f = factor(t, j) if t is not None and j is not None else None
        by = f" by a factor: PyTorch's = the port's x {said(f)}" if f is not None else ""
        edge = f"`{c.module}`{by}"
        text = (
            f"{c.parameter}: differs{by}, while {_elsewhere(forward)}: the two "
            "implementations cut their modules differently here (a step inside one side's module is "
            "outside the other's); not a difference of the function\n" + c.message
        )
        out.append(dataclasses.replace(c, passed=True, status=BOUNDARY, message=text))
        edges.append(edge)
    return out, edges


def note(edges: Sequence[str], *, forward: bool = False) -> str:
    """The verdict's words on the modules cut differently ("" when none)."""
    if not edges:
        return ""
    return (
        f"; module outputs that differ while {_elsewhere(forward)}: "
        f"{', '.join(edges)}: the two implementations cut their modules differently there (a step on "
        "the other side of a module's edge), not a difference of the function"
    )


def apart(
    comparisons: list[Comparison],
    outputs: dict[str, bool | None],
    firsts: dict[str, Any],
    gradients: Sequence[Comparison],
    *,
    forward: bool = False,
) -> tuple[list[Comparison], list[str]]:
    """The module rows with the edges marked (``mark``) where the model's output and every gradient
    agree (``agree_elsewhere``), ``outputs`` updated to say they agree; the rows as they were and no edge
    otherwise. ``firsts``: each module's first output, PyTorch's and the port's (None: none)."""
    if not agree_elsewhere(outputs, gradients, forward=forward):
        return comparisons, []
    out, edges = mark(comparisons, {k: v for k, v in firsts.items() if v is not None}, forward=forward)
    outputs.update({c.module: True for c in out if c.status == BOUNDARY and c.module})
    return out, edges


def verdict(found: Origin, edges: Sequence[str], *, forward: bool = False) -> Origin:
    """A verdict that found no difference, with the edges said (``found`` as it is without edges)."""
    if not edges or found.starts_in != "nowhere":
        return found
    if forward:
        text = f"the model's output and every other module's output agree ({FORWARD_ONLY})"
    else:
        text = "the model's output, every other module's output and every gradient agree"
    return dataclasses.replace(found, text=text + note(edges, forward=forward))
