"""Loading a backend, guarded: unavailable and broken backends are records; a mistake is a ``ValueError``.

A plugin's import, its factory and its ``info()`` are its code too: whatever they raise (``SystemExit``
included) makes that backend a failed record (``info()``: a note), never the end of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from crosscheck._backends import BackendBroken, BackendUnavailable, Placement, backend_info
from crosscheck._backends.protocol import BackendSpec
from crosscheck._engine.call import placed
from crosscheck._errors import Interrupts, describe, one_line, reraise_user_interrupt
from crosscheck._report.report import BackendResult
from crosscheck._types import Loaded

if TYPE_CHECKING:
    from crosscheck._workloads.protocol import EngineWorkload


def spec_name(spec: BackendSpec | Loaded, interrupts: Interrupts | None = None) -> str:
    """How a spec is named before it loads: the string, or the object's ``name`` or ``__name__``
    (``interrupts``: the run's Ctrl-C policy, as for the guarded call)."""
    if isinstance(spec, str):
        return spec
    try:
        return str(getattr(spec, "name", None) or getattr(spec, "__name__", None) or type(spec).__name__)
    except BaseException as exc:  # a name property that raises
        reraise_user_interrupt(exc, interrupts)
        return type(spec).__name__


def load(
    workload: EngineWorkload,
    spec: BackendSpec,
    *,
    required: bool,
    interrupts: Interrupts | None = None,
    placement: Sequence[Placement] = (),
) -> tuple[Loaded | None, BackendResult]:
    """``(backend or None, its record)``: ``pending`` when it loaded, else ``unavailable`` or ``failed``.
    ``interrupts``: the run's Ctrl-C policy, as for the guarded call; ``placement``: the run's, in
    effect while it loads and says where it runs (``info()``), as in each call.

    Raises:
        ValueError, TypeError: the spec cannot mean anything (an unknown name, a bad import string).
    """
    name = spec_name(spec, interrupts)
    try:
        with placed(placement):
            backend = workload.resolve(spec)
    except BackendUnavailable as exc:
        return None, BackendResult(
            name=name, status="unavailable", error=one_line(str(exc)), required=required
        )
    except BackendBroken as exc:  # an installed plugin that fails: report it, run the others
        return None, BackendResult(name=name, status="failed", error=one_line(str(exc)), required=required)
    except (ValueError, TypeError):
        raise
    except BaseException as exc:  # its import or factory called sys.exit, raised KeyboardInterrupt, ...
        reraise_user_interrupt(exc, interrupts)
        error = f"failed to load: {describe(exc)}"
        return None, BackendResult(name=name, status="failed", error=error, required=required)
    # A name or import string can be loaded again (by `crosscheck replay`); an object cannot.
    notes = {"spec": spec} if isinstance(spec, str) else {}
    result = BackendResult(
        name=spec_name(backend, interrupts),
        status="pending",
        required=required,
        info=info_where(backend, placement),
        notes=notes,
    )
    return backend, result


def info_where(backend: Loaded, placement: Sequence[Placement]) -> dict[str, str]:
    """``backend_info`` read where the backend's calls run (the run's placement in effect); never
    raises (a placement that cannot be made is its ``info_error``, as a broken ``info()`` is)."""
    try:
        with placed(placement):
            return backend_info(backend)
    except Exception as exc:
        return {"info_error": describe(exc)}
