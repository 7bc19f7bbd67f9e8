"""The distribution: its name on the package index, its version, its extras and the command it installs."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest
from paths import ROOT

import crosscheck
from crosscheck._backends import DISTRIBUTION, install_hint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_distribution_name_is_not_the_unrelated_crosscheck():
    # `crosscheck` on the package index is someone else's project (0.0.0.2, 2023).
    assert PYPROJECT["project"]["name"] == DISTRIBUTION == "crosscheck-gradients"
    assert PYPROJECT["project"]["scripts"] == {"crosscheck": "crosscheck._cli.main:console"}


def test_the_extras_name_the_distribution_itself():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert extras["all"] == [f"{DISTRIBUTION}[jax,torch]"]
    assert {"jax", "torch", "plot", "dask", "test", "docs"} <= set(extras)


def test_the_installed_distribution_is_this_one():
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed (the tests run from a source tree)")
    assert dist.version == crosscheck.__version__
    assert any(ep.name == "crosscheck" and ep.group == "console_scripts" for ep in dist.entry_points)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "torch",
            "from a clone: pip install '.[torch]'; once published: pip install 'crosscheck-gradients[torch]'",
        ),
        (None, "from a clone: pip install '.'; once published: pip install 'crosscheck-gradients'"),
    ],
    ids=["extra", "package"],
)
def test_install_hints_name_the_distribution_and_the_clone(extra, expected):
    assert install_hint(extra) == expected
