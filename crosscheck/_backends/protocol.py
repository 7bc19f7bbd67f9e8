"""The backend contract: what crosscheck needs of a backend (``Backend``), the two ways loading one
fails (``BackendUnavailable``, ``BackendBroken``) and the adapter of a plain function. Below the registry
(``crosscheck._backends``) and its import strings (``strings``), which both raise these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, Union, runtime_checkable

import numpy as np
import numpy.typing as npt


@runtime_checkable
class Backend(Protocol):
    """What crosscheck needs of a backend: a name and ``grad(weights, x) -> (L, d, d) array``.

    ``grad`` receives NumPy arrays (``weights`` ``(L, d, d)``, ``x`` ``(N, d)``, the case's float dtype)
    and must not modify them; it returns the case's dtype, unless the backend declares another in an
    ``output_dtype`` attribute (the oracle: ``"float64"``). Optional methods, discovered when present:
    ``info() -> dict`` (framework, version, device, precision settings), ``hvp(weights, x, v)`` (the
    Hessian-vector product, ``(L, d, d)``, for ``quantity="hvp"``), ``activations(weights, x)`` (the
    forward outputs ``y[1] .. y[L]``, ``(L, N, d)``: for ``explain``, and for judging a float32 gradient
    on the ReLU pattern its forward pass took); for an oracle,
    ``estimate(weights, x)`` and ``hvp_estimate(weights, x, v)`` with error bars; for
    ``crosscheck inspect``, a ``claims`` dict (``{"scan": bool, "checkpoint": "layer" | "scan" |
    "segment" | None}``) and, for a JAX backend, ``loss_fn()`` returning the scalar loss whose gradient
    ``grad`` computes; on an accelerator, ``arithmetic()`` (where it computes now:
    ``crosscheck._compare.device``) and ``program(params, inputs)`` (the program ``grad`` runs for the
    point's arrays given by shape and dtype, traced where it runs now: ``crosscheck._backends.program``),
    which a classification compares before a host CPU run may clear a device run.

    Example:
        >>> class Doubling:  # a name and ``grad``: a backend
        ...     name = "doubling"
        ...     def grad(self, weights, x):
        ...         return 2 * weights
        >>> isinstance(Doubling(), crosscheck.Backend)
        True
        >>> report = crosscheck.run(layers=2, dim=3, batch=2, backends=[Doubling()])
        >>> report.comparisons[0].backend
        'doubling'
    """

    name: str

    def grad(self, weights: np.ndarray, x: np.ndarray) -> npt.ArrayLike: ...


#: A backend as the user names one: a built-in name or an import string (``str``), an adapter object
#: (``Backend``), or a plain function ``grad(weights, x)`` (``FunctionBackend`` adapts it).
#: (``Union``: an alias evaluated when imported, on every Python this supports.)
BackendSpec: TypeAlias = Union[str, Backend, Callable[..., Any]]  # noqa: UP007


class BackendUnavailable(ImportError):
    """A backend whose framework is not installed (its message says what to install).

    Example:
        >>> try:
        ...     backend = crosscheck.load_backend("torch")
        ... except crosscheck.BackendUnavailable as exc:  # PyTorch is not installed
        ...     print(exc)  # doctest: +SKIP
        backend `torch` is unavailable: torch is not installed (from a clone: pip install '.[torch]'; ...).
    """


class BackendBroken(ValueError):
    """A backend whose own code fails to load it: an installed ``crosscheck.backends`` plugin (import
    error, missing attribute, raising factory), or an import string or class whose module raises on
    import or whose factory raises. The backend's fault, not a mistake in its name, so a run reports
    it as a failed backend and runs the others.

    Example:
        >>> try:  # mymodule.py: ``def factory(): raise RuntimeError("cannot start")``
        ...     crosscheck.load_backend("mymodule:factory")  # doctest: +SKIP
        ... except crosscheck.BackendBroken as exc:
        ...     print(exc)
        backend `mymodule:factory`: calling the factory failed: RuntimeError: cannot start
    """


class FunctionBackend:
    """Adapter for a plain function ``grad(weights, x)``; its name is the function's name."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name: str = str(name or getattr(fn, "__name__", None) or repr(fn))

    def grad(self, weights: np.ndarray, x: np.ndarray) -> npt.ArrayLike:
        return self.fn(weights, x)

    def info(self) -> dict[str, str]:
        module = getattr(self.fn, "__module__", "?")
        return {"framework": "user function", "version": "", "device": "", "source": module}
