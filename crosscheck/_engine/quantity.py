"""What is cross-checked: a quantity names the backend method that computes it; each workload's judge
says how its reference estimates it and how its tolerance is made (``Workload.judge(quantity, ...)``).

Adding a quantity: one entry here, and a judge for it in each workload that has it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Quantity:
    """``name`` (as in ``--quantity``), the backend ``method`` computing it, and a ``label`` for text."""

    name: str
    method: str
    label: str


QUANTITIES = {
    "grad": Quantity("grad", "grad", "gradient"),
    "hvp": Quantity("hvp", "hvp", "Hessian-vector product"),
}


def quantity(name: str) -> Quantity:
    """The quantity named ``name`` (``ValueError`` listing the valid names otherwise)."""
    if name not in QUANTITIES:
        raise ValueError(f"`quantity` must be one of {', '.join(QUANTITIES)}; found {name!r}.")
    return QUANTITIES[name]
