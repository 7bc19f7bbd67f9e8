"""Shared fixtures: a backend fixture over the built-ins, skipping one that is not installed; and what the
run collected (``support/collected.py``), for the suite page's figure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import crosscheck

sys.path.insert(0, str(Path(__file__).parent / "support"))  # planted, hostile, ... (tests/support/)

import collected

BUILTINS = ["jax", "torch", "numpy-fd"]


def _load(name: str):
    try:
        return crosscheck.load_backend(name)
    except crosscheck.BackendUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(params=BUILTINS)
def backend(request):
    """Each built-in backend (skipped with the reason when its framework is missing)."""
    return _load(request.param)


@pytest.fixture(params=["jax", "torch"])
def autodiff_backend(request):
    return _load(request.param)


def pytest_sessionstart(session):
    collected.started()


def pytest_collectreport(report):
    if report.skipped:  # a module skipped at collection (a framework not installed)
        collected.RUN["skipped"] += 1


def pytest_deselected(items):
    collected.RUN["deselected"] += len(items)


def pytest_collection_finish(session):
    collected.finished([item.path for item in session.items])


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a real CUDA card: skipped, with the reason, where PyTorch has none (CI;
    the GPU's behaviour is simulated elsewhere, ``support/simulated_gpu.py``)."""
    marked = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not marked:
        return
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason="needs a real CUDA GPU (none here)"))
