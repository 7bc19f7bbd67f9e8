"""Where the guarded calls put each side, read and changed for a while (the engine's ``Caller``).

The run's placement is one ``Placement`` per framework that declares settings (``Execution.placement``);
the engine passes the records as they are and asks each for its framework's own values (``on_host``),
so nothing here names a framework or a setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from crosscheck._backends import placements
from crosscheck._backends.placement import Placement
from crosscheck._engine.call import placed


class Placing:
    """The run's placement (``Execution.placement``), ``placement``, as each call applies it."""

    placement: tuple[Placement, ...]

    def placed(self) -> contextlib.AbstractContextManager[None]:
        """The placement in effect here, as inside each call: where a backend's calls run is read under
        it (``device.arithmetic``)."""
        return placed(self.placement)

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """Each side's calls on the host CPU while in effect (each framework's own ``host`` values, as
        its folder declares them), its other settings kept: a re-run the accelerator cannot make (a
        float64 operation it lacks)."""
        before = self.placement
        self.placement = tuple(record.on_host() for record in before or placements())
        try:
            yield
        finally:
            self.placement = before
