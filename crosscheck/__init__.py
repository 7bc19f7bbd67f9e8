"""crosscheck: cross-check gradients across JAX, PyTorch and a finite-difference oracle.

Importing crosscheck imports neither JAX nor PyTorch; backends load when used.
"""

from crosscheck._backends import Backend as Backend
from crosscheck._backends import BackendBroken as BackendBroken
from crosscheck._backends import BackendUnavailable as BackendUnavailable
from crosscheck._backends import load_backend as load_backend
from crosscheck._compare.record import Comparison as Comparison
from crosscheck._engine.run import check as check
from crosscheck._engine.run import run as run
from crosscheck._records import Execution as Execution
from crosscheck._records import Oracle as Oracle
from crosscheck._records import Slack as Slack
from crosscheck._report.report import Report as Report
from crosscheck._workloads.losses import projection_loss as projection_loss
from crosscheck._workloads.model.declare import Workload as Workload
from crosscheck._workloads.port.blocks.declare import Blocks as Blocks
from crosscheck._workloads.port.declare.port import Port as Port
from crosscheck._workloads.registry import available_workloads as available_workloads
from crosscheck._workloads.stack.case import Case as Case
from crosscheck._workloads.stack.case import make_inputs as make_inputs
from crosscheck._workloads.stack.workload import Stack as Stack
from crosscheck._workloads.train.declare import Train as Train

__version__ = "0.1.0"

#: Public names of the layer above the engine (the blockwise check runs on the sweep's executors),
#: imported when first asked for: ``crosscheck.testing`` imports this package and may not reach it.
_SWEEP = {"check_blocks": "crosscheck._sweep.blocks", "BlocksResult": "crosscheck._sweep.blocks"}


def __getattr__(name: str) -> object:
    if name in _SWEEP:
        import importlib

        return getattr(importlib.import_module(_SWEEP[name]), name)
    raise AttributeError(f"module 'crosscheck' has no attribute {name!r}")


__all__ = [
    "Backend",
    "Blocks",
    "BlocksResult",
    "BackendBroken",
    "BackendUnavailable",
    "Case",
    "Comparison",
    "Execution",
    "Oracle",
    "Port",
    "Report",
    "Slack",
    "Stack",
    "Train",
    "check",
    "check_blocks",
    "load_backend",
    "make_inputs",
    "projection_loss",
    "run",
    "Workload",
    "available_workloads",
]
