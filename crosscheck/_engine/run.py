"""The front door of the API: ``crosscheck.check`` (a workload and option records in, a ``Report`` out),
the one verb that starts a check, and ``crosscheck.run``, its alias with the flat keywords of earlier
releases (``flat_request``: the same request, its records made of the flat keywords). Each hands one
``Request`` to ``execute`` (``_engine/execute.py``), the path the CLI, a sweep's case and the pytest
helper take too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

from crosscheck._backends import declared_settings
from crosscheck._engine.execute import execute
from crosscheck._engine.request import Request
from crosscheck._records import Execution, Oracle, Slack
from crosscheck._report.report import Report
from crosscheck._workloads.protocol import Progress


def check(
    workload: Any = None,
    *,
    backends: Sequence[Any] | None = None,
    reference: Any = None,
    dtype: str = "float32",
    seed: int = 0,
    quantity: str = "grad",
    slack: Slack | None = None,
    strict: bool = False,
    oracle: Oracle = Oracle(),  # noqa: B008 (frozen: one instance serves every call)
    execution: Execution = Execution(),  # noqa: B008
    progress: Progress | None = None,
) -> Report:
    """Cross-check every backend's quantity on ``workload`` against the reference.

    Args:
        workload: a ``Stack`` (default: ``Stack()``), a ``Workload``, a ``Port``, a built-in name or an
            import string ``module:attribute`` naming one (loaded once). An import string is code from
            elsewhere: the whole check runs in one worker process, and its crash or hang is a failed
            report naming it, unless ``execution.isolate`` is False or a backend is an object; a
            workload given as an object runs in this process.
        backends: names, import strings, objects or functions (default: ``jax``, ``torch``,
            ``numpy-fd`` less the reference for the stack; a workload's implementations).
        reference: the backend the others are compared with (default: the ``numpy-fd`` oracle; for
            ``quantity="output"``, ``torch``, PyTorch's forward, the only reference it takes).
        dtype: ``"float32"`` or ``"float64"``, of the arrays the workload makes (yours keep theirs).
        seed: seed of the arrays the workload makes (and of the HVP's direction).
        quantity: ``"grad"``, ``"hvp"`` along a direction made from ``seed`` (``hvp(weights, x, v)``),
            ``"update"`` (a ``Train``), or ``"output"``, the forward check of a ``Port``: the model's and
            every module's output against PyTorch's, with measured tolerances and the verdict naming the
            first module that differs, no gradient and no oracle (a bug only in the backward pass is not
            seen by it).
        slack: your ``Slack`` added to every entry's tolerance (None: none).
        strict: fail when any entry is unjudgeable (a ReLU kink makes it ambiguous).
        oracle: how the reference judges (``Oracle``: full, screened or chosen by cost).
        execution: how each backend is run (``Execution``: repeats, worker processes, timeout).
        progress: called as ``progress(description, done, total)``.

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments, in one line (a mismatch is a record, never raised); the
            workload's own code failed before any backend ran (its ``generate``, a port's ``inputs``:
            whatever it raised, ``sys.exit`` included, in one line naming it). Code that runs inside a
            backend (an implementation, a backend's factory) is that backend's failure record instead.

    Example:
        >>> import crosscheck
        >>> stack = crosscheck.Stack(layers=3, dim=4)
        >>> report = crosscheck.check(stack, oracle=crosscheck.Oracle("full"))  # doctest: +SKIP
    """
    request = Request(
        workload=workload,
        backends=backends,
        reference=reference,
        dtype=dtype,
        seed=seed,
        quantity=quantity,
        slack=slack,
        strict=strict,
        oracle=oracle,
        execution=execution,
        progress=progress,
    )
    report: Report = execute(request)
    return report


def run(
    *,
    weights: Any = None,
    x: Any = None,
    layers: int = 8,
    batch: int = 8,
    dim: int = 16,
    dtype: str = "float32",
    seed: int = 0,
    init: str = "gaussian",
    scale: float = 1.0,
    backends: Sequence[Any] | None = None,
    reference: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
    strict: bool = False,
    oracle_mode: str = "auto",
    directions: int = 4,
    budget: float | None = None,
    explain: bool = False,
    progress: Progress | None = None,
    quantity: str = "grad",
    workload: Any = None,
    repeat: int = 2,
    isolate: bool | str = "auto",
    timeout: float | None = None,
    steps: int | None = None,
    jax_platform: str = "default",
    jax_precision: str = "default",
    jax_deterministic: str = "default",
    torch_device: str = "default",
    torch_matmul_tf32: str = "default",
    torch_cudnn_tf32: str = "default",
    torch_deterministic: str = "default",
) -> Report:
    """Run one case (generated, or the given arrays) and cross-check every backend's gradient: an alias
    of ``check`` with the flat keywords of earlier releases, no more. It builds the request ``check``
    builds (``flat_request``): ``check``'s keywords as they are, its records (``Slack``, ``Oracle``,
    ``Execution``) made of the flat ones, and the workload's options (``layers``, ..., ``weights``
    with ``x``, ``explain``, ``steps``: those changed from their defaults, each one the workload
    takes), and runs it as ``check`` does.

    Args:
        weights: your own weights ``(L, d, d)`` (float32 or float64) with ``x`` (``Stack.from_arrays``),
            which determine the case: ``dtype``, ``seed`` and the stack's knobs are refused beside them,
            as on the command line; else ``layers``, ``batch``, ``dim``, ``init`` and ``scale`` make the
            ``Stack``.
        x: your own inputs ``(N, d)``, with ``weights``.
        dtype: as for ``check``, as are ``seed``, ``backends``, ``reference``, ``strict``, ``progress``.
        rtol: user slack, relative, added to every entry's tolerance; with ``atol`` or not at all (``Slack``).
        atol: user slack, absolute.
        oracle_mode: ``"full"``, ``"screen"`` or ``"auto"``, with ``directions`` and ``budget``, the
            check's wall time in seconds that the model oracle keeps to (``Oracle``).
        explain: also localize (forward activations layer by layer) and classify a disagreement (``Stack``).
        quantity: ``"grad"``, or ``"hvp"`` along a direction made from ``seed`` (``hvp(weights, x, v)``).
        workload: a ``Stack``, a ``Workload``, a built-in name or an import string ``module:attribute``
            (default: the stack); another workload makes its own arrays (only ``dtype`` and ``seed`` apply).
        repeat: calls per candidate, with ``isolate`` and ``timeout`` (``Execution``).
        steps: optimizer steps per side of a ``Train`` workload (``quantity="update"``; default: its own).
        jax_platform: where the JAX side runs, ``"default"`` or ``"cpu"``, with ``jax_precision``
            (``"default"``, ``"high"``, ``"highest"``), its matmul precision, and ``jax_deterministic``
            (``"on"``: XLA's deterministic GPU ops) (``Execution``).
        torch_device: where the PyTorch side runs, ``"default"``, ``"cpu"`` or ``"cuda"``, with
            ``torch_matmul_tf32``, ``torch_cudnn_tf32`` and ``torch_deterministic`` (``Execution``).

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments, said in one line (a mismatch is a record, never raised).

    Example:
        >>> def zeros(weights, x):  # a wrong gradient
        ...     return np.zeros_like(weights)
        >>> crosscheck.run(layers=2, dim=4, batch=3, seed=1, backends=[zeros]).passed
        False
        >>> crosscheck.run(dim=16, dtype="float32", backends=["jax", "torch"]).passed  # doctest: +SKIP
        True
    """
    return execute(flat_request(**locals()))  # locals(): run's keywords as given (it defines nothing)


#: ``run``'s keywords that are ``check``'s too, handed on as they are.
CHECK_KEYWORDS = ("workload", "backends", "reference", "quantity", "strict", "progress")
#: ``run``'s keywords of the case's arrays, handed on only when changed from their defaults: beside
#: ``weights`` and ``x``, a changed one is refused (the arrays determine the case).
CASE_KEYWORDS = ("dtype", "seed")
#: ``run``'s keywords that configure the workload (``Request.workload_options``), handed on only when
#: changed from their defaults; the workload refuses one it does not take.
WORKLOAD_KEYWORDS = ("weights", "x", "layers", "batch", "dim", "init", "scale", "explain", "steps")


def flat_request(**flat: Any) -> Request:
    """The request of ``run``'s flat keywords (its defaults where one is not given), the one ``check``
    builds: ``check``'s own keywords as they are, its records made of the flat ones (``_records``), the
    case's ``dtype`` and ``seed`` when changed, and the workload's options changed from their defaults
    (``Request.workload_options``, which ``check`` never sets).

    Raises:
        TypeError: a keyword ``run`` does not take, as calling ``run`` says it.
        ValueError, TypeError: a record refused where it is made (``Slack``, ``Execution``, ``Oracle``).
    """
    try:
        bound = _run_signature().bind(**flat)
    except TypeError as exc:
        raise TypeError(f"run() {exc}") from None
    bound.apply_defaults()
    given = bound.arguments
    jax = {name: given[name] for name, _ in declared_settings() if name in given}  # each side's placement
    records = _records(
        given["rtol"],
        given["atol"],
        (given["oracle_mode"], given["directions"], given["budget"]),
        (given["repeat"], given["isolate"], given["timeout"], jax),
    )
    return Request(
        **{name: given[name] for name in CHECK_KEYWORDS},
        **_changed({name: given[name] for name in CASE_KEYWORDS}),
        **records,
        workload_options=_changed({name: given[name] for name in WORKLOAD_KEYWORDS}),
    )


def _records(*flat: Any) -> dict[str, Any]:
    """``check``'s records of ``run``'s flat keywords, each checked where it is made (in ``run``'s order:
    the tolerances, the worker processes and the timeout, the repeats, the directions; the backends
    are the request's, checked by ``execute``)."""
    rtol, atol, (oracle_mode, directions, budget), (repeat, isolate, timeout, jax) = flat
    slack = Slack.of(rtol, atol)
    execution = Execution(repeat=repeat, isolate=isolate, timeout=timeout, **jax)
    oracle = Oracle(mode=oracle_mode, directions=directions, budget=budget)
    return {"slack": slack, "oracle": oracle, "execution": execution}


def _changed(given: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``run`` among ``given`` that are not at their defaults (an array always is)."""
    parameters = _run_signature().parameters
    return {name: value for name, value in given.items() if not _is_default(value, parameters[name].default)}


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    try:
        return default is not None and bool(value == default)
    except (ValueError, TypeError):  # an array where a number belongs: given (the workload says why)
        return False


@functools.cache
def _run_signature() -> inspect.Signature:
    return inspect.signature(run)
