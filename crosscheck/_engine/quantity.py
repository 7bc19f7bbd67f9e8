"""What is cross-checked: a quantity names the backend method that computes it (none for ``output``, which
a port's judge captures from the two models themselves); each workload's judge says how its reference
estimates it and how its tolerance is made (``Workload.judge(quantity, ...)``).

Adding a quantity: one entry here (which the CLI's ``--quantity`` choices, the worker processes'
methods and the report's fields follow), and a judge for it in each workload that has it.
"""

from __future__ import annotations

import dataclasses

from crosscheck._backends import ORACLE


@dataclasses.dataclass(frozen=True)
class Quantity:
    """``name`` (as in ``--quantity``), the backend ``method`` computing it (None: the judge computes it
    from the workload's own models, no backend method is asked for), a ``label`` for text, the report
    fields its judge hands over (``Judge.extras``: ``{"direction": ...}``), the ``reference`` a run
    takes when none is given, and the workloads that have it, in words, when not every kind does
    (``owners``: the refusal of another workload names them)."""

    name: str
    method: str | None
    label: str
    extras: tuple[str, ...] = ()
    reference: str = ORACLE
    owners: str = ""


QUANTITIES = {
    "grad": Quantity("grad", "grad", "gradient", extras=("oracle",)),
    "hvp": Quantity("hvp", "hvp", "Hessian-vector product", extras=("direction", "oracle")),
    "update": Quantity("update", "update", "optimizer update"),
    "output": Quantity(
        "output",
        None,
        "module outputs",
        reference="torch",
        owners="a crosscheck.Port (its JAX port's module outputs against PyTorch's forward)",
    ),
}


def quantity(name: str) -> Quantity:
    """The quantity named ``name`` (``ValueError`` listing the valid names otherwise)."""
    if name not in QUANTITIES:
        raise ValueError(f"`quantity` must be one of {', '.join(QUANTITIES)}; found {name!r}.")
    return QUANTITIES[name]


def default_reference(name: str) -> str:
    """The reference of a run of quantity ``name`` that names none: the oracle, PyTorch's forward for
    ``output`` (an unknown name: the oracle; the plan refuses the name itself)."""
    found = QUANTITIES.get(name)
    return found.reference if found is not None else ORACLE
