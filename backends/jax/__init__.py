"""JAX: the stack's adapters (``stack``), a workload's adapter (``workload``), the settings a backend
may change and the run's placement of its side (``state``), the environment record and the arithmetic
its side ran under (``environment``), array conversions (``arrays``) and the inspect walk (``walk``).
This declaration imports none of them, nor JAX."""

from crosscheck._backends import Framework
from crosscheck._backends.placement import Setting

FRAMEWORK = Framework(
    name="jax",
    modules=("jax", "jaxlib"),
    extra="jax",
    backends={
        "jax": "JaxBackend",
        "jax-plain": "JaxPlainBackend",
        "jax-remat-scan": "JaxRematScanBackend",
        "jax-segments": "JaxSegmentsBackend",
    },
    defaults=("jax",),
    workload="JaxWorkloadBackend",
    plain="jax-plain",
    marks=("loss_fn",),
    inspectable="a JAX backend with `loss_fn()`",
    title="JAX",
    placement=(
        # The device JAX picks by default (an accelerator when there is one), or the host CPU.
        Setting(
            "platform",
            ("default", "cpu"),
            "where the JAX side runs: default (where JAX puts it: an accelerator when there is one) or "
            "cpu (the host CPU); each call, restored after it (default: default)",
            host="cpu",
        ),
        # JAX's own matrix-product precision (on a TPU one bfloat16 pass for float32), or
        # ``jax.default_matmul_precision``'s ``high`` (three passes) and ``highest`` (float32's).
        Setting(
            "precision",
            ("default", "high", "highest"),
            "the JAX side's matrix-product precision: default (JAX's own: one bfloat16 pass for float32 "
            "on a TPU), high (three passes) or highest (float32's); each call, restored after it (default: "
            "default)",
            highest="highest",
        ),
        # XLA's deterministic GPU ops: read from XLA_FLAGS once, when JAX first uses a device, so set
        # before that (``state.before``, ``state.environ``), never inside a call.
        Setting(
            "deterministic",
            ("default", "on"),
            "XLA's deterministic GPU ops for the JAX side (XLA_FLAGS=--xla_gpu_deterministic_ops=true: "
            "its scatter-adds summed in one order every call, bit for bit): default (XLA's own) or on; set "
            "before JAX first uses a device, refused where JAX was imported already without it "
            "(default: default)",
        ),
    ),
    arithmetic_info={"matmul_precision": "matmul precision", "deterministic_ops": "deterministic ops"},
)
