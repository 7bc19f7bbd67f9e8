"""The convolutional port of ``convnet.py`` as a plain JAX function of a parameter pytree (NCHW, as
PyTorch), checked module by module through ``jax_intermediates``, with planted bugs (``BUGS``).

The function returns its output and, beside it, the intermediates that correspond to the PyTorch
modules ``conv1``, ``bn1`` and ``fc``; crosscheck compares each with the PyTorch module's output.

Run from the repository root::

    crosscheck run --workload examples.port.convnet_function:port --reference torch
    crosscheck run --workload examples.port.convnet_function:batchnorm_epsilon --reference torch
"""

from __future__ import annotations

import numpy as np

import crosscheck
from examples.port.convnet import images, torch_model

#: The PyTorch modules whose outputs the function returns beside its own.
LISTED = ("conv1", "bn1", "fc")


def convnet(params, x, *, padding=(1, 1), epsilon=1e-5, relu="exact"):
    """Conv2d (stride 2) + batch norm with running statistics + ReLU + 2x2 max pooling + dense, NCHW.
    The keywords plant bugs: ``padding=(0, 1)`` (TensorFlow's SAME), ``epsilon=1e-3`` (Keras's
    default), ``relu="straight-through"`` (same forward, derivative 1)."""
    import jax
    import jax.numpy as jnp

    c, bn, fc = params["conv1"], params["bn1"], params["fc"]
    conv = jax.lax.conv_general_dilated(
        x, c["weight"], window_strides=(2, 2), padding=[padding, padding],
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    ) + c["bias"][:, None, None]  # fmt: skip
    scale = bn["weight"] / jnp.sqrt(bn["running_var"] + epsilon)
    normed = (conv - bn["running_mean"][:, None, None]) * scale[:, None, None] + bn["bias"][:, None, None]
    exact = jax.nn.relu(normed)
    h = exact if relu == "exact" else normed + jax.lax.stop_gradient(exact - normed)
    pooled = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    logits = pooled.reshape(pooled.shape[0], -1) @ fc["weight"].T + fc["bias"]
    return logits, {"conv1": conv, "bn1": normed, "fc": logits}


def parameters():
    """The function's parameter pytree: only its structure and shapes count (the values are
    replaced by the PyTorch model's, through the mapping)."""
    shapes = {
        "conv1": {"weight": (4, 3, 3, 3), "bias": (4,)},
        "bn1": {"weight": (4,), "bias": (4,), "running_mean": (4,), "running_var": (4,)},
        "fc": {"weight": (3, 16), "bias": (3,)},
    }
    return {m: {k: np.zeros(s, dtype=np.float32) for k, s in leaves.items()} for m, leaves in shapes.items()}


def make_port(name="convnet-function", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=lambda params, x: convnet(params, x, **bugs),
        jax_params=parameters(),
        inputs=images,
        jax_intermediates=LISTED,
        description="convnet.py's port as a plain JAX function (NCHW), its modules listed",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, the bug's keywords).
BUGS = {
    "same_padding": ("the strided convolution padded (0, 1): TF's SAME", "conv1", {"padding": (0, 1)}),
    "batchnorm_epsilon": ("the batch norm's epsilon 1e-3 (Keras) instead of 1e-5", "bn1", {"epsilon": 1e-3}),
    "straight_through_relu": ("a straight-through ReLU (derivative 1)", "bn1", {"relu": "straight-through"}),
}  # fmt: skip

port = make_port()
same_padding = make_port("convnet-function-same-padding", **BUGS["same_padding"][2])
batchnorm_epsilon = make_port("convnet-function-batchnorm-epsilon", **BUGS["batchnorm_epsilon"][2])
straight_through_relu = make_port(
    "convnet-function-straight-through-relu", **BUGS["straight_through_relu"][2]
)
