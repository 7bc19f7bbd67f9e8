"""The backend registry: built-in names, import strings and entry points, all lazy; the frameworks'
declarations (``FRAMEWORKS``, ``BUILTINS``, ``DEFAULTS``) and ``load_backend``. The backend contract is
in ``protocol`` and the import strings in ``strings``; the contract's names are imported here, so that
``from crosscheck._backends import Backend, BackendBroken, ...`` names them as before."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from crosscheck._backends.placement import Placement, Setting
from crosscheck._backends.protocol import (
    Backend,
    BackendBroken,
    BackendSpec,
    BackendUnavailable,
    FunctionBackend,
)
from crosscheck._backends.strings import import_attribute
from crosscheck._errors import describe, reraise_user_interrupt

ENTRY_POINT_GROUP = "crosscheck.backends"
#: The one import path of the built-in adapters (the repository's top-level ``backends/`` folder).
PACKAGE = "crosscheck.backends"

#: The distribution's name on the package index (``crosscheck`` there is an unrelated project).
DISTRIBUTION = "crosscheck-gradients"


def install_hint(extra: str | None = None) -> str:
    """What to install for ``extra`` (``None``: the package itself), as a message quotes it.

    The name is not published on the package index yet: the hint gives the form that works today, in a
    clone of the repository, and the index name as what works once published.
    """
    suffix = f"[{extra}]" if extra else ""
    return f"from a clone: pip install '.{suffix}'; once published: pip install '{DISTRIBUTION}{suffix}'"


#: The frameworks, one line each: the folder ``backends/<name>/`` declares the rest in its
#: ``__init__.py`` (a ``Framework``). ``BUILTINS`` and ``DEFAULTS`` (at the end) derive from them.
FRAMEWORKS = ("jax", "torch")
#: The oracle: finite differences of the stack's float64 loss, in NumPy (``backends/numpy_fd.py``).
ORACLE = "numpy-fd"


class Builtin(NamedTuple):
    """A built-in backend: its module under ``crosscheck.backends``, its class, what to install."""

    module: str
    cls: str
    install: str


@dataclasses.dataclass(frozen=True)
class Framework:
    """A framework's folder ``backends/<name>/``, as its ``__init__.py`` declares it (``FRAMEWORK``).

    Declaring imports nothing of the framework. The folder's modules, the same in every folder
    (``backends/jax/`` reads as the example), are imported when used:

    - ``stack.py``: the stack's adapters, one class per built-in backend name (``backends``);
    - ``workload.py``: the adapter of a Workload's implementations (``workload``: ``Class(name, loss)``);
    - ``state.py``: ``DEFAULTS``, ``read()`` and ``write(key, value)``: the settings a backend may change,
      read and restored around every guarded call while the framework is imported; with ``placement``
      declared, ``placed(placement)``: the run's ``Placement`` of its side in effect for one call;
    - ``environment.py``: ``record()``, its entry in the environment record (only once it is imported),
      and ``line(record)``, its part of the report's environment line; with ``placement`` declared,
      ``arithmetic()``: where its side computes now, as the device model reads it
      (``crosscheck._compare.device.Arithmetic``);
    - ``arrays.py``: ``to_numpy(value)`` (a result of its type as NumPy, and a note; else unchanged) and
      ``projection_loss(outputs, r)`` (``sum(r * outputs)``, differentiable, in its own arrays);
    - ``walk.py``: ``inspect_backend(backend, weights, x, result, *, check_loss)`` for
      ``crosscheck inspect``.
    """

    #: The folder's name: the prefix of its backends' names, the key of its environment record.
    name: str
    #: Its top-level modules: in use once the first is imported; arrays of their types are its own.
    modules: tuple[str, ...]
    #: The optional dependency that installs it (``install_hint(extra)``).
    extra: str
    #: Built-in backend names -> their class in ``stack.py``.
    backends: Mapping[str, str]
    #: The names ``run`` and ``sweep`` check when no backend is named (the others only when named).
    defaults: tuple[str, ...]
    #: The class in ``workload.py`` for a Workload's implementations named ``<name>`` or ``<name>-...``.
    workload: str
    #: The non-checkpointed variant ``inspect`` cross-checks against.
    plain: str
    #: Methods that make a backend this framework's for ``inspect`` (besides a ``"framework"`` claim
    #: or ``info()["framework"]``), and those backends in words, for its messages.
    marks: tuple[str, ...] = ()
    inspectable: str = ""
    #: Its name in words (``"JAX"``; by default ``name``), as messages say its side: "the JAX side".
    title: str = ""
    #: Where its side runs and the arithmetic settings it runs under (``placement.Setting``; none: it
    #: runs where it is), each given and recorded as ``<name>_<setting>`` (``jax_platform``).
    placement: tuple[Setting, ...] = ()
    #: The keys of its backends' ``info()`` that name the arithmetic they ran under, and the words the
    #: report's ``where`` line says them in.
    arithmetic_info: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "title", self.title or self.name)

    def module(self, name: str) -> ModuleType:
        """The folder's module ``name`` (``crosscheck.backends.<framework>.<name>``), imported."""
        return importlib.import_module(f"{PACKAGE}.{self.name}.{name}")

    def imported(self) -> bool:
        """Whether the framework is in use in this process (its first module imported)."""
        return sys.modules.get(self.modules[0]) is not None


def in_use() -> list[Framework]:
    """The declared frameworks imported in this process (by a backend that ran), in registry order."""
    return [framework for framework in DECLARED if framework.imported()]


def framework_named(name: str) -> Framework | None:
    """The declared framework ``name`` (``"jax"``), or None."""
    return next((framework for framework in DECLARED if framework.name == name), None)


def placements(options: Mapping[str, Any] | None = None) -> tuple[Placement, ...]:
    """A run's placement: one ``Placement`` for each framework that declares settings, each setting's
    value taken from ``options`` by the name a user gives it (``{"jax_platform": "cpu"}``: an
    ``Execution``'s fields, a JSON report's settings, a worker's message), else its default. The values
    are taken as given: ``crosscheck._records.check_placement`` refuses one that is not a choice."""
    given = options or {}
    return tuple(
        Placement(f.name, f.placement, {s.name: given.get(s.option(f.name), s.default) for s in f.placement})
        for f in DECLARED
        if f.placement
    )


def as_options(placement: Iterable[Placement]) -> dict[str, str]:
    """Every record's settings by the names a user gives them (``Placement.options``), in one mapping: what
    a run records and a worker process is sent."""
    return {option: value for record in placement for option, value in record.options().items()}


def declared_settings() -> list[tuple[str, Setting]]:
    """Every declared setting with the name a user gives it (``("jax_platform", Setting(...))``), in the
    order of ``FRAMEWORKS`` and of each declaration: the command line's options and the configuration's
    keys."""
    return [(s.option(framework.name), s) for framework in DECLARED for s in framework.placement]


def load_backend(spec: BackendSpec) -> Backend:
    """Return the backend for a built-in name, an import string, an entry-point name or an object.

    Args:
        spec: ``"jax"``, ``"torch"``, ``"numpy-fd"``; ``"package.module:attribute"`` where the attribute
            is a backend object, a class or zero-argument factory returning one, or a plain function
            ``grad(weights, x)``; the name of a ``crosscheck.backends`` entry point; or such an object.

    Raises:
        BackendUnavailable: a built-in backend whose framework is not installed.
        BackendBroken: a plugin, an import string or a class whose code fails: its module raises on
            import, or its class or factory raises (``sys.exit`` included) when called. A run
            reports it as that backend's failure and runs the others.
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
        return _adapt(import_attribute(spec), spec)
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


def import_adapter(module_name: str, name: str, install: str) -> ModuleType:
    """The built-in adapter module ``module_name`` for backend ``name``.

    Raises:
        BackendUnavailable: its framework is not installed (the message says what to install).
    """
    try:
        return importlib.import_module(f"{PACKAGE}.{module_name}")
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend `{name}` is unavailable: {exc.name or exc} is not installed ({install})."
        ) from exc


def _adapt(target: Any, spec: str) -> Backend:
    """Turn an object with ``grad``, a class or factory, or a plain function into a backend."""
    factory = callable(target) and not hasattr(target, "grad") and _takes_no_args(target)
    if inspect.isclass(target) or factory:
        try:
            target = target()
        except BaseException as exc:  # the backend's own code: its failure record, the others still run
            reraise_user_interrupt(exc)
            detail = describe(exc, "the factory")
            raise BackendBroken(f"backend `{spec}`: calling the factory failed: {detail}") from exc
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


# -- the registry, from the frameworks' folders --------------------------------------------------------


def _adapters_package() -> None:
    """Make the adapters importable as ``crosscheck.backends``, their one import path.

    A wheel installs the repository's top-level ``backends/`` folder as ``crosscheck/backends/``
    (hatch's force-include). A source checkout, or an editable install, has it beside the package: it
    is loaded from there under the same name, once, so no module is ever imported as ``backends.*``.
    """
    try:
        importlib.import_module(PACKAGE)
        return
    except ModuleNotFoundError as exc:
        if exc.name != PACKAGE:
            raise
    folder = Path(__file__).parents[2] / "backends"  # beside the package (this is crosscheck/_backends/)
    spec = importlib.util.spec_from_file_location(
        PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None or not (folder / "__init__.py").is_file():
        raise ImportError(f"crosscheck's built-in adapters are missing: no {PACKAGE} and no {folder}")
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    try:
        spec.loader.exec_module(package)
    except BaseException:
        del sys.modules[PACKAGE]
        raise
    sys.modules["crosscheck"].backends = package  # type: ignore[attr-defined]


def _builtins(frameworks: tuple[Framework, ...]) -> dict[str, Builtin]:
    """Every framework's default backends, the oracle, then every other variant (named to run)."""
    found = {
        name: Builtin(f"{framework.name}.stack", cls, install_hint(framework.extra))
        for framework in frameworks
        for name, cls in framework.backends.items()
    }
    defaults = [name for framework in frameworks for name in framework.defaults]
    oracle = {ORACLE: Builtin("numpy_fd", "FiniteDifferenceOracle", install_hint())}
    return {**{name: found[name] for name in defaults}, **oracle, **found}


# Last: a framework's declaration imports ``Framework`` from this module, which is complete by now.
_adapters_package()
#: The frameworks' declarations (``backends/<name>/__init__.py``), in the order of ``FRAMEWORKS``.
DECLARED: tuple[Framework, ...] = tuple(
    importlib.import_module(f"{PACKAGE}.{name}").FRAMEWORK for name in FRAMEWORKS
)
#: Built-in backends: name -> (module under crosscheck.backends, class, what to install). The variants
#: (``jax-plain``, ...) serve ``crosscheck inspect`` and ``crosscheck memory``, by name only.
BUILTINS: dict[str, Builtin] = _builtins(DECLARED)
#: What ``run`` and ``sweep`` check when no backend is named (the variants run only when named).
DEFAULTS: tuple[str, ...] = (*(name for framework in DECLARED for name in framework.defaults), ORACLE)
