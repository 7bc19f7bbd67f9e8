"""The program a side ran, as its framework traced it (``crosscheck._backends.program``, the JAX side's
``backends/jax/program.py``): what lets a host CPU run clear a device run only when both ran the same
program."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._backends.program import Program, specs
from crosscheck._engine.process.isolate_worker import _serve

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from crosscheck.backends.jax import program  # noqa: E402
from crosscheck.backends.jax.workload import JaxWorkloadBackend  # noqa: E402

ARRAYS = {"w": np.ones((3, 4), np.float32)}, {"x": np.ones((2, 3), np.float32)}


def _loss(params, inputs):
    return jnp.sum(jnp.tanh(inputs["x"] @ params["w"]))


def _on_the_device_only(params, inputs):
    y = inputs["x"] @ params["w"]
    if jax.config.jax_default_device is None:  # as a port branches on where it runs
        y = y * 1.05
    return jnp.sum(jnp.tanh(y))


def test_a_program_is_counted_operation_by_operation_with_what_it_calls_by_name():
    attention = jax.jit(lambda q: jax.nn.softmax(q))
    attention.__name__ = "attention"

    def loss(params, inputs):
        y, _ = jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), inputs["x"], params["w"])
        return jnp.sum(attention(y))

    arrays = {"w": np.ones((2, 3, 3), np.float32)}, {"x": np.ones((2, 3), np.float32)}
    found = program.traced(jax.grad(loss), *(program.abstract(specs(a)) for a in arrays))
    ops = found["operations"]
    assert ops["scan"] == 2 and ops["dot_general"] >= 3 and ops["tanh"] >= 1  # a scan's bodies counted
    assert any(name.startswith("jit:") for name in ops)  # a jitted function by its name
    assert found["by_platform"] == []


def test_the_same_function_traces_the_same_program_on_the_host_and_a_branch_does_not():
    backend, branching = JaxWorkloadBackend("jax", _loss), JaxWorkloadBackend("jax", _on_the_device_only)
    arrays = [specs(a) for a in ARRAYS]
    with jax.default_device(jax.devices("cpu")[0]):
        host, other = Program.of(backend.program(*arrays)), Program.of(branching.program(*arrays))
    device, own = Program.of(backend.program(*arrays)), Program.of(branching.program(*arrays))
    assert host is not None and device is not None and other is not None and own is not None
    assert device.differences(host, "on the device", "on the host CPU") == []
    there = other.operations.get("mul", 0) or "none"
    assert own.differences(other, "on the device", "on the host CPU") == [
        f"`mul` ({own.operations['mul']} on the device, {there} on the host CPU)"
    ]


def test_a_program_that_chooses_its_code_by_platform_is_never_the_same_elsewhere():
    def loss(params, inputs):
        y = jax.lax.platform_dependent(inputs["x"], cpu=jnp.tanh, default=jnp.sin)
        return jnp.sum(y @ params["w"])

    found = Program.of(JaxWorkloadBackend("jax", loss).program(*(specs(a) for a in ARRAYS)))
    assert found is not None and found.by_platform == ("platform_index",)
    assert found.differences(found, "on the device", "on the host CPU") == [
        "`platform_index`, which choose their code by the platform"
    ]


def test_a_program_crosses_a_worker_process_as_data():
    request = {
        "args": [specs(a) for a in ARRAYS],
        "kwargs": {},
        "names": [],
        "method": "program",
        "contexts": [],
    }
    out = _serve(JaxWorkloadBackend("jax", _loss), request)
    assert out["error"] is None and Program.of(out["value"]) is not None
    assert out["value"]["operations"]["tanh"] >= 1


def test_anything_else_is_no_program():
    assert Program.of(None) is None and Program.of({"operations": 3}) is None
