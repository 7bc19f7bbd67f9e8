"""The parameters whose gradient is zero by construction, as a train judges them.

An attention key's bias moves no output (softmax does not change when a row is shifted), so its
gradient is zero in exact arithmetic and rounding noise as computed. Adam divides that noise by its
own square root: each side moves the parameter by about the learning rate per step, in directions
that rounding decides, not the update rule. Comparing those moves would blame the rule for rounding.

So the gradient check at the start (``locate.start``) names the parameters whose gradient it judged
zero within rounding on both sides (``model.zeros.zero_tensors``, none refuted by the oracle), and
every run of both sides trains them on that gradient's exact value, zero (``Trainer.update``'s
``zero``): Adam's update of them is then exactly zero, and what else moves them (decoupled weight
decay, ``p * lr * wd``, a rule) is still compared at every step. A gradient PyTorch leaves ``None``
(the loss does not reach the parameter) stays ``None``: ``torch.optim`` skips such a parameter, weight
decay included, while optax decays every leaf it is given; that difference is a real one, and named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._compare.record import Comparison
from crosscheck._workloads.model.zeros import zero_tensors

#: The kind under which the PyTorch side reports a parameter whose ``.grad`` was None at a step
#: (``"name (no gradient)"``, with its start state; taken out before the state is paired).
NO_GRADIENT = "no gradient"


def zero_gradients(judge: Any, name: str, found: list[Comparison]) -> tuple[str, ...]:
    """The parameters whose gradient the generic ``judge`` (PyTorch as reference, candidate ``name``)
    found zero within rounding on both sides, their comparison passed and no oracle check refuting it
    (empty when the whole check was of zeros: that check is empty, and fails as such)."""
    findings = judge.findings
    record, reference = findings.records.get(name), findings.reference_gradient
    if record is None or reference is None or (record.zeros and all(record.zeros.values())):
        return ()
    passed = {str(c.parameter) for c in found if c.passed}
    names = zero_tensors(judge.shapes, [record.gradient, reference], record.zeros)
    refuted = {
        k for k, checks in findings.zero_checks.items() if any(c.status == "refuted" for c in checks.values())
    }
    return tuple(k for k in names if k in passed and k not in refuted)


def said(zero: tuple[str, ...]) -> str:
    """What the verdict says of them ("" when there are none)."""
    if not zero:
        return ""
    shown = ", ".join(f"`{k}`" for k in zero)
    it = "it" if len(zero) == 1 else "them"
    return (
        f"the gradient of {shown} is zero within rounding (the gradient check at the start): Adam's "
        f"update of {it} would be that rounding noise normalised by itself, so both sides train {it} on "
        f"an exact zero gradient and only what else moves {it} (weight decay) is compared"
    )


def skipped(parameter: str, none: frozenset[str], runs: dict[str, dict[str, np.ndarray]]) -> str:
    """Why ``parameter`` differs when PyTorch left its ``.grad`` None (``none``: the parameters the
    PyTorch side reported so, ``NO_GRADIENT``) and left it untouched bit for bit, while the other side
    moved it (``runs``: side name -> its float32 trajectories); "" otherwise."""
    if parameter not in none or any(parameter not in r for r in runs.values()) or "torch" not in runs:
        return ""
    moved = {
        s: not all(np.array_equal(row, r[parameter][0]) for row in r[parameter][1:]) for s, r in runs.items()
    }
    if moved["torch"] or not any(moved.values()):
        return ""
    return (
        f"PyTorch's optimizer left `{parameter}` untouched: its `.grad` is None (the loss does not reach "
        "it), and torch.optim skips such a parameter, weight decay included, while optax updates every "
        "leaf it is given (its weight decay moved it); mask it out of the optax side's weight decay, or "
        "declare it out of the port (`unused=`), to train both alike"
    )
