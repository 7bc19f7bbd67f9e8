"""The constants an original keeps in float32, which a float64 check cannot make finer.

Hugging Face's PyTorch Marian, Pegasus, RoFormer and XGLM store their sinusoidal position tables in
float32 (a buffer, or a frozen parameter), which their float64 pass casts from the float32 values;
Flax builds the same table in float64. The two float64 outputs then differ by float32's rounding of the
table (1e-7; 1e-14 with an exact table), which no noise probe sees: the constant is rounded once, not at
every evaluation. Such constants (floating buffers and frozen parameters the mapping does not carry,
whose values are float32 numbers and not integers) are found here; ``by_design`` judges the modules
holding them, and what they feed, at float32's rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def kept_in_float32(model: Any, module: str, mapped: set[str]) -> list[str]:
    """The constants of ``model``'s submodule ``module`` (PyTorch names) that are float32 numbers:
    floating buffers and frozen parameters, not in ``mapped`` and not integer-valued."""
    try:
        owner = model.get_submodule(module) if module else model
    except (AttributeError, TypeError):
        return []
    frozen = [(n, p) for n, p in owner.named_parameters() if not p.requires_grad]
    found = []
    for name, tensor in [*owner.named_buffers(), *frozen]:
        full = f"{module}.{name}" if module else name
        if full in mapped or not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        values = tensor.detach().cpu().double().numpy()
        if np.all(values == np.round(values)):  # position ids, counters: exact in any float
            continue
        if np.array_equal(values.astype(np.float32).astype(np.float64), values):
            found.append(full)
    return found
