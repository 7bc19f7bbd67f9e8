"""The precision a "float64" loss really computes in (``oracle.precision``): a loss with a float32 step
(Hugging Face's softmax upcast "to float32" in a float64 run) is found by its noise, differenced with
float32's error bar, and a port whose one side keeps such a step passes a float64 check, saying so."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._workloads.model.oracle.entries import estimate
from crosscheck._workloads.model.oracle.precision import CLEAR, PROBE_EVALUATIONS, judge, probe, probed

RNG = np.random.default_rng(1)
PARAMS = {
    "w1": RNG.standard_normal((6, 4)) * 0.5,
    "b1": RNG.standard_normal(6) * 0.1,  # zero gradient by construction: the softmax is shift-invariant
    "w2": RNG.standard_normal((3, 6)) * 0.5,
}
X, PROJECTION = RNG.standard_normal((5, 4)), RNG.standard_normal((5, 3))


def loss(params, float32=True):
    """A softmax over a linear layer, computed in float32 when ``float32`` (then back to float64)."""
    h = X @ params["w1"].T + params["b1"]
    h = h.astype(np.float32) if float32 else h
    e = np.exp(h - h.max(-1, keepdims=True))
    p = (e / e.sum(-1, keepdims=True)).astype(np.float64)
    return float(np.sum(np.tanh(p @ params["w2"].T) * PROJECTION))


def _direct(thunk):
    return thunk()


@pytest.mark.parametrize("float32", [True, False], ids=["float32-step", "float64"])
def test_the_probe_tells_a_float32_step_from_float64(float32):
    value = loss(PARAMS, float32)
    low = float(np.float32(loss({k: v.astype(np.float32) for k, v in PARAMS.items()}, True)))
    noise = probe(lambda p: loss(p, float32), PARAMS, _direct)
    found = judge(noise, value, low, "torch")
    assert found.float32 == float32
    ulps = noise / (2.0**-24 * abs(value))
    assert (0.01 < ulps < 100) if float32 else ulps < 1e-6  # float32's noise, or float64's
    assert ("computes in float32 somewhere" in found.text) == float32


def _steep(params, dtype=np.float64):
    """BEiT's zero ``cls_token`` under a LayerNorm of epsilon 1e-12: ``c / sqrt(mean(c**2) + 1e-12)``
    bends on the scale 1e-6 around ``c = 0``, far below the probe's span."""
    c, w = (np.asarray(params[k], dtype) for k in ("c", "w"))
    normed = c / np.sqrt(np.mean(c**2) + dtype(1e-12))
    return float(np.sum(np.tanh(normed + w) * PROJECTION[0, :3]))


def test_a_loss_that_bends_on_the_probes_scale_is_not_taken_for_float32_noise():
    params = {"c": np.zeros(3), "w": RNG.standard_normal(3)}
    value, low = _steep(params), float(np.float32(_steep(params, np.float32)))
    noise = probe(_steep, params, _direct)
    assert noise > 1e3 * abs(low - value)  # a residual no rounding makes
    found = judge(noise, value, low, "torch")
    assert not found.float32  # float32's error bars would let a zero gradient pass: "the check is empty"
    assert "not smooth on the noise probe's scale" in found.text


def _counted(fn):
    calls = []

    def counted(p):
        calls.append(1)
        return fn(p)

    return counted, calls


@pytest.mark.parametrize("case", ["float64", "float32-step", "steep"])
def test_probed_stops_at_its_first_points_only_where_the_noise_is_float64s_beyond_doubt(case):
    # issue 38: 9 evaluations of a forward pass instead of 17 where the answer cannot change; a float32
    # step, or a loss that bends on the probe's scale, gets every point and ``probe``'s answer, to the bit
    if case == "steep":
        params, fn = {"c": np.zeros(3), "w": RNG.standard_normal(3)}, _steep
        value, low = _steep(params), float(np.float32(_steep(params, np.float32)))
    else:
        params, fn = PARAMS, (lambda p: loss(p, case == "float32-step"))
        value = fn(PARAMS)
        low = float(np.float32(loss({k: v.astype(np.float32) for k, v in PARAMS.items()}, True)))
    counted, calls = _counted(fn)
    added = []
    found = probed(counted, params, _direct, None, value, low, "torch", added.append)
    whole = judge(probe(fn, params, _direct), value, low, "torch")
    if case == "float64":
        assert found.evaluations == len(calls) == 9 and added == [9]
        assert (
            not found.float32 and not found.text and not judge(CLEAR * found.noise, value, low, "torch").text
        )
        assert found.noise < 64 * 2.0**-52 * abs(value) and not whole.float32  # float64's, as the whole
    else:
        assert found.evaluations == len(calls) == PROBE_EVALUATIONS and added == [9, 8]
        assert (found.noise, found.float32, found.text) == (whole.noise, whole.float32, whole.text)
    assert found.to_dict()["evaluations"] == found.evaluations


def test_a_float32_step_is_differenced_with_float32s_error_bar():
    truth = estimate(lambda p: loss(p, False), PARAMS)
    noise = probe(loss, PARAMS, _direct)
    found = estimate(loss, PARAMS, noise=noise, float32=True)
    for k in PARAMS:  # every entry judged, and the float64 truth inside every error bar
        assert not found.unjudgeable[k].any(), k
        assert np.all(np.abs(found.value[k] - truth.value[k]) <= found.error[k]), k
    # as if the loss were float64 (its noise unknown), some error bar is far too small or unjudgeable
    naive = estimate(loss, PARAMS)
    missed = [
        np.any(naive.unjudgeable[k] | (np.abs(naive.value[k] - truth.value[k]) > naive.error[k]))
        for k in PARAMS
    ]
    assert any(missed)


def _upcast_port(temperature=1.0):
    """PyTorch computes its softmax in float32 whatever the dtype (as Hugging Face's eager attention);
    the nnx port computes it in the case's dtype (``temperature`` != 1: a planted bug)."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    import crosscheck

    class Upcast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)

        def forward(self, x):
            h = self.fc1(x)
            return self.fc2(torch.softmax(h.float(), -1).to(h.dtype))

    class Port(nnx.Module):
        def __init__(self, rngs):
            self.fc1, self.fc2 = nnx.Linear(4, 3, rngs=rngs), nnx.Linear(3, 2, rngs=rngs)

        def __call__(self, x):
            return self.fc2(jax.nn.softmax(self.fc1(x) * temperature, -1))

    torch.manual_seed(0)
    inputs = {"x": np.random.default_rng(0).standard_normal((3, 4))}
    return crosscheck.Port(name="upcast", torch=Upcast().eval(), jax=Port(nnx.Rngs(0)), inputs=inputs)


@pytest.mark.parametrize("temperature", [1.0, 1.001], ids=["healthy", "planted"])
def test_a_port_whose_original_keeps_a_float32_step_in_a_float64_check(temperature):
    import crosscheck

    report = crosscheck.run(workload=_upcast_port(temperature), dtype="float64")
    oracle = report.to_dict()["oracle"]
    assert oracle["precision"]["torch"]["float32"] and not oracle["precision"]["jax"]["float32"]
    assert any("`torch`'s float64 loss computes in float32 somewhere" in line for line in oracle["lines"])
    verdict = report.backends["jax"].notes["port"]
    assert "the float64 loss of `torch` computes in float32 somewhere" in verdict["text"]
    assert report.passed == (temperature == 1.0), report.problems
    # "same function" is judged against the original's loss (PyTorch's), float32 steps or not: a clean
    # port as anchor would have a port's bug blamed on the original; each derivative against its own
    jax_answers = oracle["questions"]["jax"]
    assert "differences of `torch`'s own float64 loss" in jax_answers["same function"]["comparison"]
    assert "differences of `jax`'s own float64 loss" in jax_answers["derivative"]["comparison"]
    assert "same function" not in oracle["questions"]["torch"]  # the anchor: its derivative only
    if temperature == 1.0:  # the step is in the top module's code, before fc2
        assert "is `fc2`: a float32 step is in it or just before it" in verdict["text"]
    else:  # a bug above float32's rounding is still found, and located
        assert verdict["starts_in"] == "forward" and verdict["first"] == "fc2"


@pytest.mark.parametrize("temperature", [1.0, 1.001], ids=["healthy", "planted"])
def test_with_a_backend_as_reference_a_float32_step_is_probed_too(temperature):
    # No oracle runs: each side's own float64 loss is probed once, and a side with float32 steps is
    # judged at float32's rounding in a float64 check (gradients and module outputs); a planted bug
    # above it still fails. Before, the healthy pair failed "differs first at fc2".
    import crosscheck

    report = crosscheck.run(workload=_upcast_port(temperature), dtype="float64", reference="torch")
    assert report.passed == (temperature == 1.0), report.problems
    verdict = report.backends["jax"].notes["port"]
    assert "computes in float32 somewhere" in verdict["text"]
    assert "float64 loss keeps float32 steps (noise probe): float32's rounding" in str(report.to_dict())
    if temperature != 1.0:
        assert verdict["starts_in"] == "forward" and verdict["first"] == "fc2"


def _embed_port(dtypes):
    """An embedding then a linear layer; the nnx port's ``nnx.Embed`` built with ``dtypes``."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    import crosscheck

    class Original(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.fc = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 2)

        def forward(self, ids):
            return self.fc(torch.tanh(self.embed(ids)))

    class Port(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(5, 3, **dtypes, rngs=rngs)
            self.fc = nnx.Linear(3, 2, rngs=rngs)

        def __call__(self, ids):
            return self.fc(nnx.tanh(self.embed(ids)))

    torch.manual_seed(0)
    inputs = {"ids": np.array([[0, 1, 2], [3, 4, 1]])}
    return crosscheck.Port(name="embed", torch=Original().eval(), jax=Port(nnx.Rngs(0)), inputs=inputs)


#: nnx.Embed's ``dtype`` defaults to float32, and ``None`` means its ``param_dtype`` (float32 too).
EMBED = {"default": {}, "dtype-none": {"dtype": None}}


@pytest.mark.parametrize("dtypes", EMBED.values(), ids=EMBED.keys())
def test_a_port_module_pinned_to_float32_is_named_in_a_float64_check(dtypes):
    import crosscheck

    report = crosscheck.run(
        workload=_embed_port(dtypes), reference="torch", backends=["jax"], dtype="float64"
    )
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "embed")
    assert verdict["text"].startswith("`embed` (Embed) computes in float32 in a float64 check")
    assert "`param_dtype=jnp.float64`" in verdict["text"]
    # a float32 check of the same port has nothing to say about it
    assert crosscheck.run(workload=_embed_port(dtypes), reference="torch", backends=["jax"]).passed


def test_float32_noise_stays_float32s_where_the_float32_loss_matches_by_chance():
    # 17 float32 unit roundoffs of |loss|, with a float32 loss equal to the float64 one by chance
    found = judge(1e-6, 1.0, 1.0, "torch")
    assert found.float32 and "computes in float32 somewhere" in found.text
