"""A float64 check's difference that is float32's rounding of a constant the original keeps in float32.

Hugging Face's PyTorch Marian, Pegasus, RoFormer and XGLM store their sinusoidal position tables in
float32 (a buffer, or a frozen parameter), which their float64 pass casts from the float32 values;
Flax builds the same table in float64. The two float64 outputs then differ by float32's rounding of the
table (1e-7; 1e-14 with an exact table), which no noise probe sees: the constant is rounded once, not at
every evaluation. The verdict's module, whose output first differs while its input agrees, is searched
for such constants (floating buffers and frozen parameters the mapping does not carry, whose values are
float32 numbers and not integers) and, where its output agrees within float32's rounding, they are
named (first in the modules without a JAX counterpart that run just before it, where the verdict
lists them): the float64 check cannot be made of that module as the original is; it still fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.record import Comparison
from crosscheck._workloads.port.judge.verdict import Origin
from crosscheck._workloads.port.judge.view import PortView

if TYPE_CHECKING:
    from crosscheck._workloads.port.sides.torch_side import ModuleCall


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


def within_float32(found: Any, outputs: Sequence[Any]) -> bool:
    """Whether a module comparison's largest difference is within float32's rounding of its output's
    scale (``terms.bound``: ``PERMIT_ULPS`` float32 unit roundoffs of the largest entry of ``outputs``,
    the original's)."""
    arrays = [np.abs(np.asarray(a, np.float64)) for a in outputs if np.size(a)]
    if found.max_abs_diff is None or not arrays:
        return False
    largest = max(float(np.max(a)) for a in arrays)
    return bool(found.max_abs_diff <= terms.bound(np.asarray(largest), 0.0, "float32"))


def named(
    verdict: Origin,
    workload: PortView,
    dtype: str,
    comparisons: list[Comparison],
    records: Sequence[ModuleCall],
) -> Origin:
    """``verdict`` with ``note``'s words on the port ``workload``'s original (its PyTorch model, the
    tensors its mapping carries, its module ``records`` at the case's dtype)."""
    if dtype != "float64" or verdict.starts_in != "forward" or verdict.module is None:
        return verdict
    found = next((c for c in comparisons if c.module == verdict.first), None)
    record = next((r for r in records if r.name == verdict.first), None)
    if found is None or record is None or not within_float32(found, record.outputs):
        return verdict
    mapped = {e.torch.name for e in workload.prepared.table.mapped() if e.torch is not None}
    # the modules without a JAX counterpart between the last that agrees and the first that differs
    # (Marian's `encoder.embed_positions`), then the module the verdict names
    for owner in (*verdict.suspects, verdict.module):
        base = owner.partition("#")[0]
        names = kept_in_float32(workload.port.torch, base, mapped)
        if names:
            break
    else:
        return verdict
    shown = ", ".join(f"`{n}`" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    said = (
        f"; `{base or '(model)'}` uses {shown}, a constant the original keeps in float32 (its values are "
        f"float32 numbers, not mapped to the port): its float64 output carries float32's rounding of it, "
        f"and the two outputs agree within float32's rounding (largest difference {found.max_abs_diff:.3g}): "
        "a float32 constant in a float64 check (a sinusoidal position table?); build it in float64 on "
        "the PyTorch side to check in float64, or check in float32"
    )
    return dataclasses.replace(verdict, text=verdict.text + said)
