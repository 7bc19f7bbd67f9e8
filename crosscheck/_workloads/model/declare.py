"""A user's workload: named parameter arrays and inputs, one implementation per framework, and
optionally a NumPy float64 reference loss (the engine runs it through ``model.workload``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from crosscheck._compare.constants import ALL_DTYPES
from crosscheck._compare.dtypes import is_float, is_low, numpy_dtype
from crosscheck._errors import user_call

Params = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity (it holds functions)
class Workload:
    """A model whose gradients crosscheck compares: parameters, inputs, implementations, and optionally
    a NumPy reference loss.

    Args:
        name: a short name, shown in reports.
        parameters: the differentiated arrays, ``name -> shape``; gradients are compared for each.
        inputs: arrays that are not differentiated, ``name -> shape``. Floating-point inputs take the
            case's dtype; integer and boolean inputs from ``generate`` (labels, token ids, masks) keep
            theirs.
        reference: optional ``(params, inputs) -> float``, the loss in NumPy float64, a third
            implementation the oracle differences (never with autodiff). Without it, the oracle
            differences each implementation's own loss, evaluated in float64 without autodiff, and
            compares the implementations with each other.
        implementations: ``backend name -> loss function`` in that framework, ``(params, inputs) ->
            scalar``; ``"jax"`` (and ``"jax-..."``) is differentiated with ``jax.grad``, ``"torch"`` (and
            ``"torch-..."``) with ``backward()``. Each receives the framework's arrays. A loss that cannot
            be flat in the parameters: ``crosscheck.projection_loss(outputs)``.
        generate: optional ``(rng, dtype) -> (params, inputs)``, dicts of NumPy arrays; default: normal
            values drawn in float64 with ``rng`` (parameters scaled by ``1/sqrt(fan_in)``, the product of
            every axis but the last; vectors and scalars unscaled), rounded once to ``dtype``.
        surrogate: optional ``(params_at_base, inputs) -> (params -> float)``: the NumPy float64 function
            whose gradient the implementations really compute at the base point (e.g. where
            ``stop_gradient`` or a straight-through estimator freezes a term). When given, the oracle
            differentiates it instead of ``reference`` (and no implementation's own loss), and the
            report says so.
        description: one line, shown by ``crosscheck list``.

    Example:
        >>> workload = Workload(
        ...     name="linear",
        ...     parameters={"w": (3, 1)},
        ...     inputs={"x": (4, 3)},
        ...     implementations={"jax": jax_loss, "torch": torch_loss},  # doctest: +SKIP
        ...     reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2)),  # optional
        ... )
    """

    name: str
    parameters: Mapping[str, tuple[int, ...]]
    inputs: Mapping[str, tuple[int, ...]]
    reference: Callable[[Params, Params], float] | None = None
    implementations: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    generate: Callable[[np.random.Generator, str], tuple[Params, Params]] | None = None
    surrogate: Callable[[Params, Params], Callable[[Params], float]] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"`name` of a Workload must be a non-empty string, found {self.name!r}.")
        for field in ("parameters", "inputs"):
            object.__setattr__(self, field, _shapes(self.name, field, getattr(self, field)))
        if not self.parameters:
            raise ValueError(f"workload `{self.name}`: `parameters` must name at least one array.")
        both = sorted(set(self.parameters) & set(self.inputs))
        if both:
            raise ValueError(f"workload `{self.name}`: {both[0]!r} is both a parameter and an input.")
        for field in ("reference", "generate", "surrogate"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"workload `{self.name}`: `{field}` must be callable, found {value!r}.")
        if not isinstance(self.implementations, Mapping):
            raise TypeError(
                f"workload `{self.name}`: `implementations` must be a dict of backend name -> loss "
                f"function, found {type(self.implementations).__name__}."
            )
        for key, fn in self.implementations.items():
            if not isinstance(key, str) or not callable(fn):
                raise TypeError(
                    f"workload `{self.name}`: implementation {key!r} must be a callable under a string "
                    f"name, found {fn!r}."
                )
        object.__setattr__(self, "implementations", dict(self.implementations))

    def __getstate__(self) -> dict[str, Any]:
        # Its fields only: the adapters a check keeps on it (``model.workload.kept_adapter``, compiled
        # functions) are this process's, and neither pickled nor shared with a copy.
        return {k: v for k, v in self.__dict__.items() if k != "_adapters"}

    def make(self, *, seed: int = 0, dtype: str = "float32") -> tuple[Params, Params]:
        """The case's ``(params, inputs)``: the same seed and dtype give the same arrays, bit for bit.

        Raises:
            ValueError: ``generate`` failed (``UserCodeFailed``: whatever it raised, ``sys.exit``
                included, in one line), or returned the wrong names, shapes or non-finite values.
        """
        if dtype not in ALL_DTYPES:
            raise ValueError(f"`dtype` must be one of {', '.join(ALL_DTYPES)}; found {dtype!r}.")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"`seed` must be a non-negative integer, found {seed!r}.")
        rng = np.random.default_rng(int(seed))
        made_in = "float32" if is_low(dtype) else dtype  # made in float32, then rounded once to 16 bits
        if self.generate is None:
            params = {k: rng.standard_normal(s) / math.sqrt(_fan_in(s)) for k, s in self.parameters.items()}
            inputs = {k: rng.standard_normal(s) for k, s in self.inputs.items()}
        else:
            made = user_call(f"workload `{self.name}`", "`generate(rng, dtype)`", self.generate, rng, made_in)
            try:
                params, inputs = made
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"workload `{self.name}`: `generate(rng, dtype)` must return (params, inputs), "
                    f"two dicts of arrays: {type(exc).__name__}: {exc}"
                ) from exc
        return self._checked("parameters", params, dtype), self._checked("inputs", inputs, dtype)

    def _checked(self, field: str, arrays: Any, dtype: str) -> Params:
        expected = getattr(self, field)
        if not isinstance(arrays, Mapping):
            raise ValueError(
                f"workload `{self.name}`: `generate` must return {field} as a dict, "
                f"found {type(arrays).__name__}."
            )
        if set(arrays) != set(expected):
            raise ValueError(
                f"workload `{self.name}`: `generate` must return {field} {sorted(expected)}; "
                f"found {sorted(map(str, arrays))}."
            )
        out = {}
        for key, shape in expected.items():
            array = np.asarray(arrays[key])
            if array.shape != shape:
                raise ValueError(
                    f"workload `{self.name}`: {field[:-1]} `{key}` must have shape {shape}; "
                    f"found {array.shape}."
                )
            exact = field == "inputs" and (array.dtype == bool or np.issubdtype(array.dtype, np.integer))
            if exact:
                out[key] = array.copy()  # labels, token ids, masks keep their dtype
                continue
            numeric = np.issubdtype(array.dtype, np.number) or is_float(array)
            if not numeric or not np.all(np.isfinite(array)):
                raise ValueError(
                    f"workload `{self.name}`: {field[:-1]} `{key}` must hold finite numbers; "
                    f"found dtype {array.dtype.name} with non-finite or non-numeric values."
                )
            # Rounded once to the case's dtype, and a private copy: generate's arrays are not shared. One
            # that nobody can write (``frozen``: a port's own copies of its tensors) is kept as it is.
            target = numpy_dtype(dtype)
            out[key] = array if array.dtype == target and frozen(array) else np.array(array, dtype=target)
        return out


def frozen(array: np.ndarray) -> bool:
    """Whether no one can write to ``array``: read-only, and owning its memory (not a view, whose base
    may be written, nor an array over another object's buffer, a tensor's say). Such an array is taken
    as it is by ``Workload.make``: a port's own copies of its tensors, made read-only when prepared,
    are the case's arrays without a copy of the model."""
    return not array.flags.writeable and array.flags.owndata and array.base is None


def _shapes(name: str, field: str, value: Any) -> dict[str, tuple[int, ...]]:
    if not isinstance(value, Mapping):
        raise TypeError(
            f"workload `{name}`: `{field}` must be a dict of name -> shape, found {type(value).__name__}."
        )
    out = {}
    for key, shape in value.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"workload `{name}`: `{field}` names must be non-empty strings, found {key!r}.")
        try:
            dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        except TypeError:
            dims = None
        if dims is None or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dims
        ):
            raise ValueError(
                f"workload `{name}`: the shape of `{key}` in `{field}` must be a tuple of positive "
                f"integers, found {shape!r}."
            )
        out[key] = tuple(int(d) for d in dims)
    return out


def _fan_in(shape: tuple[int, ...]) -> int:
    return math.prod(shape[:-1]) if len(shape) >= 2 else 1
