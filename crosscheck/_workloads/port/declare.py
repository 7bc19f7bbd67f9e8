"""``crosscheck.Port``: a PyTorch module and its JAX port, declared with the real objects.

Nothing here imports a framework: the port is prepared (its mapping built, its sides described) the
first time it is used, by ``crosscheck._workloads.port.build``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Arrays = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity (it holds models)
class Port:
    """A PyTorch model and its JAX port, checked module by module and gradient by gradient.

    The PyTorch ``state_dict`` is mapped onto the JAX model's parameters by name and layout (see
    ``mapping``: the table is shown before any numerics, ambiguities are refused), the weights are
    copied through the mapping, and each side's loss is differentiated by its own framework. The
    gradients come back in PyTorch's names; every module's output is compared within its measured
    rounding, and the verdict names the first module that differs. It runs as a workload:
    ``crosscheck.run(workload=port)``, ``crosscheck run --workload module:port``, sweeps, the pytest
    helper.

    Args:
        name: a short name, shown in reports.
        torch: the original, a ``torch.nn.Module`` in eval mode; its parameters are the point checked.
        jax: the port: a Flax linen or nnx module (nnx: in eval mode), an Equinox module, or a
            function ``fn(params, **inputs)``.
        inputs: the PyTorch side's inputs, ``name -> array`` (NumPy arrays or tensors), or a function
            ``(rng, dtype) -> dict`` that makes them (floating-point inputs take the case's dtype).
        jax_params: for a function ``jax``: its parameter pytree (values are replaced by the mapped
            PyTorch weights; only the structure and shapes count). Flax and Equinox models give theirs.
        jax_inputs: ``inputs -> inputs`` for the JAX side (layout: ``x.transpose(0, 2, 3, 1)`` for NHWC);
            default: the same inputs.
        torch_call: ``(module, inputs) -> output`` (default ``module(**inputs)``).
        jax_call: ``(model, inputs) -> output`` (default ``model(**inputs)``; ``model`` is the bound linen
            module, the nnx module, the Equinox module, or the function with its parameters).
        jax_intermediates: for an Equinox module or a function (a linen or nnx module's are captured
            without it): the PyTorch modules, by ``named_modules()`` name (``name#2``: its second
            call), whose outputs the JAX forward pass returns beside its own: ``jax_call`` (or the model) then
            returns ``(output, {name: array})`` with exactly these names. They are compared with the
            PyTorch modules' outputs like a linen module's, and the verdict names the first that
            differs. The values come from the very forward pass whose gradient is checked (a separate
            function could compute them right while the forward is wrong) and need no tracing trick,
            so ``jax.vmap`` and ``jax.jit`` inside work; the names are checked when the port is
            prepared, against the PyTorch modules and the shapes of their outputs.
        output: ``output -> array`` (or a pytree of arrays) on both sides, what the loss sees (default:
            the whole output).
        loss: ``array -> scalar`` on both sides, given ``output``'s pick (default: the first array). The
            default loss is a fixed random projection of every floating-point array of the output
            (``sum_i sum(R_i * a_i)``, Hugging Face ``ModelOutput`` fields, tuples and dicts paired by
            position), so that every output (a pooler's too) reaches it.
        overrides: ``PyTorch name or glob pattern -> transform`` (``"transpose"``, ``"identity"``,
            ``"OIHW->HWIO"``, ``"unit axes"``, a permutation tuple), ``-> "jax/path"``, ``-> ("jax/path",
            transform)`` or ``-> None`` (leave it unmapped: the PyTorch model keeps its value, its gradient is
            not checked, and the table and the report say so). A pattern's ``*`` are captured: each ``*`` of a
            target path takes the pattern's ``*`` at its position (``{1}``: the first), so ``{"layer.*.w":
            "params/layer_*/kernel"}`` covers every layer.
        unused: PyTorch names or glob patterns (``("pooler.*",)``) of parameters declared out of scope:
            the loss does not reach them (no autograd path from them to it, their gradient zero in
            every implementation, confirmed by the oracle). Such a parameter that is not declared
            counts as not checked and fails the run, with a hint; a declared one is said in the report
            and does not fail it.
        description: one line, shown by ``crosscheck list``.

    Example:
        >>> port = crosscheck.Port(  # doctest: +SKIP
        ...     name="convnet", torch=TorchNet().eval(), jax=FlaxNet(),
        ...     inputs={"x": x_nchw}, jax_inputs=lambda i: {"x": i["x"].transpose(0, 2, 3, 1)},
        ... )
        >>> print(port.mapping)  # doctest: +SKIP
    """

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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"`name` of a Port must be a non-empty string, found {self.name!r}.")
        if not all(callable(getattr(self.torch, a, None)) for a in ("state_dict", "named_modules")):
            raise TypeError(
                f"port `{self.name}`: `torch` must be a torch.nn.Module, found {type(self.torch).__name__}."
            )
        if getattr(self.torch, "training", False):
            raise ValueError(
                f"port `{self.name}`: the PyTorch module is in training mode (dropout and batch "
                f"statistics change every call); call `.eval()` on it first."
            )
        if not (isinstance(self.inputs, Mapping) or callable(self.inputs)):
            raise TypeError(
                f"port `{self.name}`: `inputs` must be a dict of arrays or a function (rng, dtype) -> dict."
            )
        for field in ("jax_inputs", "torch_call", "jax_call", "output", "loss"):
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

    @property
    def prepared(self) -> Any:
        """The port prepared (``build.Prepared``): its sides, mapping and workload; built once."""
        cached = self.__dict__.get("_prepared")
        if cached is None:
            from crosscheck._workloads.port.build import prepare

            cached = prepare(self)
            object.__setattr__(self, "_prepared", cached)
        return cached

    @property
    def mapping(self) -> Any:
        """The mapping table (``print(port.mapping)``): what was mapped to what, how, and what was not."""
        return self.prepared.table
