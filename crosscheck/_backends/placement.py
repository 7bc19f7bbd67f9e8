"""Where a framework's side runs, and the arithmetic settings it runs under: what a framework declares
(``Setting``, in its ``Framework.placement``) and what a run chooses (``Placement``, one record per
framework).

A framework's folder declares its settings (``backends/jax/__init__.py``: JAX's platform and matmul
precision), applies a record to its calls (``state.placed(placement)``) and reads back what ran
(``environment.arithmetic()``). The engine, the classification's re-runs and the judges pass the
records as they are: ``at_highest`` and ``on_host`` ask each framework for its own values of "the
highest arithmetic" and "the host CPU", so no code outside a framework's folder names its settings.

A setting is spelled ``<framework>_<name>`` wherever a user gives it (``Execution.jax_platform``,
``--jax-platform``, the ``[tool.crosscheck]`` key ``jax_platform``) and wherever a run records it (the
JSON report's ``"jax_settings"``): ``Placement.options``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting of where a framework's side runs or of its arithmetic, as its folder declares it.

    ``choices`` are the values it takes, ``default`` (one of them) leaves the framework as it is;
    ``highest`` is the value that asks for its most precise arithmetic and ``host`` the one that puts
    its side on the host CPU (None: this setting has none), what a classification's re-runs ask for;
    ``help`` says it on the command line (``--<framework>-<name>``).
    """

    name: str
    choices: tuple[str, ...]
    help: str
    default: str = "default"
    highest: str | None = None
    host: str | None = None

    def option(self, framework: str) -> str:
        """The setting as a user gives it and a run records it: ``jax_platform``."""
        return f"{framework}_{self.name}"


@dataclasses.dataclass(frozen=True)
class Placement:
    """One framework's side as a run places it: its ``framework`` (``"jax"``), the ``settings`` it
    declares, and ``values``, each setting's value by name (one left out: its default).

    Example:
        >>> from crosscheck._backends import placements
        >>> [p.options() for p in placements({"jax_platform": "cpu"})]
        [{'jax_platform': 'cpu', 'jax_precision': 'default'}]
    """

    framework: str
    settings: tuple[Setting, ...] = dataclasses.field(repr=False)
    values: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "values", {s.name: self.values.get(s.name, s.default) for s in self.settings}
        )

    def value(self, name: str) -> str:
        """The value of the setting ``name``."""
        return self.values[name]

    @property
    def left_alone(self) -> bool:
        """Whether every setting is its default: the framework runs as it would without crosscheck."""
        return not self.chosen()

    @property
    def key(self) -> str:
        """The JSON report's key of this framework's settings: ``jax_settings``."""
        return f"{self.framework}_settings"

    def options(self) -> dict[str, str]:
        """Each setting's value by the name a user gives it: ``{"jax_platform": "cpu", ...}``."""
        return {s.option(self.framework): self.values[s.name] for s in self.settings}

    def chosen(self) -> dict[str, str]:
        """The settings the run changed from their defaults, by the names a user gives them."""
        return {
            s.option(self.framework): self.values[s.name]
            for s in self.settings
            if self.values[s.name] != s.default
        }

    @property
    def off_host(self) -> bool:
        """Whether the run asked for this side on an accelerator by name: a setting that has a ``host``
        value given another value than its default and the host's (``torch_device`` ``cuda``)."""
        return any(
            s.host is not None and self.values[s.name] not in (s.default, s.host) for s in self.settings
        )

    def at_highest(self) -> Placement:
        """The same side at its most precise arithmetic (each setting that has a ``highest`` value set to
        it, the others kept): the classification's first re-run."""
        return self._with({s.name: s.highest for s in self.settings if s.highest is not None})

    def on_host(self) -> Placement:
        """The same side on the host CPU (each setting that has a ``host`` value set to it, the others
        kept): a re-run the accelerator cannot make, and the classification's second."""
        return self._with({s.name: s.host for s in self.settings if s.host is not None})

    def _with(self, changed: Mapping[str, str]) -> Placement:
        return dataclasses.replace(self, values={**self.values, **changed})
