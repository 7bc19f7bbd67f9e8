"""The PyTorch side copies the model no more than it must (issue 38), and still finds every write.

The tensors of a capture, of the proof and of a gradient are made over the memory of the arrays the
engine's guarded call hands (its private copies: ``torch_side.share``, the adapter's ``share``), not
copied once more; ``torch_side.call`` compares what it was given bit for bit after the forward (a tensor
over a handed array with what the engine compares that array with, ``handed.test_of``; any other with
a copy it made before), so a module that writes into its parameter, a buffer or its input is caught as
before, down to a sign bit. Nothing of a call is kept after it: no float64 tensor, no ``.grad``.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flax")

from crosscheck._engine.caller import Caller  # noqa: E402
from crosscheck._workloads.model.workload import _framework_backend  # noqa: E402
from crosscheck._workloads.port.judge import capture  # noqa: E402
from crosscheck._workloads.port.sides import torch_side  # noqa: E402


class Net(torch.nn.Module):
    """A Linear and a buffer; ``write`` names what its forward writes to (a sign bit only: 0.0 to -0.0)."""

    def __init__(self, write: str = "") -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.register_buffer("shift", torch.zeros(2))
        self.write = write
        self.seen: dict[str, int] = {}

    def forward(self, x):
        self.seen = {"weight": self.fc.weight.data_ptr(), "x": x.data_ptr()}
        with torch.no_grad():
            target = {"weight": self.fc.weight, "shift": self.shift, "x": x}.get(self.write)
            if target is not None:
                target.view(-1)[0] = -0.0 if target.view(-1)[0] == 0 else target.view(-1)[0]
        return torch.tanh(self.fc(x)) + self.shift


def _arrays(dtype: str = "float64") -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    params = {"fc.weight": rng.standard_normal((2, 3)), "fc.bias": rng.standard_normal(2)}
    params["fc.weight"][0, 0] = 0.0  # a +0.0 the writing module turns into -0.0
    inputs = {"x": np.zeros((4, 3)), "shift": np.zeros(2)}
    return {k: v.astype(dtype) for k, v in params.items()}, {k: v.astype(dtype) for k, v in inputs.items()}


class _Prepared:
    """What ``capture.torch_capture`` reads of a prepared port."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.torch_side = torch_side.Wrapped(module, lambda m, inputs: m(**inputs))

    def torch_state(self, arrays):
        return {k: v for k, v in arrays.items() if k == "shift"}

    def user_inputs(self, arrays):
        return {"x": arrays["x"]}


def test_share_wraps_a_private_array_and_copies_what_torch_cannot_wrap():
    private = np.arange(6.0).reshape(2, 3)
    assert np.shares_memory(torch_side.share(private).numpy(), private)
    assert torch_side.share(private, requires_grad=True).requires_grad
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    others = [read_only, np.arange(6.0)[::-1]]
    for array in others:
        t = torch_side.share(array)
        assert not np.shares_memory(t.numpy(), array) and np.array_equal(t.numpy(), array)
    copied = torch_side.tensor(private)
    assert not np.shares_memory(copied.numpy(), private) and np.array_equal(copied.numpy(), private)


def test_a_capture_computes_over_the_parameters_handed_and_a_copy_of_the_inputs():
    """The parameters are not copied once more; each call's inputs are its own copy (a model may write
    to its input in place, as XGLM does, and still compute a function of it)."""
    module = Net()
    params, inputs = _arrays()
    records = capture.torch_capture(_Prepared(module), params, inputs)
    assert module.seen["weight"] == params["fc.weight"].ctypes.data
    assert module.seen["x"] != inputs["x"].ctypes.data
    top = records[-1].outputs[0]
    assert not np.shares_memory(top, params["fc.weight"]) and top.dtype == np.float64


@pytest.mark.parametrize(
    ("write", "said"),
    [
        ("weight", "changes its parameter `fc.weight`"),
        ("shift", "updates its buffer `shift` in place"),
    ],
)
def test_a_write_of_a_sign_bit_into_a_shared_tensor_is_still_caught(write, said):
    params, inputs = _arrays()
    with pytest.raises(torch_side.Misbehaved, match=f"{said} during its forward"):
        capture.torch_capture(_Prepared(Net(write)), params, inputs)


def test_a_write_of_a_sign_bit_into_an_input_is_noted_by_name_and_the_input_kept():
    params, inputs = _arrays()
    kept = inputs["x"].copy()
    prepared = _Prepared(Net("x"))
    capture.torch_capture(prepared, params, inputs)
    assert prepared.torch_side.wrote == {"x"}
    assert np.array_equal(inputs["x"], kept) and not np.signbit(inputs["x"][0, 0])
    healthy = _Prepared(Net())
    capture.torch_capture(healthy, params, inputs)
    assert healthy.torch_side.wrote == set()


def test_through_the_engine_the_write_is_the_pytorch_sides_failure_and_the_point_stays():
    params, inputs = _arrays()
    kept = {k: v.copy() for k, v in {**params, **inputs}.items()}
    call = Caller({**params, **inputs})
    got = call(capture.torch_capture, _Prepared(Net("weight")), params, inputs)
    assert got.error is not None and got.error.startswith("Misbehaved: the PyTorch module (`torch`) changes")
    assert all(np.array_equal(v, kept[k]) for k, v in {**params, **inputs}.items())
    assert np.signbit(params["fc.weight"][0, 0]) == np.signbit(kept["fc.weight"][0, 0])


def _float64_tensors() -> list[torch.Tensor]:
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is torch.Tensor and o.dtype == torch.float64]


def test_nothing_of_a_capture_or_a_gradient_is_kept_after_it():
    module = Net()
    prepared = _Prepared(module)
    before = len(_float64_tensors())
    params, inputs = _arrays()
    capture.torch_capture(prepared, params, inputs)
    loss = lambda p, i: torch_side.call(prepared.torch_side, {**p, "shift": i["shift"]}, {"x": i["x"]}).sum()  # noqa: E731
    backend = type(_framework_backend("torch", loss))("torch", loss)
    grads = backend.grad(params, inputs)
    assert set(grads) == set(params) and all(g.dtype == np.float64 for g in grads.values())
    del grads
    assert len(_float64_tensors()) == before
    assert all(p.grad is None for p in module.parameters())  # functional_call: the module's own untouched


def test_the_gradient_leaves_are_the_arrays_handed_and_a_write_into_one_fails_the_call():
    def writes(params, inputs):
        out = torch.sum(torch.tanh(inputs["x"] @ params["w"]))
        with torch.no_grad():
            params["w"].view(-1)[0] = -0.0  # +0.0 before: a sign bit
        return out

    params, inputs = {"w": np.zeros((3, 2))}, {"x": np.ones((4, 3))}
    seen = {}

    def records(p, i):
        seen["w"] = p["w"].data_ptr()
        return torch.sum(torch.tanh(i["x"] @ p["w"]))

    backend = type(_framework_backend("torch", records))("torch", records)
    backend.grad(params, inputs)
    assert seen["w"] == params["w"].ctypes.data  # no copy of the parameter
    writer = type(_framework_backend("torch", writes))("torch", writes)
    got = Caller({**params, **inputs})(writer.grad, params, inputs)
    assert got.error is not None and "modified its inputs" in got.error and "`w`" in got.error
    assert not np.signbit(params["w"]).any()  # the point's own array is never handed


def test_the_batched_losses_share_the_parameters_handed():
    seen = {}

    def loss(p, i):
        seen["b"] = p["b"].data_ptr()  # not batched: the tensor itself
        return torch.sum(torch.tanh(i["x"] @ p["w"]) * p["b"])

    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((2, 3, 2)), "b": rng.standard_normal(2)}
    inputs = {"x": rng.standard_normal((4, 3))}
    backend = type(_framework_backend("torch", loss))("torch", loss)
    both = backend.losses(params, inputs, ("w",))
    assert seen["b"] == params["b"].ctypes.data
    one = backend.loss({"w": params["w"][0], "b": params["b"]}, inputs)
    assert both.shape == (2,) and np.isclose(both[0], one, rtol=1e-12, atol=0)


def _copies(monkeypatch) -> list:
    """The tensors ``torch_side`` copies to find a write (``_copy``), recorded."""
    made: list = []
    original = torch_side._copy
    monkeypatch.setattr(torch_side, "_copy", lambda t: made.append(tuple(t.shape)) or original(t))
    return made


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_through_the_engine_no_handed_tensor_is_copied_and_a_write_is_still_caught(monkeypatch, dtype):
    """The engine's guarded call keeps what it hands a backend to compare after the call: the PyTorch
    side tests a tensor over a handed array against that (``handed.test_of``), not a copy of its own, a
    float32 point's arrays re-run in float64 (``Caller.cast``: compared with their cast source) too."""
    made = _copies(monkeypatch)
    params, inputs = _arrays("float32")
    call = Caller({**params, **inputs})
    if dtype == "float64":
        params, inputs = call.cast(params, "float64"), call.cast(inputs, "float64")
    got = call(capture.torch_capture, _Prepared(Net()), params, inputs)
    assert got.error is None and made == []
    for write, said in (("weight", "changes its parameter `fc.weight`"), ("x", None)):
        p, i = params, inputs
        if dtype == "float64":
            p, i = call.cast(params, dtype), call.cast(inputs, dtype)
        prepared = _Prepared(Net(write))
        got = call(capture.torch_capture, prepared, p, i)
        if said is None:  # an input: the call's own copy, so a note, not an error
            assert got.error is None and prepared.torch_side.wrote == {"x"}
            continue
        assert (
            got.error
            == f"Misbehaved: the PyTorch module (`torch`) {said} during its forward; " + torch_side.RULE
        )
    assert made == []


def test_outside_a_guarded_call_the_tensors_are_copied_to_compare():
    from crosscheck._backends import handed

    params, _ = _arrays()
    assert handed.test_of(params["fc.weight"]) is None
    with handed.handing([params["fc.weight"]], [lambda a: True]):
        assert handed.test_of(params["fc.weight"]) is not None
        assert handed.test_of(params["fc.weight"][:1]) is None  # a view: another array, copied
        assert handed.test_of(params["fc.weight"].copy()) is None
    assert handed.test_of(params["fc.weight"]) is None


def test_same_bits_sees_a_sign_bit_and_a_nan_payload_in_any_block():
    from crosscheck._backends import handed

    a = np.zeros(10_000)
    for change in (-0.0, np.float64(np.nan), 1e-300):
        for where in (0, 4095, 9999):
            b = a.copy()
            b[where] = change
            assert not handed.same_bits(a, b, block=4096)
    nan = np.full(3, np.nan)
    other = nan.view(np.uint64) | np.uint64(1)
    assert handed.same_bits(nan, nan.copy()) and not handed.same_bits(nan, other.view(np.float64))
    assert handed.same_bits(a, a.copy(), block=4096) and not handed.same_bits(a, a[:10])
