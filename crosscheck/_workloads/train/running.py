"""The running statistics of a train in training mode: carried from step to step on both sides, and
compared after every step as the parameters are.

A train whose port is checked in training mode (its PyTorch module in ``.train()``, BatchNorms tracking
their running statistics) updates them with every forward pass of a step: PyTorch's buffers
(``bn.running_mean``), a linen module's ``batch_stats``. Each side carries its own from step to step,
updated by the step's forward pass from the parameters before the step, as its training loop does, and
hands them over beside the parameters' trajectories, keyed ``"bn.running_mean (running statistics)"``
(the JAX side's read back to PyTorch's names through the port's mapping). The judge compares them
after every step within each side's measured rounding, as it does a parameter; where a statistic
differs first, the verdict names it and its module, never the optimizer: "the running statistics
differ first at step 1, at `bn` (`bn.running_mean`)".

A linen or an nnx port carries them (an nnx module's ``BatchStat`` variables, updated in its state); a
train of an Equinox or function port whose PyTorch module tracks running statistics is refused
(``refusal``), never run with its statistics left uncompared.

Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The kind a running statistic's trajectory is keyed with: ``"bn.running_mean (running statistics)"``.
KIND = "running statistics"


def key(name: str) -> str:
    """A running statistic's trajectory key."""
    return f"{name} ({KIND})"


def is_statistic(key_: str) -> bool:
    """Whether a trajectory key is a running statistic's."""
    return key_.endswith(f" ({KIND})")


def parameters_only(trajectories: Mapping[str, Any]) -> dict[str, Any]:
    """The trajectories of the parameters, the running statistics left out."""
    return {k: v for k, v in trajectories.items() if not is_statistic(k)}


def modules(keys: Iterable[str]) -> str:
    """The modules of the running statistics among ``keys``: ``"`bn`, `bn2`"`` ("" when none)."""
    names = [k.removesuffix(f" ({KIND})") for k in keys if is_statistic(k)]
    return ", ".join(f"`{m}`" for m in dict.fromkeys(n.rpartition(".")[0] for n in names))


def agree(steps: int, keys: Iterable[str]) -> str:
    """The verdict where nothing differs: the parameters, and the running statistics among ``keys``."""
    said = f"every parameter agrees after each of the {steps} steps, within both sides' measured rounding"
    carried = modules(keys)
    return said + (f", and so do the running statistics of {carried}" if carried else "")


def differs(step: int, parameter: str, record: dict[str, Any]) -> str:
    """The verdict where the first difference is a running statistic (the optimizer has no part in it),
    named in ``record`` (``running_statistics``) with its module (``module``: ``bn``, as a port's
    verdict names it)."""
    name = parameter.removesuffix(f" ({KIND})")
    record.update(running_statistics=name, module=name.rpartition(".")[0])
    return (
        f"the running statistics differ first at step {step}, at `{record['module']}` (`{name}`): "
        "the update of the running statistics differs (its momentum and its convention, the variance's "
        "Bessel correction), not the optimizer; every parameter agrees through that step"
    )


#: The JAX sides that carry running statistics: a linen module's mutable ``batch_stats``, an nnx
#: module's ``BatchStat`` variables.
CARRIED = ("linen", "nnx")
#: How a refusal names the other kinds of JAX side.
KINDS = {"equinox": "an Equinox module", "function": "a function of a parameter tree"}


def refusal(name: str, kind: str, statistics: list[str]) -> str:
    """Why a train whose JAX side is of ``kind`` and whose PyTorch module updates ``statistics`` is
    refused ("" for a side that carries them, or none to carry)."""
    if not statistics or kind in CARRIED:
        return ""
    return (
        f"train `{name}`: the PyTorch module is in training mode and updates running statistics "
        f"(`{statistics[0]}`), which a train carries from step to step and compares only for a Flax linen "
        f"or nnx port (`batch_stats`, `BatchStat`), not for {KINDS.get(kind, kind)}: they would not be "
        "compared. Train in eval mode (`.eval()` on the PyTorch module, the JAX model called so)."
    )
