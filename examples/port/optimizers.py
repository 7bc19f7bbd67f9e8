"""AdamW on both sides of a port, the same hyper-parameters, and five classic optimizer-porting bugs
(``BUGS``) planted in the optax side: ``crosscheck.Train`` factories for any port.

PyTorch: ``torch.optim.AdamW`` with two parameter groups (matrices decayed, vectors, biases and norms
not), gradients clipped by their global norm before each step (``clip_grad_norm_``). optax: the same
as ``clip_by_global_norm`` then ``adamw`` with the same decay mask.
"""

from __future__ import annotations

import functools

#: The hyper-parameters both sides receive (``Train(hyper=...)``); ``max_norm`` None: no clipping.
HYPER = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1, "max_norm": 1.0}


def decayed(shape) -> bool:
    """Matrices (and embeddings) are decayed; vectors (biases, norm scales) are not, on both sides."""
    return len(shape) >= 2


class Clipped:
    """A PyTorch optimizer with ``clip_grad_norm_`` before each step (``max_norm`` None: no clipping)
    and its learning-rate ``scheduler`` stepped after it (None: a constant rate)."""

    def __init__(self, optimizer, params, max_norm, scheduler=None):
        self.optimizer, self.params, self.max_norm = optimizer, params, max_norm
        self.scheduler = scheduler

    @property
    def state(self):
        """The optimizer's state (crosscheck pairs it with optax's, by parameter name)."""
        return self.optimizer.state

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        import torch

        if self.max_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()


#: A resumed run's optimizer state (``resume=True``): ``RESUME_STEP`` steps taken, and moments made
#: from each parameter's value entry by entry (so that each side makes them in its own layout).
RESUME_STEP = 3


def resumed_moments(p, xp):
    """``(exp_avg, exp_avg_sq)`` of a resumed run for parameter ``p`` (``xp``: torch or jax.numpy)."""
    return 1e-2 * xp.tanh(p), 1e-4 * p * p + 1e-6


def warmup(step, *, warmup_steps):
    """The learning rate's factor at ``step`` (0 for the first optimizer step): linear warmup over
    ``warmup_steps`` steps, ``(step + 1) / warmup_steps`` up to 1."""
    return min(1.0, (step + 1) / warmup_steps)


def torch_adamw(named, *, lr, betas, eps, weight_decay, max_norm, warmup_steps=0, resume=False):
    """``torch.optim.AdamW`` over ``(name, tensor)`` pairs: matrices decayed, the rest not; a linear
    warmup over ``warmup_steps`` (``LambdaLR``, stepped after each step); ``resume``: the state of a
    resumed run (``RESUME_STEP``), put in ``optimizer.state`` as a checkpoint's ``load_state_dict`` does."""
    import torch

    groups = [
        {"params": [(n, p) for n, p in named if decayed(p.shape)], "weight_decay": weight_decay},
        {"params": [(n, p) for n, p in named if not decayed(p.shape)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas, eps=eps)
    for _, p in named if resume else ():
        exp_avg, exp_avg_sq = resumed_moments(p.detach(), torch)
        step = torch.tensor(float(RESUME_STEP))
        optimizer.state[p] = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    scheduler = None
    if warmup_steps:
        factor = functools.partial(warmup, warmup_steps=warmup_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return Clipped(optimizer, [p for _, p in named], max_norm, scheduler)


def optax_adamw(*, lr, betas, eps, weight_decay, max_norm, warmup_steps=0, resume=False, bug=None):
    """``clip_by_global_norm`` then ``optax.adamw`` with the same decay mask, the same warmup and
    resumed state; ``bug`` plants one of ``BUGS``."""
    tx = _optax_adamw(lr, betas, eps, weight_decay, max_norm, warmup_steps, bug)
    return _resumed(tx, bug) if resume else tx


def _resumed(tx, bug):
    """``tx`` whose ``init`` gives a resumed run's state (``optax.tree_utils.tree_set``)."""
    import jax
    import jax.numpy as jnp
    import optax

    def init(params):
        mu = jax.tree_util.tree_map(lambda p: resumed_moments(p, jnp)[0], params)
        nu = jax.tree_util.tree_map(lambda p: resumed_moments(p, jnp)[1], params)
        if bug == "resume_exp_avg":  # the converter forgot the first moment: a fresh one
            mu = jax.tree_util.tree_map(jnp.zeros_like, params)
        count = RESUME_STEP + (bug == "resume_count")  # the converter counts the step it resumes at
        return optax.tree_utils.tree_set(tx.init(params), mu=mu, nu=nu, count=jnp.asarray(count, jnp.int32))

    return optax.GradientTransformation(init, tx.update)


def _optax_adamw(lr, betas, eps, weight_decay, max_norm, warmup_steps, bug):
    import jax
    import optax

    mask = functools.partial(jax.tree_util.tree_map, lambda x: decayed(x.shape))
    clip = optax.identity() if max_norm is None else optax.clip_by_global_norm(max_norm)
    b1, b2 = betas
    if warmup_steps and bug == "warmup_off_by_one":  # the schedule's first step at count 1, not 0
        lr = optax.linear_schedule(0.0, lr, warmup_steps)
    elif warmup_steps:  # optax counts from 0 at the first update: (count + 1) / warmup_steps
        lr = optax.linear_schedule(lr / warmup_steps, lr, warmup_steps - 1)
    if bug == "clip_per_tensor" and max_norm is not None:
        clip = _clip_per_tensor(max_norm)
    if bug == "eps_inside_sqrt":
        return optax.chain(
            clip, optax.adamw(lr, b1, b2, eps=0.0, eps_root=eps, weight_decay=weight_decay, mask=mask)
        )
    if bug == "coupled_weight_decay":  # decay added to the gradient, then normalised by Adam (Adam + L2)
        return optax.chain(
            clip, optax.add_decayed_weights(weight_decay, mask), optax.adam(lr, b1, b2, eps=eps)
        )
    if bug == "decay_all":
        return optax.chain(clip, optax.adamw(lr, b1, b2, eps=eps, weight_decay=weight_decay))
    adam = (
        _adam_without_bias_correction(b1, b2, eps)
        if bug == "no_bias_correction"
        else optax.scale_by_adam(b1, b2, eps)
    )
    decay = optax.add_decayed_weights(weight_decay, mask)
    return optax.chain(clip, adam, decay, optax.scale_by_learning_rate(lr))


def _clip_per_tensor(max_norm):
    """Each tensor clipped to ``max_norm`` on its own (the bug: PyTorch clips by the global norm)."""
    import jax
    import jax.numpy as jnp
    import optax

    def update(updates, state, params=None):
        def clip(g):
            return g * jnp.minimum(1.0, max_norm / jnp.sqrt(jnp.sum(g * g)))

        return jax.tree_util.tree_map(clip, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def _adam_without_bias_correction(b1, b2, eps):
    """Adam's moments without ``1 - beta ** t`` (the bug: both PyTorch and optax correct them)."""
    import jax
    import jax.numpy as jnp
    import optax

    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return (zeros, zeros)

    def update(grads, state, params=None):
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state[0], grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state[1], grads)
        return jax.tree_util.tree_map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu), (mu, nu)

    return optax.GradientTransformation(init, update)


#: The planted optimizer bugs: name -> (what it is, the optimizer part the verdict must name).
BUGS = {
    "eps_inside_sqrt": ("epsilon inside the square root (optax `eps_root`), not added after it", "epsilon"),
    "coupled_weight_decay": (
        "weight decay added to the gradient before Adam (L2), not decoupled as AdamW does",
        "weight decay",
    ),
    "decay_all": ("every parameter decayed, biases and norm scales too (no mask)", "weight decay"),
    "no_bias_correction": (
        "Adam's moments used without bias correction",
        "moments and bias correction",
    ),
    "clip_per_tensor": (
        "each gradient tensor clipped on its own, not by the global norm",
        "gradient clipping",
    ),
}


#: Bugs of a resumed run's state (``resume=True`` on both sides), planted in the optax side: name -> (what
#: it is, what the verdict names).
STATE_BUGS = {
    "resume_count": (
        "the resumed optax state counts one step more than PyTorch's (`count` = step + 1)",
        "the optimizer state (step)",
    ),
    "resume_exp_avg": (
        "the resumed optax state's first moment left at zeros (a fresh `mu`), PyTorch's resumed",
        "the optimizer state (exp_avg)",
    ),
}
#: The warmup of the schedule bug's pair (``warmup_steps`` in ``hyper``).
WARMUP_STEPS = 5
#: A schedule bug (the pair with ``WARMUP_STEPS`` of warmup), planted in the optax side.
SCHEDULE_BUGS = {
    "warmup_off_by_one": (
        "the port's warmup is `linear_schedule(0, lr, W)`: optax's count is 0 at the first update, so its "
        "first step has a rate of 0 where PyTorch's LambdaLR (also 0 at the first step) gives lr / W",
        "learning-rate schedule",
    ),
}

#: SGD with momentum on both sides: PyTorch's ``buf = momentum * buf + (1 - dampening) * g`` (the first
#: step ``buf = g``) and Nesterov's ``g + momentum * buf``; optax's ``trace`` is the same with dampening 0.
SGD_HYPER = {"lr": 1e-2, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0}


def torch_sgd(named, *, lr, momentum, nesterov, weight_decay):
    import torch

    return torch.optim.SGD(named, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)


def optax_sgd(*, lr, momentum, nesterov, weight_decay, bug=None):
    """``optax.sgd`` (weight decay added to the gradient, as PyTorch's SGD does); ``bug``: one of
    ``SGD_BUGS``."""
    import optax

    if bug == "sgd_nesterov":  # the port turns Nesterov on where the original has plain momentum
        nesterov = not nesterov
    if bug == "sgd_dampening":  # an EMA of the gradient (dampening = momentum), not PyTorch's sum
        trace = optax.ema(momentum, debias=False)
        return optax.chain(optax.add_decayed_weights(weight_decay), trace, optax.scale(-lr))
    sgd = optax.sgd(lr, momentum=momentum or None, nesterov=nesterov)
    return optax.chain(optax.add_decayed_weights(weight_decay), sgd)


#: The planted SGD bugs: name -> (what it is, the optimizer part the verdict must name).
SGD_BUGS = {
    "sgd_nesterov": ("Nesterov momentum on the port's side only", "momentum"),
    "sgd_dampening": ("momentum as an average (dampening = momentum), not PyTorch's sum", "momentum"),
}


def sgd(port, *, bug=None, steps=20, name=None):
    """``crosscheck.Train`` of ``port`` with SGD and momentum (``bug``: one of ``SGD_BUGS``)."""
    import crosscheck

    return crosscheck.Train(
        port,
        torch_optimizer=torch_sgd,
        optax=functools.partial(optax_sgd, bug=bug),
        hyper=SGD_HYPER,
        steps=steps,
        name=name or "",
        description=f"{port.name} trained with SGD and momentum"
        + (f", optax side with {bug}" if bug else ""),
    )


def train(port, *, bug=None, steps=20, name=None, resume=False, warmup=False):
    """``crosscheck.Train`` of ``port`` with these optimizers (``bug``: one of ``BUGS``, ``STATE_BUGS`` or
    ``SCHEDULE_BUGS`` in the optax side; ``resume``: both sides resume a run, ``RESUME_STEP``;
    ``warmup``: both warm up over ``WARMUP_STEPS``). A state bug resumes, a schedule bug warms up."""
    import crosscheck

    resume, warmup = resume or bug in STATE_BUGS, warmup or bug in SCHEDULE_BUGS
    return crosscheck.Train(
        port,
        torch_optimizer=functools.partial(torch_adamw, resume=resume),
        optax=functools.partial(optax_adamw, bug=bug, resume=resume),
        hyper={**HYPER, "warmup_steps": WARMUP_STEPS} if warmup else HYPER,
        steps=steps,
        name=name or "",
        description=f"{port.name} trained with AdamW" + (f", optax side with {bug}" if bug else ""),
    )
