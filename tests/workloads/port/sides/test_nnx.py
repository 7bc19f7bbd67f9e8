"""A Flax nnx module as the JAX side of a ``Port``: its variables mapped by name and layout (nnx
paths in the table), rebuilt with ``nnx.merge`` inside the differentiated function, and its
submodules' outputs captured and paired with the PyTorch modules' for the verdict."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import crosscheck

pytest.importorskip("torch")
pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")

X = {"x": np.random.default_rng(0).standard_normal((5, 4))}


def torch_mlp():
    """fc1 (4 -> 5), tanh, fc2 (5 -> 5: a square kernel), LayerNorm."""
    import torch

    class TorchMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.ln = torch.nn.Linear(4, 5), torch.nn.Linear(5, 5), torch.nn.LayerNorm(5)

        def forward(self, x):
            return self.ln(self.fc2(torch.tanh(self.fc1(x))))

    torch.manual_seed(0)
    return TorchMLP().eval()


def nnx_mlp(epsilon=1e-5):
    class NnxMLP(nnx.Module):
        def __init__(self, rngs):
            self.fc1, self.fc2 = nnx.Linear(4, 5, rngs=rngs), nnx.Linear(5, 5, rngs=rngs)
            self.ln = nnx.LayerNorm(5, epsilon=epsilon, rngs=rngs)

        def __call__(self, x):
            return self.ln(self.fc2(nnx.tanh(self.fc1(x))))

    return NnxMLP(nnx.Rngs(0))


def mlp_port(epsilon=1e-5, **kwargs):
    return crosscheck.Port(name="nnx-mlp", torch=torch_mlp(), jax=nnx_mlp(epsilon), inputs=X, **kwargs)


def _verdict(port, dtype="float32"):
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"], dtype=dtype)
    return report, report.backends["jax"].notes["port"]


def test_the_mapping_table_lists_nnx_paths_and_their_transforms():
    rows = {r["torch"]: r for r in mlp_port().mapping.rows()}
    assert (rows["fc1.weight"]["jax"], rows["fc1.weight"]["transform"]) == ("fc1/kernel", "transpose")
    # the square kernel: nnx.Linear's layout is known, so the layouts decide (no ambiguity)
    assert (rows["fc2.weight"]["jax"], rows["fc2.weight"]["transform"]) == ("fc2/kernel", "transpose")
    assert "layout: Linear (out,in) -> Linear (in,out)" in rows["fc2.weight"]["how"]
    assert rows["ln.weight"]["jax"] == "ln/scale" and all(r["status"] == "mapped" for r in rows.values())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_healthy_nnx_mlp_passes_module_by_module(dtype):
    report, verdict = _verdict(mlp_port(), dtype)
    assert report.passed, report.problems
    assert verdict["starts_in"] == "nowhere"
    modules = [c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")]
    assert modules == ["fc1 (output)", "fc2 (output)", "ln (output)", "(model) (output)"]


def test_a_wrong_layer_norm_epsilon_is_located_to_it():
    report, verdict = _verdict(mlp_port(epsilon=1e-1))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"], verdict["first"]) == ("forward", "ln", "ln")
    assert "its input agrees" in verdict["text"]


def test_an_untransposed_square_kernel_is_located_to_its_module():
    port = mlp_port(overrides={"fc2.weight": "identity"})
    assert {r["torch"]: r for r in port.mapping.rows()}["fc2.weight"]["how"] == "by override"
    report, verdict = _verdict(port)
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "fc2")


def test_the_capture_leaves_the_nnx_classes_as_they_were():
    before = nnx.Linear.__dict__["__call__"], nnx.LayerNorm.__dict__["__call__"]
    _verdict(mlp_port())
    assert (nnx.Linear.__dict__["__call__"], nnx.LayerNorm.__dict__["__call__"]) == before
    assert "__call__" in type(nnx_mlp()).__dict__  # its own, untouched


@pytest.fixture(scope="module")
def convnet_nnx():
    from examples.port import convnet_nnx

    return convnet_nnx


def test_the_nnx_convnet_maps_its_batch_statistics_and_passes(convnet_nnx):
    rows = {r["torch"]: r for r in convnet_nnx.port.mapping.rows()}
    assert (rows["conv1.weight"]["jax"], rows["conv1.weight"]["transform"]) == ("conv1/kernel", "OIHW->HWIO")
    assert rows["bn1.running_mean"]["jax"] == "bn1/mean" and rows["bn1.running_var"]["jax"] == "bn1/var"
    assert rows["bn1.num_batches_tracked"]["status"] == "unmatched"
    report, verdict = _verdict(convnet_nnx.port)
    assert report.passed, report.problems
    assert verdict["text"].startswith(
        "every module's output and every gradient agree (`jax` vs `torch`: module outputs and gradients)"
    )
    assert "not seen in float32: check in float64 too (--dtype float64)" in verdict["text"]


@pytest.mark.parametrize("bug", ["same_padding", "batchnorm_epsilon", "kernel_dot_t"])
def test_each_planted_nnx_convnet_bug_is_located(convnet_nnx, bug):
    report, verdict = _verdict(getattr(convnet_nnx, bug))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", convnet_nnx.BUGS[bug][1])


def test_an_nnx_module_in_training_mode_is_a_one_line_error():
    model = nnx_mlp()
    model.ln = nnx.BatchNorm(5, rngs=nnx.Rngs(0))  # use_running_average=False: training mode
    port = crosscheck.Port(name="train", torch=torch_mlp(), jax=model, inputs=X)
    with pytest.raises(ValueError, match=r"in training mode \(`ln` \(BatchNorm\) has use_running_average"):
        print(port.mapping)


def test_an_nnx_port_refuses_a_listing():
    port = mlp_port(jax_intermediates=["fc1"])
    with pytest.raises(ValueError, match="a Flax nnx module's submodule outputs are captured without it"):
        print(port.mapping)


def test_telling_the_kind_of_a_function_imports_no_flax():
    code = (
        "import sys; from crosscheck._workloads.port.sides.jax_side import kind_of; "
        "assert kind_of(lambda p, x: x) == 'function'; assert 'flax' not in sys.modules, 'flax imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _scanned_embed_port() -> crosscheck.Port:
    """A PyTorch ``Embedding`` and three ``Linear`` + ReLU layers against an ``nnx.Embed`` (built with
    its default float32 table, so its ``dtype`` is float32) and an ``nnx.scan`` over ``nnx.vmap``-made
    layers: healthy, but in a float64 pass the embedding's float32 output enters the scan's carry."""
    import torch

    layers, d, vocab = 3, 6, 10

    class TorchLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(d, d)

        def forward(self, x):
            return torch.relu(self.linear(x))

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, d)
            self.layers = torch.nn.ModuleList(TorchLayer() for _ in range(layers))

        def forward(self, ids):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            return x

    class Layer(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(d, d, rngs=rngs)

        def __call__(self, x):
            return nnx.relu(self.linear(x))

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(vocab, d, rngs=rngs)

            @nnx.split_rngs(splits=layers)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def make(rngs):
                return Layer(rngs)

            self.layers = make(rngs)

        def __call__(self, ids):
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def step(x, layer):
                return layer(x)

            return step(self.embed(ids), self.layers)

    torch.manual_seed(0)
    model = Net(nnx.Rngs(0))
    model.eval()
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    return crosscheck.Port(name="embed-scan", torch=TorchNet().eval(), jax=model, inputs={"ids": ids})


def test_a_float32_embedding_table_before_a_scan_is_named_in_one_line_with_the_way_out():
    """The default reference runs float64 passes: JAX's raw "scan body function carry input and carry
    output must have equal types" named neither the module nor what to do."""
    port = _scanned_embed_port()
    report = crosscheck.check(port)
    assert not report.passed
    said = " ".join(report.problems)
    assert "`embed` (Embed) computes in float32 whatever its variable `embed.embedding` holds" in said, said
    assert "build it with `param_dtype=jnp.float64` under x64" in said and "--dtype float32" in said
    assert "\n" not in said
    assert crosscheck.check(port, dtype="float32", reference="torch").passed  # healthy in float32


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_nnx_capture_is_one_compiled_pass_per_precision_recording_what_op_by_op_did(dtype):
    """The nnx capture runs its forward pass as one ``nnx.jit`` (op by op, every new operation was
    compiled on its own), kept for the side's next capture in that dtype: the same records as op by op
    (names, classes, shapes), their values within a few units in the last place."""
    import jax

    compiled: list[str] = []

    def listen(event, seconds, *, fun_name="", **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(fun_name)

    from crosscheck._workloads.port.sides import jax_side, nnx_side

    x = X["x"].astype(dtype)
    model = nnx_mlp()
    side = jax_side.JaxSide(model, None, None, {"x": x})
    values = [np.asarray(v, dtype) for v in jax.tree_util.tree_leaves(nnx_side.split(model)[0])]
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        with jax.enable_x64(dtype == "float64"):
            leaves = [jax.device_put(v) for v in values]
            first = side.capture(leaves, {"x": jax.device_put(x)}, np.dtype(dtype))
            once = len(compiled)
            again = side.capture(leaves, {"x": jax.device_put(x)}, np.dtype(dtype))
            merged = side.rebuild(leaves, np.dtype(dtype))[0]  # op by op: no kept passes
            stepwise = nnx_side.capture(merged, side.call, {"x": x}, jax_side._numpy, jax_side.narrow)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert len(compiled[:once]) == 1 and "nnx_pass" in compiled[0], compiled  # the whole pass, once
    assert not any("nnx_pass" in c for c in compiled[once:]), compiled  # the second capture runs it again
    names = [(r.name, r.module_type) for r in first]
    assert names == [(r.name, r.module_type) for r in again] == [(r.name, r.module_type) for r in stepwise]
    assert [r.name for r in first] == ["fc1", "fc2", "ln", ""]
    rtol = 1e-13 if dtype == "float64" else 2e-6
    for a, b in zip(first, stepwise, strict=True):
        for u, v in zip(a.inputs + a.outputs, b.inputs + b.outputs, strict=True):
            assert u.shape == v.shape and u.dtype == v.dtype
            np.testing.assert_allclose(u, v, rtol=rtol, atol=1e-6 if dtype == "float32" else 1e-15)
