"""``--quiet``: the verdict line (with what was not judged entry by entry: a screen's directions, the
entries unjudgeable) and the verdict's caveats, and nothing of other libraries' warnings.

A quiet run is read by a script or a person who wants the answer only: a warning a framework prints
while the workload is imported or run (PyTorch's `enable_nested_tensor` note, a deprecation of JAX's)
is not the answer, but "a bug that moves the gradients by less is not seen in bfloat16: check in
float32 too" is part of it, and is kept.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def no_warnings(quiet: bool) -> Iterator[None]:
    """While a quiet run runs: Python warnings ignored here and in the worker processes it starts
    (``PYTHONWARNINGS``, which a worker's interpreter reads when it starts); both restored after."""
    if not quiet:
        yield
        return
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "ignore"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


def render(report: Any, console: Any) -> None:
    """``PASSED`` (with what it did not judge entry by entry, as the PASSED line says it: ``PASSED
    (screened: ...); 12 entries unjudgeable (...)``) or ``FAILED: ...`` (every problem), then each
    caveat of the verdicts, once."""
    from crosscheck._report.table import not_judged

    verdict = "PASSED" + not_judged(report) if report.passed else "FAILED: " + "; ".join(report.problems)
    console.print(verdict, markup=False, highlight=False)
    if getattr(report, "classification", None):
        said = f"classified by re-runs: {report.classification['text']}"
        console.print(said, markup=False, highlight=False)
    for line in report.caveats():
        console.print(f"caveat of {line}", markup=False, highlight=False)
