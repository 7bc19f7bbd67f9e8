"""What a device's reduced-precision products can do to a side's result, modelled per operation on the case,
and what a run at that precision may therefore be explained by.

A device's product at a reduced precision rounds each input to the device's unit ``u`` (a TPU's float32
product at JAX's default precision: bfloat16's 2^-8) and sums in float32: a product of length K with
terms p_t errs by about ``u * sqrt(sum p_t**2)``, sqrt(K) units of a term. What that does to a gradient is
not a constant of the device: a softmax turns a logit's absolute error into a relative one, layers
compound it (on a simulated TPU, the worst parameter of a healthy small convolutional network differs
from float32's by a median of 0.12 units of its scale, the zoo's ViT's by 3.1). So it is computed on the
case, as the rounding model of the stack computes float32's: the side's own program run on the host CPU
with each product the device makes at that precision rounding its inputs to ``u`` (the side's
``modelled(params, inputs, unit)``; the JAX side: ``backends/jax/rounded.py``), against the same program
unrounded.

``summary`` measures, per parameter, the run's difference from float32 (``asked``: the device's result
against the host's) and the model's (``modelled``), each the median entry's in units ``u`` of the entry's
scale (``|float32| + its RMS + the whole gradient's RMS``, ``terms.bound``'s). ``beyond`` names the
parameters whose run differs by more than ``MODEL_FACTOR`` times the model plus ``MODEL_FLOOR_UNITS``:
a difference the reduced precision cannot produce. The figures are measured on healthy ports and
planted differences: ``docs/measurements/accelerator.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from crosscheck._compare import terms, whole

#: How far a run's median difference may exceed the modelled one: the device's other arithmetic (its
#: float32 sums in another order, its elementwise functions' ~4,000 ulps) moves it too. On the simulated
#: TPU, healthy ports (the zoo's, the examples') used at most 0.2 of ``MODEL_FACTOR x modelled +
#: MODEL_FLOOR_UNITS``; a factor 2 made only at the default precision uses it many times over.
MODEL_FACTOR = 4.0
#: Units of the device's unit roundoff of an entry's scale that no run is asked to beat (a parameter
#: whose modelled median is a tenth of a unit: a deep stack's last blocks, four entries each).
MODEL_FLOOR_UNITS = 2.0


def summary(
    asked: Mapping[str, Any], modelled: Mapping[str, Any], exact: Mapping[str, Any], unit: float
) -> dict[str, list[float]]:
    """Per parameter of ``exact`` (the program's float32 result, unrounded), ``[asked, modelled]``: the
    median entry's difference of the run's result ``asked`` and of the model's ``modelled`` from it, in
    units ``unit`` of the entry's scale."""
    names = [k for k in exact if k in asked and k in modelled]
    shared = whole.rms([np.asarray(exact[k], np.float64) for k in names]) if names else 0.0
    out = {}
    for k in names:
        wide = np.abs(np.asarray(exact[k], np.float64))
        scale = wide + terms.rms(wide) + shared
        out[k] = [_median(asked[k], exact[k], scale) / unit, _median(modelled[k], exact[k], scale) / unit]
    return out


def _median(value: Any, exact: Any, scale: np.ndarray) -> float:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(np.asarray(value, np.float64) - np.asarray(exact, np.float64))
        ratio = np.where(scale > 0, diff / scale, 0.0)
    return float(np.median(np.nan_to_num(ratio, nan=np.inf))) if ratio.size else 0.0


def used(asked: float, modelled: float) -> float:
    """How much of what the model permits a run's median difference uses (> 1: beyond it)."""
    return asked / (MODEL_FACTOR * modelled + MODEL_FLOOR_UNITS)


def worst(found: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """The parameters of a ``summary``, each ``(name, asked, modelled)``, the one that uses most of what
    the model permits first (``used``)."""
    rows = [(str(k), float(v[0]), float(v[1])) for k, v in found.items()]
    return sorted(rows, key=lambda e: -used(e[1], e[2]))


def beyond(found: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """The parameters of a ``summary`` whose run differs beyond what the modelled rounding can produce,
    each ``(name, asked, modelled)``, the worst first."""
    return [row for row in worst(found) if used(row[1], row[2]) > 1.0]
