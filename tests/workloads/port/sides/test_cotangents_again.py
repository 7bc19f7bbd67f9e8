"""The JAX side's cotangents in a check made again with the same kept program
(``jax_cotangents.cotangents``): the model is traced afresh, once (no shape pass where the calls are
those of the last check), and what changed since is seen: a flag its code reads, calls added or taken
away. Each is what a new capture, kept nowhere, gives."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flax")

#: Read by the model's code while it is traced: changed between checks.
SETTINGS = {"scale": 1.0, "twice": False}


def _loss():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            inner = nn.Dense(3, name="inner")
            h = inner(x) * SETTINGS["scale"]
            if SETTINGS["twice"]:
                h = inner(jnp.tanh(h))
            return nn.Dense(2, name="outer")(jnp.tanh(h))

    x = jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)
    model = Net()
    variables = model.init(jax.random.key(0), x)  # called twice or once: the same parameters

    def loss(params, inputs):
        return (model.apply(params, inputs["x"]) ** 2).sum()

    return loss, variables, {"x": x}


def _arrays(records):
    return [(r.name, [np.asarray(a) for a in (*r.inputs, *r.outputs)]) for r in records]


@pytest.fixture
def counted(monkeypatch):
    """The traces of the model the captures made (``jax_cotangents._perturbed``: True for a shape pass,
    False for a perturbed one)."""
    from crosscheck._workloads.port.sides import jax_cotangents

    made: list[bool] = []
    original = jax_cotangents._perturbed

    def spy(loss, perturb, *args):
        made.append(perturb is None)
        return original(loss, perturb, *args)

    monkeypatch.setattr(jax_cotangents, "_perturbed", spy)
    yield made
    SETTINGS.update(scale=1.0, twice=False)


def test_a_check_made_again_traces_afresh_once_and_sees_what_changed(counted):
    from crosscheck._workloads.port.sides import jax_cotangents
    from crosscheck._workloads.programs import Kept

    loss, params, inputs = _loss()
    kept = Kept()
    steps = [
        {"scale": 1.0, "twice": False},
        {"scale": 1.0, "twice": False},  # the same calls: no shape pass
        {"scale": 3.0, "twice": False},  # a flag the code reads: the same calls, other cotangents
        {"scale": 3.0, "twice": True},  # a call added: found afresh
        {"scale": 3.0, "twice": False},  # and taken away
    ]
    passes = []
    for settings in steps:
        SETTINGS.update(settings)
        kept.renew()
        got, _ = jax_cotangents.cotangents(loss, params, inputs, kept)
        passes.append(list(counted))
        fresh, _ = jax_cotangents.cotangents(loss, params, inputs)  # kept nowhere: a shape pass
        counted.clear()
        assert [name for name, _ in _arrays(got)] == [name for name, _ in _arrays(fresh)]
        for (name, mine), (_, theirs) in zip(_arrays(got), _arrays(fresh), strict=True):
            for a, b in zip(mine, theirs, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=0, err_msg=name)
        assert [r.name for r in got] == (
            ["inner", "inner#2", "outer"] if settings["twice"] else ["inner", "outer"]
        )
    first, again, new = [True, False], [False], [False, True, False]  # True: a shape pass
    assert passes == [first, again, again, new, new]
    scaled = next(r for r in got if r.name == "inner")
    SETTINGS.update(scale=1.0, twice=False)
    plain = next(r for r in jax_cotangents.cotangents(loss, params, inputs)[0] if r.name == "inner")
    assert not np.allclose(scaled.inputs[0], plain.inputs[0])  # the flag was read afresh
