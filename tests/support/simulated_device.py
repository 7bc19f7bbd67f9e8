"""A TPU simulated on the CPU, for the tests of the JAX side on an accelerator (CI has none): the JAX
side is "on the chip" unless placed on the host CPU (JAX's default device set, as ``--jax-platform cpu``
and ``Call.on_host`` set it), where a float32 product at JAX's default matmul precision takes its inputs
rounded to bfloat16 (one pass); and the two-layer PyTorch MLP the simulated ports are checked against.
Import it after ``pytest.importorskip`` of torch and jax.

The chip's arithmetic changes the values a program computes, never the program: a real TPU runs the
jaxpr the host CPU runs. So the simulated rounding is the same operation on the chip and on the host
(``lax.reduce_precision``, to a product's bits on the chip and to float32's 23, an identity, elsewhere:
``rounded``), and a port's code that branches on ``on_chip`` (as a port branches on
``jax.default_backend()``) is what makes another program on the host."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch


def on_chip() -> bool:
    """Whether the JAX side is on the simulated chip now (not placed on the host CPU)."""
    return jax.config.jax_default_device is None


def rounded(value, bits: int):
    """``value`` rounded to ``bits`` of mantissa where the simulated chip rounds a product's float32
    inputs (on the chip, at JAX's default matmul precision), else to float32's own 23 (unchanged): the
    same operation either way, so that the chip's arithmetic is no other program."""
    low = value.dtype == jnp.float32 and on_chip() and jax.config.jax_default_matmul_precision is None
    if value.dtype != jnp.float32:
        return value
    return jax.lax.reduce_precision(value, exponent_bits=8, mantissa_bits=bits if low else 23)


def bfloat16_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """The simulated chip's float32 product at the default precision: inputs rounded to bfloat16 (7 bits
    of mantissa), summed in float32; at ``highest``, in float64 or on the host CPU, the exact product."""
    lhs, rhs = rounded(lhs, 7), rounded(rhs, 7)
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision)


class TorchMLP(torch.nn.Module):
    """``fc2(tanh(fc1(x)))``."""

    def __init__(self, width: int, hidden: int, out: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, out)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def mlp_port(name: str, width: int, hidden: int, out: int, shift: float = 0.0):
    """The MLP's port, its Flax side's products the simulated chip's (``bfloat16_dot``), its output off
    by ``shift`` (a planted bug; 0: healthy), on 16 seeded inputs."""
    import flax.linen as nn
    import numpy as np

    import crosscheck

    class FlaxMLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = jnp.tanh(nn.Dense(hidden, name="fc1", dot_general=bfloat16_dot)(x))
            return nn.Dense(out, name="fc2", dot_general=bfloat16_dot)(h) + shift

    x = np.random.default_rng(3).standard_normal((16, width)).astype(np.float32)
    torch.manual_seed(0)
    model = TorchMLP(width, hidden, out).eval()
    return crosscheck.Port(name=name, torch=model, jax=FlaxMLP(), inputs={"x": x})
