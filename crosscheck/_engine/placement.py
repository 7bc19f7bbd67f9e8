"""Where the guarded calls put the JAX side, read and changed for a while (the engine's ``Caller``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from crosscheck._engine.call import placed


class Placement:
    """The run's settings for the JAX side (``Execution.jax``), ``settings``, as each call applies them."""

    settings: Mapping[str, str] | None

    def placed(self) -> contextlib.AbstractContextManager[None]:
        """The settings in effect here, as inside each call: where a backend's calls run is read under
        them (``device.arithmetic``)."""
        return placed(self.settings)

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """The JAX side's calls on the host CPU while in effect (``Execution.jax_platform`` ``"cpu"``,
        the precision kept): a re-run the accelerator cannot make (a float64 operation it lacks)."""
        before = self.settings
        self.settings = {**(before or {"jax_precision": "default"}), "jax_platform": "cpu"}
        try:
            yield
        finally:
            self.settings = before
