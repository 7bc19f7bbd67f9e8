"""crosscheck: cross-check gradients across JAX, PyTorch and a finite-difference oracle.

Importing crosscheck imports neither JAX nor PyTorch; backends load when used.
"""

from ._backend import Backend as Backend
from ._backend import BackendUnavailable as BackendUnavailable
from ._backend import load_backend as load_backend
from ._case import Case as Case
from ._case import make_inputs as make_inputs
from ._compare import Comparison as Comparison
from ._report import Report as Report
from ._run import run as run
from ._workload import Workload as Workload
from ._workload import available_workloads as available_workloads

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendUnavailable",
    "Case",
    "Comparison",
    "Report",
    "load_backend",
    "make_inputs",
    "run",
    "Workload",
    "available_workloads",
]
