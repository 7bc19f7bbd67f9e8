"""Every tolerance term, built in one place with the words a report says about it.

An entry passes when its difference is within a sum of named terms (``compare.Tolerance``); each judge
and localizer builds its terms here, each one a small pure function beside its help text (a report's
``tolerance_sources``), and hands the workload's own nouns in (what was re-run, over what):

- ``floor``: so many unit roundoffs of the largest reference entry (``FLOOR_ULPS``, or
  ``SAFETY_FLOOR_ULPS`` where a judge's floor is the safety factor of its rounding, the same 8),
  summed over a direction's entries with ``across``; ``floor_help``; in a float64 case, where both
  values lie within float64 rounding of the gradient's scale, twice that (``saturated``).
- ``modelled``: ``SAFETY`` standard deviations of a rounding error that is modelled (Monte Carlo
  arithmetic on the case) or estimated; ``modelled_help``.
- ``measured``: a rounding measured by a re-run in the other precision, ``SAFETY x (|difference| + its
  RMS)``, the difference widened to a float64 case's by ``WIDEN`` (``widening``); ``measured_help``.
- the permit (``bound``, ``median_ratio``, ``cap``): what a dtype's rounding permits a re-run's
  difference, so that no candidate sets its own tolerance: float32's (``PERMIT_ULPS``) or, the 16-bit
  cap, a 16-bit dtype's own (``LOW_PERMIT_ULPS``); ``permit_dtype`` says which; ``capped``, entry by
  entry (a module's output), says a re-run that is no re-rounding (``Redrawn``: a random draw); a side
  that ran on an accelerator is permitted its device's arithmetic too (``device.Arithmetic``).
- ``slack``'s help (``TERM_HELP``): the same for every workload.

The permit. A side's rounding is measured by re-running it in the other precision; that difference is
evidence, not a tolerance to take as it comes: an error that exists only in a side's float32 run (a
bfloat16 step, an approximation taken only in float32, a nondeterministic result) would otherwise be
its own tolerance. ``bound`` says, from the float64 result alone, what float32 rounding may do to each
entry: ``PERMIT_ULPS`` float32 unit roundoffs of the entry's scale (``|value|`` + the RMS of its array
+ an optional scale shared by all arrays). ``median_ratio`` judges a measured difference against it by
its typical entry, so that isolated entries (a kink decided differently in the two precisions) do not
count.

A 16-bit case (bfloat16, float16) re-runs each side in float32; what its rounding permits is
``LOW_PERMIT_ULPS`` of the dtype's own unit roundoff, a number calibrated on healthy ports, not 256 u
(which is 100 % of an entry in bfloat16): ``docs/measurements/mixed-precision.md``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar, overload

import numpy as np

from crosscheck._compare import whole
from crosscheck._compare.constants import FLOOR_ULPS, SAFETY, WIDEN
from crosscheck._compare.device import Arithmetic
from crosscheck._compare.dtypes import is_low, unit_roundoff
from crosscheck._types import Floats

#: What the tolerance terms that mean the same for every workload are (a report's ``tolerance_sources``).
TERM_HELP = {
    "slack": "user slack: atol + rtol * |reference|",
}

# -- the floor --------------------------------------------------------------------------------------

#: A floor of ``SAFETY`` unit roundoffs: the floor of the judges whose rounding term is ``SAFETY`` times
#: a rounding estimate (a modelled one, or the HVP's re-run), the safety factor applied to one unit
#: roundoff of the largest entry. The same 8 as ``FLOOR_ULPS``; named so that neither moves the other.
SAFETY_FLOOR_ULPS = SAFETY

#: A term of one number, or of an array of them (one per entry, per step), as its argument is.
_F = TypeVar("_F", float, np.ndarray)


def largest(values: Any) -> float:
    """The largest magnitude of ``values`` (0 for none): what a floor is a number of unit roundoffs of.
    A real float array's from its largest and smallest entries (no array of magnitudes; NaN as NaN)."""
    array = np.asarray(values)
    if array.dtype.kind != "f" or array.size == 0:
        return float(np.max(np.abs(array), initial=0.0))
    top, bottom = float(np.max(array)), float(np.min(array))
    if math.isnan(top) or math.isnan(bottom):
        return math.nan
    return max(0.0, abs(top), abs(bottom))


@overload
def floor(largest: float, u: float, *, ulps: float = ..., across: float = ...) -> float: ...
@overload
def floor(largest: np.ndarray, u: float, *, ulps: float = ..., across: Floats = ...) -> np.ndarray: ...
@overload
def floor(largest: Floats, u: float, *, ulps: float = ..., across: np.ndarray) -> np.ndarray: ...
def floor(largest: Floats, u: float, *, ulps: float = FLOOR_ULPS, across: Floats = 1.0) -> Floats:
    """``ulps`` unit roundoffs ``u`` of the largest reference entry ``largest`` (a number, or an array
    of them: one per step), the precision no entry is asked to beat; ``across``: the entries of a
    direction it is summed over (their count, or the direction's norm: in quadrature)."""
    return ulps * u * across * largest


def saturated(candidate: Any, reference: Any, shared: float, dtype: str) -> np.ndarray:
    """Per entry, a floor where both values lie within ``dtype``'s rounding of the gradient's scale
    (``bound`` of the reference, ``shared`` the whole gradient's RMS): twice that bound there, 0
    elsewhere. In a float64 case the measured rounding comes from a float32 re-run, which is blind where
    float32 saturates before float64 does (a tanh GELU far in its tail: float32's derivative exactly 0,
    float64's a cancellation, a few times 1e-14 of the gradient's scale): two values that float64
    rounding cannot tell from zero are not a difference. A value beyond the bound (any real error of
    more than ``PERMIT_ULPS`` float64 unit roundoffs of the scale) keeps the plain floor."""
    limit = bound(np.asarray(reference, np.float64), shared, dtype)
    cand = np.abs(np.nan_to_num(np.asarray(candidate, np.float64), nan=np.inf))
    both = (cand <= limit) & (np.abs(np.asarray(reference, np.float64)) <= limit)
    return np.where(both, 2.0 * limit, 0.0)


def floor_help(of: str, *, ulps: float = FLOOR_ULPS, then: str = "") -> str:
    """What a floor of ``ulps`` unit roundoffs ``of`` the largest entry is (``then``: what it means)."""
    return f"{ulps:g} unit roundoffs of {of}{then}"


# -- the rounding, modelled or measured --------------------------------------------------------------


def modelled(sigma: _F) -> _F:
    """``SAFETY`` standard deviations of a rounding error ``sigma`` (modelled, or estimated): never
    reached by chance, p < 1e-15 for a Gaussian error."""
    return SAFETY * sigma


def modelled_help(what: str) -> str:
    """What a modelled rounding term is: ``what`` the rounding can produce, and how many sigma."""
    return f"{what} (modelled, x{SAFETY:g} sigma)"


def rms(values: np.ndarray) -> float:
    """The root mean square of ``values`` (0 for none). A long float64 array a piece at a time
    (``whole.rms``: the same pairwise sum, never a square of the whole tensor)."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64 and values.flags.c_contiguous:
        if values.size > whole.PIECE:
            return whole.rms([values], clean=False)
    return math.sqrt(float(np.mean(np.square(values)))) if np.size(values) else 0.0


def widening(dtype: str) -> float:
    """What a re-run's difference is multiplied by to be ``dtype``'s rounding: float64's per float32's
    (``WIDEN``, ``2**-29``) in a float64 case, whose re-run is in float32; 1 otherwise."""
    return WIDEN if dtype == "float64" else 1.0


def measured(
    difference: np.ndarray, spread: Floats | None = None, *, widen: float = 1.0, own: bool = False
) -> np.ndarray:
    """The rounding measured by a re-run in the other precision: ``SAFETY x widen x (|difference| +
    spread)``, ``spread`` the difference's RMS (over the array unless given: over a layer, a step),
    which guards entries where the two precisions agree by chance; ``widen``: ``widening``, where the
    difference is not already scaled (one re-run is one sample of the rounding); ``own``: the array
    ``difference`` is the caller's to overwrite (the term is made in it, the same numbers)."""
    spread = rms(difference) if spread is None else spread
    if own and isinstance(difference, np.ndarray) and np.shape(spread) == ():
        difference += spread
        difference *= SAFETY * widen
        return difference
    return SAFETY * widen * (difference + spread)


def measured_help(whose: str, difference: str, spread: str, *, then: str = "", again: bool = False) -> str:
    """What a measured rounding term is: ``whose`` rounding, ``SAFETY x (difference + spread)``, and
    ``then`` how it was scaled; ``again``: measured as the term before it was."""
    if again:
        return f"{whose}, measured the same way ({SAFETY:g} x ({difference} + {spread}))"
    return f"{whose}, measured: {SAFETY:g} x ({difference} + {spread}){then}"


# -- the permit: what a dtype's rounding permits ------------------------------------------------------

#: Healthy workloads and ports measure a median of at most ~5 and a largest entry of ~30 float32 unit
#: roundoffs of this scale (``docs/explanations/reliability.md``); bfloat16 rounding is ~10,000 and a
#: 1 % error ~100,000.
PERMIT_ULPS = 256.0
#: A 16-bit dtype's: its unit roundoffs of the same scale, against its float32 re-run. Healthy GPT-2
#: measures a median of at most 5.1 (bfloat16, 20 seeds) and 6.2 (float16, 20 seeds), the convnet 0.5:
#: 16 leaves a factor 2.6. Planted porting bugs change both runs alike and are caught against the
#: reference, not by this; a side far off its own float32 run is (``docs/measurements/mixed-precision.md``).
LOW_PERMIT_ULPS = {"bfloat16": 16.0, "float16": 16.0}


def permit_ulps(dtype: str) -> float:
    """How many of ``dtype``'s unit roundoffs its rounding may cost an entry's scale."""
    return LOW_PERMIT_ULPS.get(dtype, PERMIT_ULPS)


def permit_dtype(dtype: str) -> str:
    """Whose permit caps a re-run's difference in a ``dtype`` case: a 16-bit dtype's own (the 16-bit
    cap, against its float32 re-run), else float32's (float32 against float64)."""
    return dtype if is_low(dtype) else "float32"


def bound(
    wide: np.ndarray, shared: float = 0.0, dtype: str = "float32", *, device: Arithmetic | None = None
) -> np.ndarray:
    """Per entry, the difference ``dtype``'s rounding permits against the wider precision, from the wide
    result ``wide`` (and ``shared``, a scale common to several arrays: the RMS of a whole gradient):
    float32 against float64, or a 16-bit dtype against float32; with ``device``, what the arithmetic
    of the device the narrow run computed on permits too (``device.Arithmetic.permit``)."""
    per = permit_ulps(dtype) * unit_roundoff(dtype)
    if device is not None:
        per = device.permit(per)
    value = np.abs(np.asarray(wide, np.float64))  # its own array: the rest in place, the same numbers
    if not isinstance(value, np.ndarray):  # a 0-d array's: a NumPy scalar, as it always was
        value = np.nan_to_num(value, nan=0.0, posinf=0.0)
        return per * (value + rms(value) + shared)
    if not whole.finite(value):  # a pass of its own only where there is a NaN or an infinity
        np.nan_to_num(value, copy=False, nan=0.0, posinf=0.0)
    spread = rms(value)
    value += spread
    value += shared
    value *= per
    return value


def travelled(path: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """What ``dtype``'s rounding permits a sum for the ``path`` it travelled (``sum |steps|``), beside
    ``bound`` of its value: a trajectory's entry is its start plus every update, each rounded."""
    return permit_ulps(dtype) * unit_roundoff(dtype) * path


def median_ratio(diff: np.ndarray, permit: np.ndarray, wide: np.ndarray | None = None) -> float:
    """The typical entry's measured difference over what is permitted (> 1: beyond float32). Entries
    zero in both precisions (a dead ReLU unit's, an unused parameter's) say nothing and are left out
    when ``wide`` is given. In place on its own copy of ``diff``: the ratios, then the informative ones."""
    ratios = np.atleast_1d(np.abs(np.asarray(diff, np.float64)))  # its own array (a 0-d one's: 1 entry)
    zero = ratios == 0
    # Without a zero difference, no ratio is set to 0 and every entry is informative: both passes skipped.
    some = bool(zero.any())
    informative = None if wide is None or not some else ~zero | (np.asarray(wide) != 0)
    inside = np.broadcast_shapes(ratios.shape, np.shape(permit)) == ratios.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.divide(ratios, permit, out=ratios if inside else None)
    return median_of_ratios(ratios, zero if some else None, informative)


def median_of_ratios(
    ratios: np.ndarray, zero: np.ndarray | None, informative: np.ndarray | None, *, nonnegative: bool = False
) -> float:
    """``median_ratio`` from its ratios (``|diff| / permit``, at least 1-d, its own array: in place),
    ``zero`` where ``diff`` is 0 (None: nowhere) and the ``informative`` entries (None: every one);
    ``nonnegative``: the caller knows no ratio has its sign bit set once ``zero``'s are 0 (not looked at)."""
    if zero is not None:
        ratios[np.broadcast_to(zero, ratios.shape)] = 0.0
    left = 0  # the entries left out: each a ratio set to +0 above
    if informative is not None:
        keep = np.broadcast_to(informative, ratios.shape)
        left = ratios.size - int(np.count_nonzero(keep))
        if left == ratios.size:
            return 0.0
        # else they are the smallest: skipped in the median
        if left and not (nonnegative or _nonnegative(ratios)):
            ratios, left = ratios[keep], 0
    if np.size(ratios) == 0:
        return 0.0
    if not whole.finite(ratios):
        np.nan_to_num(ratios, copy=False, nan=np.inf)
    # No sign bit: the zeros are the least entries, all +0. Where they reach past the middle the median
    # is +0, taken without a partition (one that NumPy makes slowly among many equal entries).
    zeros = ratios.size - int(np.count_nonzero(ratios)) if nonnegative else 0
    if zeros and left + (ratios.size - left) // 2 < zeros:
        return 0.0
    return _past_zeros(ratios, zeros, left) if zeros else median(ratios, skip=left)


#: Entries ``_past_zeros`` moves at once (its temporary: one block's nonzero entries).
MOVE = 1 << 18


def _past_zeros(values: np.ndarray, zeros: int, skip: int) -> float:
    """``median(values, skip)`` of entries none of which has its sign bit set, ``zeros`` of them +0 and
    the middle past them: the nonzero entries moved to the front (in place, a block at a time) and only
    they partitioned. The same order statistics, the same mean: NumPy's partition is slow where many
    entries equal the one it seeks (a second where half a tensor's ratios are 0)."""
    flat, kept = values.reshape(-1), 0
    for i in range(0, flat.size, MOVE):
        block = flat[i : i + MOVE]
        moved = block[block != 0]  # a copy: written at or before the block it came from
        flat[kept : kept + moved.size] = moved
        kept += moved.size
    return _among_nonzero(flat[:kept], flat.size, skip)


def median_past_zeros(nonzero: np.ndarray, size: int, left: int) -> float:
    """``median_of_ratios(nonnegative=True)`` of ``size`` ratios none of which has its sign bit set, from
    their nonzero entries alone (``nonzero``: a 1-d array of its own, in place, cleaned as
    ``median_of_ratios`` cleans them: no NaN, no infinity), the others +0 and ``left`` of those left out
    (not informative): the same number, where the caller kept only the nonzero ratios as it made them
    (``ratios.blocked``: no pass over the zeros)."""
    zeros = size - nonzero.size
    if left == size:  # every entry left out (or none at all)
        return 0.0
    if zeros and left + (size - left) // 2 < zeros:
        return 0.0
    return _among_nonzero(nonzero, size, left) if zeros else median(nonzero, skip=left)


def _among_nonzero(part: np.ndarray, size: int, skip: int) -> float:
    """``median(values, skip)`` of ``size`` values of which ``part`` are the nonzero ones (none has its
    sign bit set, no NaN), the others +0, the middle past them: only ``part`` partitioned (in place)."""
    half = skip + (size - skip) // 2 - (size - part.size)
    part.partition(half)
    if (size - skip) % 2:
        return float(np.mean(part[half : half + 1]))
    low = np.max(part[:half]) if half else 0.0
    return float(np.mean(np.array([low, part[half]])))


def _nonnegative(ratios: np.ndarray) -> bool:
    """Whether no ratio has its sign bit set (no negative, no -0: ``+0`` is then the least; a NaN
    becomes infinite)."""
    return not np.signbit(ratios).any()


def median(values: np.ndarray, skip: int = 0) -> float:
    """``np.median(values, overwrite_input=True)`` of an array without NaN, the same number in less: one
    partition at the upper middle entry (``np.median`` also partitions at the last entry, its NaN check),
    the lower middle entry the largest below it, and their mean as ``np.mean`` takes it. In place.
    ``skip``: the median of the entries but ``skip`` of its least (all equal, the least of the array)."""
    part = values.reshape(-1)
    size = part.size - skip
    if size < 2 and not skip:
        return float(np.median(part, overwrite_input=True))
    half = skip + size // 2
    part.partition(half)
    if size % 2:
        return float(np.mean(part[half : half + 1]))
    return float(np.mean(np.array([np.max(part[:half]), part[half]])))


def cap(
    signed: np.ndarray, wide: np.ndarray, shared: float = 0.0, dtype: str = "float32"
) -> tuple[np.ndarray, float]:
    """A measured difference ``signed`` (the ``dtype`` result minus the wider ``wide``), clipped at
    ``bound`` where its typical entry is beyond it, and that ``median_ratio``: never its own tolerance."""
    limit = bound(wide, shared, dtype)
    ratio = median_ratio(signed, limit, wide)
    return (np.clip(signed, -limit, limit) if ratio > 1.0 else signed), ratio


#: A re-run whose difference is beyond ``bound`` in more than this share of an array's entries (and in
#: ``REDRAWN_ENTRIES`` at least) is not a re-rounding of the same computation: a random draw made again
#: (a dropout's mask: JAX draws its uniforms in the default float dtype, so its float64 re-run draws
#: another mask). A healthy output's entries stay within the bound (the gradients' largest entry measures
#: ~30 of its 256 unit roundoffs); a kink decided differently in the two precisions moves no output
#: entry past it (an output is continuous there).
REDRAWN_SHARE = 0.01
REDRAWN_ENTRIES = 2
#: Entries at the edge of float32's range are a dtype's constant, not a rounding: a mask of the dtype's
#: minimum (T5's causal mask, `finfo(dtype).min`: -3.4e38 in float32, -1.8e308 in float64) differs
#: between the precisions by design, and never counts as a redrawn entry.
RANGE_EDGE = float(np.finfo(np.float32).max) / 1024


@dataclasses.dataclass(frozen=True)
class Redrawn:
    """A re-run that is not the same computation: ``entries`` of ``total`` beyond what ``dtype``'s
    rounding permits, the worst by ``ratio`` times it."""

    entries: int
    total: int
    ratio: float
    dtype: str


def capped(
    diff: np.ndarray, wide: np.ndarray, dtype: str = "float32", *, device: Arithmetic | None = None
) -> tuple[np.ndarray, Redrawn | None]:
    """A measured difference ``diff`` (``|narrow - wide|``) capped entry by entry at ``bound`` of the
    wider result ``wide`` (with the ``device``'s arithmetic, where the side ran on one), so that no
    entry sets its own tolerance; and, where too many entries are beyond it (``REDRAWN_SHARE``; entries
    at the edge of float32's range, ``RANGE_EDGE``, left out), the ``Redrawn`` that says the re-run is
    another computation."""
    diff = np.abs(np.asarray(diff, np.float64))
    with np.errstate(over="ignore"):  # a mask at float64's minimum: its RMS is inf, so no entry is capped
        limit = bound(wide, 0.0, dtype, device=device)
    # NaN is at no edge and an infinity at both, as ``nan_to_num`` makes them: no copy of ``wide`` made
    with np.errstate(invalid="ignore"):
        edge = np.abs(np.asarray(wide, np.float64)) >= RANGE_EDGE
    far = diff >= RANGE_EDGE
    inside = isinstance(edge, np.ndarray) and edge.shape == np.shape(far)
    edge = np.logical_or(edge, far, out=edge if inside else None)
    over = diff > limit
    over &= ~edge
    count = int(np.count_nonzero(over))
    redrawn = None
    if count >= REDRAWN_ENTRIES and count > REDRAWN_SHARE * diff.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            worst = float(np.max(np.where(over, diff / limit, 0.0)))
        redrawn = Redrawn(count, int(diff.size), worst, dtype)
    own = isinstance(limit, np.ndarray) and limit.shape == diff.shape  # ``bound``'s array, made for this
    return np.minimum(diff, limit, out=limit if own else None), redrawn
