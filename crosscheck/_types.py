"""The names of the seams whose values mypy cannot check, and of the few types many rooms pass.

Equinox's ``PyTree`` and chex's ``pytypes`` show the way: a value whose type the checker cannot see still
gets a name, declared once, so that a signature says what it passes and why it is not checked. Each
alias of ``Any`` says why in its name and its comment: the frameworks (PyTorch, JAX) are not installed
where ``mypy`` runs (``nox -s lint``), and what crossed a process or was parsed from JSON is checked where
it is read, not by its type. Where a precise type exists (a protocol, a record), a signature names it
instead; ``tests/test_typing.py`` keeps every alias of ``Any`` in this module. ``Floats`` and ``Console``
are checked: a union, and a forward reference to a class imported for mypy only.

Imports nothing of crosscheck: every room, and the adapters in ``backends/``, may name these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, Union

import numpy as np

if TYPE_CHECKING:  # rich is imported when a report is printed, not with crosscheck
    import rich.console

#: A number or an array of them: a tolerance term made per entry, per step or once.
#: (``Union``: an alias evaluated when imported, on every Python this supports.)
Floats: TypeAlias = Union[float, np.ndarray]  # noqa: UP007

#: The ``rich`` console a report and its sections print on.
Console: TypeAlias = "rich.console.Console"

#: A framework's array: a PyTorch tensor or a JAX array (NumPy's too, where a function takes all three).
#: ``Any``: the frameworks are not installed where mypy runs.
FrameworkArray: TypeAlias = Any

#: A ``torch.nn.Module`` (a user's model, a block of it). ``Any``: PyTorch is not installed where mypy runs.
TorchModule: TypeAlias = Any

#: A pytree, as Equinox's ``PyTree``: nested dicts, lists and tuples of arrays (or of their shapes), such
#: as a model's output or a JAX model's parameters. ``Any``: its structure is its user's, and the
#: frameworks are not installed where mypy runs.
PyTree: TypeAlias = Any

#: Data parsed from a file or received from another process (JSON, TOML, a worker's message): its shape
#: is checked where it is read, key by key. ``Any``: no type crosses a file or a process.
Parsed: TypeAlias = Any

#: A backend as the engine and the judges hold it once loaded (``EngineWorkload.resolve``): a stack's
#: ``Backend``, a workload's adapter (``grad(params, inputs)``), a worker's stand-in (``IsolatedBackend``)
#: or a user's object. Its optional methods (``hvp``, ``estimate``, ``activations``, ``loss``, ...) are
#: found by what it has. ``Any``: no one protocol names them all.
Loaded: TypeAlias = Any
