"""The parts of a float64 check that the original computes in float32 by design (a timestep embedding, a
position table), found in its module records before any gradient is judged: they, and everything they
feed, are judged at float32's rounding, and the verdict says so.

- A module the original computes in float32 inside a float64 run: its output comes back float32
  (diffusers' ``Timesteps``, whose Flax twin does the same). Both sides' float64 results carry float32's
  rounding of it, which no noise probe sees: it is rounded once at the point (the timestep is an input,
  not a parameter), not at every evaluation.
- A module holding constants the original keeps in float32 (floating buffers and frozen parameters the
  mapping does not carry, float32 numbers and not integers: Hugging Face's sinusoidal position tables,
  ``float32_constants.kept_in_float32``). A port that builds the table in float64 differs from it by
  float32's rounding of the table.

A module of the port that computes in float32 where the original's does not is no such part: it fails
(``locate``). Judging at float32's rounding is what the original permits: its float64 pass is no finer
there. The cost is said: a difference below float32's rounding downstream of such a part is not seen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from crosscheck._workloads.port.judge.float32_constants import kept_in_float32

if TYPE_CHECKING:
    from crosscheck._workloads.port.sides.torch_side import ModuleCall


@dataclasses.dataclass(frozen=True)
class Part:
    """A module of the original (``module``, PyTorch's name; "" the model) that computes in float32 by
    design, and why (``because``: its output is float32, or the constants it holds)."""

    module: str
    because: str


def parts(records: Sequence[ModuleCall], model: Any, mapped: set[str], dtype: str) -> tuple[Part, ...]:
    """The parts of the original computed in float32 by design in a ``dtype`` check (none unless
    float64): from its module ``records`` at the case's dtype, its PyTorch ``model`` and the tensors
    its mapping carries (``mapped``)."""
    if dtype != "float64":
        return ()
    because: dict[str, list[str]] = {r.name: ["its output is float32"] for r in records if r.narrow}
    held: dict[str, list[str]] = {}
    for name in kept_in_float32(model, "", mapped):
        held.setdefault(name.rpartition(".")[0], []).append(name)
    for owner, names in held.items():
        shown = ", ".join(f"`{n}`" for n in names[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else ""
        )
        because.setdefault(owner, []).append(f"it holds {shown}, constants kept in float32")
    return tuple(Part(module, "; ".join(why)) for module, why in because.items())


def said(found: Sequence[Part]) -> str:
    """The verdict's words on the parts computed in float32 by design ("" when there are none)."""
    if not found:
        return ""
    each = "; ".join(f"`{p.module or '(model)'}` ({p.because})" for p in found[:4])
    more = f"; and {len(found) - 4} more" if len(found) > 4 else ""
    return (
        f"; the original computes in float32 by design: {each}{more}: in this float64 check those parts "
        "and everything they feed (module outputs, gradients, the float64 losses) are judged at float32's "
        "rounding, the finest the original holds there; a difference below it is not seen there"
    )


def mirrored(found: Sequence[Part], paired: dict[str, str]) -> set[str]:
    """The port's modules paired with a part of the original that computes in float32 by design (its
    float32 output there mirrors the original's, and is no failure)."""
    return {paired[p.module] for p in found if p.module in paired}
