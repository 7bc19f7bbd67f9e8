"""The convolutional port of ``convnet.py`` in Flax nnx (NHWC), checked module by module (its
submodules' calls are captured without a listing), with planted bugs (``BUGS``).

Run from the repository root::

    crosscheck run --workload examples.port.convnet_nnx:port --reference torch
    crosscheck run --workload examples.port.convnet_nnx:batchnorm_epsilon --reference torch
"""

from __future__ import annotations

import crosscheck
from examples.port.convnet import images, torch_model


def nnx_model(*, padding="explicit", epsilon=1e-5):
    """The port in Flax nnx, in eval mode (``BatchNorm`` on its running statistics). The keywords
    plant bugs: ``padding="SAME"`` (pads (0, 1)), ``epsilon=1e-3`` (Keras's default)."""
    import jax
    from flax import nnx

    class NnxNet(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            pad = "SAME" if padding == "SAME" else ((1, 1), (1, 1))
            self.conv1 = nnx.Conv(3, 4, (3, 3), strides=(2, 2), padding=pad, rngs=rngs)
            self.bn1 = nnx.BatchNorm(4, epsilon=epsilon, rngs=rngs)
            self.fc = nnx.Linear(4 * 2 * 2, 3, rngs=rngs)

        def __call__(self, x):
            x = nnx.max_pool(jax.nn.relu(self.bn1(self.conv1(x))), (2, 2), strides=(2, 2))
            return self.fc(x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1))  # flatten C, H, W

    model = NnxNet(nnx.Rngs(0))
    model.eval()  # BatchNorm: use_running_average=True
    return model


def make_port(name="convnet-nnx", overrides=None, **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=nnx_model(**bugs),
        inputs=images,
        jax_inputs=lambda inputs: {"x": inputs["x"].transpose(0, 2, 3, 1)},  # NCHW -> NHWC
        overrides=overrides,
        description="Conv2d + BatchNorm2d + ReLU + MaxPool2d + Linear, PyTorch NCHW -> Flax nnx NHWC",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the port).
BUGS = {
    "same_padding": ("padding='SAME' on the strided convolution", "conv1", dict(padding="SAME")),
    "batchnorm_epsilon": ("the batch norm's epsilon 1e-3 (Keras's), not 1e-5", "bn1", dict(epsilon=1e-3)),
    "kernel_dot_t": (
        "the convolution kernel converted with `.T` (W, H, I, O) instead of OIHW -> HWIO",
        "conv1",
        dict(overrides={"conv1.weight": (3, 2, 1, 0)}),
    ),
}

port = make_port()
same_padding = make_port("convnet-nnx-same-padding", **BUGS["same_padding"][2])
batchnorm_epsilon = make_port("convnet-nnx-batchnorm-epsilon", **BUGS["batchnorm_epsilon"][2])
kernel_dot_t = make_port("convnet-nnx-kernel-dot-t", **BUGS["kernel_dot_t"][2])
