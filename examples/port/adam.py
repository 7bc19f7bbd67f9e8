"""``torch.optim.AdamW`` against ``optax.adamw`` on a model with a gradient that is zero by construction:
``crosscheck.Train`` of the mini UNet (``examples.port.unet``, its Flax output transposed to NCHW),
five steps, with and without weight decay, and the coupled-L2 bug (``BUGS``); in training mode, its
running statistics carried and compared after every step (``TRAINING``).

The attention's key bias ``attn.k.bias`` has a zero gradient in exact arithmetic: it adds ``q . b`` to
every logit of a query's row, and the softmax does not change when a row is shifted. Its computed
gradient is rounding noise, and Adam divides that noise by its own square root: each side moves the
bias by about ``lr`` per step, in directions that rounding decides, not the update rule. Decoupled
weight decay on it would still be a rule (here the mask decays matrices only: kernels, not biases).

Run from the repository root::

    crosscheck run --workload examples.port.adam:adamw --quantity update
    crosscheck run --workload examples.port.adam:adamw_no_decay --quantity update
    crosscheck run --workload examples.port.adam:coupled_l2 --quantity update
"""

from __future__ import annotations

import functools

from examples.port.planted import Planted

#: Both sides' hyper-parameters (``Train(hyper=...)``); five steps.
HYPER = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}
STEPS = 5
#: The parameter whose gradient is zero by construction.
ZERO_GRADIENT = "attn.k.bias"


def decayed(shape) -> bool:
    """Matrices and kernels are decayed, vectors (biases, norm scales) are not: the same mask both sides."""
    return len(shape) >= 2


def torch_adamw(named, *, lr, betas, eps, weight_decay):
    """``torch.optim.AdamW`` with two groups: the decayed parameters, and the rest at ``weight_decay=0``."""
    import torch

    groups = [
        {"params": [p for n, p in named if decayed(p.shape)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if not decayed(p.shape)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def optax_adamw(*, lr, betas, eps, weight_decay, bug=None):
    """``optax.adamw`` with the same mask; ``bug="coupled_l2"``: the decay added to the gradient before
    Adam (``add_decayed_weights`` then ``adam``: L2 regularisation, which Adam then normalises)."""
    import jax
    import optax

    mask = functools.partial(jax.tree_util.tree_map, lambda x: decayed(x.shape))
    if bug == "coupled_l2":
        return optax.chain(optax.add_decayed_weights(weight_decay, mask), optax.adam(lr, *betas, eps=eps))
    return optax.adamw(lr, *betas, eps=eps, weight_decay=weight_decay, mask=mask)


def make_train(name: str, *, weight_decay: float = HYPER["weight_decay"], bug=None, training=None):
    """The train; ``training``: the name of one of ``unet.TRAINING``'s pairs, trained in training mode
    (its running statistics carried and compared after every step), else the eval-mode port."""
    import crosscheck
    from examples.port import unet

    port = (
        unet.make_port(f"unet-{training}", **unet.TRAINING[training].change)
        if training
        else unet.make_port("unet-nchw", jax_call=unet.output_nchw)
    )
    return crosscheck.Train(
        port,
        torch_optimizer=torch_adamw,
        optax=functools.partial(optax_adamw, bug=bug),
        hyper={**HYPER, "weight_decay": weight_decay},
        steps=STEPS,
        name=name,
        description=f"the mini UNet trained {STEPS} steps with AdamW (weight decay {weight_decay})"
        + (f", optax side with {bug}" if bug else "")
        + (f", in training mode (`unet.{training}`)" if training else ""),
    )


#: The healthy pairs: name -> make_train's keywords.
HEALTHY = {"adamw": {}, "adamw_no_decay": dict(weight_decay=0.0)}
#: The planted bug: the optimizer part a verdict must name (in ``module``), in the optax side.
BUGS = {
    "coupled_l2": Planted(
        "weight decay added to the gradient before Adam (L2), not decoupled as AdamW's",
        "weight decay",
        dict(bug="coupled_l2"),
        shows_in="update",
    )
}


#: Training mode: the mini UNet's BatchNorm on batch statistics, its running statistics carried from
#: step to step on both sides and compared after every step. name -> (what it is, the module a verdict
#: must name or "" for a healthy pair, make_train's keywords).
TRAINING = {
    "adamw_train": Planted(
        "healthy: `unet.train` (PyTorch in .train(), Flax with `train=True`) trained with AdamW",
        "",
        dict(training="train"),
    ),
    "adamw_train_momentum": Planted(
        "`unet.train_momentum` (Flax's `nn.BatchNorm(momentum=0.1)`, PyTorch's convention) trained with "
        "AdamW: the parameters agree at every step, the running statistics do not",
        "bn",
        dict(training="train_momentum"),
        shows_in="running statistics",
    ),
}


def __getattr__(name):  # the trains are built when asked for: importing this module imports no framework
    if name in TRAINING:
        return make_train(f"unet-{name}".replace("_", "-"), **TRAINING[name].change)
    if name in HEALTHY:
        return make_train(f"unet-{name}".replace("_", "-"), **HEALTHY[name])
    if name in BUGS:
        return make_train(f"unet-adamw-{name}".replace("_", "-"), **BUGS[name].change)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
