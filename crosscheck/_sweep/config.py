"""``[tool.crosscheck]`` in ``pyproject.toml``: the case matrix, the backends and the tolerances of a sweep.

The matrix is the cartesian product of the listed values. Every key is optional; command-line options
replace the key they name. Without any matrix key (and no matrix option on the command line) a sweep
runs the built-in CI matrix (the stack's, ``Stack.ci_cases``).

Example::

    [tool.crosscheck]
    workloads = ["stack"]            # "stack" (the built-in) or workload specs, e.g. "mypkg.model:workload"
    layers = [8]
    batch = [8]
    dim = [16, 32]
    dtypes = ["float32", "float64"]
    seeds = [0, 1, 2]
    inits = ["gaussian", "integer"]
    backends = ["jax", "torch"]      # names, entry-point names or import strings
    reference = "numpy-fd"
    rtol = 1e-6                      # user slack, with atol: both or neither
    atol = 1e-9
    strict = false
    timeout = 600                    # seconds per case
    jax_platform = "default"         # where the JAX side runs: "default" (JAX's choice) or "cpu"
    jax_precision = "default"        # its matmul precision: "default", "high" or "highest"
    jax_deterministic = "default"    # "on": XLA's deterministic GPU ops (XLA_FLAGS)
    torch_device = "default"         # where the PyTorch side runs: "default", "cpu" or "cuda"
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from crosscheck._backends import declared_settings
from crosscheck._compare.constants import DTYPES
from crosscheck._records import MAX_TIMEOUT
from crosscheck._types import Parsed
from crosscheck._workloads.registry import case_knobs, ci_cases

CONFIG_FILE = "pyproject.toml"
STACK = "stack"
#: How the stack's inputs may be drawn (its ``init`` knob's choices).
INITS: tuple[str, ...] = case_knobs(STACK)["init"].choices or ()

#: Keys whose lists span the matrix, in the order the product runs (the last varies fastest).
MATRIX_KEYS = ("workloads", "layers", "batch", "dim", "dtypes", "seeds", "inits")
#: Defaults for a matrix key left out when another one is given (the defaults of `crosscheck run`).
MATRIX_DEFAULTS: dict[str, list[Any]] = {
    "workloads": [STACK],
    "layers": [8],
    "batch": [8],
    "dim": [16],
    "dtypes": ["float32"],
    "seeds": [0],
    "inits": ["gaussian"],
}
#: The most cases a matrix may expand to unless the user raises it (``--max-cases``).
MAX_CASES = 10_000


class ConfigError(ValueError):
    """A configuration mistake: one line naming the key, what was expected and what was found."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _list_of(what: str, ok: Callable[[Any], bool]) -> tuple[str, Callable[[Any], bool]]:
    return f"a non-empty list of {what}", lambda v: isinstance(v, list) and bool(v) and all(map(ok, v))


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _one_of(choices: tuple[str, ...]) -> tuple[str, Callable[[Any], bool]]:
    return f"one of {', '.join(choices)}", lambda v: v in choices


#: key -> (what is expected, check).
SCHEMA: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "workloads": _list_of('strings ("stack" or workload specs)', _nonempty_str),
    "layers": _list_of("positive integers", lambda v: _is_int(v) and v >= 1),
    "batch": _list_of("positive integers", lambda v: _is_int(v) and v >= 1),
    "dim": _list_of("positive integers", lambda v: _is_int(v) and v >= 1),
    "dtypes": _list_of(f"strings from {', '.join(DTYPES)}", lambda v: v in DTYPES),
    "seeds": _list_of("non-negative integers", lambda v: _is_int(v) and v >= 0),
    "inits": _list_of(f"strings from {', '.join(INITS)}", lambda v: v in INITS),
    "backends": _list_of("backend names or import strings", _nonempty_str),
    "reference": ("a backend name or import string", _nonempty_str),
    "rtol": ("a non-negative number", lambda v: _is_number(v) and v >= 0),
    "atol": ("a non-negative number", lambda v: _is_number(v) and v >= 0),
    "strict": ("true or false", lambda v: isinstance(v, bool)),
    "timeout": (
        f"a positive number of seconds, at most {MAX_TIMEOUT} (the longest this platform can wait)",
        lambda v: _is_number(v) and 0 < v <= MAX_TIMEOUT,
    ),
    # Each framework's placement (``Framework.placement``): jax_platform, jax_precision, torch_device, ...
    **{name: _one_of(setting.choices) for name, setting in declared_settings()},
}


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """Validated settings of a sweep: ``values`` holds only the keys that were given."""

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    path: Path | None = None

    def merged(self, overrides: Mapping[str, Any]) -> SweepConfig:
        """These settings with command-line ``overrides`` (None values ignored) replacing the keys they
        name; the messages of a bad override name the option (``--dim``)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        validate(given, where="option")
        _check_tolerances(given, where="option")
        return SweepConfig({**self.values, **given}, self.path)

    def has_matrix(self) -> bool:
        return any(key in self.values for key in MATRIX_KEYS)

    def get(self, key: str, default: Parsed = None) -> Parsed:
        return self.values.get(key, default)


def find_config(start: str | Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.crosscheck]`` table, in ``start`` (default: the
    current directory) or its parents, as ruff and pytest look for theirs; None when there is none."""
    folder = Path(start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / CONFIG_FILE
        if path.is_file():
            try:
                if "crosscheck" in _read(path).get("tool", {}):
                    return path
            except ConfigError:
                return path  # a broken file nearest the user must be reported, not skipped
    return None


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate ``[tool.crosscheck]`` of the TOML file at ``path``.

    Raises:
        ConfigError: unreadable or invalid TOML, no ``[tool.crosscheck]`` table, an unknown key or a
            value of the wrong type (the one-line message names the key).
    """
    path = Path(path)
    table = _read(path).get("tool", {}).get("crosscheck")
    if not isinstance(table, dict):
        raise ConfigError(f"{path} has no [tool.crosscheck] table.")
    validate(table, where="[tool.crosscheck]")
    _check_tolerances(table, where="[tool.crosscheck]")
    return SweepConfig(dict(table), path)


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}.") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}.") from exc


def validate(values: Mapping[str, Any], *, where: str) -> None:
    """Raise ``ConfigError`` for the first unknown key or wrongly typed value in ``values``."""
    for key, value in values.items():
        if key not in SCHEMA:
            hint = _did_you_mean(key)
            raise ConfigError(
                f"unknown key `{_name(key, where)}`: expected one of {', '.join(SCHEMA)}.{hint}"
            )
        expected, ok = SCHEMA[key]
        if not ok(value):
            raise ConfigError(f"`{_name(key, where)}` must be {expected}; found {_show(value)}.")


def _check_tolerances(values: Mapping[str, Any], *, where: str) -> None:
    if ("rtol" in values) != ("atol" in values):
        given, missing = ("rtol", "atol") if "rtol" in values else ("atol", "rtol")
        raise ConfigError(
            f"`{_name(given, where)}` and `{_name(missing, where)}` must be given together or not at "
            f"all; found only `{_name(given, where)}`."
        )


#: Command-line option of each key whose option is not ``--<key>``.
_OPTIONS = {
    "workloads": "workload",
    "dtypes": "dtype",
    "seeds": "seed",
    "inits": "init",
    "backends": "backend",
}


def _name(key: str, where: str) -> str:
    """How the user wrote ``key``: ``[tool.crosscheck].dim`` in the file, ``--dim`` on the command line."""
    return "--" + _OPTIONS.get(key, key).replace("_", "-") if where == "option" else f"{where}.{key}"


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _did_you_mean(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(SCHEMA), n=1)
    return f" Did you mean `{close[0]}`?" if close else ""


def cases(config: SweepConfig, *, limit: int | None = MAX_CASES) -> list[dict[str, Any]]:
    """The cases of the sweep as plain dicts (``workload`` plus what rebuilds the inputs).

    The product of the matrix keys when any is given, else the built-in CI matrix. A stack case holds
    ``layers, batch, dim, dtype, seed, init, scale``; another workload's case ``dtype`` and ``seed`` (its
    shapes are its own), so duplicates are dropped (in linear time: each case once, in a set).

    Raises:
        ConfigError: the product has more than ``limit`` cases (refused before it is expanded).
    """
    if not config.has_matrix():
        return [{"workload": STACK, **case} for case in ci_cases()]
    lists = [config.get(key, MATRIX_DEFAULTS[key]) for key in MATRIX_KEYS]
    size = math.prod(len(values) for values in lists)
    if limit is not None and size > limit:
        raise ConfigError(
            f"the matrix has {size} cases ({' x '.join(str(len(v)) for v in lists)} values of "
            f"{', '.join(MATRIX_KEYS)}), more than the limit of {limit}; narrow it, or raise the "
            f"limit (--max-cases {size})."
        )
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for values in itertools.product(*lists):
        row = dict(zip(MATRIX_KEYS, values, strict=True))
        case = {"workload": row["workloads"], "dtype": row["dtypes"], "seed": row["seeds"]}
        if row["workloads"] == STACK:
            case = {
                "workload": STACK,
                "layers": row["layers"],
                "batch": row["batch"],
                "dim": row["dim"],
                "dtype": row["dtypes"],
                "seed": row["seeds"],
                "init": row["inits"],
                "scale": 1.0,
            }
        key = tuple(case.items())
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


def options(config: SweepConfig) -> dict[str, Any]:
    """The run options shared by every case: backends (None: every built-in), reference, tolerances."""
    return {
        "backends": config.get("backends"),
        "reference": config.get("reference", "numpy-fd"),
        "rtol": config.get("rtol"),
        "atol": config.get("atol"),
        "strict": config.get("strict", False),
        **{name: config.get(name, setting.default) for name, setting in declared_settings()},
    }
