"""The zero perturbations of one module call (``sides/perturbations.py``): a call in a scan's step is
labelled with ``@*`` and counted within its step's trace, its zeros carry the scan's length, each step
adds its own slice, and its records are named per step as the capture names them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")


def test_a_scanned_label_becomes_one_record_name_per_step():
    from crosscheck._workloads.port.sides.perturbations import labels

    assert labels("fc1", ()) == [("fc1", ())]
    assert labels("layers.fc1@*#2", (3,)) == [
        ("layers.fc1@0#2", (0,)),
        ("layers.fc1@1#2", (1,)),
        ("layers.fc1@2#2", (2,)),
    ]
    assert [name for name, _ in labels("a.b@*.*", (2, 2))] == ["a.b@0.0", "a.b@0.1", "a.b@1.0", "a.b@1.1"]


def test_a_call_in_a_scan_s_step_is_labelled_counted_in_its_step_and_perturbed_by_its_own_slice():
    import jax
    import jax.numpy as jnp

    from crosscheck._workloads.port.sides import steps
    from crosscheck._workloads.port.sides.perturbations import Calls, Shape

    shapes: dict[str, Shape] = {}
    names: list[str] = []

    def body(calls):
        def step(carry, x):
            for _ in range(2):  # a submodule called twice in one step
                label = calls.label("layers.fc")
                names.append(label)
                entered = calls.entering(label, (carry,))[0]
                carry = calls.leaving(label, "Dense", (carry,), entered * 2.0)
            return carry, None

        return step

    with steps.indexed():
        outside = Calls(None, shapes)
        names.append(outside.label("embed"))
        jax.lax.scan(body(outside), jnp.ones(2), jnp.arange(3.0))
    assert names == ["embed", "layers.fc@*", "layers.fc@*#2"]
    assert shapes["layers.fc@*"] == Shape(
        "Dense", jax.ShapeDtypeStruct((2,), jnp.float32), (jax.ShapeDtypeStruct((2,), jnp.float32),), (3,)
    )
    first, (out,) = shapes["layers.fc@*"].zeros()
    assert first.shape == out.shape == (3, 2)

    def loss(perturb):
        calls = Calls(perturb, {})
        with steps.indexed():
            return jax.lax.scan(body(calls), jnp.ones(2), jnp.arange(3.0))[0].sum()

    zeros = {label: shapes[label].zeros() for label in ("layers.fc@*", "layers.fc@*#2")}
    grads = jax.grad(loss)(zeros)
    # step i's second output reaches the loss through 2 ** (2 * (2 - i)) doublings after it
    expected = np.array([[16.0] * 2, [4.0] * 2, [1.0] * 2])
    assert np.array_equal(np.asarray(grads["layers.fc@*#2"][1][0]), expected)
    assert np.array_equal(np.asarray(grads["layers.fc@*#2"][0]), 2 * expected)  # its input: x2 more
