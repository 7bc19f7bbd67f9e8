"""A planted bug of an example port, as data: what it is, where a verdict must locate it, how to make
the port that carries it, and what it changes (so that a test can show the bug is really there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Planted:
    """One planted bug.

    ``what``: the bug in a line; ``module``: the PyTorch module a verdict must name; ``change``: the
    keywords of the example's ``make_port`` that plant it; ``shows_in``: ``"output"`` (the forward pass
    changes, and with it the gradients), ``"gradient"`` (a hand-written backward: the forward is exact),
    ``"running statistics"`` (training mode: the output and gradients agree, BatchNorm's updated
    running statistics do not) or ``"update"`` (an optimizer's step: ``module`` is then the optimizer
    part a verdict must name); ``dtype``: the lowest precision whose rounding lets it show (a bug of
    size 1e-6 is below float32's tolerance of a whole check).
    """

    what: str
    module: str
    change: dict[str, Any] = field(default_factory=dict)
    shows_in: str = "output"
    dtype: str = "float32"
