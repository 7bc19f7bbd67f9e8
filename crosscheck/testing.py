"""Assertions for your own test suite: ``assert_gradients_close`` fails a test with crosscheck's message.

Importing this module imports neither JAX nor PyTorch.

Example:
    >>> from crosscheck.testing import assert_gradients_close
    >>> def test_my_port():  # doctest: +SKIP
    ...     assert_gradients_close("mypkg.mymodel:workload", backends=["jax", "torch"], dtype="float64")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from crosscheck._report.report import Report

__all__ = ["assert_gradients_close", "failure_message"]


def assert_gradients_close(
    workload_or_case: Any = None, /, *, backends: Sequence[Any] | None = None, **options: Any
) -> Report:
    """Run one cross-check and raise ``AssertionError`` unless every candidate agrees with the reference.

    Args:
        workload_or_case: a ``crosscheck.Stack``, a ``crosscheck.Workload``, a built-in workload name or
            an import string ``module:attribute``; or a ``crosscheck.Case`` of the stack; or None (the
            stack, with ``options`` such as ``dim=``, ``seed=``).
        backends: names, import strings, backend objects or functions (default: the workload's
            implementations; for the stack, ``jax`` and ``torch`` against the oracle).
        **options: any keyword of ``crosscheck.run`` (``dtype``, ``seed``, ``reference``, ``rtol`` and
            ``atol``, ``strict``, the stack's ``layers``, ``dim``, ...).

    Returns:
        The ``Report``, when the check passed.

    Raises:
        AssertionError: the check failed; the message starts with the verdict (the FAILED line: a
            port's names the module where it differs first), then what ``crosscheck run`` prints after
            its table (each mismatch message, naming the parameter or module output and the worst entry).
        ValueError, TypeError: bad arguments, as ``crosscheck.run``.

    Example:
        >>> from crosscheck.testing import assert_gradients_close
        >>> def test_my_grad():  # in your test suite; my_grad(weights, x) is yours
        ...     assert_gradients_close(crosscheck.Stack(layers=4, dim=8), backends=[my_grad])
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this function's
    from crosscheck._engine.execute import execute
    from crosscheck._engine.run import flat_request

    if _is_case(workload_or_case):
        fields = dataclasses.asdict(workload_or_case)
        both = sorted(set(options) & set(fields))
        if both:
            raise TypeError(f"`{both[0]}` is given twice: by the Case and as a keyword.")
        options = {**fields, **options}
    elif workload_or_case is not None:
        options["workload"] = workload_or_case
    # The request ``crosscheck.run`` builds of these keywords (the option records made once, here).
    report = execute(flat_request(backends=backends, **options))
    if not report.passed:
        raise AssertionError(failure_message(report))
    return report


def failure_message(report: Report) -> str:
    """The verdict first, on one line (``FAILED: ...``, the first thing pytest's summary shows: a port's
    says where it differs first, naming the module), then what ``crosscheck run`` prints after its
    table, as plain text (the CLI may wrap long lines): the detail.

    Example:
        >>> from crosscheck.testing import failure_message
        >>> def zeros(weights, x):  # a wrong gradient
        ...     return np.zeros_like(weights)
        >>> report = crosscheck.run(layers=2, dim=4, batch=3, seed=1, backends=[zeros])
        >>> print(failure_message(report).splitlines()[0])
        FAILED: `zeros` disagrees with `numpy-fd`
    """
    lines = ["FAILED: " + "; ".join(report.problems)]
    lines += [text for text, _ in report.messages()]
    lines += [f"{r.name}: {r.status}: {r.error}" for r in report.backends.values() if r.status in _FAILED]
    return "\n".join(lines)


_FAILED = ("failed", "unavailable")


def _is_case(value: Any) -> bool:
    """A ``crosscheck.Case`` (the stack's plain-data case), known by the public name."""
    from crosscheck import Case

    return isinstance(value, Case)
