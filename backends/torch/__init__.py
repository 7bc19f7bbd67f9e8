"""PyTorch: the stack's adapters (``stack``), a workload's adapter (``workload``), the settings a
backend may change (``state``), the environment record (``environment``), array conversions
(``arrays``) and the inspect watcher (``walk``). This declaration imports none of them, nor PyTorch."""

from crosscheck._backends import Framework

FRAMEWORK = Framework(
    name="torch",
    modules=("torch",),
    extra="torch",
    backends={
        "torch": "TorchBackend",
        "torch-plain": "TorchPlainBackend",
        "torch-segments": "TorchSegmentsBackend",
    },
    defaults=("torch",),
    workload="TorchWorkloadBackend",
    plain="torch-plain",
    inspectable="a PyTorch backend",
    title="PyTorch",
    arithmetic_info={"float32_matmul_precision": "float32 matmul precision"},
)
