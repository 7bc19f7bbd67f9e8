"""The model oracle's modes (``model/oracle/function.py``): a workload's oracle differences entries or
directions; the stack's outputs mode is not one of them, and asking for it is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._workloads.model.oracle.function import differencing


def test_a_workload_refuses_the_stacks_outputs_mode_by_name():
    with pytest.raises(
        ValueError, match=r"a workload's `oracle_mode` is one of auto, full, screen; found 'outputs'"
    ):
        differencing("outputs", {"w": np.ones((2, 2))}, 4)
    assert differencing("screen", {"w": np.ones((2, 2))}, 4).mode == "screen"
