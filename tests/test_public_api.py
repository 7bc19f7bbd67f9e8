"""No private framework API in the package or its adapters: what a release may rename or remove.

A private name (``jax._src``, ``torch._C``, ``torch.utils._python_dispatch``, ``tensor._base``, ...)
can change in any release without notice, and a tool that proves how a backend computes must not
break, or worse say something else, when it does. The package and its adapters are searched for
such names; an allowed use needs its reason here, and there is none today.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import ROOT

PACKAGES = ("crosscheck", "backends")
#: Exact spellings that are private whatever follows them.
PRIVATE_STRINGS = (
    "jax._src",
    "torch._C",
    "torch.utils._",
    "._base",
    "numpy.lib.format._",
    "np.core",
    "numpy.core",
    "sys._getframe",
)
FRAMEWORKS = r"(?:jax|jnp|lax|torch|numpy|np|flax|nnx|transformers|ml_dtypes)"
#: ``torch.overrides._pop_mode``, ``jax.interpreters._x``, ``from torch import _C``: a module or an
#: attribute whose name starts with one underscore (dunders such as ``__version__`` are public).
PRIVATE_PATTERNS = (
    re.compile(rf"\b{FRAMEWORKS}(?:\.\w+)*\._[A-Za-z]"),
    re.compile(rf"\bfrom {FRAMEWORKS}(?:\.\w+)* import \(?\s*_[A-Za-z]"),
)
#: ``path: reason`` for a use no public API can replace (none today).
ALLOWED: dict[str, str] = {}


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def private_uses(text: str) -> list[str]:
    """Each line of ``text`` that names a private framework API, as ``line: text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if any(s in line for s in PRIVATE_STRINGS) or any(p.search(line) for p in PRIVATE_PATTERNS):
            found.append(f"{number}: {line.strip()}")
    return found


def test_the_package_and_its_adapters_use_no_private_framework_api():
    sources = _sources()
    assert len(sources) > 50  # the search ran over the package, not over an empty folder
    found = {
        str(path.relative_to(ROOT)): uses
        for path in sources
        if (uses := private_uses(path.read_text(encoding="utf-8")))
        and str(path.relative_to(ROOT)) not in ALLOWED
    }
    assert not found, found


@pytest.mark.parametrize(
    "line",
    [
        "from jax._src.ad_checkpoint import saved_residuals",
        "from torch.utils._python_dispatch import TorchDispatchMode",
        "    node = torch._C._current_autograd_node()",
        "base = tensor._base if tensor._base is not None else tensor",
        "frame = sys._getframe(2)",
        "header = numpy.lib.format._read_array_header(f, version)",
        "np.core.multiarray",
        "from torch import _C",
        "torch.overrides._pop_mode_temporarily()",
        "jax.interpreters._private_thing",
    ],
)
def test_each_kind_of_private_name_is_found(line):
    assert private_uses(line) == [f"1: {line.strip()}"]


@pytest.mark.parametrize(
    "line",
    [
        "from jax.ad_checkpoint import print_saved_residuals",
        "from torch.overrides import TorchFunctionMode",
        "torch.__version__",
        "params_at_base = np.asarray(x)",
        "frame = inspect.currentframe()",
    ],
)
def test_public_names_are_not_flagged(line):
    assert private_uses(line) == []
