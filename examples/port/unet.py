"""A mini UNet as image codebases write it: PyTorch (NCHW) against a Flax linen port (NHWC), with
planted bugs (``BUGS``) and the training-mode pairs (``TRAINING``).

``conv_in`` -> ``bn`` (BatchNorm) -> SiLU -> ``down`` (a strided convolution, half the size, twice the
channels) -> ``gn1`` (GroupNorm) -> SiLU -> ``attn`` (self-attention over the pixels: a GroupNorm
``attn.norm``, then ``attn.q``/``k``/``v``/``proj`` on ``(B, H*W, C)`` tokens, a residual) -> ``up``
(nearest upsampling, then ``up.conv``) -> the skip (concatenated with the output of the first SiLU) ->
``gn2`` -> SiLU -> ``conv_out``. Its output is an image, ``(B, 3, H, W)`` in PyTorch.

The healthy ``port`` leaves the Flax output NHWC, as Flax writes it; ``port_nchw`` transposes it back
to NCHW in its ``jax_call``. ``square`` is the 8x8 case where attention's ``(B, H*W, C)`` is
``(2, 16, 16)``: tokens and channels alike, so a layout cannot be told by the shapes (``square``'s
output is NCHW, ``square_nhwc``'s NHWC). ``odd`` is 10x10.

Training mode (``TRAINING``): ``train*`` declare the PyTorch module in ``.train()`` and a Flax call with
``train=True`` (``jax_call_train``: crosscheck makes ``batch_stats`` mutable and compares the running
statistics); ``train_workaround*`` keep the module in eval mode and switch its BatchNorm to batch
statistics in a ``torch_call`` (the way round an eval-mode-only check, which never compares the running
statistics).
Flax's ``nn.BatchNorm`` updates its running variance with the biased batch variance, PyTorch's with the
unbiased one: the healthy training pair uses ``TorchBatchNorm`` (a user's BatchNorm that does as
PyTorch does), and ``train_flax_batch_norm`` keeps ``nn.BatchNorm`` to show that true difference.

Run from the repository root::

    crosscheck run --workload examples.port.unet:port --reference torch
    crosscheck run --workload examples.port.unet:attention_scale --reference torch
    crosscheck run --workload examples.port.unet:train_workaround --reference torch
"""

from __future__ import annotations

from examples.port.planted import Planted

#: Input channels, the first width (the attention's is twice it), GroupNorm's groups, the batch.
C_IN, WIDTH, GROUPS, BATCH = 3, 8, 4, 2
#: PyTorch's GroupNorm and BatchNorm epsilon (Flax's GroupNorm defaults to 1e-6: ``BUGS``).
EPS = 1e-5


def torch_model(*, train: bool = False):
    """The original, with BatchNorm statistics as after training (so that a mix-up of them shows); in
    eval mode unless ``train``."""
    import torch

    from examples.port._unet_torch import TorchUNet

    torch.manual_seed(0)
    model = TorchUNet(C_IN, WIDTH, GROUPS, EPS)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.5, 0.5)
    return model.train(train)


def flax_model(**planted):
    """The port (``FlaxUNet``, NHWC); the keywords plant bugs (``BUGS``, ``TRAINING``)."""
    from examples.port._unet_flax import FlaxUNet

    return FlaxUNet(C_IN, WIDTH, GROUPS, EPS, **planted)


def convert(sd):
    """PyTorch's ``state_dict`` (name -> array) -> the Flax variables: a hand-written conversion, for
    scripts and tests, and the mapping of ``train_convert*`` (``Port(convert=convert)``; the other ports
    use crosscheck's automatic mapping)."""

    def conv(name):
        return {"kernel": sd[f"{name}.weight"].transpose(2, 3, 1, 0), "bias": sd[f"{name}.bias"]}

    def dense(name):
        return {"kernel": sd[f"{name}.weight"].T, "bias": sd[f"{name}.bias"]}

    def norm(name):
        return {"scale": sd[f"{name}.weight"], "bias": sd[f"{name}.bias"]}

    attn = {"norm": norm("attn.norm"), **{n: dense(f"attn.{n}") for n in ("q", "k", "v", "proj")}}
    params = {
        **{name: conv(name) for name in ("conv_in", "down", "conv_out")},
        **{name: norm(name) for name in ("bn", "gn1", "gn2")},
        "attn": attn,
        "up": {"conv": conv("up.conv")},
    }
    stats = {"bn": {"mean": sd["bn.running_mean"], "var": sd["bn.running_var"]}}
    return {"params": params, "batch_stats": stats}


def images(size: int):
    """Inputs: a batch of 3-channel ``size`` x ``size`` images, NCHW as PyTorch takes them."""

    def make(rng, dtype):
        return {"x": rng.standard_normal((BATCH, C_IN, size, size)).astype(dtype)}

    return make


def nhwc(inputs):
    return {"x": inputs["x"].transpose(0, 2, 3, 1)}


def output_nchw(model, inputs):
    """The Flax output transposed back to PyTorch's NCHW, as a user does to make the layouts meet."""
    return model(**inputs).transpose(0, 3, 1, 2)


def make_port(
    name="unet", *, size=16, jax_call=None, torch_call=None, train=False, converted=False, **planted
):
    import crosscheck

    return crosscheck.Port(
        name=name,
        torch=torch_model(train=train),
        jax=flax_model(**planted),
        inputs=images(size),
        jax_inputs=nhwc,
        jax_call=jax_call,
        torch_call=torch_call,
        convert=convert if converted else None,
        description=f"a mini UNet ({size}x{size}): PyTorch NCHW -> Flax linen NHWC",
    )


#: The planted bugs of the eval-mode port (16x16, its output NHWC), each in the Flax side.
BUGS = {
    "attention_scale": Planted(
        "the attention's logits scaled by 1/C, not 1/sqrt(C)", "attn", dict(attention_scale="1/C")
    ),
    "upsample_bilinear": Planted(
        "the upsampling bilinear (`jax.image.resize(..., 'bilinear')`), PyTorch's `nn.Upsample` nearest",
        "up.resize",
        dict(upsample="bilinear"),
    ),
    "group_norm_epsilon": Planted(
        "every GroupNorm left at Flax's default epsilon 1e-6 (PyTorch's is 1e-5): first used in `gn1`",
        "gn1",
        dict(gn_epsilon=1e-6),
    ),
}


def torch_call_training(module, inputs):
    """Today's way round the eval-mode rule: the module stays in eval mode for the Port, its BatchNorm
    runs on batch statistics for the call, without updating its running ones (crosscheck refuses a
    forward that writes a buffer: ``track_running_stats`` off for the call)."""
    bn = module.bn
    bn.training, bn.track_running_stats = True, False
    try:
        return module(**inputs)
    finally:
        bn.training, bn.track_running_stats = False, True


def jax_call_training(model, inputs):
    """The Flax side in training mode as a user writes it today: the bound model unbound, applied with
    ``train=True`` and ``mutable=["batch_stats"]`` (the updated statistics dropped); while crosscheck
    initialises the model through this call, the plain call (nothing bound to unbind yet). The output
    is transposed to NCHW (as ``output_nchw``), so that the training pairs test training mode alone."""
    if model.is_initializing():
        return model(**inputs)
    module, variables = model.unbind()
    out, _updated = module.apply(variables, **inputs, train=True, mutable=["batch_stats"])
    return out.transpose(0, 3, 1, 2)


def jax_call_train(model, inputs):
    """The Flax side in training mode as the issue's user wants to write it: ``train=True``, nothing
    else (crosscheck makes ``batch_stats`` mutable and initialises the model without this call). The
    output is transposed to NCHW (as ``output_nchw``)."""
    return model(**inputs, train=True).transpose(0, 3, 1, 2)


#: The training-mode pairs: name -> (what it is, the module a verdict must name, or "" for a healthy
#: pair, make_port's keywords). ``train*``: the PyTorch module in ``.train()``, as a user declares it;
#: ``train_workaround*``: the three-part way round an eval-mode-only check.
TRAINING = {
    "train": Planted(
        "healthy: PyTorch in .train(); Flax with `train=True`, a BatchNorm whose "
        "running variance takes the unbiased batch variance as PyTorch's does",
        "",
        dict(train=True, jax_call=jax_call_train, batch_norm="torch"),
    ),
    "train_workaround": Planted(
        "healthy: the module in eval mode, `torch_call` flips `bn.training`, the same `jax_call`",
        "",
        dict(torch_call=torch_call_training, jax_call=jax_call_training, batch_norm="torch"),
    ),
    "train_momentum": Planted(
        "Flax's `nn.BatchNorm(momentum=0.1)`, PyTorch's convention: Flax keeps `momentum` of the old "
        "statistics (0.9 matches PyTorch's 0.1)",
        "bn",
        dict(train=True, jax_call=jax_call_train, batch_norm="flax", momentum=0.1),
        shows_in="running statistics",
    ),
    "train_workaround_momentum": Planted(
        "the momentum bug above, declared the way round of `train_workaround`",
        "bn",
        dict(torch_call=torch_call_training, jax_call=jax_call_training, batch_norm="flax", momentum=0.1),
        shows_in="running statistics",
    ),
    "train_flax_batch_norm": Planted(
        "Flax's own `nn.BatchNorm` (momentum 0.9, right): its running variance takes the biased batch "
        "variance, PyTorch's the unbiased one (n / (n - 1), n = B*H*W): a true difference of the two "
        "libraries after a training step",
        "bn",
        dict(train=True, jax_call=jax_call_train, batch_norm="flax"),
        shows_in="running statistics",
    ),
    "train_convert": Planted(
        "healthy: the `train` pair with the hand-written conversion (`convert`) as its mapping",
        "",
        dict(train=True, jax_call=jax_call_train, batch_norm="torch", converted=True),
    ),
    "train_convert_momentum": Planted(
        "the momentum bug above, in a port whose mapping is the hand-written conversion (`convert`)",
        "bn",
        dict(train=True, jax_call=jax_call_train, batch_norm="flax", momentum=0.1, converted=True),
        shows_in="running statistics",
    ),
    "train_running_average": Planted(
        "the port's BatchNorm normalises with its running statistics in training mode "
        "(`use_running_average=True` fixed), PyTorch's with the batch's",
        "bn",
        dict(train=True, jax_call=jax_call_train, batch_norm="running"),
    ),
    "train_workaround_running_average": Planted(
        "the running-average bug above, declared the way round of `train_workaround`",
        "bn",
        dict(torch_call=torch_call_training, jax_call=jax_call_training, batch_norm="running"),
    ),
}

#: The eval-mode variants of the healthy port: name -> make_port's keywords.
HEALTHY = {
    "port": {},
    "port_nchw": dict(jax_call=output_nchw),
    "square": dict(size=8, jax_call=output_nchw),
    "square_nhwc": dict(size=8),
    "odd": dict(size=10),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name in HEALTHY:
        return make_port(f"unet-{name}".replace("_", "-"), **HEALTHY[name])
    planted = BUGS.get(name) or TRAINING.get(name)
    if planted is not None:
        return make_port(f"unet-{name}".replace("_", "-"), **planted.change)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
