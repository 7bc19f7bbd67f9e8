"""``crosscheck.Train``: a ``Port`` plus the optimizer on each side, for the ``update`` quantity.

Nothing here imports a framework: the optimizers are built, from the factories, each time a side trains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from crosscheck._workloads.port.declare.port import Port

#: The optimizer parts a classification re-run turns off, by the hyper-parameters that do it; a part is
#: tried when the train's ``hyper`` names all its keys. Order matters: the first part whose re-run agrees
#: is named, so the parts that change the training least come first. Turning clipping off makes the
#: gradients larger, which hides an epsilon misplaced (it matters only where the second moment is
#: small); turning Adam's moments off makes every update a sign, which hides clipping.
DEFAULT_PARTS: dict[str, dict[str, Any]] = {
    "learning-rate schedule": {"warmup_steps": 0},
    "epsilon": {"eps": 1e-30},
    "weight decay": {"weight_decay": 0.0},
    "momentum": {"momentum": 0.0, "nesterov": False},
    "gradient clipping": {"max_norm": None},
    "moments and bias correction": {"betas": (0.0, 0.0)},
}


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity (it holds models)
class Train:
    """A port trained ``steps`` optimizer steps in PyTorch and in JAX, from the same start.

    Both sides start from the port's parameters and inputs (the case's), take ``steps`` steps on the
    port's loss, and their parameters are compared after every step, parameter by parameter in
    PyTorch's names (the JAX tree mapped back through the port's mapping, transforms undone; a
    ``convert=``'s through its transpose over the transpose of ones, exact for a selection), within
    each side's measured rounding (its float32 trajectory against its float64 re-run, step by step).
    Run it with ``crosscheck.check(train, quantity="update")`` or ``crosscheck run --workload
    module:train --quantity update --steps K``.

    Args:
        port: the ``crosscheck.Port`` whose model is trained (its ``inputs`` are the batch of every step).
        torch_optimizer: ``(named_params, **hyper) -> optimizer``: ``named_params`` is a list of
            ``(PyTorch name, tensor)`` pairs (``torch.optim`` takes them as they are, or grouped by name);
            the optimizer is anything with ``zero_grad()`` and ``step()`` (wrap one to clip gradients or
            step a schedule after it).
        optax: ``(**hyper) -> optax.GradientTransformation``, applied to the JAX model's parameter tree
            (a linen module's ``params`` collection; an nnx, Equinox or function port's whole tree).
        hyper: the hyper-parameters both factories receive (``lr``, ``weight_decay``, ``eps``, ...).
        steps: optimizer steps per side (``--steps`` overrides it).
        parts: optimizer part -> hyper-parameter values that turn it off, for the classification re-runs
            (default ``DEFAULT_PARTS``, those whose keys ``hyper`` names; a part already off is not tried).
        name: shown in reports (default: the port's name with ``-train``).
        description: one line, shown by ``crosscheck list``.
        torch_step: in place of ``torch_optimizer``, your own step: ``(params, grads, state, **hyper) ->
            None`` updates ``params`` (PyTorch name -> tensor) in place, under ``torch.no_grad()``;
            ``state`` is a dict it keeps between steps (empty at first; ``state[name][kind]``, a tensor,
            is shown in the optimizer state's table).
        jax_step: in place of ``optax``, your own step: ``(params, grads, state, **hyper) -> (params,
            state)`` on the JAX model's trained tree; ``state`` is None at the first step.

    Example:
        >>> train = crosscheck.Train(  # doctest: +SKIP
        ...     port,  # a crosscheck.Port
        ...     torch_optimizer=lambda named, lr, weight_decay: torch.optim.AdamW(
        ...         [p for _, p in named], lr=lr, weight_decay=weight_decay),
        ...     optax=lambda lr, weight_decay: optax.adamw(lr, weight_decay=weight_decay),
        ...     hyper={"lr": 1e-3, "weight_decay": 0.01}, steps=20,
        ... )
        >>> crosscheck.check(train, quantity="update").passed  # doctest: +SKIP
        True
    """

    port: Port
    torch_optimizer: Callable[..., Any] | None = None
    optax: Callable[..., Any] | None = None
    hyper: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    steps: int = 10
    parts: Mapping[str, Mapping[str, Any]] | None = None
    name: str = ""
    description: str = ""
    torch_step: Callable[..., Any] | None = None
    jax_step: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.port, Port):
            raise TypeError(f"`port` of a Train must be a crosscheck.Port, found {type(self.port).__name__}.")
        if not self.name:
            object.__setattr__(self, "name", f"{self.port.name}-train")
        for field, step in (("torch_optimizer", "torch_step"), ("optax", "jax_step")):
            given = [f for f in (field, step) if getattr(self, f) is not None]
            if len(given) != 1:
                raise TypeError(
                    f"train `{self.name}`: give one of `{field}` (a factory) and `{step}` (a step function); "
                    f"found {' and '.join(f'`{f}`' for f in given) or 'neither'}."
                )
            if not callable(getattr(self, given[0])):
                raise TypeError(f"train `{self.name}`: `{given[0]}` must be callable.")
        if not isinstance(self.hyper, Mapping) or not all(isinstance(k, str) for k in self.hyper):
            raise TypeError(f"train `{self.name}`: `hyper` must be a dict of name -> value.")
        check_steps(self.steps)
        if self.parts is not None and not (
            isinstance(self.parts, Mapping) and all(isinstance(v, Mapping) for v in self.parts.values())
        ):
            raise TypeError(f"train `{self.name}`: `parts` must be a dict of part -> {{hyper: value}}.")

    def controls(self) -> dict[str, dict[str, Any]]:
        """The classification re-runs: part -> the hyper-parameters that turn it off."""
        parts = DEFAULT_PARTS if self.parts is None else self.parts
        return {
            k: dict(v)
            for k, v in parts.items()
            if v and all(name in self.hyper for name in v) and any(self.hyper[n] != x for n, x in v.items())
        }


def check_steps(steps: Any) -> int:
    """``steps`` as optimizer steps (``ValueError``: not a positive integer)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` must be a positive integer (optimizer steps per side), found {steps!r}.")
    return steps
