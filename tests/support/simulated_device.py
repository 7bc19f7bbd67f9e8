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

import contextlib

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


#: The products a TPU makes at JAX's default precision: JAX's primitives, each input rounded there.
PRODUCTS = ("dot_general_p", "conv_general_dilated_p")


def _default_precision(params) -> bool:
    """Whether a product's ``precision`` parameter is JAX's default (one bfloat16 pass on a TPU)."""
    precision = params.get("precision")
    if precision is None:
        return True
    if isinstance(precision, (tuple, list)):
        return all(p in (None, jax.lax.Precision.DEFAULT) for p in precision)
    return precision == jax.lax.Precision.DEFAULT


def _through(value, low: bool):
    """``value`` with its float32 entries rounded to bfloat16 where ``low`` (to float32's 23 bits, an
    identity, elsewhere: the same operation either way)."""
    if value.dtype != jnp.float32:
        return value
    return jax.lax.reduce_precision(value, exponent_bits=8, mantissa_bits=7 if low else 23)


#: JAX's traces of differentiation: a product bound while one of them is JAX's current trace is not
#: rounded there but where JAX makes it (the primal product, and each product of the backward pass, which
#: JAX binds when it transposes), as a TPU rounds each product it runs. Rounded at differentiation, the
#: rounding's own derivative would round each backward product's result once more.
DIFFERENTIATING = ("LinearizeTrace", "JVPTrace", "JaxprTrace")


def _differentiating() -> bool:
    from jax.extend.core import take_current_trace

    with take_current_trace() as trace:
        return type(trace).__name__ in DIFFERENTIATING


@contextlib.contextmanager
def bfloat16_products():
    """Every float32 product JAX traces inside (``jnp.dot``, ``einsum``, Flax's and Equinox's layers, a
    convolution; forward, tangent and transposed alike) made as the simulated chip makes it at JAX's
    default precision: its inputs rounded to bfloat16, summed in float32. At ``highest``, in float64 or on
    the host CPU: float32's own. Any port's JAX side on the simulated TPU, without a change to its code;
    JAX's caches are cleared on the way in and out (a program traced inside is not run outside)."""
    patched = [getattr(jax.lax, name) for name in PRODUCTS]
    for primitive in patched:
        primitive.bind = _rounding(primitive, primitive.bind)
    jax.clear_caches()
    try:
        yield
    finally:
        for primitive in patched:
            del primitive.bind  # the class's own, again
        jax.clear_caches()


def _rounding(primitive, bind):
    def rounded_bind(lhs, rhs, **params):
        if _differentiating():
            return bind(lhs, rhs, **params)
        low = lhs.dtype == jnp.float32 and on_chip() and _default_precision(params)
        return bind(_through(lhs, low), _through(rhs, low), **params)

    return rounded_bind


def pretend_tpu(monkeypatch) -> None:
    """The JAX side says it runs on a TPU (its ``environment.side``) unless placed on the host CPU."""
    from crosscheck.backends.jax import environment

    real = environment.side

    def side():
        found = real()
        return found if not on_chip() else {**found, "platform": "tpu", "device_kind": "TPU v5 lite"}

    monkeypatch.setattr(environment, "side", side)


class TorchNear(torch.nn.Module):
    """``fc2(tanh((fc1(x) - near(x)) / gap))``, ``near``'s weights ``fc1``'s plus ``gap`` times noise: a
    difference of two close products, whose rounding is ``1 / gap`` times theirs (catastrophic
    cancellation: healthy, and sensitive to a device's reduced-precision products)."""

    def __init__(self, width: int, hidden: int, out: int, gap: float) -> None:
        super().__init__()
        self.gap = gap
        self.fc1, self.near = torch.nn.Linear(width, hidden), torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, out)
        with torch.no_grad():
            self.near.weight.copy_(self.fc1.weight + gap * torch.randn(hidden, width))
            self.near.bias.copy_(self.fc1.bias)

    def forward(self, x):
        return self.fc2(torch.tanh((self.fc1(x) - self.near(x)) / self.gap))


def near_port(width: int, hidden: int, out: int, gap: float = 0.01):
    """``TorchNear``'s port, its Flax side's products the simulated chip's (``bfloat16_dot``): at JAX's
    default precision on the chip its outputs differ from float32's by far more than the device's flat
    permit, all of it the chip's bfloat16 products (at ``highest`` it agrees)."""
    import flax.linen as nn
    import numpy as np

    import crosscheck

    class FlaxNear(nn.Module):
        @nn.compact
        def __call__(self, x):
            a = nn.Dense(hidden, name="fc1", dot_general=bfloat16_dot)(x)
            b = nn.Dense(hidden, name="near", dot_general=bfloat16_dot)(x)
            return nn.Dense(out, name="fc2", dot_general=bfloat16_dot)(jnp.tanh((a - b) / gap))

    x = np.random.default_rng(3).standard_normal((16, width)).astype(np.float32)
    torch.manual_seed(0)
    model = TorchNear(width, hidden, out, gap).eval()
    return crosscheck.Port(name="near", torch=model, jax=FlaxNear(), inputs={"x": x})
