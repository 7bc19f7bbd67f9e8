"""The distribution: its name on the package index, its version, its extras and the command it installs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

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


# -- installed as users install it ----------------------------------------------------------------------


def _run(command: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_environment_runs_from_outside_the_clone(tmp_path):
    """The wheel, not the clone: built from the working tree, installed with ``pip --no-deps`` into a new
    virtual environment that sees this one's packages (a ``.pth``: no network), and its console script
    run from a folder outside the clone on the stack and on a port example copied there (the examples are
    not in the wheel)."""
    pytest.importorskip("hatchling", reason="the build backend (in the `test` extra)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip"]
    offline = ["--no-deps", "--no-index"]
    built = _run([*pip, "wheel", *offline, "--no-build-isolation", "-w", str(dist), str(ROOT)], tmp_path, env)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("crosscheck_gradients-*.whl")
    venv = tmp_path / "venv"
    made = _run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], tmp_path, env
    )
    assert made.returncode == 0, made.stderr
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    where = _run([str(python), "-c", "import site, sys; print(site.getsitepackages()[0])"], tmp_path, env)
    site_packages = Path(where.stdout.strip())
    # This environment's packages (NumPy, JAX, PyTorch, ...) after the new one's own: its crosscheck, if
    # installed here too, is shadowed by the wheel's.
    (site_packages / "tests_environment.pth").write_text("\n".join(sysconfig_paths()) + "\n")
    into = ["--python", str(python), "install", *offline, "--force-reinstall", "--quiet"]
    installed = _run([*pip, *into, str(wheel)], tmp_path, env)
    assert installed.returncode == 0, installed.stderr
    outside = tmp_path / "work"
    outside.mkdir()
    found = _run(
        [str(python), "-c", "import crosscheck, crosscheck.backends; print(crosscheck.__file__)"],
        outside,
        env,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(venv), found.stdout  # the wheel's, not the clone's
    script = venv / ("Scripts/crosscheck.exe" if os.name == "nt" else "bin/crosscheck")
    stack = _run([str(script), "run", "--quiet", "--layers", "2", "--dim", "3", "--batch", "2"], outside, env)
    assert (stack.returncode, stack.stdout) == (0, "PASSED\n"), stack.stdout + stack.stderr
    if importlib.util.find_spec("flax") is None:
        pytest.skip("the port example needs flax (the `port` extra)")
    shutil.copy(ROOT / "examples" / "port" / "convnet.py", outside / "my_convnet.py")
    port = _run(
        [str(script), "run", "--workload", "my_convnet:port", "--reference", "torch", "--quiet"], outside, env
    )
    # a float32 pass keeps, under --quiet, the caveat of what float32's rounding hides
    said = port.stdout.splitlines()
    assert (port.returncode, said[0]) == (0, "PASSED"), port.stdout + port.stderr
    assert all(line.startswith("caveat of ") for line in said[1:]) and "--dtype float64" in port.stdout
    planted = ["--workload", "my_convnet:same_padding", "--reference", "torch", "--quiet"]
    bug = _run([str(script), "run", *planted], outside, env)
    assert bug.returncode == 1 and "the forward pass differs first at `conv1`" in " ".join(bug.stdout.split())


def sysconfig_paths() -> list[str]:
    """This interpreter's site-packages folders (where the tests' dependencies are installed)."""
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]
