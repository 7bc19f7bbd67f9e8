"""``crosscheck.Blocks``: a model checked block by block, each block a ``Port`` on recorded inputs.

A model too large to check whole (twice in memory, in float32 and float64, with its module captures)
is checked one block at a time: one PyTorch forward pass records each block's inputs, one backward
pass the cotangent reaching each block's output from the model's own check loss, and each ported block
is then checked as a ``crosscheck.Port`` on those very inputs, its loss ``sum(output * cotangent)``
on both sides. Each block's check is the port's own (its mapping, module by module localisation,
measured tolerances and verdict); ``crosscheck._sweep.blocks`` runs them and names the first block
that differs.

Nothing here imports a framework; the recording (``blocks_record``) imports PyTorch when it runs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from crosscheck._types import FrameworkArray, PyTree, TorchModule
from crosscheck._workloads.losses import dot, floating_outputs, outputs_loss
from crosscheck._workloads.port.declare.port import Port

if TYPE_CHECKING:
    from crosscheck._workloads.port.blocks.recorded import Recorded

#: What a block's ``port`` factory may not set: the blockwise check sets these itself.
SET_HERE = ("name", "torch", "inputs", "torch_call", "loss", "output")
#: How the cotangent of each block's output is chosen.
COTANGENTS = ("model", "random")

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity (it holds models)
class Blocks:
    """A PyTorch model checked block by block against its JAX port, one block at a time.

    One PyTorch forward pass records each block's inputs (a forward pre-hook), and one backward pass
    of the model's check loss (the fixed random projection of its output, a ``Port``'s default) the
    cotangent reaching each block's output. Each block is then checked as a ``crosscheck.Port``: the
    PyTorch block against ``port(index, name, block)``'s JAX block, on the recorded inputs, with the
    loss ``sum(output * cotangent)`` on both sides, so each block gets the port's mapping, module by
    module localisation, measured tolerances and verdict, and the check names the first block (in the
    order the forward pass calls them) that differs. Run it with ``crosscheck.check_blocks`` or
    ``crosscheck blocks --workload module:attribute``; on a Dask cluster each worker holds one block.

    What it cannot see, compared with checking the model whole: the wiring between blocks (each JAX
    block gets PyTorch's input, not the previous JAX block's output), the modules outside the blocks
    (embeddings, the final norm, the head: declare them as blocks too), inputs the JAX model computes
    at model level (masks, positions: each block's ``jax_inputs`` makes them), and gradients across
    blocks (each block's cotangent is PyTorch's). What it can: a model that does not fit twice in
    memory, and exact localisation, each block on identical inputs.

    Args:
        name: a short name, shown in reports (block ``h.3`` is checked as the port ``name[h.3]``).
        torch: the PyTorch model in eval mode, or a function of no arguments returning it (built only
            where it is needed: the recording, and a worker's block without ``torch_block``).
        inputs: the model's inputs, ``name -> array``, or a function ``(rng, dtype) -> dict``.
        blocks: the blocks, a pattern of ``named_modules()`` names whose ``*`` stands for one name
            (``"transformer.h.*"``).
        port: ``(index, name, block) -> dict`` of the ``crosscheck.Port`` keywords of block ``name``
            (``jax``, ``jax_call``, ``jax_inputs``, ``overrides``, ``convert``, ...), not ``name``,
            ``torch``, ``inputs``, ``torch_call``, ``loss`` nor ``output``, which the check sets.
        torch_block: ``(index, name) -> torch.nn.Module``, the block alone (its weights are loaded from
            the recording): a Dask worker then builds only its block, never the model.
        torch_call: ``(model, inputs) -> output`` (default ``model(**inputs)``).
        cotangent: ``"model"`` (default: the cotangent of the model's check loss at each block's
            output) or ``"random"`` (a fixed random projection of each block's output: no backward
            pass of the whole model is needed).
        description: one line.

    Example:
        >>> blocks = crosscheck.Blocks(  # doctest: +SKIP
        ...     name="gpt2", torch=model.eval(), inputs={"input_ids": ids}, blocks="transformer.h.*",
        ...     port=lambda index, name, block: dict(jax=FlaxGPT2Block(config), jax_call=...),
        ... )
        >>> crosscheck.check_blocks(blocks).passed  # doctest: +SKIP
    """

    name: str
    torch: Any
    inputs: Mapping[str, Any] | Callable[..., Mapping[str, Any]]
    blocks: str
    port: Callable[[int, str, Any], Mapping[str, Any]]
    torch_block: Callable[[int, str], Any] | None = None
    torch_call: Callable[[Any, dict[str, Any]], Any] | None = None
    cotangent: str = "model"
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"`name` of Blocks must be a non-empty string, found {self.name!r}.")
        where = f"blocks `{self.name}`"
        is_module = all(callable(getattr(self.torch, a, None)) for a in ("state_dict", "named_modules"))
        if not (is_module or callable(self.torch)):
            raise TypeError(
                f"{where}: `torch` must be a torch.nn.Module or a function returning one, found "
                f"{type(self.torch).__name__}."
            )
        if not (isinstance(self.inputs, Mapping) or callable(self.inputs)):
            raise TypeError(f"{where}: `inputs` must be a dict of arrays or a function (rng, dtype) -> dict.")
        if not isinstance(self.blocks, str) or not all(self.blocks.split(".")):
            raise TypeError(
                f"{where}: `blocks` must be a pattern of module names such as 'transformer.h.*', "
                f"found {self.blocks!r}."
            )
        for field in ("port", "torch_block", "torch_call"):
            value = getattr(self, field)
            if (value is not None or field == "port") and not callable(value):
                raise TypeError(f"{where}: `{field}` must be callable, found {type(value).__name__}.")
        if self.cotangent not in COTANGENTS:
            raise ValueError(
                f"{where}: `cotangent` must be one of {', '.join(COTANGENTS)}, found {self.cotangent!r}."
            )

    def model(self) -> TorchModule:
        """The PyTorch model (``torch`` called when it is a function), checked to be in eval mode.

        Raises:
            ValueError: the function failed or returned no module, or the model is in training mode.
        """
        from crosscheck._errors import user_call

        where = f"blocks `{self.name}`"
        model = self.torch
        if not hasattr(model, "named_modules"):
            model = user_call(where, "`torch()`", model)
            if not hasattr(model, "named_modules"):
                raise ValueError(
                    f"{where}: `torch()` must return a torch.nn.Module, found {type(model).__name__}."
                )
        if getattr(model, "training", False):
            raise ValueError(f"{where}: the PyTorch model is in training mode; call `.eval()` on it first.")
        return model

    def matching(self, names: list[str]) -> list[str]:
        """The module names the ``blocks`` pattern matches (``*``: one name), in the order given; all
        have as many names as the pattern, so none contains another.

        Raises:
            ValueError: it matches none.
        """
        rule = re.compile("\\.".join("[^.]+" if p == "*" else re.escape(p) for p in self.blocks.split(".")))
        found = [n for n in names if rule.fullmatch(n)]
        if not found:
            near = ", ".join(n for n in names if n and n.count(".") <= 1)[:160]
            raise ValueError(
                f"blocks `{self.name}`: no module of the model matches `blocks` {self.blocks!r} "
                f"(a `*` stands for one name); its modules include: {near}."
            )
        return found

    def block_port(self, index: int, block_name: str, block: TorchModule, recorded: Recorded) -> Port:
        """Block ``block_name`` as a ``crosscheck.Port`` on its recorded inputs (``Recorded``), its loss
        the recorded cotangent (``cotangent="model"``) or the port's default (``"random"``).

        Raises:
            ValueError: ``port`` failed, returned no dict, or set what the blockwise check sets.
        """
        from crosscheck._errors import user_call

        where = f"blocks `{self.name}`"
        kwargs = user_call(
            where, f"`port({index}, {block_name!r}, block)`", self.port, index, block_name, block
        )
        if not isinstance(kwargs, Mapping):
            raise ValueError(
                f"{where}: `port` must return a dict of crosscheck.Port keywords, found "
                f"{type(kwargs).__name__}."
            )
        taken = next((k for k in SET_HERE if k in kwargs), None)
        if taken is not None:
            raise ValueError(f"{where}: `port` may not set `{taken}`: the blockwise check sets it.")
        extra: dict[str, Any] = {}
        if self.cotangent == "model":
            extra = {"output": _whole, "loss": block_loss(self.cotangent, recorded.cotangents)}
        return Port(
            name=f"{self.name}[{block_name}]",
            torch=block.eval(),
            inputs=dict(recorded.inputs),
            torch_call=block_call(recorded),
            **extra,
            **dict(kwargs),
        )


def block_call(recorded: Recorded) -> Callable[[TorchModule, dict[str, Any]], PyTree]:
    """``(module, inputs) -> output``: the block called as the model called it (``Recorded``): its array
    inputs by name, a tuple argument's members (``NAME[0]``, ...) given back as a tuple, and its other
    recorded arguments."""
    constants = dict(recorded.constants)
    tuples = dict(getattr(recorded, "tuples", {}))  # name -> how many: inputs `name[0]`, ...
    members = {f"{k}[{i}]" for k, n in tuples.items() for i in range(n)}

    def torch_call(module: TorchModule, inputs: dict[str, Any]) -> PyTree:
        plain = {k: v for k, v in inputs.items() if k not in members}
        grouped = {k: tuple(inputs[f"{k}[{i}]"] for i in range(n)) for k, n in tuples.items()}
        return module(**plain, **grouped, **constants)

    return torch_call


def _whole(output: _T) -> _T:
    return output


def block_loss(cotangent: str, cotangents: list[Any]) -> Callable[[PyTree], FrameworkArray]:
    """``output -> loss``: what a block's check differentiates, on either side: ``cotangent_loss`` of
    the recorded ``cotangents`` (``cotangent="model"``), else the port's default, a fixed random
    projection of every floating-point array of the output (``losses.outputs_loss``)."""
    if cotangent == "model":
        return cotangent_loss(cotangents)
    from crosscheck._workloads.port.declare.build import SEED

    return lambda output: outputs_loss(output, seed=SEED)


def cotangent_loss(cotangents: list[Any]) -> Callable[[PyTree], FrameworkArray]:
    """``output -> sum_i sum(a_i * c_i)``: each floating-point array ``a_i`` of a block's output
    (``floating_outputs``) weighed by its recorded cotangent ``c_i``, on either side, in its dtype.

    Raises:
        ValueError (when called): the output's floating-point arrays are not the recorded ones.
    """

    def loss(output: PyTree) -> FrameworkArray:
        arrays = floating_outputs(output)
        shapes = [tuple(a.shape) for a in arrays]
        wanted = [tuple(c.shape) for c in cotangents]
        if shapes != wanted:
            raise ValueError(
                f"the block's output has floating-point arrays of shapes {shapes}, the PyTorch block's "
                f"recorded cotangents {wanted}: return the same outputs (`jax_call`)"
            )
        total = dot(arrays[0], cotangents[0])
        for array, c in zip(arrays[1:], cotangents[1:], strict=True):
            total = total + dot(array, c)
        return total

    return loss
