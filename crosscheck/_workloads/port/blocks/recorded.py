"""One block's recording, as the blockwise check reads it back (``record.load``) and proves a rebuilt
block by it (``proof``): plain arrays and values, no framework."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass
class Recorded:
    """One block's recording: its array inputs by argument name, its other arguments, the cotangent of
    each floating-point array of its output, its weights (when saved) and how often it was called."""

    block: str
    index: int
    inputs: dict[str, np.ndarray]
    constants: dict[str, Any]
    cotangents: list[np.ndarray]
    weights: dict[str, np.ndarray]
    calls: int
    #: The arguments that were tuples of arrays: name -> how many (kept as inputs ``NAME[0]``, ...).
    tuples: dict[str, int] = dataclasses.field(default_factory=dict)
    #: The model's block's output on these inputs (each floating-point array; saved with the weights):
    #: what a block rebuilt by ``torch_block`` must reproduce, bit for bit, before its check counts.
    outputs: list[np.ndarray] = dataclasses.field(default_factory=list)
    #: PyTorch's intra-op threads when it was recorded (the rebuilt block's output is computed with as
    #: many: a sum split otherwise may round otherwise).
    threads: int | None = None
    #: How the block's check makes its loss (``Blocks.cotangent``: ``"model"`` or ``"random"``).
    cotangent: str = "model"
    #: The model's block's gradient of that loss at the recorded inputs (saved with the weights),
    #: ``weight/NAME`` and ``input/NAME`` (``proof.backward``): what a rebuilt block must reproduce too.
    backward: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    #: Why that gradient could not be recorded (None: it was, or no weights were saved).
    backward_problem: str | None = None
