"""``Port(jax_intermediates=...)``: module by module for an Equinox module and a plain JAX function.

The JAX side returns ``(output, {PyTorch module name: array})``; the listed outputs are compared with
the PyTorch modules' (forward hooks) within their measured rounding, and the verdict names the first
listed module that differs, or says that only the gradient does. Bad listings are one-line errors
when the port is prepared."""

from __future__ import annotations

import numpy as np
import pytest
from paths import ROOT

import crosscheck

pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

X = {"x": np.random.default_rng(0).standard_normal((5, 3))}
LISTED = ["fc1", "fc2", "fc3"]


def torch_mlp():
    """fc1 (3 -> 4), tanh, fc2 (4 -> 5), tanh, fc3 (5 -> 2): no two weights of one shape."""
    import torch

    class TorchMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 5), torch.nn.Linear(5, 2)

        def forward(self, x):
            return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))

    torch.manual_seed(0)
    return TorchMLP().eval()


def _tanh(bug):
    """The activation after fc1: ``sigmoid`` (a forward bug) or a straight-through tanh (same forward,
    derivative 1: a gradient-only bug)."""
    if bug == "sigmoid":
        return jax.nn.sigmoid
    if bug == "straight_through":
        return lambda h: h + jax.lax.stop_gradient(jnp.tanh(h) - h)
    return jnp.tanh


def function_port(bug=None, listed=LISTED, returns=None, **kwargs):
    """The MLP as a plain function of a pytree, returning its listed intermediates."""

    def fn(params, x):
        a = x @ params["fc1"]["w"] + params["fc1"]["b"]
        b = _tanh(bug)(a) @ params["fc2"]["w"] + params["fc2"]["b"] * (2.0 if bug == "bias" else 1.0)
        c = jnp.tanh(b) @ params["fc3"]["w"] + params["fc3"]["b"]
        return (c, returns(a, b, c)) if returns else (c, {"fc1": a, "fc2": b, "fc3": c})

    shapes = dict(zip(LISTED, [(3, 4), (4, 5), (5, 2)], strict=True))
    tree = {k: {"w": np.zeros(s), "b": np.zeros(s[1])} for k, s in shapes.items()}
    return crosscheck.Port(name="fn", torch=torch_mlp(), jax=fn, jax_params=tree, inputs=X,
                           jax_intermediates=listed, **kwargs)  # fmt: skip


def equinox_port(bug=None, listed=LISTED):
    """The MLP in Equinox, called under ``jax.vmap``, returning its listed intermediates."""
    eqx = pytest.importorskip("equinox")

    class EqxMLP(eqx.Module):
        fc1: eqx.nn.Linear
        fc2: eqx.nn.Linear
        fc3: eqx.nn.Linear

        def __init__(self, key):
            k1, k2, k3 = jax.random.split(key, 3)
            self.fc1, self.fc2 = eqx.nn.Linear(3, 4, key=k1), eqx.nn.Linear(4, 5, key=k2)
            self.fc3 = eqx.nn.Linear(5, 2, key=k3)

        def __call__(self, x):
            a = self.fc1(x)
            b = self.fc2(_tanh(bug)(a)) + (self.fc2.bias if bug == "bias" else 0.0)
            c = self.fc3(jnp.tanh(b))
            return c, {"fc1": a, "fc2": b, "fc3": c}

    return crosscheck.Port(name="eqx", torch=torch_mlp(), jax=EqxMLP(jax.random.key(0)), inputs=X,
                           jax_call=lambda m, i: jax.vmap(m)(i["x"]), jax_intermediates=listed)  # fmt: skip


PORTS = {"function": function_port, "equinox": equinox_port}


def _verdict(port):
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"])
    return report, report.backends["jax"].notes["port"]


@pytest.mark.parametrize("kind", list(PORTS))
def test_a_healthy_port_compares_every_listed_module_and_passes(kind):
    report, verdict = _verdict(PORTS[kind]())
    assert report.passed, report.problems
    modules = [c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")]
    assert modules == ["fc1 (output)", "fc2 (output)", "fc3 (output)", "(model) (output)"]
    assert verdict["starts_in"] == "nowhere"


@pytest.mark.parametrize("kind", list(PORTS))
@pytest.mark.parametrize("bug", ["bias", "sigmoid"])
def test_a_forward_bug_in_the_middle_layer_is_located_to_it(kind, bug):
    report, verdict = _verdict(PORTS[kind](bug))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"], verdict["first"]) == ("forward", "fc2", "fc2")
    assert "`fc1`, the listed module before it, agrees" in verdict["text"]
    assert "in `fc2` or in the code between `fc1` and it" in verdict["text"]
    assert verdict["text"] in report.problems[0]
    failed = {c.parameter for c in report.comparisons if not c.passed}
    assert "fc1 (output)" not in failed and {"fc2 (output)", "fc3 (output)"} <= failed


def dropout_port(rate):
    """The MLP with a dropout after fc1's tanh: PyTorch's in eval mode (off), the Equinox port's left
    on at ``rate`` with a fixed key (JAX draws its uniforms in the default float dtype: its float64
    re-run draws another mask)."""
    eqx = pytest.importorskip("equinox")
    import torch

    class TorchDrop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(3, 8), torch.nn.Linear(8, 5)
            self.drop, self.fc3 = torch.nn.Dropout(0.1), torch.nn.Linear(5, 2)

        def forward(self, x):
            return self.fc3(torch.tanh(self.fc2(self.drop(torch.tanh(self.fc1(x))))))

    class EqxDrop(eqx.Module):
        fc1: eqx.nn.Linear
        fc2: eqx.nn.Linear
        fc3: eqx.nn.Linear
        drop: eqx.nn.Dropout

        def __init__(self, key):
            k1, k2, k3 = jax.random.split(key, 3)
            self.fc1, self.fc2 = eqx.nn.Linear(3, 8, key=k1), eqx.nn.Linear(8, 5, key=k2)
            self.fc3, self.drop = eqx.nn.Linear(5, 2, key=k3), eqx.nn.Dropout(rate, inference=rate == 0.0)

        def __call__(self, x):
            a = self.fc1(x)
            d = self.drop(jnp.tanh(a), key=jax.random.key(1))
            b = self.fc2(d)
            c = self.fc3(jnp.tanh(b))
            return c, {"fc1": a, "drop": d, "fc2": b, "fc3": c}

    torch.manual_seed(0)
    inputs = {"x": np.random.default_rng(0).standard_normal((16, 3))}
    return crosscheck.Port(name="eqx-dropout", torch=TorchDrop().eval(), jax=EqxDrop(jax.random.key(0)),
                           inputs=inputs, jax_call=lambda m, i: jax.vmap(m)(i["x"]),
                           jax_intermediates=["fc1", "drop", "fc2", "fc3"])  # fmt: skip


def test_a_dropout_left_on_is_a_rerun_that_is_not_the_same_computation_and_fails_at_it():
    # before: its float64 re-run's other mask was its own "rounding" (0.945 against a 0.22 difference),
    # `drop` agreed and the verdict named `fc2`
    report, verdict = _verdict(dropout_port(0.1))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "drop")
    assert "the float64 re-run of `jax` is not the same computation" in verdict["text"]
    assert "random?" in verdict["text"]
    (drop,) = [c for c in report.comparisons if c.parameter == "drop (output)"]
    assert not drop.passed and "not the same computation" in drop.message


def test_the_same_port_with_its_dropout_off_passes():
    report, verdict = _verdict(dropout_port(0.0))
    assert report.passed, report.problems
    assert "not the same computation" not in verdict["text"]


@pytest.mark.parametrize("kind", list(PORTS))
def test_a_gradient_only_bug_says_the_forward_agrees(kind):
    report, verdict = _verdict(PORTS[kind]("straight_through"))
    assert not report.passed
    assert verdict["starts_in"] == "gradient" and verdict["module"] == "fc1"
    assert "those of `fc2` agree" in verdict["text"]
    assert verdict["text"].startswith("forward agrees (every listed module's output (fc1, ")
    assert "every module's output" not in verdict["text"]  # only the listed ones were captured
    assert all(c.passed for c in report.comparisons if "(output)" in (c.parameter or ""))


def test_a_bug_after_the_last_listed_module_is_in_the_top_modules_code():
    port = function_port("sigmoid", listed=["fc1"], returns=lambda a, b, c: {"fc1": a})
    _, verdict = _verdict(port)
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "")
    assert "every listed output agrees" in verdict["text"] and "its code after `fc1`" in verdict["text"]
    assert "fc2, fc3" in verdict["text"]  # the unlisted PyTorch modules that run there


def test_the_finite_difference_oracle_takes_a_listed_port():
    report = crosscheck.run(workload=function_port())
    assert report.passed, report.problems


BAD = [
    ("unknown-module", dict(listed=["fc1", "fc9"], returns=lambda a, b, c: {"fc1": a, "fc9": b}), ValueError,
     r"^port `fn`: `jax_intermediates` names `fc9`, which is not a PyTorch module "
     r"\(its modules: fc1, fc2, fc3\)\.$"),
    ("second-call", dict(listed=["fc1#2"], returns=lambda a, b, c: {"fc1#2": a}), ValueError,
     r"names `fc1#2`, but the PyTorch forward pass calls `fc1` 1 time\(s\)"),
    ("missing-name", dict(returns=lambda a, b, c: {"fc1": a, "fc2": b}), ValueError,
     r"lists \['fc1', 'fc2', 'fc3'\]; the JAX call returned no `fc3` \(its names: \['fc1', 'fc2'\]\)"),
    ("extra-name", dict(listed=["fc1"], returns=lambda a, b, c: {"fc1": a, "fc4": c}), ValueError,
     r"the JAX call returned `fc4`, which is not listed"),
    ("wrong-shape", dict(returns=lambda a, b, c: {"fc1": a, "fc2": b[:, :3], "fc3": c}), ValueError,
     r"`fc2` has shape \(5, 3\) on the JAX side; PyTorch's `fc2` \(Linear\) outputs \(5, 5\)\.$"),
    ("no-broadcast", dict(returns=lambda a, b, c: {"fc1": a, "fc2": b[:, None, :], "fc3": c}), ValueError,
     r"`fc2` has shape \(5, 1, 5\) on the JAX side; PyTorch's `fc2` \(Linear\) outputs \(5, 5\)\.$"),
    ("not-an-array", dict(returns=lambda a, b, c: {"fc1": a, "fc2": [b], "fc3": c}), TypeError,
     r"`fc2` must be an array, found list\.$"),
    ("not-a-pair", dict(returns=None, jax_call=lambda f, i: f(**i)[0]), TypeError,
     r"the JAX call must return \(output, \{PyTorch module name: array\}\), "
     r"found an array of shape \(5, 2\)\.$"),
    ("a-string", dict(listed="fc1"), TypeError, r"must be a list of PyTorch module names, found str"),
    ("empty", dict(listed=[]), TypeError, r"found an empty list"),
    ("twice", dict(listed=["fc1", "fc1"]), ValueError, r"lists `fc1` twice"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "error", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_listing_is_a_one_line_error_before_any_numerics(kwargs, error, message):
    with pytest.raises(error, match=message) as raised:
        print(function_port(**kwargs).mapping)
    assert "\n" not in str(raised.value)


def test_a_listed_output_whose_shape_broadcasts_is_compared_after_broadcasting():
    """JAX's ``(2, 5, 4)`` against PyTorch's ``(5, 4)`` (a linen or nnx capture's broadcast): compared."""
    port = function_port(
        returns=lambda a, b, c: {"fc1": jnp.broadcast_to(a, (2, *a.shape)), "fc2": b, "fc3": c}
    )
    report, _ = _verdict(port)
    assert report.passed, report.problems
    row = next(c for c in report.comparisons if c.parameter == "fc1 (output)" and c.backend == "jax")
    assert row.coverage.startswith("every entry, after broadcasting"), row.coverage
    assert "(5, 4)" in row.coverage and "(2, 5, 4)" in row.coverage


def test_a_listed_output_broadcast_from_one_row_is_compared_and_differs():
    """JAX's ``(1, 4)`` against PyTorch's ``(5, 4)``: accepted, compared after broadcasting, and the
    other rows differ (said as a module boundary: the forward itself and every gradient agree)."""
    report, verdict = _verdict(function_port(returns=lambda a, b, c: {"fc1": a[:1], "fc2": b, "fc3": c}))
    row = next(c for c in report.comparisons if c.parameter == "fc1 (output)" and c.backend == "jax")
    assert row.status == "boundary" and "fc1 (output): differs" in row.message, row.message
    assert row.coverage.startswith("every entry, after broadcasting"), row.coverage
    assert "`fc1`" in verdict["text"] and "compared after broadcasting" in verdict["text"]


def test_a_linen_port_refuses_a_listing():
    pytest.importorskip("flax")
    from examples.port import convnet

    port = crosscheck.Port(name="linen", torch=convnet.torch_model(), jax=convnet.flax_model(),
                           inputs=convnet.images, jax_intermediates=["conv1"])  # fmt: skip
    with pytest.raises(ValueError, match="is for an Equinox module or a function; a Flax linen module"):
        print(port.mapping)


# ---- The convolutional example as a plain function -----------------------------------------------------


@pytest.fixture(scope="module")
def convnet_function():
    from examples.port import convnet_function

    return convnet_function


def test_the_healthy_function_convnet_passes(convnet_function):
    report, verdict = _verdict(convnet_function.port)
    assert report.passed, report.problems
    assert verdict["text"].startswith("every listed module's output (conv1, bn1, fc)")
    rows = {r["torch"]: r for r in convnet_function.port.mapping.rows()}
    assert rows["conv1.weight"]["transform"] == "identity"  # NCHW and OIHW, as PyTorch


@pytest.mark.parametrize("bug", ["same_padding", "batchnorm_epsilon", "straight_through_relu"])
def test_each_planted_function_convnet_bug_is_located(convnet_function, bug):
    report, verdict = _verdict(getattr(convnet_function, bug))
    assert not report.passed
    starts_in = "gradient" if bug == "straight_through_relu" else "forward"
    assert (verdict["starts_in"], verdict["module"]) == (starts_in, convnet_function.BUGS[bug][1])


def test_the_cli_turns_a_bad_listing_into_exit_2(convnet_function, monkeypatch, capsys):

    from crosscheck._cli.main import main

    bad = crosscheck.Port(name="bad", torch=convnet_function.torch_model(), jax=convnet_function.convnet,
                          jax_params=convnet_function.parameters(), inputs=convnet_function.images,
                          jax_intermediates=["conv1", "bn"])  # fmt: skip
    monkeypatch.setattr(convnet_function, "bad", bad, raising=False)
    monkeypatch.chdir(ROOT)
    # --no-isolate: the port is patched into the module in this process only.
    assert main(["run", "--workload", "examples.port.convnet_function:bad", "--no-isolate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # Both sides' problems of the one mistake, each on its line: PyTorch has no `bn`, the JAX call
    # returns `bn1` and `fc`, which are not listed.
    assert err[0] == "crosscheck: error: port `bad`: 2 problems, each to fix before it is checked:"
    assert err[1] == (
        "  - `jax_intermediates` names `bn`, which is not a PyTorch module (its modules: conv1, bn1, "
        "relu, pool, fc)."
    )
    assert err[2].startswith("  - `jax_intermediates` lists ['conv1', 'bn']; the JAX call returned no `bn`")
    assert "Traceback" not in "\n".join(err) and len(err) == 3


# ---- The transformer block example in Equinox (vmapped over the batch and the sequence) ---------------


@pytest.fixture(scope="module")
def block_equinox():
    pytest.importorskip("equinox")
    from examples.port import block_equinox

    return block_equinox


def test_the_healthy_equinox_block_maps_by_name_and_passes(block_equinox):
    rows = {r["torch"]: r for r in block_equinox.port.mapping.rows()}
    assert (rows["attn.q.weight"]["jax"], rows["attn.q.weight"]["transform"]) == ("attn/q/weight", "identity")
    assert "layout: Linear (out,in) -> Linear (out,in)" in rows["fc1.weight"]["how"]
    report, verdict = _verdict(block_equinox.port)
    assert report.passed, report.problems
    assert verdict["text"].startswith("every listed module's output (ln1, attn, ln2, fc1, act, fc2)")
    outputs = [c for c in report.comparisons if "(output)" in (c.parameter or "")]
    assert len(outputs) == len(block_equinox.LISTED) + 1 and all(c.total > 0 for c in outputs)


@pytest.mark.parametrize("bug", ["attention_scale", "gelu_tanh"])
def test_each_planted_equinox_block_bug_is_located(block_equinox, bug):
    report, verdict = _verdict(getattr(block_equinox, bug))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", block_equinox.BUGS[bug][1])


def test_a_listed_output_in_another_layout_fits_as_module_outputs_are_compared():
    from crosscheck._workloads.port.declare.intermediates import _fits

    assert _fits((2, 4, 4, 8), (2, 8, 16))  # (B, H, W, C) against a GroupNorm's (B, C, H*W)
    assert _fits((2, 16, 16, 3), (2, 3, 16, 16))  # NHWC against NCHW
    assert not _fits((2, 6), (3, 4))  # neither a layout nor a broadcast
