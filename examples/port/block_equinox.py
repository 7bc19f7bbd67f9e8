"""A transformer block ported to Equinox, checked module by module through ``jax_intermediates``,
with planted bugs (``BUGS``).

The PyTorch original is a pre-LayerNorm block: ``x + attn(ln1(x))``, then ``h + fc2(act(fc1(ln2(h))))``,
with attention of two heads made of four ``nn.Linear`` (``attn.q``, ``attn.k``, ``attn.v``,
``attn.out``). Its Equinox port keeps PyTorch's names as field names, so the ``state_dict`` maps by
name (``attn.q.weight`` onto ``attn/q/weight``; Equinox's ``Linear`` keeps PyTorch's (out, in) layout).

Where ``vmap`` goes: an Equinox layer takes one example (``Linear`` and ``LayerNorm`` one vector), so
the model maps its per-token layers over the sequence (``jax.vmap(self.fc1)(h)``) and the port's call
maps the model over the batch (``jax_call=lambda model, inputs: jax.vmap(model)(inputs["x"])``). The
model returns its output and, beside it, the values that correspond to PyTorch modules, keyed by the
PyTorch module's name (``named_modules()``); under the outer ``vmap`` they come back batched, with
the shapes of PyTorch's module outputs, and ``jax_intermediates`` lists them.

Run from the repository root::

    crosscheck run --workload examples.port.block_equinox:port --reference torch
    crosscheck run --workload examples.port.block_equinox:attention_scale --reference torch --quiet
"""

from __future__ import annotations

import math

import crosscheck

#: Width, heads, MLP width, and the inputs' batch and sequence length.
D, HEADS, HIDDEN, BATCH, SEQ = 8, 2, 16, 2, 4
#: The PyTorch modules whose outputs the Equinox model returns beside its own.
LISTED = ("ln1", "attn", "ln2", "fc1", "act", "fc2")


def torch_model():
    """The original: a pre-LayerNorm transformer block, random weights, in eval mode."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (f(x).view(b, s, HEADS, D // HEADS).transpose(1, 2) for f in (self.q, self.k, self.v))
            weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // HEADS), dim=-1)
            return self.out((weights @ v).transpose(1, 2).reshape(b, s, D))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(D), Attention(), nn.LayerNorm(D)
            self.fc1, self.act, self.fc2 = nn.Linear(D, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, D)

        def forward(self, x):
            h = x + self.attn(self.ln1(x))
            return h + self.fc2(self.act(self.fc1(self.ln2(h))))

    torch.manual_seed(0)
    model = Block()
    with torch.no_grad():  # LayerNorm's scale and shift away from 1 and 0, so that a mix-up shows
        for ln in (model.ln1, model.ln2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.5, 0.5)
    return model.eval()


def equinox_model(*, scale="sqrt", gelu="exact"):
    """The port in Equinox (one sequence ``(S, D)`` per call). The keywords plant bugs:
    ``scale="d"`` (attention scores divided by the head width, not its square root), ``gelu="tanh"``
    (the tanh approximation of GELU; PyTorch's ``nn.GELU()`` is exact)."""
    import equinox as eqx
    import jax

    class Attention(eqx.Module):
        q: eqx.nn.Linear
        k: eqx.nn.Linear
        v: eqx.nn.Linear
        out: eqx.nn.Linear

        def __init__(self, key):
            self.q, self.k, self.v, self.out = (eqx.nn.Linear(D, D, key=k) for k in jax.random.split(key, 4))

        def __call__(self, x):  # x: (S, D)
            s, width = x.shape[0], D // HEADS
            q, k, v = (
                jax.vmap(f)(x).reshape(s, HEADS, width).transpose(1, 0, 2) for f in (self.q, self.k, self.v)
            )
            divisor = math.sqrt(width) if scale == "sqrt" else width
            weights = jax.nn.softmax(q @ k.transpose(0, 2, 1) / divisor, axis=-1)
            return jax.vmap(self.out)((weights @ v).transpose(1, 0, 2).reshape(s, D))

    class Block(eqx.Module):
        ln1: eqx.nn.LayerNorm
        attn: Attention
        ln2: eqx.nn.LayerNorm
        fc1: eqx.nn.Linear
        fc2: eqx.nn.Linear

        def __init__(self, key):
            k1, k2, k3 = jax.random.split(key, 3)
            self.ln1, self.attn, self.ln2 = eqx.nn.LayerNorm(D), Attention(k1), eqx.nn.LayerNorm(D)
            self.fc1, self.fc2 = eqx.nn.Linear(D, HIDDEN, key=k2), eqx.nn.Linear(HIDDEN, D, key=k3)

        def __call__(self, x):  # one sequence (S, D): the per-token layers are mapped over S here
            ln1 = jax.vmap(self.ln1)(x)
            attn = self.attn(ln1)
            h = x + attn
            ln2 = jax.vmap(self.ln2)(h)
            fc1 = jax.vmap(self.fc1)(ln2)
            act = jax.nn.gelu(fc1, approximate=gelu == "tanh")
            fc2 = jax.vmap(self.fc2)(act)
            out = h + fc2
            return out, {"ln1": ln1, "attn": attn, "ln2": ln2, "fc1": fc1, "act": act, "fc2": fc2}

    return Block(jax.random.key(0))


def tokens(rng, dtype):
    """A batch of two sequences of four tokens, ``(B, S, D)``."""
    return {"x": rng.standard_normal((BATCH, SEQ, D)).astype(dtype)}


def _batched(model, inputs):
    import jax

    return jax.vmap(model)(inputs["x"])  # the batch axis, which the Equinox model does not take


def make_port(name="block-equinox", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=equinox_model(**bugs),
        inputs=tokens,
        jax_call=_batched,
        jax_intermediates=LISTED,
        description="a pre-LayerNorm transformer block in Equinox (vmapped), its modules listed",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, the bug's keywords).
BUGS = {
    "attention_scale": ("attention scores divided by the head width, not its root", "attn", {"scale": "d"}),
    "gelu_tanh": ("GELU's tanh approximation where PyTorch's nn.GELU() is exact", "act", {"gelu": "tanh"}),
}

port = make_port()
attention_scale = make_port("block-equinox-attention-scale", **BUGS["attention_scale"][2])
gelu_tanh = make_port("block-equinox-gelu-tanh", **BUGS["gelu_tanh"][2])
