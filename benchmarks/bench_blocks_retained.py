"""What a blockwise check keeps from block to block: ``crosscheck.check_blocks`` on a Llama of TinyLlama's
shape at half its width (width 1024, 16 query heads over 4 key/value heads, SwiGLU width 2816, six
layers, vocabulary 1000: ``examples/port/llama_blocks.py``'s blocks; ``--width`` and ``--layers`` change
the width, with the SwiGLU width 2.75 times it, and the number of layers, each a block),
``--reference torch``, one block at a time in this process, printing after each block the resident
memory, the peak so far, the live JAX arrays, the PyTorch tensors Python still reaches and the ports
(``crosscheck.Port``) still alive, and at the end the process's peak.

``--trim`` returns the C allocator's free memory to the system after each block (glibc's
``malloc_trim(0)``, Linux only); ``--clear`` empties JAX's compilation caches after each block. Together
they tell memory that is only held by the allocator or the caches from memory something still holds.

Usage: ``python benchmarks/bench_blocks_retained.py [--trim] [--clear]``, from the repository root.
Quote the output with the machine, its load (``uptime``) and the date.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import time


def _status_gib(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (the peak so far) of this process, in GiB."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith(f"{field}:"))
    return int(line.split()[1]) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trim", action="store_true", help="malloc_trim(0) after each block")
    parser.add_argument("--clear", action="store_true", help="jax.clear_caches() after each block")
    parser.add_argument("--width", type=int, default=1024, help="the hidden width (default 1024)")
    parser.add_argument("--layers", type=int, default=6, help="the layers, each a block (default 6)")
    args = parser.parse_args()
    sys.path.insert(0, ".")
    import jax
    import torch

    import crosscheck
    from examples.port import llama_blocks

    config = {
        **llama_blocks.ONE_B,
        "hidden_size": args.width,
        "intermediate_size": args.width * 11 // 4,
        "num_hidden_layers": args.layers,
        "num_attention_heads": 16,
        "vocab_size": 1000,
    }
    llama_blocks.TOKENS["half"] = (1, 32)
    blocks = llama_blocks.make_blocks("llama-half-blocks", config=config, size="half")

    def progress(done: int, total: int) -> None:
        gc.collect()
        if args.trim:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        if args.clear:
            jax.clear_caches()
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
        held = sum(t.numel() * t.element_size() for t in tensors) / 2**20
        live = jax.live_arrays()
        ports = sum(isinstance(o, crosscheck.Port) for o in gc.get_objects())
        print(
            f"{time.strftime('%H:%M:%S')} block {done}/{total}: resident {_status_gib('VmRSS'):.2f} GiB "
            f"(peak so far {_status_gib('VmHWM'):.2f}), {len(live)} live JAX arrays, {len(tensors)} "
            f"PyTorch tensors ({held:.0f} MiB), {ports} ports alive",
            flush=True,
        )

    start = time.perf_counter()
    result = crosscheck.check_blocks(blocks, reference="torch", progress=progress)
    print(result.verdict()[:100])
    print(f"peak resident {_status_gib('VmHWM'):.2f} GiB, {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
