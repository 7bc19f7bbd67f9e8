"""What is cross-checked: a quantity names the backend method that computes it; each workload's judge
says how its reference estimates it and how its tolerance is made (``Workload.judge(quantity, ...)``).

Adding a quantity: one entry here (which the CLI's ``--quantity`` choices, the worker processes'
methods and the report's fields follow), and a judge for it in each workload that has it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Quantity:
    """``name`` (as in ``--quantity``), the backend ``method`` computing it, a ``label`` for text, and
    the report fields its judge hands over (``Judge.extras``: ``{"direction": ...}``)."""

    name: str
    method: str
    label: str
    extras: tuple[str, ...] = ()


QUANTITIES = {
    "grad": Quantity("grad", "grad", "gradient", extras=("oracle",)),
    "hvp": Quantity("hvp", "hvp", "Hessian-vector product", extras=("direction",)),
    "update": Quantity("update", "update", "optimizer update"),
}


def quantity(name: str) -> Quantity:
    """The quantity named ``name`` (``ValueError`` listing the valid names otherwise)."""
    if name not in QUANTITIES:
        raise ValueError(f"`quantity` must be one of {', '.join(QUANTITIES)}; found {name!r}.")
    return QUANTITIES[name]
