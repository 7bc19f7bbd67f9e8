"""An NVIDIA GPU simulated on the CPU, for the tests of both sides on a GPU (CI has none): TF32 products
(float32's inputs rounded to 10 bits of mantissa, summed in float32) where each framework makes them on
a GPU, and the two sides saying they ran there.

- JAX: a product at its default matmul precision on the simulated card (not placed on the host CPU) is
  TF32 (``tf32_dot``, a linen ``Dense``'s ``dot_general``); ``jax_on_a_gpu`` makes JAX's side say it ran
  on a GPU.
- PyTorch: a product is TF32 while ``torch.backends.cuda.matmul.allow_tf32`` is on (``torch_tf32_matmul``),
  a 2-d convolution while ``torch.backends.cudnn.allow_tf32`` is on (``torch_tf32_conv``, PyTorch's default);
  ``torch_on_cuda`` makes PyTorch's side say it ran on CUDA (its tensors stay on the host: CI has no CUDA).
- A sum whose order changes from call to call (``Shuffled``): a scatter-add's atomics.

Import it after ``pytest.importorskip`` of torch and jax.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import torch

#: The simulated card's name, as a side says it.
CARD = "Simulated H200"


def tf32(x):
    """A JAX float32 array rounded to TF32 (10 bits of mantissa, float32's exponent)."""
    return jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=10)


def tf32_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """The simulated card's float32 product at JAX's default precision: inputs in TF32, summed in float32;
    at ``highest``, in float64 or on the host CPU, the exact product. The card's arithmetic changes the
    values, never the program (as ``simulated_device.rounded``): the same ``reduce_precision`` either way,
    to TF32's 10 bits on the card at the default precision, to float32's own 23 (unchanged) elsewhere."""
    if lhs.dtype != jnp.float32:
        return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision)
    on_card = jax.config.jax_default_device is None
    bits = 10 if on_card and jax.config.jax_default_matmul_precision is None else 23
    lhs, rhs = (jax.lax.reduce_precision(v, exponent_bits=8, mantissa_bits=bits) for v in (lhs, rhs))
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision)


def jax_on_a_gpu(monkeypatch) -> None:
    """JAX's side says it runs on the simulated card unless placed on the host CPU."""
    from crosscheck.backends.jax import environment

    real = environment.side

    def side():
        found = real()
        on_card = jax.config.jax_default_device is None
        return {**found, "platform": "gpu", "device_kind": CARD} if on_card else found

    monkeypatch.setattr(environment, "side", side)


def torch_round_tf32(t: torch.Tensor) -> torch.Tensor:
    """A PyTorch float32 tensor rounded to TF32 (to nearest, ties to even, on its bits), autograd's path
    kept (the rounding's gradient is 1, as a product's backward in TF32 rounds its inputs too); others
    as they are."""
    if t.dtype != torch.float32:
        return t
    bits = t.detach().view(torch.int32)
    rounded = ((bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32)
    return t + (rounded - t.detach())


def torch_tf32_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` as the simulated card makes it: TF32 inputs while PyTorch's matmul flag is on."""
    if torch.backends.cuda.matmul.allow_tf32:
        a, b = torch_round_tf32(a), torch_round_tf32(b)
    return a @ b


def torch_tf32_conv(monkeypatch) -> None:
    """PyTorch's 2-d convolutions as the simulated card makes them (``torch.nn.functional.conv2d``, which
    ``Conv2d`` calls): TF32 inputs while cuDNN's flag is on, unless the side is placed on the host CPU."""
    from crosscheck._backends.devices import placed_device

    real = torch.nn.functional.conv2d

    def conv2d(x, weight, *args, **kwargs):
        if torch.backends.cudnn.allow_tf32 and placed_device("torch") != "cpu":
            x, weight = torch_round_tf32(x), torch_round_tf32(weight)
        return real(x, weight, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "conv2d", conv2d)


def torch_on_cuda(monkeypatch) -> None:
    """PyTorch's side says it runs on CUDA (the simulated card), its TF32 switches as in effect, unless
    placed on the host CPU; its tensors stay where they are."""
    from crosscheck._backends.devices import placed_device
    from crosscheck.backends.torch import environment

    real = environment.side

    def side(*, placed: bool = True, home: str | None = None):
        found = real(placed=False)
        if not placed or placed_device("torch") == "cpu":
            return found
        flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        on = ["on" if flag else "off" for flag in flags]
        return {
            **found,
            "device": "cuda:0",
            "platform": "cuda",
            "device_kind": CARD,
            "matmul_tf32": on[0],
            "cudnn_tf32": on[1],
        }

    monkeypatch.setattr(environment, "side", side)


class Shuffled:
    """``sum`` of a vector in another order each call (a scatter-add's atomics on a GPU): the same
    numbers, summed in float32 in a rotating order."""

    def __init__(self) -> None:
        self._calls = itertools.count()

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        shift = next(self._calls) % max(1, v.numel())
        order = np.roll(np.arange(v.numel()), shift)
        total = torch.zeros((), dtype=v.dtype)
        for i in order:
            total = total + v.reshape(-1)[int(i)]
        return total
