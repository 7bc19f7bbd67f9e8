"""The backend protocol and the registry: built-in names, import strings and entry points, all lazy."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

import numpy as np

from crosscheck._errors import describe, reraise_user_interrupt

ENTRY_POINT_GROUP = "crosscheck.backends"

#: The distribution's name on the package index (``crosscheck`` there is an unrelated project).
DISTRIBUTION = "crosscheck-gradients"


def install_hint(extra: str | None = None) -> str:
    """What to install for ``extra`` (``None``: the package itself), as a message quotes it.

    The name is not published on the package index yet, so the hint also gives the form that works in
    a clone of the repository.
    """
    suffix = f"[{extra}]" if extra else ""
    return f"pip install '{DISTRIBUTION}{suffix}'; from a clone: pip install '.{suffix}'"


#: Built-in backends: name -> (module under crosscheck.backends, class, what to install).
BUILTINS: dict[str, tuple[str, str, str]] = {
    "jax": ("jax.stack", "JaxBackend", install_hint("jax")),
    "torch": ("torch.stack", "TorchBackend", install_hint("torch")),
    "numpy-fd": ("numpy_fd", "FiniteDifferenceOracle", install_hint()),
    # Variants for `crosscheck inspect` and `crosscheck memory`, by name only (not in DEFAULTS).
    "jax-plain": ("jax.stack", "JaxPlainBackend", install_hint("jax")),
    "jax-remat-scan": ("jax.stack", "JaxRematScanBackend", install_hint("jax")),
    "jax-segments": ("jax.stack", "JaxSegmentsBackend", install_hint("jax")),
    "torch-plain": ("torch.stack", "TorchPlainBackend", install_hint("torch")),
    "torch-segments": ("torch.stack", "TorchSegmentsBackend", install_hint("torch")),
}
#: What `run` and `sweep` check when no backend is named (the variants run only when named).
DEFAULTS = ("jax", "torch", "numpy-fd")
ORACLE = "numpy-fd"


@runtime_checkable
class Backend(Protocol):
    """What crosscheck needs of a backend: a name and ``grad(weights, x) -> (L, d, d) array``.

    ``grad`` receives NumPy arrays (``weights`` ``(L, d, d)``, ``x`` ``(N, d)``, the case's float dtype)
    and must not modify them; it returns the case's dtype, unless the backend declares another in an
    ``output_dtype`` attribute (the oracle: ``"float64"``). Optional methods, discovered when present:
    ``info() -> dict`` (framework, version, device, precision settings), ``hvp(weights, x, v)`` (the
    Hessian-vector product, ``(L, d, d)``, for ``quantity="hvp"``); for an oracle,
    ``estimate(weights, x)`` and ``hvp_estimate(weights, x, v)`` with error bars; for
    ``crosscheck inspect``, a ``claims`` dict (``{"scan": bool, "checkpoint": "layer" | "scan" |
    "segment" | None}``) and, for a JAX backend, ``loss_fn()`` returning the scalar loss whose gradient
    ``grad`` computes.
    """

    name: str

    def grad(self, weights: np.ndarray, x: np.ndarray) -> Any: ...


class BackendUnavailable(ImportError):
    """A backend whose framework is not installed."""


class BackendBroken(ValueError):
    """An installed ``crosscheck.backends`` plugin that fails to load (import error, missing attribute,
    raising factory): the plugin's fault, not the user's, so a run reports it as a failed backend."""


class FunctionBackend:
    """Adapter for a plain function ``grad(weights, x)``; its name is the function's name."""

    def __init__(self, fn: Any, name: str | None = None) -> None:
        self.fn = fn
        self.name: str = str(name or getattr(fn, "__name__", None) or repr(fn))

    def grad(self, weights: np.ndarray, x: np.ndarray) -> Any:
        return self.fn(weights, x)

    def info(self) -> dict[str, str]:
        module = getattr(self.fn, "__module__", "?")
        return {"framework": "user function", "version": "", "device": "", "source": module}


def load_backend(spec: Any) -> Backend:
    """Return the backend for a built-in name, an import string, an entry-point name or an object.

    Args:
        spec: ``"jax"``, ``"torch"``, ``"numpy-fd"``; ``"package.module:attribute"`` where the attribute
            is a backend object, a class or zero-argument factory returning one, or a plain function
            ``grad(weights, x)``; the name of a ``crosscheck.backends`` entry point; or such an object.

    Raises:
        BackendUnavailable: a built-in backend whose framework is not installed.
        BackendBroken: an entry-point plugin that fails to import or to build its backend.
        ValueError: an unknown name or an import string that cannot be resolved.

    Example:
        >>> oracle = load_backend("numpy-fd")
        >>> oracle.grad(weights, x)  # doctest: +SKIP
    """
    if not isinstance(spec, str):
        return _adapt(spec, getattr(spec, "__name__", None) or type(spec).__name__)
    if spec in BUILTINS:
        return _load_builtin(spec)
    if ":" in spec:
        return _adapt(_import_attribute(spec), spec)
    entry_points = plugin_entry_points()
    if spec in entry_points:
        return _load_entry_point(entry_points[spec])
    known = ", ".join(list(BUILTINS) + sorted(entry_points))
    hint = " Did you mean `numpy-fd`?" if spec.replace("_", "-") == "numpy-fd" else ""
    raise ValueError(
        f"unknown backend `{spec}`: expected one of {known}, or an import string "
        f"`package.module:attribute`.{hint}"
    )


def plugin_entry_points() -> dict[str, metadata.EntryPoint]:
    """The installed ``crosscheck.backends`` entry points by name (none is loaded)."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(entry_point: metadata.EntryPoint) -> Backend:
    where = f"entry point `{entry_point.name} = {entry_point.value}`"
    dist = getattr(entry_point, "dist", None)
    if dist is not None:
        where += f" of {dist.name} {dist.version}"
    try:
        return _adapt(entry_point.load(), entry_point.name)
    except BaseException as exc:  # a broken plugin must say so, not crash the run or the other backends
        reraise_user_interrupt(exc)
        detail = describe(exc)
        if isinstance(exc, ValueError):  # from _adapt, which names the backend already
            detail = str(exc).removeprefix(f"backend `{entry_point.name}`: ")
        raise BackendBroken(f"backend `{entry_point.name}` ({where}) failed to load: {detail}") from exc


def _load_builtin(name: str) -> Backend:
    module_name, class_name, install = BUILTINS[name]
    return getattr(import_adapter(module_name, name, install), class_name)()


def import_adapter(module_name: str, name: str, install: str) -> Any:
    """The built-in adapter module ``module_name`` for backend ``name``.

    Raises:
        BackendUnavailable: its framework is not installed (the message says what to install).
    """
    try:
        return _import_builtin_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend `{name}` is unavailable: {exc.name or exc} is not installed ({install})."
        ) from exc


def _import_builtin_module(module_name: str) -> Any:
    try:
        return importlib.import_module(f"crosscheck.backends.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != "crosscheck.backends":
            raise
    # Running from a source checkout: the wheel installs backends/ as crosscheck/backends/.
    return importlib.import_module(f"backends.{module_name}")


def _import_attribute(target: str, *, spec: str | None = None, kind: str = "backend") -> Any:
    """The attribute an import string ``package.module:attribute`` names (``spec``: what the user
    wrote, for messages; ``kind``: what is being loaded, ``backend`` or ``workload``)."""
    spec = spec or target
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{kind} import string `{spec}` must look like `package.module:attribute`.")
    if os.getcwd() not in sys.path:
        # Like `python -m`, let users name a module in the current directory.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"{kind} `{spec}`: cannot import module `{module_name}` ({exc}).") from exc
    except BaseException as exc:  # its sys.exit too: importing it failed, the run goes on to say so
        reraise_user_interrupt(exc)
        raise ValueError(f"{kind} `{spec}`: importing `{module_name}` failed: {describe(exc)}") from exc
    value = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            names = [n for n in dir(module) if not n.startswith("_")]
            raise ValueError(
                f"{kind} `{spec}`: module `{module_name}` has no attribute `{attribute}` "
                f"(found: {', '.join(names[:12]) or 'nothing public'})."
            )
        value = getattr(value, part)
    return value


def _adapt(target: Any, spec: str) -> Backend:
    """Turn an object with ``grad``, a class or factory, or a plain function into a backend."""
    factory = callable(target) and not hasattr(target, "grad") and _takes_no_args(target)
    if inspect.isclass(target) or factory:
        try:
            target = target()
        except BaseException as exc:
            reraise_user_interrupt(exc)
            raise ValueError(f"backend `{spec}`: calling the factory failed: {describe(exc)}") from exc
    if hasattr(target, "grad") and callable(target.grad):
        if not isinstance(getattr(target, "name", None), str):
            try:
                target.name = spec
            except AttributeError:
                return FunctionBackend(target.grad, spec)
        return target
    if callable(target):
        return FunctionBackend(target)
    raise ValueError(
        f"backend `{spec}`: expected an object with a `grad(weights, x)` method, a class or factory "
        f"returning one, or a function; found {type(target).__name__} {_short_repr(target)}."
    )


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _takes_no_args(fn: Any) -> bool:
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins)
        return False
    return True


def backend_info(backend: Backend) -> dict[str, str]:
    """The backend's ``info()`` if it has one (never raises)."""
    info = getattr(backend, "info", None)
    if not callable(info):
        return {}
    try:
        return {str(k): str(v) for k, v in info().items()}
    except BaseException as exc:  # info is optional decoration; a broken one must not fail the run
        reraise_user_interrupt(exc)
        return {"info_error": describe(exc)}
