"""The example ports of image models, custom ops, training mode and AdamW (``examples/port/unet.py``,
``custom_op.py``, ``adam.py``) and of diffusers' Flax twins (``diffusers_twins.py``): facts about the
examples themselves, whatever crosscheck says of them. Each healthy pair computes the same function under
the layout it states; each planted bug changes what it claims to (the output, a gradient, the running
statistics, an update), at a module that exists; the two sides hold the same parameters; diffusers'
conversion maps every tensor. The pairs are run here directly (a hand-written or diffusers' conversion),
not through crosscheck."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

needs = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("torch", "flax", "optax")),
    reason="needs torch, flax and optax (the port extra)",
)
pytestmark = needs

#: Float32 outputs of size ~1 after a few dozen operations: the healthy pairs agree to ~1e-6; a planted
#: bug moves the output by at least 2e-5 (diffusers' GroupNorm epsilon, the smallest), so 1e-5 separates.
AGREE = 1e-5


def numpy_state(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def count(tree) -> int:
    import jax

    return sum(int(np.prod(np.shape(leaf))) for leaf in jax.tree_util.tree_leaves(tree))


# -- the mini UNet -------------------------------------------------------------------------------------


def unet_pair(size=16, *, train=False, **planted):
    """The PyTorch output (NCHW), the Flax output (NHWC as Flax writes it) and, in training mode, each
    side's updated running statistics, from the same weights and images."""
    import jax.numpy as jnp
    import torch

    from examples.port import unet

    model = unet.torch_model(train=train)
    variables = unet.convert(numpy_state(model))
    x = unet.images(size)(np.random.default_rng(0), np.float32)["x"]
    with torch.no_grad():
        torch_out = model(x=torch.from_numpy(x)).numpy()
    flax = unet.flax_model(**planted)
    if not train:
        return torch_out, np.asarray(flax.apply(variables, jnp.asarray(x.transpose(0, 2, 3, 1)))), None
    out, updated = flax.apply(
        variables, jnp.asarray(x.transpose(0, 2, 3, 1)), train=True, mutable=["batch_stats"]
    )
    stats = {
        k: (model.bn.state_dict()[f"running_{k}"].numpy(), np.asarray(v))
        for k, v in updated["batch_stats"]["bn"].items()
    }
    return torch_out, np.asarray(out), stats


def test_the_unet_sides_hold_the_same_parameters_and_statistics():
    import jax

    from examples.port import unet

    model = unet.torch_model()
    x = np.zeros((1, 8, 8, unet.C_IN), np.float32)
    shapes = jax.eval_shape(unet.flax_model().init, jax.random.key(0), x)
    converted = unet.convert(numpy_state(model))
    assert jax.tree_util.tree_map(np.shape, converted) == jax.tree_util.tree_map(lambda s: s.shape, shapes)
    used = [v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")]
    assert count(shapes) == sum(v.numel() for v in used)


@pytest.mark.parametrize("size", [16, 8, 10])
def test_the_healthy_unet_computes_pytorch_s_image_in_nhwc(size):
    torch_out, flax_out, _ = unet_pair(size)
    assert flax_out.shape == (torch_out.shape[0], size, size, torch_out.shape[1])
    assert np.abs(flax_out.transpose(0, 3, 1, 2) - torch_out).max() < AGREE


def test_the_square_variant_gives_attention_as_many_tokens_as_channels():
    from examples.port import unet

    def tokens(size):  # attention's (B, H*W, C) follows the strided `down`: H*W = (size / 2)^2
        return (size // 2) ** 2

    assert tokens(unet.HEALTHY["square"]["size"]) == 2 * unet.WIDTH  # (2, 16, 16)
    assert tokens(16) != 2 * unet.WIDTH and tokens(unet.HEALTHY["odd"]["size"]) != 2 * unet.WIDTH


def test_the_nchw_call_returns_pytorch_s_layout():
    import flax.linen as nn
    import jax.numpy as jnp

    from examples.port import unet

    torch_out, _, _ = unet_pair(16)
    model = unet.torch_model()
    x = unet.images(16)(np.random.default_rng(0), np.float32)["x"]
    out = nn.apply(unet.output_nchw, unet.flax_model())(
        unet.convert(numpy_state(model)), unet.nhwc({"x": jnp.asarray(x)})
    )
    assert np.abs(np.asarray(out) - torch_out).max() < AGREE


@pytest.mark.parametrize("name", ["attention_scale", "upsample_bilinear", "group_norm_epsilon"])
def test_each_planted_unet_bug_changes_the_image_and_names_a_module_that_exists(name):
    from examples.port import unet

    planted = unet.BUGS[name]
    torch_out, flax_out, _ = unet_pair(**planted.change)
    assert np.abs(flax_out.transpose(0, 3, 1, 2) - torch_out).max() > 5 * AGREE
    assert planted.module in dict(unet.torch_model().named_modules())


@pytest.mark.parametrize(
    "name",
    ["train", "train_momentum", "train_flax_batch_norm", "train_running_average"],
)
def test_a_training_pair_differs_only_where_it_says(name):
    from examples.port import unet

    planted = unet.TRAINING[name]
    flax_keys = {k: v for k, v in planted.change.items() if k in ("batch_norm", "momentum")}
    torch_out, flax_out, stats = unet_pair(train=True, **flax_keys)
    output_differs = np.abs(flax_out.transpose(0, 3, 1, 2) - torch_out).max() > 5 * AGREE
    stats_differ = {k: np.abs(a - b).max() > 5 * AGREE for k, (a, b) in stats.items()}
    assert output_differs == (planted.shows_in == "output" and planted.module != "")
    if planted.module == "":
        assert not any(stats_differ.values())
    elif planted.shows_in == "running statistics":
        assert stats_differ["var"]
        assert stats_differ["mean"] == (name == "train_momentum")  # Bessel's correction is the variance's


def test_the_workaround_calls_run_training_mode_and_leave_pytorch_s_buffers():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import torch

    from examples.port import unet

    model = unet.torch_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = unet.images(16)(np.random.default_rng(0), np.float32)["x"]
    with torch.no_grad():
        out = unet.torch_call_training(model, {"x": torch.from_numpy(x)}).numpy()
        trained = unet.torch_model(train=True)(torch.from_numpy(x)).numpy()
    assert not model.training and model.bn.track_running_stats
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert np.array_equal(out, trained)
    flax = unet.flax_model(batch_norm="torch")
    inputs = unet.nhwc({"x": jnp.asarray(x)})
    # the is_initializing branch (shapes only: an eager init compiles every initializer on its own)
    variables = jax.eval_shape(nn.init(unet.jax_call_training, flax), jax.random.key(0), inputs)
    assert set(variables) == {"params", "batch_stats"}
    got = nn.apply(unet.jax_call_training, flax)(unet.convert(numpy_state(model)), inputs)
    assert np.abs(np.asarray(got) - trained).max() < AGREE


def test_every_unet_variant_declares_a_port_in_the_mode_it_says():
    from examples.port import unet

    for name in [*unet.HEALTHY, *unet.BUGS, *unet.TRAINING]:
        port = getattr(unet, name)
        assert port.torch.training == (name.startswith("train") and "workaround" not in name), name


# -- the custom op -------------------------------------------------------------------------------------


def test_the_original_s_hand_written_backward_is_right():
    import torch

    from examples.port._custom_op_torch import RMSNormFunction

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, generator=generator, requires_grad=True)
    w = (0.5 + torch.rand(6, dtype=torch.float64, generator=generator)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: RMSNormFunction.apply(a, b, 1e-6), (x, w))


def custom_vjp(bug, dtype=np.float64):
    """The custom op's forward and the VJP of a random cotangent, healthy or with ``bug``, and those of
    JAX's own derivative of the same forward."""
    import jax

    from examples.port import custom_op
    from examples.port._custom_op_jax import rms_norm, rms_norm_forward

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 16)).astype(dtype)
    w = rng.uniform(0.5, 1.5, 16).astype(dtype)
    g = rng.standard_normal((2, 5, 16)).astype(dtype)
    with jax.enable_x64(dtype == np.float64):
        op = rms_norm(custom_op.EPS, bug)
        out, vjp = jax.vjp(op, x, w)
        plain = jax.vjp(lambda a, b: rms_norm_forward(a, b, custom_op.EPS), x, w)[1]
        return np.asarray(out), [np.asarray(a) for a in vjp(g)], [np.asarray(a) for a in plain(g)]


def relative(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_the_port_s_healthy_backward_is_the_derivative_of_its_forward():
    _, got, autodiff = custom_vjp("")
    assert all(relative(a, b) < 1e-13 for a, b in zip(got, autodiff, strict=True))


@pytest.mark.parametrize(
    "name", ["missing_term", "wrong_sign", "wrong_axis", "weight_grad", "eps_outside_sqrt"]
)
def test_each_planted_backward_bug_leaves_the_forward_and_changes_the_gradient_it_names(name):
    from examples.port import custom_op

    planted = custom_op.BUGS[name]
    healthy_out, healthy, _ = custom_vjp("")
    out, got, _ = custom_vjp(planted.change["bug"])
    assert planted.shows_in == "gradient" and np.array_equal(out, healthy_out)
    dx, dw = (relative(a, b) for a, b in zip(got, healthy, strict=True))
    if name == "weight_grad":
        assert dx == 0 and dw > 1e-2
    elif name == "eps_outside_sqrt":  # tiny: seen in float64 only
        assert planted.dtype == "float64" and 1e-9 < dx < 1e-5 and dw < 1e-5
    else:
        assert dw == 0 and dx > 1e-2


def test_the_custom_op_sides_compute_the_same_model():
    import jax.numpy as jnp
    import torch

    from examples.port import custom_op

    model = custom_op.torch_model()
    x = custom_op.tokens(np.random.default_rng(0), np.float32)["x"]
    with torch.no_grad():
        expected = model(x=torch.from_numpy(x)).numpy()
    variables = custom_op.convert(numpy_state(model))
    got = custom_op.flax_model().apply(variables, jnp.asarray(x))
    assert np.abs(np.asarray(got) - expected).max() < AGREE
    assert count(variables) == sum(p.numel() for p in model.parameters())


# -- AdamW ---------------------------------------------------------------------------------------------


def test_the_attention_key_bias_has_a_zero_gradient_by_construction():
    import torch

    from examples.port import adam, unet

    model = unet.torch_model().double()
    x = torch.from_numpy(unet.images(16)(np.random.default_rng(0), np.float64)["x"])
    projection = torch.from_numpy(np.random.default_rng(1).standard_normal((2, 3, 16, 16)))
    (model(x) * projection).sum().backward()
    grads = dict(model.named_parameters())
    largest = max(float(p.grad.abs().max()) for p in grads.values())
    assert float(grads[adam.ZERO_GRADIENT].grad.abs().max()) < 1e-12 * largest


def one_step(factory, params, grads):
    """One step of an optax factory of ``adam`` on float64 arrays, the update it makes."""
    import jax

    from examples.port import adam

    with jax.enable_x64(True):
        tx = factory(**adam.HYPER)
        updates, _ = tx.update(grads, tx.init(params), params)
        return {k: np.asarray(v) for k, v in updates.items()}


def test_the_adamw_pair_makes_the_same_step_and_the_coupled_bug_differs_on_decayed_parameters_only():
    import functools

    import torch

    from examples.port import adam

    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    grads = {"w": 1e-2 * rng.standard_normal((3, 4)), "b": 1e-2 * rng.standard_normal(4)}
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    optimizer = adam.torch_adamw(list(tensors.items()), **adam.HYPER)
    for k, t in tensors.items():
        t.grad = torch.tensor(grads[k])
    optimizer.step()
    torch_step = {k: t.detach().numpy() - params[k] for k, t in tensors.items()}
    healthy = one_step(adam.optax_adamw, params, grads)
    coupled = one_step(functools.partial(adam.optax_adamw, bug="coupled_l2"), params, grads)
    assert all(relative(healthy[k], torch_step[k]) < 1e-12 for k in params)
    assert relative(coupled["w"], healthy["w"]) > 1e-2 and relative(coupled["b"], healthy["b"]) < 1e-12


# -- diffusers' Flax twins -----------------------------------------------------------------------------

needs_diffusers = pytest.mark.skipif(
    importlib.util.find_spec("diffusers") is None, reason="needs diffusers (the diffusers extra)"
)


@pytest.fixture(scope="module", params=["unet", "vae"])
def twins(request):
    import jax
    from flax.traverse_util import flatten_dict

    from examples.port import diffusers_twins as twins
    from examples.port._diffusers_flax import diffusers_convert

    kind = request.param
    model, flax = twins.torch_model(kind), twins.flax_model(kind)
    state = numpy_state(model)
    shapes = flatten_dict(jax.eval_shape(flax.init_weights, jax.random.PRNGKey(0)))
    return kind, model, flax, state, shapes, diffusers_convert


@needs_diffusers
def test_diffusers_conversion_maps_every_tensor_onto_every_leaf_once(twins):
    from flax.traverse_util import flatten_dict

    _, model, flax, state, shapes, convert = twins
    converted = flatten_dict(convert(flax)(state)["params"])
    assert set(converted) == set(shapes) and len(converted) == len(state)
    assert all(converted[k].shape == shapes[k].shape for k in shapes)
    assert count(converted) == sum(p.numel() for p in model.parameters())


@needs_diffusers
@pytest.mark.slow  # the tiny UNet's Flax forward, op by op: about 30 s on two busy cores
def test_the_fixed_twins_agree_and_each_planted_bug_changes_the_sample(twins):
    import flax.linen as nn
    import jax.numpy as jnp
    import torch

    from examples.port import diffusers_twins as twins_module

    kind, model, flax, state, _, convert = twins
    inputs = (twins_module.unet_inputs if kind == "unet" else twins_module.vae_inputs)(
        np.random.default_rng(0), np.float32
    )
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).sample.numpy()
    flax_inputs = {
        k: jnp.asarray(v)
        for k, v in (twins_module.flax_unet_inputs(inputs) if kind == "unet" else inputs).items()
    }

    def sample(swaps=None, hw_swapped=""):
        swaps = (twins_module.FIXES if kind == "unet" else ()) if swaps is None else swaps
        call = twins_module.jax_call(tuple(swaps))
        return np.asarray(nn.apply(call, flax)(convert(flax, hw_swapped)(state), flax_inputs))

    assert np.abs(sample() - expected).max() < AGREE
    for name, planted in twins_module.BUGS.items():
        change = dict(planted.change)
        if change.pop("kind") == kind:
            assert np.abs(sample(**change) - expected).max() > 2 * AGREE, name
            assert planted.module in dict(model.named_modules()), name


def test_the_diffusers_example_says_what_to_install_when_diffusers_is_missing(monkeypatch):
    import sys

    from examples.port import diffusers_twins

    monkeypatch.setitem(sys.modules, "diffusers", None)  # as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r"crosscheck-gradients\[diffusers\]"):
        diffusers_twins.unet  # noqa: B018
