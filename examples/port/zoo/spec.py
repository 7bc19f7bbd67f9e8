"""One architecture of the zoo: its config, its inputs, and how to build the port from them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import crosscheck

#: The std of every weight drawn from ``initializer_range`` (or its architecture's name for it): at a
#: model's default 0.02 every pre-activation is ~0.05, where bugs such as the tanh GELU or a norm's
#: epsilon are below float32 rounding (see ``examples/port/gpt2.py``); trained weights are O(1).
STD = 0.5
#: No dropout anywhere, no cache: a deterministic function of the weights.
QUIET = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, use_cache=False)


@dataclass(frozen=True)
class Arch:
    """A Hugging Face architecture shipped in PyTorch and Flax, at its smallest.

    ``model`` is the class stem (``Bert`` for ``BertConfig``, ``BertModel``, ``FlaxBertModule``),
    ``module`` the ``transformers.models`` package; ``inputs(rng, dtype)`` the PyTorch side's inputs,
    ``jax_inputs`` what the Flax side takes instead (channels last, explicit positions); ``prepare(model)``
    changes the PyTorch model's values (running statistics), ``before()`` runs before the Flax module is
    built (a fix of the library's Flax code for today's JAX); ``overrides``
    the mapping decisions the automatic mapping cannot make (a dict, or a function of the PyTorch model
    for per-tensor ones), ``overrides_note`` why, and which would disappear with override patterns
    with groups or a better automatic mapping; ``unused`` the parameters its inference never uses,
    declared out of scope.
    """

    name: str
    family: str
    model: str
    module: str
    config: Mapping[str, Any]
    inputs: Callable[..., dict[str, Any]]
    jax_inputs: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    overrides: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] = field(default_factory=dict)
    overrides_note: str = ""
    eager: bool = True
    prepare: Callable[[Any], None] | None = None
    before: Callable[[], None] | None = None
    #: Parameters the model's forward pass does not use (``crosscheck.Port(unused=...)``), and why.
    unused: tuple[str, ...] = ()
    #: Keywords the Flax module's call takes beside the inputs (RoFormer's ``head_mask=None``).
    keywords: Mapping[str, Any] = field(default_factory=dict)


def classes(arch: Arch):
    import transformers

    flax = importlib.import_module(f"transformers.models.{arch.module}.modeling_flax_{arch.module}")
    return (
        getattr(transformers, f"{arch.model}Config"),
        getattr(transformers, f"{arch.model}Model"),
        getattr(flax, f"Flax{arch.model}Module"),
    )


def make_port(
    arch: Arch,
    name: str | None = None,
    *,
    torch_config: Mapping[str, Any] | None = None,
    flax_config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    jax_inputs: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    prepare: Callable[[Any], None] | None = None,
    jax_call: Callable[[Any, dict[str, Any]], Any] | None = None,
) -> crosscheck.Port:
    """The port of ``arch``: PyTorch (eager attention, eval mode, seed 0) against its Flax module, with
    the configs changed by ``torch_config`` / ``flax_config`` and the overrides by ``overrides`` (how
    the planted bugs are made)."""
    import torch

    if arch.before is not None:
        arch.before()
    config, torch_model, flax_module = classes(arch)
    torch.manual_seed(0)
    eager = {"attn_implementation": "eager"} if arch.eager else {}
    original = torch_model(config(**{**arch.config, **(torch_config or {})}, **eager)).eval()
    for step in (arch.prepare, prepare):
        if step is not None:
            with torch.no_grad():
                step(original)
    port = flax_module(config(**{**arch.config, **(flax_config or {})}))
    fixed = arch.overrides(original) if callable(arch.overrides) else arch.overrides
    return crosscheck.Port(
        name=name or arch.name,
        torch=original,
        jax=port,
        inputs=arch.inputs,
        jax_inputs=jax_inputs or arch.jax_inputs,
        jax_call=jax_call or (lambda module, inputs: module(**inputs, **arch.keywords, deterministic=True)),
        overrides={**fixed, **(overrides or {})} or None,
        unused=arch.unused,
        description=f"Hugging Face {arch.model} ({arch.family}, tiny random config), PyTorch against Flax",
    )


def randomize_batch_norms(model) -> None:
    """Running statistics as a trained model has them (mean ~ N(0, 0.5), variance in [0.05, 1]), and
    affine parameters away from (1, 0): with the defaults (0, 1) a BatchNorm's epsilon barely shows."""
    import torch

    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            size = module.num_features
            module.running_mean.copy_(0.5 * torch.randn(size, generator=generator))
            module.running_var.copy_(0.05 + 0.95 * torch.rand(size, generator=generator))
            module.weight.copy_(1 + 0.5 * torch.randn(size, generator=generator))
            module.bias.copy_(0.5 * torch.randn(size, generator=generator))
