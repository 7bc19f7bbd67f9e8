"""A candidate's rounding, *measured*: the same backend re-run on the same values in the other precision.

For a float32 case, ``|g32 - g64|``; for a float64 case, ``|g64 - g32|`` scaled by ``2**-29`` (rounding
error is, to first order, proportional to the unit roundoff). The per-entry term is that difference
plus its RMS over the parameter (one re-run is one sample of the rounding), times ``SAFETY``; the
signed difference is kept too, so that screening can project it on its directions.

A candidate cannot set its own tolerance with this: the measured difference is evidence, judged against
what float32 rounding permits (``ratios.permitted``, ``crosscheck._compare.terms``: ``PERMIT_ULPS`` unit
roundoffs of the entry's scale, from its float64 gradient). A parameter whose typical (median) entry
differs by more than that does not compute in float32 precision (a bfloat16 step, an approximation taken
only in float32, a nondeterministic gradient): its term is capped at the permitted bound and the
candidate fails with the measured ratio (``Excess``). Isolated entries beyond it (a kink flipped between
the two precisions) keep their measured term.
In a float32 case whose float64 re-run keeps float32 steps (Hugging Face's upcasts, found by the noise
probe), ``|g32 - g64|`` is two float32 roundings, and each is permitted that bound (``TWO_ROUNDINGS``).

The float64 run is checked, not trusted (``pinned``): it must come back in float64 and hold float64 numbers. A
module pinned to float32 (a Flax module built with ``dtype=float32``, a PyTorch module that casts)
computes in float32 whatever it is given, so its "float64" result is the float32 result (bit for bit,
or at least float32 numbers in every entry); such a run gets the conservative bound
(``FALLBACK_ULPS`` float32 unit roundoffs of ``|gradient|`` + RMS) and a note naming the
implementation.

A 16-bit case (bfloat16, float16) is re-run in float32, the precision its products accumulate in:
``|g16 - g32|`` is the candidate's 16-bit rounding, judged against what the dtype permits
(``terms.LOW_PERMIT_ULPS`` of its unit roundoff, calibrated on healthy ports). A float16 entry that
is non-finite where the float32 one is finite overflowed; one flushed to zero underflowed: both are
said as such (``sixteen.limits``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping

import numpy as np

from crosscheck._compare import terms, whole
from crosscheck._compare.constants import OTHER_DTYPE, UNIT_ROUNDOFF
from crosscheck._compare.device import Arithmetic
from crosscheck._compare.dtypes import is_low, unit_roundoff
from crosscheck._workloads.model.measured import (
    Measured,
    Narrowed,
)
from crosscheck._workloads.model.pinned import ran_in_float32
from crosscheck._workloads.model.ratios import blocked, blockwise, shared_scale
from crosscheck._workloads.model.sixteen import limits, unrounded

#: Without a usable re-run in the other precision: this many unit roundoffs of |gradient| + its RMS.
FALLBACK_ULPS = 1024.0
#: A float32 formula that loses bits, deterministically, as a healthy library's port does
#: (``docs/measurements/tolerances.md``: Flax's LayerNorm of a residual stream with a mean).
LOST_BITS = (
    "a formula that cancels in float32, such as a variance as E[x^2] - E[x]^2 of inputs with a large mean: "
    "Flax's `LayerNorm` default, `use_fast_variance=True`"
)


@dataclasses.dataclass(frozen=True)
class Excess:
    """A parameter whose float32 and float64 gradients differ beyond what float32 permits: ``ratio`` (the
    median entry's difference over the permitted bound), ``relative`` (the difference's RMS over the
    gradient's), ``bits`` (the significant bits that ``relative`` leaves)."""

    parameter: str
    ratio: float
    relative: float
    #: The case's dtype when it is a 16-bit one (measured against float32, not float64).
    low: str | None = None

    @property
    def bits(self) -> float:
        return -math.log2(self.relative) if self.relative > 0 else math.inf

    def says(self, name: str, dtype: str) -> str:
        if self.low is not None:
            dtype = self.low
            return (
                f"`{name}` computes `{self.parameter}` below {dtype} precision: its {dtype} and float32 "
                f"gradients differ by {self.relative:.2g} relative (RMS), {self.ratio:.3g} x what {dtype} "
                f"rounding permits, about {max(self.bits, 0.0):.0f} significant bits; a step below {dtype} "
                "(a narrower cast) or a nondeterministic gradient"
            )
        bits = self.bits
        like = " (bfloat16 keeps 8)" if 5 <= bits < 10 else " (float16 keeps 11)" if 10 <= bits < 14 else ""
        what = (
            f"`{name}` computes `{self.parameter}` below float32 precision"
            if dtype == "float32"
            else f"`{name}`'s float32 re-run of `{self.parameter}` is below float32 precision (noted only)"
        )
        return (
            f"{what}: its float32 and float64 gradients differ by {self.relative:.2g} relative (RMS), "
            f"{self.ratio:.3g} x what float32 rounding permits, about {bits:.0f} significant bits{like}; "
            f"a float32-only step (bfloat16, an approximation, {LOST_BITS}) or a nondeterministic gradient"
        )


@dataclasses.dataclass(frozen=True)
class Rounding:
    """A candidate's rounding: ``term`` per entry (the tolerance's ``rounding``), ``delta`` the signed
    measured difference (kept in float32, read in float64: ``Narrowed``; None when not measured),
    ``how`` it was obtained, ``honest`` False when its float64 run did not compute in float64.
    Measured, ``term`` is made from ``delta`` when read (``Measured``): read it once per use."""

    term: Mapping[str, np.ndarray]
    delta: Mapping[str, np.ndarray] | None
    how: str
    honest: bool = True
    #: Parameters whose measured difference is beyond what float32 permits (their term is capped).
    excess: tuple[Excess, ...] = ()
    #: The largest median entry's difference over what float32 permits, over the parameters (healthy:
    #: a few hundredths; > 1 is an excess); None when not measured.
    used: float | None = None
    #: A 16-bit case: per parameter, the entries its dtype's range lost (overflow, underflow), said.
    limits: dict[str, str] = dataclasses.field(default_factory=dict)
    #: A 16-bit case whose result shows no 16-bit rounding: it computed in float32 (``unrounded``).
    wide_only: bool = False


rms = terms.rms


def usable(again: dict | None, shapes: dict[str, tuple[int, ...]], other: str) -> bool:
    """Whether a re-run came back with every parameter, of its shape, in the other precision."""
    return again is not None and all(
        k in again and np.shape(again[k]) == s and again[k].dtype.name == other for k, s in shapes.items()
    )


#: A float32 case whose float64 re-run keeps float32 steps (Hugging Face's upcasts): ``|g32 - g64|`` is
#: the float32 run's rounding plus the float64 run's own float32 rounding, each permitted ``terms.bound``
#: (``docs/measurements/zoo.md``: a 9-layer Llama's JAX side, 1.04 of one bound, 0.52 of two).
TWO_ROUNDINGS = 2.0


def measure(
    value: dict[str, np.ndarray],
    again: dict[str, np.ndarray] | None,
    *,
    shapes: dict[str, tuple[int, ...]],
    dtype: str,
    name: str,
    steps: bool | Callable[[], bool] = False,
    consume: bool = False,
    device: Arithmetic | None = None,
) -> Rounding:
    """The rounding of the candidate ``name`` from its result ``value`` and its re-run ``again``;
    ``steps``: a float32 case whose float64 re-run keeps float32 steps (``oracle.precision``'s noise probe),
    so that ``|g32 - g64|`` is the difference of two float32 roundings, each permitted its bound; a
    callable is asked only where it matters: a float32 case with a parameter beyond the permit.
    ``consume``: ``again``'s arrays are the caller's to overwrite (the engine's private copies of a
    re-run, read by no one after): a float32 case's signed difference is made in its float64 arrays,
    and each entry of ``again`` is dropped (None) once its difference is kept (``Narrowed``).
    ``device``: where the candidate computed, on an accelerator: its arithmetic is permitted too
    (``device.Arithmetic``).

    A parameter at a time, the largest last: its ratio to the permit (a tensor's temporaries
    at a time), then its difference kept in float32 and, with ``consume``, its re-run's array dropped;
    a parameter beyond the permit is kept whole until the probe has said whether ``steps``."""
    other = OTHER_DTYPE[dtype]
    if not usable(again, shapes, other) or not all(
        k in value and np.shape(value[k]) == s for k, s in shapes.items()
    ):
        how = f"no usable re-run in {other}: {FALLBACK_ULPS:g} unit roundoffs of |gradient| + RMS"
        return Rounding(_fallback(value, shapes, unit_roundoff(dtype)), None, how)
    assert again is not None
    wide, narrow = (value, again) if dtype == "float64" else (again, value)
    if not is_low(dtype) and ran_in_float32(wide, narrow):  # a 16-bit re-run is float32 by design
        how = (
            f"`{name}` did not compute in float64: its float64 run gave float32 numbers (a module pinned "
            f"to float32?); conservative bound, {FALLBACK_ULPS:g} float32 unit roundoffs of "
            "|gradient| + RMS"
        )
        return Rounding(_fallback(value, shapes, UNIT_ROUNDOFF["float32"]), None, how, honest=False)
    lost = limits(value, again, shapes, dtype) if is_low(dtype) else {}
    wide_only = is_low(dtype) and unrounded(value, again, shapes, dtype)
    every = shared_scale(wide, shapes)
    probe = steps if callable(steps) else None
    steps = bool(steps) and probe is None and dtype == "float32"
    delta, spread = Narrowed(), dict[str, float]()
    keep = functools.partial(_keep, delta, spread, value, again, dtype, consume)
    ratios, beyond = {}, {}
    # A parameter at a time, the largest last: one within the permit is kept at once (its re-run's array
    # dropped, ``consume``), so the largest's temporaries come when the others' arrays are gone.
    for k in sorted(shapes, key=lambda k: np.size(wide[k])):
        ratio, found = _ratios(value, again, wide, {k: shapes[k]}, every, dtype, steps, device)
        ratios[k] = ratio[k]
        if found:  # beyond the permit (rare): kept whole until ``steps`` is known
            beyond[k] = found[0]
        else:
            keep(k, None)
    pending = [k for k in shapes if k in beyond]
    if probe is not None and dtype == "float32" and beyond and probe():
        steps = True
        # The permit doubled (``TWO_ROUNDINGS``): a ratio within it, halved, is the ratio made anew (the
        # permit and each ratio scaled exactly by a power of two); one beyond it is made anew.
        ratios = {k: r if k in beyond else r / TWO_ROUNDINGS for k, r in ratios.items()}
        anew, found = _ratios(
            value, again, wide, {k: shapes[k] for k in pending}, every, dtype, steps, device
        )
        ratios.update(anew)
        beyond = {e.parameter: e for e in found}
    for k in pending:  # a parameter still beyond the permit: its difference capped there
        keep(k, _bound(wide[k], every, dtype, steps, device) if k in beyond else None)
    delta.order(shapes)
    how, excess = _measured_how(name, dtype, steps, [beyond[k] for k in shapes if k in beyond])
    used = max((ratios[k] for k in shapes), default=0.0)
    term = Measured(delta, {k: spread[k] for k in shapes})
    return Rounding(term, delta, how, excess=tuple(excess), used=used, limits=lost, wide_only=wide_only)


def _keep(
    delta: Narrowed,
    spread: dict[str, float],
    value: dict,
    again: dict,
    dtype: str,
    consume: bool,
    k: str,
    bound: np.ndarray | None,
) -> None:
    """``k``'s signed difference (``_signed``, clipped to ``bound``) kept in float32 (``Narrowed``), its
    RMS in float64 (the term's spread); with ``consume``, made in ``again``'s float64 array (a float32
    case) and that array dropped from ``again``."""
    signed = _signed(value[k], again[k], bound, dtype, own=consume and dtype == "float32")
    spread[k] = terms.rms(signed)
    delta.keep(k, signed, capped=bound is not None)
    del signed
    if consume:  # the re-run's array goes now, not with the whole re-run
        again[k] = None


def _bound(
    wide: np.ndarray, every: float, dtype: str, steps: bool, device: Arithmetic | None = None
) -> np.ndarray:
    """What the case's rounding permits each entry (``terms.bound``; on the ``device``'s arithmetic),
    twice that with ``steps``: the float64 run rounds at float32 too, and its rounding is permitted as
    the float32 run's."""
    bound = terms.bound(wide, every, terms.permit_dtype(dtype), device=device)
    if steps:
        bound *= TWO_ROUNDINGS
    return bound


def _ratios(
    value: dict,
    again: dict,
    wide: dict,
    shapes: dict,
    every: float,
    dtype: str,
    steps: bool,
    device: Arithmetic | None = None,
) -> tuple[dict[str, float], list[Excess]]:
    """Per parameter, its median entry's difference over the permit, and the parameters beyond it
    (``Excess``): a tensor's temporaries at a time (its permit, its difference, their ratios), none kept."""
    ratios, excess = {}, []
    for k in shapes:
        if blockwise(wide[k]):  # a block at a time (``ratios.blocked``): the same numbers
            twice = TWO_ROUNDINGS if steps else None
            ratios[k] = blocked(value[k], again[k], wide[k], every, dtype, twice, device=device)
            signed = None
        else:
            bound = _bound(wide[k], every, dtype, steps, device)
            signed = _signed(value[k], again[k], None, dtype, scale=False)
            ratios[k] = terms.median_ratio(signed, bound, wide[k])  # of |signed|, on its own copy
            del bound
        if ratios[k] > 1.0:  # an excess (rare): its difference's RMS, the difference made whole
            if signed is None:
                signed = _signed(value[k], again[k], None, dtype, scale=False)
            found = _excess(k, ratios[k], signed, wide[k], dtype)
            if found is not None:
                excess.append(found)
    return ratios, excess


def _signed(
    value: np.ndarray,
    again: np.ndarray,
    bound: np.ndarray | None,
    dtype: str,
    *,
    own: bool = False,
    scale: bool = True,
) -> np.ndarray:
    """``value - again`` in float64 (NaN and infinities as 0), clipped to ``bound`` where given (a
    parameter beyond the permit) and scaled by ``terms.widening`` (``scale``); ``own``: made in
    ``again``'s array where it is a writable float64 one (the same numbers: ``value`` is widened entry
    by entry as a float64 copy of it would be)."""
    own = own and isinstance(again, np.ndarray) and again.dtype == np.float64 and again.flags.writeable
    signed = again if own else np.array(value, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if own:
            np.subtract(value, again, out=signed, dtype=np.float64)
        else:
            np.subtract(signed, np.asarray(again, np.float64), out=signed)
    if not whole.finite(signed):  # a pass of its own only where there is a NaN or an infinity
        np.nan_to_num(signed, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    if bound is not None:
        np.clip(signed, -bound, bound, out=signed)
    widen = terms.widening(dtype)
    if scale and widen != 1.0:
        signed *= widen
    return signed


def _measured_how(name: str, dtype: str, steps: bool, excess: list) -> tuple[str, list]:
    """How a measured rounding was made, in words, and the excesses that fail the check (in a float64
    check, a float32 re-run that is off is said, and the check goes on)."""
    how = f"measured: re-run in {OTHER_DTYPE[dtype]}"
    if steps:
        how += (
            f"; `{name}`'s float64 loss keeps float32 steps (noise probe): |g32 - g64| is two float32 "
            "roundings, each permitted what float32 permits"
        )
    if excess:
        names = ", ".join(f"`{e.parameter}`" for e in excess)
        how += f"; capped at what {terms.permit_dtype(dtype)} permits for {names}"
    if dtype == "float64":
        how += "".join(f"; {e.says(name, dtype)}" for e in excess)
        excess = []
    return how, excess


def _excess(k: str, ratio: float, diff: np.ndarray, wide: np.ndarray, dtype: str) -> Excess | None:
    """``k``'s excess when its median entry differs beyond the permitted bound (``ratio``; isolated
    entries, a kink flipped between the precisions, do not count); ``diff`` signed or not (its RMS)."""
    if not ratio > 1.0:
        return None
    scale = rms(np.asarray(wide, np.float64))
    return Excess(k, ratio, rms(diff) / scale if scale else math.inf, dtype if is_low(dtype) else None)


def _fallback(value: dict, shapes: dict[str, tuple[int, ...]], u: float) -> dict[str, np.ndarray]:
    out = {}
    for k, shape in shapes.items():
        mine = np.abs(np.asarray(value.get(k, 0.0), np.float64))
        if mine.shape != shape:
            mine = np.zeros(shape)
        d = np.nan_to_num(FALLBACK_ULPS * u * mine, nan=0.0, posinf=0.0)
        out[k] = terms.measured(d)
    return out
