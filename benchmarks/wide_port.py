"""The custom op example (``examples/port/custom_op.py``) at 2.1 million parameters: widths 512, 2048
and 512, 8 sequences of 128 tokens, where the comparisons' cost shows. ``wide_port:NAME`` is the
example's ``NAME`` at this width (``port``, or a planted bug of its ``BUGS``), a spec ``crosscheck run
--workload`` loads with the repository root and ``benchmarks`` on ``PYTHONPATH``; ``backward_cost.py``
calls it ``wide:NAME``. Importing it widens the example in this process."""

from __future__ import annotations

from typing import Any

from examples.port import custom_op

#: The custom op example's widths and batch here.
WIDE = {"D_IN": 512, "HIDDEN": 2048, "D_OUT": 512, "BATCH": 8, "TOKENS": 128}
for _key, _value in WIDE.items():
    setattr(custom_op, _key, _value)


def __getattr__(name: str) -> Any:  # built when asked for, as the example's ports are
    if name != "port" and name not in custom_op.BUGS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    change = custom_op.BUGS[name].change if name in custom_op.BUGS else {}
    return custom_op.make_port(name=f"custom-op-wide-{name}".replace("_", "-"), **change)
