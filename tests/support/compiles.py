"""The XLA compilations a test session makes, counted (``jax.monitoring``'s backend compile events):
``COMPILES`` gets each one's seconds, appended for the whole session; a test reads how many its own
work added. Imports jax: a test imports it after ``pytest.importorskip("jax")``."""

from __future__ import annotations

import jax

#: Each compilation's seconds, in the order they were made.
COMPILES: list[float] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **_: (
        COMPILES.append(seconds) if event == "/jax/core/compile/backend_compile_duration" else None
    )
)
