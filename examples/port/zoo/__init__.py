"""A zoo of Hugging Face architectures, each PyTorch against the library's own Flax port (``transformers``
4.x ships both), from tiny random configs (no download), wired through ``crosscheck.Port`` as a user
would; and classic porting bugs planted in them (``BUGS``).

Run from the repository root::

    crosscheck run --workload examples.port.zoo:bert --reference torch               # a healthy pair
    crosscheck run --workload examples.port.zoo:bert_layer_norm_epsilon --reference torch
    python benchmarks/zoo.py --arch bert,llama --reference torch                      # the table

``ARCHS`` lists the architectures (name -> ``Arch``: family, config, inputs, overrides and why).
"""

from __future__ import annotations

from .bugs import BUGS
from .spec import Arch, make_port
from .text import ARCHS as _TEXT
from .vision import ARCHS as _VISION

#: name -> the architecture, in the zoo's order: text, then vision, CLIP and audio.
ARCHS: dict[str, Arch] = {arch.name: arch for arch in (*_TEXT, *_VISION)}

__all__ = ["ARCHS", "BUGS", "Arch", "make_port", "port"]


def port(name: str):
    """The healthy port of architecture ``name``, or the planted bug ``name`` (``<arch>_<bug>``)."""
    if name in ARCHS:
        return make_port(ARCHS[name])
    if name in BUGS:
        bug = BUGS[name]
        return make_port(ARCHS[bug.arch], f"{bug.arch}-{bug.kind}", **bug.change)
    raise AttributeError(name)


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name in ARCHS or name in BUGS:
        return port(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
