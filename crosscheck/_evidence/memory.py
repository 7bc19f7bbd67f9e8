"""What checkpointing saves: residual bytes over depth and width, and the measured peak of the gradient.

Two kinds of numbers, kept apart:

- **Residual bytes** (deterministic): what each variant keeps from forward to backward, as listed by
  ``crosscheck._evidence.inspect`` (JAX: ``print_saved_residuals``; PyTorch: ``saved_tensors_hooks``), the
  weights excluded (they are alive anyway). Fitted against depth: the bytes per layer.
- **Peak** of the actual differentiated computation, in a child process per variant: the growth of the
  resident set (``VmHWM`` after resetting it through ``/proc/self/clear_refs``, minus ``VmRSS`` before)
  while one gradient runs, and for JAX the temporary bytes XLA's buffer assignment plans
  (``compiled.memory_analysis().temp_size_in_bytes``). The resident-set numbers depend on the allocator
  and the machine; the XLA number does not.

``python -m crosscheck._evidence.memory VARIANT LAYERS BATCH DIM`` is the child: it prints one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

VARIANTS = ("jax-plain", "jax", "jax-remat-scan", "jax-segments", "torch-plain", "torch", "torch-segments")
DEPTHS = (8, 16, 32, 64)
WIDTHS = (64, 256)
BATCH = 128
#: Where the peak is measured: big enough that activations (8 MiB a layer at float32) dwarf the noise.
PEAK_SIZE = {"layers": 64, "batch": 32768, "dim": 64}


@dataclass
class MemoryRow:
    """Residual bytes of one variant at one width, over depth."""

    variant: str
    width: int
    batch: int
    bytes_by_depth: dict[int, int]
    recomputed: int  # layer forwards run again during backward, at the largest depth
    checkpoint: str | None
    slope: float = 0.0  # bytes per layer, least-squares fit over depth
    ratio: float | None = None  # against the plain variant of the same framework, at the largest depth
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def per_layer_activations(self) -> float:
        """The slope in units of one float32 activation ``(N, d)``."""
        return self.slope / (self.batch * self.width * 4)

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "width": self.width,
            "batch": self.batch,
            "bytes_by_depth": {str(k): v for k, v in self.bytes_by_depth.items()},
            "bytes_per_layer": self.slope,
            "activations_per_layer": self.per_layer_activations,
            "ratio_to_plain": self.ratio,
            "recomputed_layers": self.recomputed,
            "checkpoint": self.checkpoint,
        }


def residual_table(
    *,
    variants: Sequence[str] = VARIANTS,
    depths: Sequence[int] = DEPTHS,
    widths: Sequence[int] = WIDTHS,
    batch: int = BATCH,
) -> list[MemoryRow]:
    """Residual bytes (weights excluded) of every variant, width and depth, float32 gaussian inputs.

    Raises:
        BackendUnavailable: a variant whose framework is not installed.
        ValueError: an unknown variant, or one that is neither a JAX nor a PyTorch backend.
    """
    from crosscheck._backends import load_backend
    from crosscheck._evidence.inspect import inspect_backend, stack_inputs

    rows = []
    for name in variants:
        backend = load_backend(name)
        for width in widths:
            by_depth, last = {}, None
            for layers in depths:
                weights, x = stack_inputs(layers=layers, batch=batch, dim=width)
                last = inspect_backend(backend, weights, x, check_loss=False)
                if not last.framework:
                    raise ValueError(
                        f"`{name}` cannot be measured: expected a JAX backend with `loss_fn()` or a "
                        "PyTorch backend (see `crosscheck inspect`)."
                    )
                by_depth[layers] = last.activation_bytes
            assert last is not None  # `depths` is not empty
            slope = (
                float(np.polyfit(list(by_depth), list(by_depth.values()), 1)[0]) if len(by_depth) > 1 else 0.0
            )
            recomputed = last.found.get("recomputed_layers", 0)
            rows.append(
                MemoryRow(name, width, batch, by_depth, recomputed, last.found.get("checkpoint"), slope)
            )
    _set_ratios(rows, max(depths))
    return rows


def _set_ratios(rows: list[MemoryRow], depth: int) -> None:
    plain = {
        (r.variant.split("-")[0], r.width): r.bytes_by_depth[depth]
        for r in rows
        if r.variant.endswith("-plain")
    }
    for row in rows:
        base = plain.get((row.variant.split("-")[0], row.width))
        row.ratio = row.bytes_by_depth[depth] / base if base else None


def measure_peak(variant: str, *, layers: int, batch: int, dim: int, timeout: float = 600) -> dict[str, Any]:
    """Run one gradient of ``variant`` in a child process and return what it measured (see module doc)."""
    command = [sys.executable, "-m", "crosscheck._evidence.memory", variant]
    command += [str(layers), str(batch), str(dim)]
    # A fixed mmap threshold makes glibc map every large block afresh and unmap it when freed (its
    # default threshold adapts upwards, after which freed blocks stay resident and get reused unseen).
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"variant": variant, "error": f"child exited {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # "5": reset the peak resident set size (Linux >= 4.0)
        return True
    except OSError:
        return False


def _child(variant: str, layers: int, batch: int, dim: int) -> dict[str, Any]:
    from crosscheck._backends import load_backend
    from crosscheck._evidence.inspect import stack_inputs

    backend = load_backend(variant)
    weights, x = stack_inputs(layers=layers, batch=batch, dim=dim)
    out: dict[str, Any] = {"variant": variant, "layers": layers, "batch": batch, "dim": dim}
    jax = callable(getattr(backend, "loss_fn", None))
    # XLA keeps a computation's buffers for its next call: measure its first call, after compiling.
    run = _jax_runner(backend, weights, x, out) if jax else None
    if run is None:
        small_w, small_x = stack_inputs(layers=2, batch=2, dim=dim)
        backend.grad(small_w, small_x)  # load kernels and allocator state before measuring

        def run():
            return backend.grad(weights, x)

    if not jax:
        run()  # warm at full size: first-call allocations are not the computation's
    before = _status_kib("VmRSS")
    if not _reset_peak():
        out["error"] = "cannot reset the peak resident set (/proc/self/clear_refs)"
        return out
    start = time.perf_counter()
    result = run()
    out["seconds"] = time.perf_counter() - start
    out["peak_rss_growth_bytes"] = (_status_kib("VmHWM") - before) * 1024
    out["activation_bytes"] = batch * dim * np.dtype(weights.dtype).itemsize
    del result
    return out


def _jax_runner(backend, weights, x, out):
    import jax
    import jax.numpy as jnp

    w, y = jnp.asarray(weights), jnp.asarray(x)
    compiled = jax.jit(jax.grad(backend.loss_fn())).lower(w, y).compile()
    analysis = compiled.memory_analysis()
    if analysis is not None:
        out["xla_temp_bytes"] = int(analysis.temp_size_in_bytes)
    return lambda: compiled(w, y).block_until_ready()


if __name__ == "__main__":
    name, *sizes = sys.argv[1:]
    print(json.dumps(_child(name, *(int(s) for s in sizes))))
