"""The JAX and PyTorch adapters' oracle evaluations send (JAX: copy; PyTorch: share) a parameter array
once while its bits stay (issue 38: every call converted every array, which cost more than the forward
pass): structural, by the count of arrays sent or taken, and never stale: an array written between two
calls, by the caller or by the model, is sent again (JAX) or is the very memory computed with
(PyTorch)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from crosscheck._workloads.model.workload import _framework_backend  # noqa: E402


def JaxWorkloadBackend(name, loss):  # a fresh adapter of the class the workload makes (it keeps its own)
    return type(_framework_backend(name, loss))(name, loss)


def TorchWorkloadBackend(name, loss):
    pytest.importorskip("torch")
    return type(_framework_backend(name, loss))(name, loss)


def _loss(params, inputs):
    import jax.numpy as jnp

    return jnp.sum(jnp.tanh(inputs["x"] @ params["w"]) * params["b"]) + jnp.sum(inputs["ids"] * 0.5)


def _arrays():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    inputs = {"x": rng.standard_normal((2, 3)), "ids": np.arange(4, dtype=np.int64)}
    return params, inputs


def test_an_array_whose_bits_stay_is_sent_once_and_a_written_one_again():
    backend = JaxWorkloadBackend("jax", _loss)
    params, inputs = _arrays()
    first = backend.loss(params, inputs)
    assert backend.resident.sent == 4
    assert backend.loss(dict(params), dict(inputs)) == first and backend.resident.sent == 4
    params["w"][1, 2] += 1e-3  # written in place, as the oracle's evaluator does
    moved = backend.loss(params, inputs)
    assert backend.resident.sent == 5 and moved != first
    assert moved == JaxWorkloadBackend("jax", _loss).loss(params, inputs)  # what a fresh backend gives
    params["w"][1, 2] -= 1e-3
    assert backend.loss(params, inputs) == first and backend.resident.sent == 6


def test_a_float32_call_and_a_gradient_clear_what_is_held():
    backend = JaxWorkloadBackend("jax", _loss)
    params, inputs = _arrays()
    wide = backend.loss(params, inputs)
    narrow = {k: v.astype(np.float32) for k, v in params.items()}
    low = backend.loss(narrow, {**inputs, "x": inputs["x"].astype(np.float32)})
    assert low.dtype == np.float32 and wide.dtype == np.float64 and backend.resident.sent == 8
    backend.grad(params, inputs)
    assert backend.resident._held == {}
    assert backend.loss(params, inputs) == wide and backend.resident.sent == 12


def test_the_batched_losses_share_the_arrays_that_do_not_move():
    backend = JaxWorkloadBackend("jax", _loss)
    params, inputs = _arrays()
    stacked = {**params, "w": np.stack([params["w"], params["w"] + 1e-3])}
    first = backend.losses(stacked, inputs, ("w",))
    sent = backend.resident.sent
    again = backend.losses(stacked, inputs, ("w",))
    assert backend.resident.sent == sent == 3 and np.array_equal(first, again)
    assert first[0] == backend.loss(params, inputs)


def _torch_loss(params, inputs):
    import torch

    return torch.sum(torch.tanh(inputs["x"] @ params["w"]) * params["b"]) + torch.sum(inputs["ids"] * 0.5)


def test_the_torch_adapter_takes_an_array_once_while_its_bits_stay():
    pytest.importorskip("torch")
    backend = TorchWorkloadBackend("torch", _torch_loss)
    params, inputs = _arrays()
    first = backend.loss(params, inputs)
    assert backend.resident.taken == 4
    held = backend.resident._held
    assert all(np.shares_memory(held[f"p:{k}"].numpy(), v) for k, v in params.items())  # no copy
    again = {k: v.copy() for k, v in params.items()}  # other arrays, the same bits: not taken again
    assert backend.loss(again, dict(inputs)) == first and backend.resident.taken == 4
    again["b"][0] += 1e-3  # other bits: taken
    moved = backend.loss(again, inputs)
    assert backend.resident.taken == 5 and moved == TorchWorkloadBackend("torch", _torch_loss).loss(
        again, inputs
    )
    assert backend.loss(params, inputs) == first and backend.resident.taken == 6
    backend.grad(params, inputs)
    assert backend.resident._held == {}


def _fresh_torch_loss(params, inputs):
    return TorchWorkloadBackend("torch", _torch_loss).loss({k: v.copy() for k, v in params.items()}, inputs)


def test_an_array_written_between_calls_is_never_stale():
    # The adapter's tensors are the arrays handed (the engine's private copies): one written in place
    # between two calls, by the caller or by the model, is what the next call computes with.
    pytest.importorskip("torch")

    def writes(params, inputs):
        out = _torch_loss(params, inputs)
        params["b"].mul_(2.0)  # a model that changes its own tensor in place
        return out

    backend = TorchWorkloadBackend("torch", writes)
    params, inputs = _arrays()
    before = {k: v.copy() for k, v in params.items()}
    first = backend.loss(params, inputs)
    assert np.array_equal(params["b"], 2.0 * before["b"])  # the write is in the array handed
    expected = _fresh_torch_loss(params, inputs)
    assert backend.loss(params, inputs) == expected != first
    assert first == TorchWorkloadBackend("torch", _torch_loss).loss(before, inputs)
    params["w"][0, 0] += 1.0  # written by the caller
    expected = _fresh_torch_loss(params, inputs)
    assert backend.loss(params, inputs) == expected


def test_an_entry_written_past_the_first_chunk_is_seen():
    from crosscheck._workloads.model.workload import _framework_backend as make

    module = __import__(type(make("jax", _loss)).__module__, fromlist=["CHUNK"])
    backend = JaxWorkloadBackend("jax", _loss)
    params, inputs = _arrays()
    params["w"] = np.zeros((3, module.CHUNK + 5))  # the comparison's chunks: the last one is short
    inputs["x"] = np.ones((2, 3))
    params["b"] = np.ones(module.CHUNK + 5)
    first = backend.loss(params, inputs)
    for where in (0, module.CHUNK - 1, module.CHUNK, -1):
        params["b"][where] = 2.0
        sent = backend.resident.sent
        moved = backend.loss(params, inputs)
        assert backend.resident.sent == sent + 1, where
        assert moved == JaxWorkloadBackend("jax", _loss).loss(params, inputs)
        params["b"][where] = 1.0
        assert backend.loss(params, inputs) == first
