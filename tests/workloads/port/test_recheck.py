"""A second check in one process judges the port as it is now: the fix-and-recheck loop of a notebook.

JAX keeps a jitted function's traces by the function's identity, and a trace bakes in what the Python
code read while it ran: a module-level flag read by a Flax module's ``__call__``, a closure's variable
of a function port. Each port kind (linen, nnx, Equinox, a function) is checked healthy, then its JAX
code is changed in place (the same ``Port`` object, as a notebook keeps it) and checked again: the
second check must see the change, for the gradient (``reference="torch"``) and for the forward check
(``quantity="output"``). The control: the changed code, in a port made afresh, fails too.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
pytest.importorskip("flax")

#: Read by every JAX side below while it is traced (the Flax, Equinox and function code): 1 is the
#: healthy port, 1.05 a 5 % error in its output (and so in its gradient).
SCALE = 1.0
X = {"x": np.random.default_rng(0).standard_normal((5, 3))}


def torch_mlp():
    """fc1 (3 -> 4), tanh, fc2 (4 -> 2)."""

    class TorchMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)))

    torch.manual_seed(0)
    return TorchMLP().eval()


def linen_port(name="recheck-linen"):
    import flax.linen as nn

    class LinenMLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2, name="fc2")(jax.numpy.tanh(nn.Dense(4, name="fc1")(x))) * SCALE

    return crosscheck.Port(name=name, torch=torch_mlp(), jax=LinenMLP(), inputs=X)


def nnx_port(name="recheck-nnx"):
    from flax import nnx

    class NnxMLP(nnx.Module):
        def __init__(self, rngs):
            self.fc1, self.fc2 = nnx.Linear(3, 4, rngs=rngs), nnx.Linear(4, 2, rngs=rngs)
            self.scale = 1.0  # an attribute of the module (in its graph, not a variable)

        def __call__(self, x):
            return self.fc2(nnx.tanh(self.fc1(x))) * SCALE * self.scale

    return crosscheck.Port(name=name, torch=torch_mlp(), jax=NnxMLP(nnx.Rngs(0)), inputs=X)


def equinox_port(name="recheck-equinox"):
    eqx = pytest.importorskip("equinox")

    class EqxMLP(eqx.Module):
        fc1: eqx.nn.Linear
        fc2: eqx.nn.Linear

        def __init__(self, key):
            one, two = jax.random.split(key)
            self.fc1, self.fc2 = eqx.nn.Linear(3, 4, key=one), eqx.nn.Linear(4, 2, key=two)

        def __call__(self, x):
            return self.fc2(jax.numpy.tanh(self.fc1(x))) * SCALE

    return crosscheck.Port(
        name=name,
        torch=torch_mlp(),
        jax=EqxMLP(jax.random.key(0)),
        jax_call=lambda model, inputs: jax.vmap(model)(inputs["x"]),
        inputs=X,
    )


def _mlp(params, x, factor):
    h = jax.numpy.tanh(x @ params["fc1"]["weight"].T + params["fc1"]["bias"])
    return (h @ params["fc2"]["weight"].T + params["fc2"]["bias"]) * factor


def function_port(name="recheck-function"):
    """A function port whose factor is a closure's variable (``nonlocal``), changed with ``SCALE``."""
    factor = SCALE

    def mlp(params, x):
        return _mlp(params, x, factor)

    def follow():  # the closure's variable takes the flag's value now
        nonlocal factor
        factor = SCALE

    shapes = {"fc1": {"weight": (4, 3), "bias": (4,)}, "fc2": {"weight": (2, 4), "bias": (2,)}}
    params = {m: {k: np.zeros(s, np.float32) for k, s in leaves.items()} for m, leaves in shapes.items()}
    port = crosscheck.Port(name=name, torch=torch_mlp(), jax=mlp, jax_params=params, inputs=X)
    return port, follow


KINDS = {"linen": linen_port, "nnx": nnx_port, "equinox": equinox_port, "function": function_port}


def _made(kind, **kwargs):
    made = KINDS[kind](**kwargs)
    return made if isinstance(made, tuple) else (made, lambda: None)


def _check(port, quantity):
    if quantity == "output":
        return crosscheck.check(port, quantity="output")
    return crosscheck.check(port, reference="torch", backends=["jax"])


@pytest.mark.parametrize("quantity", ["grad", "output"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_second_check_of_the_same_port_sees_its_code_changed(kind, quantity, monkeypatch):
    port, follow = _made(kind)
    first = _check(port, quantity)
    assert first.passed, first.problems
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 1.05)
    follow()
    second = _check(port, quantity)
    assert not second.passed  # the same port object, its JAX code 5 % off now
    fresh, _ = _made(kind, name=f"recheck-{kind}-fresh")
    assert not _check(fresh, quantity).passed  # the control: made afresh, it fails as well
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 1.0)
    follow()
    third = _check(port, quantity)
    assert third.passed, third.problems  # fixed again: passes again


@pytest.mark.parametrize("quantity", ["grad", "output"])
def test_an_attribute_set_on_an_nnx_module_is_seen_by_the_next_check(quantity):
    """An nnx module is mutable: an attribute set on it between two checks (in its graph, which the
    model is rebuilt from) is the module's as it is now."""
    port = nnx_port()
    assert _check(port, quantity).passed
    port.jax.scale = 1.05
    assert not _check(port, quantity).passed
    port.jax.scale = 1.0
    assert _check(port, quantity).passed


def test_an_nnx_module_whose_variables_changed_is_refused_with_the_fix():
    from flax import nnx

    port = nnx_port()
    assert _check(port, "output").passed
    port.jax.extra = nnx.Linear(2, 2, rngs=nnx.Rngs(1))  # variables the mapping was not made for
    with pytest.raises(
        ValueError, match=r"variables changed since the port was prepared .* new crosscheck.Port"
    ):
        _check(port, "output")
