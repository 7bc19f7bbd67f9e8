"""The pass that proves an output's layout (``layout.of``): the port's forward compiled as one program,
not an operation at a time (where each operation, a Flax parameter's initializer too, was compiled on
its own: 1.5 s of a 2.8 s first check of a four-module port), and its values found alike when first
asked inside a loss's trace."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
nn = pytest.importorskip("flax.linen")

import crosscheck  # noqa: E402
from crosscheck._workloads.port.declare import layout  # noqa: E402
from crosscheck._workloads.port.declare.build import output_layouts  # noqa: E402
from tests.support.compiles import COMPILES  # noqa: E402

#: Odd sizes no other test uses: an operation of this model is compiled here first.
IN, HIDDEN, OUT, ROWS = 7, 19, 3, 17


def _port(name: str) -> crosscheck.Port:
    """Two Dense layers with a LayerNorm, the output NHWC-like ``(B, 1, ROWS, OUT)`` in Flax against
    ``(B, OUT, 1, ROWS)`` in PyTorch: its layout proven by the values."""

    class Torch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(IN, HIDDEN)
            self.norm = torch.nn.LayerNorm(HIDDEN)
            self.fc2 = torch.nn.Linear(HIDDEN, OUT)

        def forward(self, x):
            return self.fc2(torch.tanh(self.norm(self.fc1(x)))).transpose(1, 2).unsqueeze(2)

    class Flax(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.tanh(nn.LayerNorm(name="norm")(nn.Dense(HIDDEN, name="fc1")(x)))
            return nn.Dense(OUT, name="fc2")(h)[:, None]

    torch.manual_seed(0)
    return crosscheck.Port(
        name=name,
        torch=Torch().eval(),
        jax=Flax(),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((2, ROWS, IN)).astype(dtype)},
    )


def test_the_layout_pass_compiles_the_port_once_not_each_operation():
    prepared = _port("layout-pass").prepared
    before = len(COMPILES)
    found = output_layouts(prepared)
    assert found and found[0] is not None and found[0].perm == (0, 3, 1, 2)
    # the pass's one program (the leaves made inside it, the arrays put on the device, not lifted)
    assert len(COMPILES) - before == 1, len(COMPILES) - before


def test_the_layouts_first_asked_inside_a_trace_are_found_by_their_values():
    outside = output_layouts(_port("layout-outside").prepared)
    prepared = _port("layout-inside").prepared
    seen = []

    @jax.jit
    def traced(x):
        seen.append(output_layouts(prepared))  # first asked here, inside the trace
        return x

    traced(np.float32(1.0))
    assert seen and seen[0] == outside and seen[0][0] is not None
    assert isinstance(layout.known(prepared), tuple)
