"""The option records of ``crosscheck.check``: small, frozen, each validated when it is made.

``Slack`` (the user's tolerance pair, both or none), ``Oracle`` (how the reference judges) and
``Execution`` (how each backend is run). ``crosscheck.run`` builds them from its flat keywords, the CLI
from its options, ``sweep`` from its configuration; the messages name ``run``'s keywords (``spell``
names an option as the CLI does, for a rule the CLI checks before it builds a record).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._backends import Placement, declared_settings, framework_named, placements

#: How the reference judges: every entry (by the weights' differences, or the stack's by its layers'
#: outputs'), random directions then entries, or chosen by cost.
ORACLE_MODES = ("auto", "full", "outputs", "screen")


@dataclasses.dataclass(frozen=True)
class Slack:
    """Your slack, added to every entry's tolerance: ``atol + rtol * |reference|`` (torch's
    ``get_tolerances`` says why the two come together or not at all).

    Args:
        rtol: relative, a non-negative finite number.
        atol: absolute, a non-negative finite number.

    Raises:
        ValueError: one of them missing (None), negative or not finite.

    Example:
        >>> import crosscheck
        >>> crosscheck.Slack(rtol=1e-5, atol=1e-8)
        Slack(rtol=1e-05, atol=1e-08)
    """

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        if self.rtol is None and self.atol is None:
            raise ValueError("a `Slack` needs both `rtol` and `atol`; for no slack pass `slack=None`.")
        _check_tolerances(self.rtol, self.atol)
        object.__setattr__(self, "rtol", float(self.rtol))
        object.__setattr__(self, "atol", float(self.atol))

    @classmethod
    def of(cls, rtol: float | None, atol: float | None) -> Slack | None:
        """The slack of a pair that may be absent (None when both are; ``ValueError`` for one)."""
        _check_tolerances(rtol, atol)
        return None if rtol is None or atol is None else cls(rtol, atol)


@dataclasses.dataclass(frozen=True)
class Oracle:
    """How the reference judges the candidates.

    Args:
        mode: ``"full"`` (every entry), ``"outputs"`` (the stack's gradient, every entry, from
            differences in each layer's outputs: far cheaper than ``"full"`` at width), ``"screen"``
            (random directional derivatives per layer or parameter tensor, then every entry of one that
            fails them) or ``"auto"`` (the stack: ``full`` while it is cheap, else ``outputs`` while it
            fits its budget and memory, else ``screen``; a workload of your own: screen when the full
            oracle is costly).
        directions: random directions per layer, or per group of a workload's tensors, when screening.
        budget: the check's wall time in seconds, the work around the model oracle (of a ``Workload``
            or a ``Port``) counted with its differencing (None: the default, 600 s): the oracle stops
            once the check's seconds and a reserve for the work after it reach the budget; the tensors
            it has not judged then are not checked, and the run fails.

    Raises:
        ValueError: a mode not listed, ``directions`` not a positive integer, ``budget`` not a positive
            number of seconds.

    Example:
        >>> import crosscheck
        >>> crosscheck.Oracle(mode="screen", directions=8)
        Oracle(mode='screen', directions=8, budget=None)
    """

    mode: str = "auto"
    directions: int = 4
    budget: float | None = None

    def __post_init__(self) -> None:
        _check_positive("directions", self.directions)
        if self.budget is not None:
            check_budget(self.budget)
            object.__setattr__(self, "budget", float(self.budget))
        if self.mode not in ORACLE_MODES:
            raise ValueError(f"`oracle_mode` must be one of {', '.join(ORACLE_MODES)}; found {self.mode!r}.")


@dataclasses.dataclass(frozen=True)
class Execution:
    """How each backend is run.

    Args:
        repeat: calls per candidate: a second result that differs beyond its own rounding fails it
            (1: no repeat).
        isolate: a worker process per backend, so that its crash is its failure: ``True`` each one named
            by a spec, ``"auto"`` import strings and plugins, ``False`` none. Unless False, a workload
            given as an import string runs its whole check in one worker process too.
        timeout: seconds a backend call may take before it is that backend's failure (None: no limit).
        jax_platform: where the JAX side's calls run: ``"default"`` (where JAX puts them: an accelerator
            when there is one) or ``"cpu"`` (the host CPU). Applied to each call, restored after it.
        jax_precision: the JAX side's matrix-product precision: ``"default"`` (JAX's own, unless set
            outside crosscheck), ``"high"`` or ``"highest"``. Applied to each call, restored after it.
        jax_deterministic: ``"on"``: XLA's deterministic GPU ops for the JAX side
            (``XLA_FLAGS=--xla_gpu_deterministic_ops=true``, its scatter-adds in one order, bit for bit),
            set before JAX first uses a device (a contained check's worker starts with it); refused
            where JAX was imported in this process already without it. ``"default"`` leaves XLA's own.
        torch_device: where the PyTorch side's calls run: ``"default"`` (where its module lives: the
            host CPU unless a port's module is on CUDA), ``"cpu"`` or ``"cuda"`` (refused where PyTorch
            has no CUDA device); its tensors follow for each call, results come to the host.
        torch_matmul_tf32: PyTorch's TF32 for float32 products on CUDA: ``"default"`` (PyTorch's own:
            off), ``"off"`` or ``"on"``. Applied to each call, restored after it.
        torch_cudnn_tf32: PyTorch's TF32 for cuDNN convolutions: ``"default"`` (PyTorch's own: on),
            ``"off"`` or ``"on"``.
        torch_deterministic: ``"on"``: ``torch.use_deterministic_algorithms`` for the PyTorch side's
            calls (its sums in one order, bit for bit); ``"default"`` leaves PyTorch's own.

    Each framework's settings (its folder's declaration, ``Framework.placement``) are fields named
    ``<framework>_<setting>``; they make ``placement``, the records the engine passes.

    Raises:
        TypeError, ValueError: a value of the wrong kind (the message names it).

    Example:
        >>> import crosscheck
        >>> execution = crosscheck.Execution(repeat=1, isolate=True, timeout=60)
        >>> execution.timeout, execution.jax_platform, execution.torch_device
        (60.0, 'default', 'default')
    """

    repeat: int = 2
    isolate: bool | str = "auto"
    timeout: float | None = None
    jax_platform: str = "default"
    jax_precision: str = "default"
    jax_deterministic: str = "default"
    torch_device: str = "default"
    torch_matmul_tf32: str = "default"
    torch_cudnn_tf32: str = "default"
    torch_deterministic: str = "default"

    def __post_init__(self) -> None:
        check_isolation(self.isolate, self.timeout)
        _check_positive("repeat", self.repeat)
        check_placement(self._fields())
        check_available(self.placement)
        if self.timeout is not None:
            object.__setattr__(self, "timeout", float(self.timeout))

    @property
    def placement(self) -> tuple[Placement, ...]:
        """Where each side runs and the arithmetic it runs under: one record per framework that declares
        settings (``crosscheck._backends.placements``), from the fields named for them."""
        return placements(self._fields())

    @property
    def jax(self) -> dict[str, str]:
        """The JAX side's settings, as a run records them (the JSON report's ``"jax_settings"``)."""
        return {
            "jax_platform": self.jax_platform,
            "jax_precision": self.jax_precision,
            "jax_deterministic": self.jax_deterministic,
        }

    def _fields(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


#: The longest timeout, in whole seconds: what both threading (``TIMEOUT_MAX``) and a worker's
#: pipe (``poll``, in milliseconds as a C int) can wait.
MAX_TIMEOUT = int(min(threading.TIMEOUT_MAX, (2**31 - 1) / 1000))


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, found {value!r}.")


def check_isolation(isolate: Any, timeout: Any) -> None:
    """``isolate`` is True, False or ``"auto"`` (``TypeError``), and ``timeout`` a timeout."""
    if not (isinstance(isolate, bool) or isolate == "auto"):
        raise TypeError(f"`isolate` must be True, False or 'auto', found {isolate!r:.60}.")
    check_timeout(timeout)


def check_timeout(timeout: Any, *, front: str = "api") -> None:
    """A timeout is None (no limit) or a positive, finite number of seconds a thread and a worker's pipe
    can wait (``MAX_TIMEOUT``); ``ValueError`` naming it as ``front`` spells it."""
    if timeout is None:
        return
    name = spell("timeout", front=front)
    number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not (number and np.isfinite(timeout) and timeout > 0):
        raise ValueError(f"`{name}` must be a positive number of seconds, found {timeout!r:.60}.")
    if timeout > MAX_TIMEOUT:  # a longer wait overflows a platform limit: a traceback mid-run
        raise ValueError(
            f"`{name}` must be at most {MAX_TIMEOUT} seconds (about 24 days, the longest this platform "
            f"can wait), found {timeout!r:.60}; leave it out for no limit."
        )


def spell(name: str, value: Any = None, *, front: str) -> str:
    """``name`` as ``front`` spells it: the CLI's ``--oracle-mode full``, the API's ``oracle_mode='full'``
    (one rule, one message, the option named as the user gave it)."""
    if front == "cli":
        return f"--{name.replace('_', '-')}" + ("" if value is None else f" {value}")
    return name if value is None else f"{name}={value!r}"


def check_pair(rtol: float | None, atol: float | None, *, front: str = "api") -> None:
    """``rtol`` and ``atol`` come together or not at all (``ValueError`` naming the one given)."""
    if (rtol is None) != (atol is None):
        given = spell("rtol" if atol is None else "atol", front=front)
        raise ValueError(
            f"`{spell('rtol', front=front)}` and `{spell('atol', front=front)}` must be given together or "
            f"not at all; found only `{given}`."
        )


def check_placement(options: Mapping[str, Any], *, front: str = "api") -> None:
    """Each framework's setting that ``options`` gives (by the name a user gives it: ``jax_platform``) is
    one of its declared choices (``ValueError`` naming the option as ``front`` spells it)."""
    for name, setting in declared_settings():
        value = options.get(name, setting.default)
        if not (isinstance(value, str) and value in setting.choices):
            raise ValueError(
                f"`{spell(name, front=front)}` must be one of {', '.join(setting.choices)}; "
                f"found {value!r:.60}."
            )


def placement_keywords(given: Mapping[str, Any]) -> dict[str, str]:
    """The placement a function's keywords give (``given``: its ``locals()``, one keyword per declared
    setting by the name a user gives it; a setting without its keyword is a ``KeyError``), each checked
    (``check_placement``): what ``sweep`` and ``check_blocks`` hand each case, as ``Execution`` takes
    them."""
    placement = {name: given[name] for name, _ in declared_settings()}
    check_placement(placement)
    return placement


def check_available(placement: Sequence[Placement]) -> None:
    """Each side can be placed where ``placement`` asks, in this process (``ValueError`` in one line: a
    CUDA device asked for where PyTorch has none), asked of each framework's folder (its state's
    ``unavailable``) for a record that changes anything."""
    for record in placement:
        framework = framework_named(record.framework)
        if record.left_alone or framework is None:
            continue
        unavailable = getattr(framework.module("state"), "unavailable", None)
        problem = unavailable(record) if callable(unavailable) else ""
        if problem:
            raise ValueError(problem)


def check_budget(budget: Any, *, front: str = "api") -> None:
    """A budget is a positive, finite number of seconds (``ValueError`` naming it)."""
    number = isinstance(budget, (int, float)) and not isinstance(budget, bool)
    if not (number and np.isfinite(budget) and budget > 0):
        raise ValueError(
            f"`{spell('budget', front=front)}` must be a positive number of seconds, found {budget!r:.60}."
        )


def _check_tolerances(rtol: float | None, atol: float | None) -> None:
    check_pair(rtol, atol)
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise ValueError(f"`{name}` must be a non-negative finite number, found {value!r}.")
