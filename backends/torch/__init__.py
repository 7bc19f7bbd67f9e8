"""PyTorch: the stack's adapters (``stack``), a workload's adapter (``workload``), the settings a
backend may change and the run's placement of its side (``state``), the environment record and the
arithmetic its side ran under (``environment``), array conversions (``arrays``) and the inspect watcher
(``walk``). This declaration imports none of them, nor PyTorch."""

from crosscheck._backends import Framework
from crosscheck._backends.placement import Setting

#: PyTorch's TF32 switches, each a setting: ``default`` leaves PyTorch's own (products off, cuDNN
#: convolutions on), ``off`` is its float32 arithmetic (the classification's ``highest``).
_TF32 = ("default", "off", "on")

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
    placement=(
        # The device the PyTorch side's tensors are put on for each call (a port's inputs follow its
        # module); default: where the module lives (a port's), else the host CPU.
        Setting(
            "device",
            ("default", "cpu", "cuda"),
            "where the PyTorch side runs: default (where its module lives: the host CPU unless a port's "
            "module is on cuda), cpu (the host CPU) or cuda (the first CUDA device; its tensors follow "
            "for each call, results come to the host to be compared) (default: default)",
            host="cpu",
        ),
        Setting(
            "matmul_tf32",
            _TF32,
            "PyTorch's TF32 for float32 matrix products on CUDA (torch.backends.cuda.matmul.allow_tf32): "
            "default (PyTorch's own: off), off or on; each call, restored after it (default: default)",
            highest="off",
        ),
        Setting(
            "cudnn_tf32",
            _TF32,
            "PyTorch's TF32 for cuDNN convolutions (torch.backends.cudnn.allow_tf32): default (PyTorch's "
            "own: on), off or on; each call, restored after it (default: default)",
            highest="off",
        ),
        Setting(
            "deterministic",
            ("default", "on"),
            "torch.use_deterministic_algorithms for the PyTorch side: default (PyTorch's own) or on (its "
            "sums in one order every call, bit for bit); each call, restored after it (default: default)",
        ),
    ),
    arithmetic_info={
        "float32_matmul_precision": "float32 matmul precision",
        "matmul_tf32": "TF32 products",
        "cudnn_tf32": "TF32 convolutions",
    },
)
