"""What the stack's oracle costs, in flops of matrix products: on every entry (``full_oracle_flops``),
from its layers' outputs (``outputs_flops``), and on the layers a screen checks entry by entry
(``escalation_flops``); so what "auto" takes for the gradient (``gradient_mode``: full below
``SCREEN_FLOPS``, outputs below ``OUTPUTS_FLOPS``, else a screen) and when a screen may check a layer's
every entry (``ESCALATE_FLOPS``). The gradient's screen, the HVP's and the memory estimate ask here.
"""

from __future__ import annotations

from collections.abc import Sequence

from crosscheck._workloads.stack.oracle import preactivation

#: Above this many floating-point operations of matrix products "auto" screens. The count is the dense
#: one (every row of the batch, ``full_oracle_flops``); the oracle evaluates only the rows a
#: perturbation changes, about a quarter, so at the threshold it takes a second or two on 2 cores. For
#: the HVP the count is 2L times the gradient oracle's (``hvp_screen``).
SCREEN_FLOPS = 1.5e11


def full_oracle_flops(layers: int, batch: int, dim: int) -> float:
    """Matrix-product flops of the full oracle: per entry, two evaluations of the layers after it."""
    # sum over k of 2 d^2 (L - 1 - k) 2 N d^2, in closed form (the sum of L - 1 - k is L (L - 1) / 2)
    return float(4 * batch * dim**4 * (layers * (layers - 1) // 2))


#: Above this many flops of the oracle from the layers' outputs (``outputs_flops``, counted dense as
#: ``full_oracle_flops`` is) "auto" screens the gradient instead of judging every entry. At L = N = 8 the
#: budget takes d up to about 2600: d = 2048 counts 5.8e12 and took 61 CPU s (164 s of wall time on 2
#: busy cores); d = 4096 counts 4.6e13 and took 456 CPU s (``docs/measurements/speed.md``).
OUTPUTS_FLOPS = 1.2e13


def outputs_flops(layers: int, batch: int, dim: int) -> float:
    """Matrix-product flops of the oracle from the layers' outputs (``preactivation.flops``)."""
    return preactivation.flops(layers, batch, dim)


def gradient_mode(layers: int, batch: int, dim: int, *, screens: bool, outputs: bool, fits: bool) -> str:
    """What "auto" takes for the gradient: ``full`` while the full oracle is within ``SCREEN_FLOPS``,
    else ``outputs`` where the reference can (``outputs``), its flops are within ``OUTPUTS_FLOPS`` and
    its memory estimate fits this machine (``fits``: ``size.fits_outputs``), else ``screen`` where the
    reference can (``screens``), else ``full``."""
    if full_oracle_flops(layers, batch, dim) <= SCREEN_FLOPS:
        return "full"
    if outputs and fits and outputs_flops(layers, batch, dim) <= OUTPUTS_FLOPS:
        return "outputs"
    return "screen" if screens else "full"


#: Above this many flops (``escalation_flops``) the layers whose directions disagree are not checked
#: entry by entry: the candidate fails on its directions alone, and the message says so (a check of
#: every entry of one layer costs ``O(N d**4)``: at ``d = 1024`` most of an hour on 2 cores, days at
#: 4096). At the limit a check takes a few minutes; ``--oracle-mode full`` checks every entry.
ESCALATE_FLOPS = 100 * SCREEN_FLOPS


def escalation_flops(layers: int, batch: int, dim: int, which: Sequence[int]) -> float:
    """Matrix-product flops of the full oracle on the layers ``which`` (``full_oracle_flops``'s terms,
    each at least one layer's worth)."""
    return float(sum(4 * batch * dim**4 * max(layers - 1 - k, 1) for k in which))


def escalates(layers: int, batch: int, dim: int) -> bool:
    """Whether a screen of this size may check a layer entry by entry (its costliest one within
    ``ESCALATE_FLOPS``); the memory estimate counts the full oracle only then."""
    return escalation_flops(layers, batch, dim, [0]) <= ESCALATE_FLOPS
