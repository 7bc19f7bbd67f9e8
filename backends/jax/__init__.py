"""JAX: the stack's adapters (``stack``), a workload's adapter (``workload``), the settings a backend
may change (``state``), the environment record (``environment``), array conversions (``arrays``) and
the inspect walk (``walk``). This declaration imports none of them, nor JAX."""

from crosscheck._backends import Framework

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
)
