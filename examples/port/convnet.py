"""A convolutional port: PyTorch ``Conv2d`` + ``BatchNorm2d`` (eval) + ReLU + max pooling + ``Linear``,
against the same model in Flax linen, NCHW against NHWC, with planted bugs (``BUGS``).

Run from the repository root::

    crosscheck run --workload examples.port.convnet:port                 # the healthy port
    crosscheck run --workload examples.port.convnet:same_padding         # a planted bug
    python -m examples.port.convnet                                      # the mapping, then every port
"""

from __future__ import annotations

import numpy as np

import crosscheck


def torch_model():
    """The original: a small convolutional classifier in eval mode, with non-trivial batch statistics."""
    import torch
    from torch import nn

    class TorchNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=2, padding=1)
            self.bn1 = nn.BatchNorm2d(4)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(4 * 2 * 2, 3)

        def forward(self, x):
            x = self.pool(self.relu(self.bn1(self.conv1(x))))
            return self.fc(x.flatten(1))

    torch.manual_seed(0)
    model = TorchNet()
    with torch.no_grad():  # batch statistics as after training, so that a mix-up of them shows
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
        model.bn1.weight.uniform_(0.5, 1.5)
        model.bn1.bias.uniform_(-0.5, 0.5)
    return model.eval()


def flax_model(*, padding="explicit", relu="exact", flatten="nchw"):
    """The port in Flax linen (NHWC). The keywords plant bugs: ``padding="SAME"`` (TensorFlow's
    asymmetric padding of a strided convolution), ``relu="straight-through"`` (same forward, wrong
    derivative), ``flatten="nhwc"`` (flattening channels-last before the dense layer)."""
    import flax.linen as nn
    import jax

    class FlaxNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            pad = "SAME" if padding == "SAME" else ((1, 1), (1, 1))
            x = nn.Conv(4, (3, 3), strides=(2, 2), padding=pad, name="conv1")(x)
            x = nn.BatchNorm(use_running_average=True, epsilon=1e-5, name="bn1")(x)
            x = nn.relu(x) if relu == "exact" else x + jax.lax.stop_gradient(nn.relu(x) - x)
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            if flatten == "nchw":
                x = x.transpose(0, 3, 1, 2)
            return nn.Dense(3, name="fc")(x.reshape(x.shape[0], -1))

    return FlaxNet()


def images(rng, dtype):
    """A batch of two 3-channel 8x8 images, NCHW as PyTorch takes them."""
    return {"x": rng.standard_normal((2, 3, 8, 8)).astype(dtype)}


def make_port(name="convnet", overrides=None, **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=flax_model(**bugs),
        inputs=images,
        jax_inputs=lambda inputs: {"x": inputs["x"].transpose(0, 2, 3, 1)},  # NCHW -> NHWC
        overrides=overrides,
        description="Conv2d + BatchNorm2d + ReLU + MaxPool2d + Linear, PyTorch NCHW -> Flax NHWC",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the port).
BUGS = {
    "same_padding": (
        "padding='SAME' on the strided convolution (pads (0, 1), PyTorch's padding=1 pads (1, 1))",
        "conv1",
        dict(padding="SAME"),
    ),
    "kernel_dot_t": (
        "the convolution kernel converted with `.T` (W, H, I, O) instead of OIHW -> HWIO",
        "conv1",
        dict(overrides={"conv1.weight": (3, 2, 1, 0)}),
    ),
    "flatten_nhwc": (
        "flattened channels-last before the dense layer (PyTorch flattens C, H, W)",
        "fc",
        dict(flatten="nhwc"),
    ),
    "straight_through_relu": (
        "a straight-through ReLU: the forward is exact, its derivative is 1 everywhere",
        "relu",
        dict(relu="straight-through"),
    ),
}

port = make_port()
same_padding = make_port("convnet-same-padding", **BUGS["same_padding"][2])
kernel_dot_t = make_port("convnet-kernel-dot-t", **BUGS["kernel_dot_t"][2])
flatten_nhwc = make_port("convnet-flatten-nhwc", **BUGS["flatten_nhwc"][2])
straight_through_relu = make_port("convnet-straight-through-relu", **BUGS["straight_through_relu"][2])


if __name__ == "__main__":
    print(port.mapping)
    for candidate in (port, same_padding, kernel_dot_t, flatten_nhwc, straight_through_relu):
        report = crosscheck.run(workload=candidate)
        print(candidate.name, "PASSED" if report.passed else "FAILED", report.problems[:1])
    del np
