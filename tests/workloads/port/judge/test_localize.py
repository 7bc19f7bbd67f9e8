"""Module by module without false alarms (issue 24, part L): what a healthy pair's modules may differ in
without differing in function. Each case is a tiny hand-written PyTorch + Flax linen pair with the
cause a Hugging Face model showed: an output that broadcasts (DistilBERT's position embedding), a
parametrization whose "output" is a weight (Wav2Vec2's weight norm), a module applied on its own inside
the model's call (Flax Wav2Vec2's weight-norm conv), a side that cannot run in float64 (CLIP's mask)."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nn = pytest.importorskip("flax.linen")

S, H = 5, 4


def tokens(rng, dtype):
    return {"ids": rng.integers(0, 6, size=(2, S)).astype(np.int32)}


class TorchEmbed(torch.nn.Module):
    """Token plus position embedding; the position one is looked up for ``(1, S)`` ids: ``(1, S, H)``."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(6, H), torch.nn.Embedding(S, H)
        self.fc = torch.nn.Linear(H, 3)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1])[None]
        return self.fc(torch.tanh(self.tok(ids) + self.pos(positions)))


class FlaxEmbed(nn.Module):
    """The same, with ``(B, S)`` position ids: its position embedding's output is ``(B, S, H)``."""

    @nn.compact
    def __call__(self, ids):
        positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
        x = nn.Embed(6, H, name="tok")(ids) + nn.Embed(S, H, name="pos")(positions)
        return nn.Dense(3, name="fc")(jnp.tanh(x))


def _run(port, **kwargs):
    return crosscheck.run(workload=port, reference="torch", backends=["jax"], **kwargs)


def _embed_port(**kwargs):
    torch.manual_seed(0)
    return crosscheck.Port(name="embed", torch=TorchEmbed().eval(), jax=FlaxEmbed(), inputs=tokens, **kwargs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_output_that_broadcasts_is_compared_after_broadcasting_and_said(dtype):
    report = _run(_embed_port(), dtype=dtype)
    (row,) = [c for c in report.comparisons if c.parameter == "pos (output)"]
    assert row.passed and row.coverage.startswith("every entry, after broadcasting")
    assert "(1, 5, 4)" in row.coverage and "(2, 5, 4)" in row.coverage
    text = report.backends["jax"].notes["port"]["text"]
    assert "agree" in text and "after broadcasting" in text and "`pos (output)`" in text
    assert report.passed


def test_outputs_that_do_not_broadcast_still_differ():
    from crosscheck._workloads.port.judge.localize import compare_arrays

    args = {"dtype": "float32", "channels_last": False, "backend": "jax", "reference": "torch"}
    ones = np.ones((3, 1))
    found = compare_arrays("m (output)", ([ones], [ones]), ([np.ones(3)], [np.ones(3)]), **args)
    assert not found.passed and "PyTorch shape (3, 1), JAX shape (3,)" in found.message
    wrong = compare_arrays("m (output)", ([ones.T], [ones.T]), ([2 * np.ones((4, 3))],) * 2, **args)
    assert not wrong.passed and wrong.status == "mismatch" and "after broadcasting" in wrong.message


def test_a_second_output_that_broadcasts_either_way_agrees():
    """T5's cross-attention returns its position bias beside its output: zeros plus the padding mask,
    ``(B, H, Q, K)`` in PyTorch and ``(B, 1, 1, K)`` in Flax; it "differed first" there."""
    from crosscheck._workloads.port.judge.localize import compare_arrays

    args = {"dtype": "float32", "channels_last": False, "backend": "jax", "reference": "torch"}
    out, mask = np.arange(6.0).reshape(2, 3), np.zeros((2, 1, 1, 6))
    torch_side = [out, np.broadcast_to(mask, (2, 2, 5, 6)).copy()]
    found = compare_arrays("attn (output)", (torch_side, torch_side), ([out, mask], [out, mask]), **args)
    assert found.passed and "array 1: PyTorch's (2, 2, 5, 6) and JAX's (2, 1, 1, 6)" in found.coverage


def _identity_parametrized_linear():
    class Same(torch.nn.Module):
        def forward(self, w):
            return w

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
            torch.nn.utils.parametrize.register_parametrization(self.fc, "weight", Same())

        def forward(self, x):
            return torch.tanh(self.fc(x))

    torch.manual_seed(0)
    return TorchNet().eval()


class FlaxDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(2, name="fc")(x))


def test_a_parametrization_is_left_out_with_a_note():
    port = crosscheck.Port(
        name="parametrized",
        torch=_identity_parametrized_linear(),
        jax=FlaxDense(),
        inputs={"x": np.random.default_rng(0).standard_normal((4, 3))},
        overrides={"fc.parametrizations.weight.original": ("params/fc/kernel", "transpose")},
    )
    report = _run(port)
    names = [c.parameter for c in report.comparisons]
    assert "fc (output)" in names and not any("parametrizations" in n and "(output)" in n for n in names)
    text = report.backends["jax"].notes["port"]["text"]
    assert "not compared: `fc.parametrizations.weight` (a ParametrizationList" in text
    assert report.passed


class FlaxApplied(nn.Module):
    """A Dense applied on its own inside the call (a separate ``apply``: its module path is ``()``)."""

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.zeros, (3, 2))
        bias = self.param("bias", nn.initializers.zeros, (2,))
        return jnp.tanh(nn.Dense(2).apply({"params": {"kernel": kernel, "bias": bias}}, x))


def test_a_module_applied_on_its_own_inside_the_call_is_not_the_top_module():
    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.bias = torch.nn.Parameter(torch.randn(2, 3)), torch.nn.Parameter(torch.randn(2))

        def forward(self, x):
            return torch.tanh(x @ self.weight.T + self.bias)

    port = crosscheck.Port(
        name="applied",
        torch=TorchNet().eval(),
        jax=FlaxApplied(),
        inputs={"x": np.random.default_rng(0).standard_normal((4, 3))},
        overrides={"weight": ("params/kernel", "transpose")},
    )
    report = _run(port)
    (top,) = [c for c in report.comparisons if c.parameter == "(model) (output)"]
    assert top.passed and report.passed


class FlaxMethod(nn.Module):
    """The model's own method at path () inside its call: still the model, its submodules captured."""

    def setup(self):
        self.fc = nn.Dense(2)

    def body(self, x):
        return self.fc(x)

    def __call__(self, x):
        return jnp.tanh(self.body(x))


def test_the_models_own_methods_are_not_taken_for_a_separate_apply():
    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, x):
            return torch.tanh(self.fc(x))

    x = {"x": np.random.default_rng(0).standard_normal((4, 3))}
    report = _run(crosscheck.Port(name="method", torch=TorchNet().eval(), jax=FlaxMethod(), inputs=x))
    rows = {c.parameter: c.passed for c in report.comparisons}
    assert rows.get("fc (output)") and rows.get("(model) (output)") and report.passed


def _float32_only(module, inputs):
    """A PyTorch model that cannot run in float64 (CLIP's mask filled with float32's minimum)."""
    if module.fc.weight.dtype == torch.float64:
        raise RuntimeError("value cannot be converted to type float without overflow")
    return module(**inputs)


def test_a_side_that_cannot_rerun_in_the_other_precision_takes_the_others_rounding():
    report = _run(_embed_port(torch_call=_float32_only))
    modules = [c for c in report.comparisons if c.parameter.endswith("(output)")]
    assert modules and all(c.passed for c in modules)
    assert all("could not be measured" in c.tolerance_sources["reference"] for c in modules)
    text = report.backends["jax"].notes["port"]["text"]
    assert "the PyTorch side could not be re-run in the other precision" in text
    assert "value cannot be converted" in text and report.passed


def test_neither_side_rerun_means_not_judged_never_passed_nor_blamed():
    def jax_float32_only(model, inputs):
        kernel = model.variables.get("params", {}).get("fc", {}).get("kernel")  # none while initialising
        if kernel is not None and kernel.dtype == jnp.float64:
            raise RuntimeError("this port computes in float32 only")
        return model(**inputs)

    report = _run(_embed_port(torch_call=_float32_only, jax_call=jax_float32_only))
    modules = [c for c in report.comparisons if c.parameter.endswith("(output)")]
    assert modules and all(not c.passed and c.coverage == "not judged" for c in modules)
    assert all("not judged" in c.message for c in modules)
    verdict = report.backends["jax"].notes["port"]
    assert verdict["starts_in"] != "forward" and "no module output was judged" in verdict["text"]
    assert not report.passed


def test_an_output_of_another_shape_says_both_shapes_in_the_verdict():
    port = _embed_port(jax_inputs=lambda i: {"ids": i["ids"].T})  # (S, B) ids: a wrong input layout
    report = _run(port)
    assert not report.passed
    line = report.problems[0]
    assert "the port's output has shape (5, 2, 3), the original's (2, 5, 3)" in line
    assert "`jax_inputs`" in line


def test_a_module_output_is_said_as_a_module_output_never_as_a_parameter():
    from crosscheck._report.report import versus
    from crosscheck._workloads.port.judge.localize import compare_arrays

    t = np.arange(12, dtype=np.float32).reshape(3, 4)
    runs = ([t], [t])
    c = compare_arrays(
        "gn2 (output)",
        runs,
        ([t + 1], [t + 1]),
        dtype="float32",
        channels_last=False,
        backend="jax",
        reference="torch",
        module="gn2",
    )
    assert not c.passed and c.module == "gn2"
    assert versus(c) == "jax vs torch, module output `gn2`"  # its message's heading
    assert "in module output `gn2`" in c.message
    assert "parameter" not in versus(c) + c.message
