"""What a ``crosscheck.Port`` holds, checked when it is made: its fields and their types; what depends on
the objects' state (the PyTorch module's training mode) is checked each time the port is used.

Below ``build`` (which prepares a port from these fields), ``intermediates`` and the engine's view
(``workload``), none of which needs more; ``declare.Port`` adds the preparation, built on first use, and
its mapping table. Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Arrays = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity (it holds models)
class PortFields:
    """The fields of a ``crosscheck.Port`` (``declare.Port`` documents each), validated when it is made."""

    name: str
    torch: Any
    jax: Any
    inputs: Arrays | Callable[..., Arrays]
    jax_params: Any = None
    jax_inputs: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    torch_call: Callable[[Any, dict[str, Any]], Any] | None = None
    jax_call: Callable[[Any, dict[str, Any]], Any] | None = None
    jax_intermediates: Sequence[str] | None = None
    output: Callable[[Any], Any] | None = None
    loss: Callable[[Any], Any] | None = None
    overrides: Mapping[str, Any] | None = None
    description: str = ""
    unused: Sequence[str] = ()
    convert: Callable[[dict[str, Any]], Any] | None = None
    output_layout: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"`name` of a Port must be a non-empty string, found {self.name!r}.")
        if not all(callable(getattr(self.torch, a, None)) for a in ("state_dict", "named_modules")):
            raise TypeError(
                f"port `{self.name}`: `torch` must be a torch.nn.Module, found {type(self.torch).__name__}."
            )
        if not (isinstance(self.inputs, Mapping) or callable(self.inputs)):
            raise TypeError(
                f"port `{self.name}`: `inputs` must be a dict of arrays or a function (rng, dtype) -> dict."
            )
        for field in ("jax_inputs", "torch_call", "jax_call", "output", "loss", "convert"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(
                    f"port `{self.name}`: `{field}` must be callable, found {type(value).__name__}."
                )
        self._check_intermediates()
        unused = self.unused
        if (
            isinstance(unused, (str, bytes))
            or not isinstance(unused, Sequence)
            or not all(isinstance(u, str) and u for u in unused)
        ):
            raise TypeError(
                f"port `{self.name}`: `unused` must be a list of PyTorch names or glob patterns "
                f"(non-empty strings), found {unused!r:.60}."
            )
        if self.overrides is not None and not isinstance(self.overrides, Mapping):
            raise TypeError(f"port `{self.name}`: `overrides` must be a dict of PyTorch name -> transform.")
        if self.convert is not None and self.overrides is not None:
            raise ValueError(
                f"port `{self.name}`: give `convert` or `overrides`, not both: with `convert` your function "
                f"makes every JAX leaf, so there is no automatic mapping to override."
            )

    def check_in_use(self) -> None:
        """Raise a one-line ``ValueError`` where the port cannot be used as its objects are now: the
        PyTorch module in training mode with a dropout that drops at random. Checked each time the port
        is used (``declare.Port.prepared``), not when it is made, so that one bad port does not break
        the module that declares it, and a module put back into training mode after the port was made
        is judged as it is then. A module in training mode is checked in training mode (batch
        statistics; the running statistics compared: ``port.judge.running``)."""
        if not getattr(self.torch, "training", False):
            return
        from crosscheck._workloads.port.sides.torch_training import random

        drops = random(self.torch)
        if drops:
            name, what = drops[0]
            raise ValueError(
                f"port `{self.name}`: the PyTorch module is in training mode and `{name}` ({what}) drops at "
                f"random, so no two calls agree; make it deterministic: `model.{name}.eval()` (or p=0), "
                "and on the JAX side `deterministic=True` (linen `nn.Dropout`; nnx `nnx.Dropout`)"
                + (f"; {len(drops) - 1} more dropout module(s) likewise" if len(drops) > 1 else "")
                + "."
            )

    def _check_intermediates(self) -> None:
        names = self.jax_intermediates
        if names is None:
            return
        if isinstance(names, (str, bytes, Mapping)) or not isinstance(names, Sequence):
            raise TypeError(
                f"port `{self.name}`: `jax_intermediates` must be a list of PyTorch module names, "
                f"found {type(names).__name__}."
            )
        bad = next((n for n in names if not isinstance(n, str) or not n), None)
        if bad is not None or not names:
            found = f"{bad!r} ({type(bad).__name__})" if bad is not None else "an empty list"
            raise TypeError(
                f"port `{self.name}`: `jax_intermediates` must be a non-empty list of PyTorch module "
                f"names (non-empty strings), found {found}."
            )
        twice = next((n for n in names if list(names).count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"port `{self.name}`: `jax_intermediates` lists `{twice}` twice.")
