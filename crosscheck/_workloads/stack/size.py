"""How much memory a stack case needs, estimated before anything is allocated (``Stack.memory``).

A pure function of the case's sizes and options: ``crosscheck.run`` compares the total with the memory
this machine has available and refuses, with the estimate, a case that cannot fit. The coefficients
count the arrays the code makes (in units of one float64 ``(L, d, d)`` array, ``E``; one float64
``(N, d)`` activation, ``A``) and were checked against ``tracemalloc`` peaks of whole runs (L = 8,
N = 8, d = 256, full oracle: 160 MiB measured, 275 MiB estimated; L = 3, N = 64, d = 32: 14.1 MiB
measured, 18.9 MiB estimated; a screened case that may check a layer entry by entry
(``cost.escalates``) is estimated as if every layer were: L = 4, N = 4, d = 128, 12.0 MiB measured,
46.1 MiB estimated; past that, a screen is estimated with its own arrays: L = N = 8, d = 768, 18.2 E
measured, 23.5 E estimated). A run of ``crosscheck run --dim 3000 --backend torch`` grew past 22 GiB
(its screen checked layers entry by entry, which it no longer does at that size);
``tests/workloads/stack/test_size.py`` checks the estimates on small cases. Against the resident
peak of ``crosscheck run --dim D --batch 8`` (jax and torch) the estimate is about 1.5 times it at
d = 1024 to 2048 (``benchmarks/stack_sizes.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crosscheck._files import available_memory
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.oracle import parallel as _parallel
from crosscheck._workloads.stack.oracle import perturb as _perturb
from crosscheck._workloads.stack.oracle import preactivation

#: float64 ``(L, d, d)`` arrays alive at the peak: the tolerance's terms and totals, the kink judgement,
#: the oracle's value, error bar and flags, each candidate's results (kept for the report), the inputs.
GRADIENT_ARRAYS = 20
#: float64 ``(L, d, d)`` arrays alive at the peak of a screen that checks no layer entry by entry, beyond
#: the rounding model's part and the directions: the inputs in float64, two rounding models' entries,
#: the candidates' results, the kink judgement (its count and culprit, changes and minor sums) while it
#: is made. Every square of the weights, transposed copy, ``|W|``, kink threshold or bound and zero
#: underflow bound is taken a ``(d, d)`` layer at a time, and the kink judgement is dropped once the
#: screen has its slack. Measured with ``tracemalloc`` (L = N = 8, one candidate, float32 rounding
#: leaving entries unjudgeable so that the oracle screens a second time), d = 768: 9.6 E at the peak,
#: the kink judgement's (it was 17.6 E, at the oracle's second screen); estimated 13.5 E there. The spot
#: check (``judge.spot``) makes its kink judgement after the screen has dropped its own (as it does at
#: these sizes), with one more array (its threshold), and drops it at once: within the same peak.
SCREEN_ARRAYS = 6
#: float64 ``(L, d, d)`` arrays a float32 candidate judged on its own ReLU pattern adds while it is
#: compared with every entry (``Passes.held``): the answer moved to its pattern (value and error bar),
#: that pattern's rounding model and its kink judgement; failing there, the comparisons that name the
#: piece its gradient took (``judge.pieces``: float64's pattern's rounding model and another
#: comparison). One candidate at a time. Measured with ``tracemalloc`` (L = N = 8, d = 512,
#: ``--oracle-mode outputs``, init nearzero: a candidate held at a pattern with 32 units flipped
#: beside one on float64's, 4.9 E more at the peak than without flips; one candidate whose backward
#: took two units otherwise, 8.5 E more than a passing one).
HELD_ARRAYS = 10
#: int8 copies of the screening directions: the screen's, those less the unjudgeable entries, and
#: the private copy of each handed to the oracle.
DIRECTION_COPIES = 4
#: float64 ``(L, d, d)`` arrays the full oracle holds at its peak (measured: 17 to 40 at d = 64 to 128).
ORACLE_ARRAYS = 40
#: Blocks of changed rows (``perturb._CHUNK_VALUES`` float64 values each) per core the oracle runs on.
CHUNK_BUFFERS = 4
#: float64 ``(N, d)`` arrays per layer: the float64 forward and backward pass and its masks.
ACTIVATION_ARRAYS = 6
#: Per framework candidate: its copies of the inputs, its activations and its gradient, in its dtype.
FRAMEWORK_COPIES = 3
#: What each framework's runtime and allocator holds beyond the arrays: about half the resident peak of
#: ``crosscheck run --dim 16`` with JAX and PyTorch (``docs/measurements/memory.md``, "A framework's
#: runtime").
RUNTIME = 288 * 2**20


def estimate(
    *,
    layers: int,
    batch: int,
    dim: int,
    dtype: str,
    quantity: str = "grad",
    oracle_mode: str = "auto",
    directions: int = 4,
    explain: bool = False,
    candidates: int = 1,
    frameworks: int = 1,
    screens: bool = True,
) -> dict[str, int]:
    """Bytes a case needs, by part: ``{"inputs and results", "rounding model", "oracle", "frameworks"}``.

    Args:
        candidates: how many candidates are checked (each keeps its results for the report).
        frameworks: how many of them run a framework (JAX, PyTorch) in this process.
        screens: whether the reference can screen (the built-in oracle can).
    """
    f64 = 8
    item = 4 if dtype == "float32" else 8
    entries, rows = layers * dim * dim, (layers + 1) * batch * dim
    samples = rounding.MODEL_SAMPLES
    kept = GRADIENT_ARRAYS + 2 * max(candidates - 1, 0)
    parts = {
        "inputs and results": f64 * (kept * entries + ACTIVATION_ARRAYS * rows),
        # One dtype at a time: the noisy activations of every sample (and a layer's temporaries), and
        # each part's gradient variances and their pooled total (never a sample's whole gradient).
        "rounding model": f64 * (samples * (rows + 5 * batch * dim) + 3 * entries),
        "oracle": 0,
        "frameworks": frameworks * FRAMEWORK_COPIES * item * (entries + rows) + frameworks * RUNTIME,
    }
    mode = _mode(layers, batch, dim, dtype, quantity, oracle_mode, screens)
    screened = mode == "screen"
    if dtype == "float32" and not screened:  # a candidate judged on its own pattern, every entry
        parts["inputs and results"] += f64 * HELD_ARRAYS * entries
    if mode == "outputs":
        # The oracle from the layers' outputs: its answer, its float64 rounding model and its pieces'
        # buffers (``preactivation.memory``); the full comparison's arrays are the ones above.
        parts["oracle"] = preactivation.memory(layers, batch, dim)
        if explain:  # a mismatch's classification re-checks a nudged point beside the first answer
            parts["oracle"] *= 2
    elif screened and not cost.escalates(layers, batch, dim):
        # A screen that never checks a layer entry by entry (too costly at this size: a disagreeing
        # direction fails the candidate on its own): the screen's arrays, its int8 directions (the
        # screen's, those less the unjudgeable entries, and the copies handed to the oracle), two
        # float64 layers of them at a time, and the oracle's chunks of changed rows.
        parts["inputs and results"] = f64 * (
            (SCREEN_ARRAYS + 2 * max(candidates - 1, 0)) * entries + ACTIVATION_ARRAYS * rows
        )
        parts["oracle"] = (
            DIRECTION_COPIES * layers * directions * dim * dim
            + 2 * f64 * directions * dim * dim
            + f64 * CHUNK_BUFFERS * _perturb._CHUNK_VALUES * _parallel.workers()
        )
    elif quantity == "grad" and screens:
        # The full oracle: per entry, its perturbations' steps, values, errors and flags at each
        # refinement, and the changed rows it carries in bounded chunks. Screening needs it too, for
        # the layers it checks entry by entry (those with a failing direction), where it may
        # (``cost.escalates``): which they are is known only after the screen, so the estimate
        # counts every layer.
        parts["oracle"] = f64 * (
            ORACLE_ARRAYS * entries + CHUNK_BUFFERS * _perturb._CHUNK_VALUES * _parallel.workers()
        ) + _paths(layers, batch, dim)
        if screened:
            parts["oracle"] += DIRECTION_COPIES * layers * directions * dim * dim  # int8 directions
    if explain or quantity == "hvp":
        parts["inputs and results"] += 4 * f64 * entries  # float64 re-runs; the HVP's direction
    return parts


def _paths(layers: int, batch: int, dim: int) -> int:
    """Bytes of the oracle's reduced weights (``perturb._Path``, about half of ``W`` per batch row):
    kept for every row up to ``perturb._PATH_CACHE_BYTES``, else one row's per worker at a time."""
    per_row = 4 * layers * dim * dim
    if per_row * batch <= _perturb._PATH_CACHE_BYTES:
        return per_row * batch
    return per_row * _parallel.workers()


def _mode(layers: int, batch: int, dim: int, dtype: str, quantity: str, mode: str, screens: bool) -> str:
    """The gradient oracle's mode the run takes: ``mode`` as asked, or what "auto" takes
    (``auto_mode``); ``full`` for a reference that cannot screen, and for the HVP (whose oracle's
    arrays are counted apart)."""
    if quantity != "grad" or not screens:
        return "full"
    return auto_mode(layers, batch, dim, dtype) if mode == "auto" else mode


def auto_mode(layers: int, batch: int, dim: int, dtype: str) -> str:
    """What "auto" takes for the gradient with the built-in oracle (``cost.gradient_mode``): full,
    outputs or screen."""
    fits = fits_outputs(layers, batch, dim, dtype)
    return cost.gradient_mode(layers, batch, dim, screens=True, outputs=True, fits=fits)


#: The run whose memory "auto" sizes the outputs mode for: the default one, the two built-in
#: frameworks' candidates (the judge that chooses does not know the candidates; the run's own estimate,
#: with its candidates, is then checked against the machine as any other).
DEFAULT_CANDIDATES = 2


def fits_outputs(layers: int, batch: int, dim: int, dtype: str) -> bool:
    """Whether the outputs mode's estimate for the default run (``DEFAULT_CANDIDATES``) fits the memory
    this machine has available (``available_memory``); only asked where its flops are within budget."""
    if cost.outputs_flops(layers, batch, dim) > cost.OUTPUTS_FLOPS:
        return False
    parts = estimate(
        layers=layers,
        batch=batch,
        dim=dim,
        dtype=dtype,
        oracle_mode="outputs",
        candidates=DEFAULT_CANDIDATES,
        frameworks=DEFAULT_CANDIDATES,
    )
    return sum(parts.values()) <= available_memory()


def case_sizes(given: Mapping[str, Any]) -> dict[str, Any]:
    """``layers, batch, dim, dtype`` of ``crosscheck.run``'s keywords (your arrays' shapes, or the
    case options with ``Case``'s defaults); sizes that are not positive integers are left to ``Case``."""
    import numpy as np

    weights, x = given.get("weights"), given.get("x")
    if weights is not None and x is not None and np.ndim(weights) == 3 and np.ndim(x) == 2:
        layers, dim, _ = np.shape(weights)
        dtype = getattr(weights, "dtype", np.dtype("float64")).name
        return {"layers": layers, "batch": np.shape(x)[0], "dim": dim, "dtype": dtype}
    from crosscheck._workloads.stack.case import Case

    sizes = {}
    for name in ("layers", "batch", "dim"):
        value = given.get(name)
        value = getattr(Case, name) if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            return {}
        sizes[name] = int(value)
    return {**sizes, "dtype": given.get("dtype") or "float32"}
