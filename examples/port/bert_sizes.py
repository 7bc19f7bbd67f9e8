"""Hugging Face BERT at a million and ten million parameters, PyTorch against its Flax port: the model
oracle's large-model targets (issue 25: a healthy 1e6-parameter BERT under 60 s with the default
reference, 1e7 under 5 minutes).

Built as the zoo's BERT is (``examples.port.zoo``: eager attention, eval mode, seed 0, no dropout, two
sequences of 6 token ids), from a config sized to the target; the weights' std shrinks with the width
(``0.5 * sqrt(8 / hidden)``, the zoo's 0.5 at width 8), so that pre-activations stay of order one::

    crosscheck run --workload examples.port.bert_sizes:bert1e6
    python benchmarks/oracle_speed.py --ports examples.port.bert_sizes:bert1e6
"""

from __future__ import annotations

import dataclasses
import functools
import math

#: name -> (hidden, layers, intermediate, vocab): 0.99e6 and 1.01e7 parameters.
SIZES = {
    "bert1e6": (128, 4, 512, 1000),
    "bert1e7": (256, 10, 1024, 8000),
}

__all__ = ["SIZES", "port"]


@functools.cache
def port(name: str):
    """The healthy BERT port of ``name`` (a key of ``SIZES``), built once a process."""
    from .zoo import ARCHS, make_port
    from .zoo.inputs import SEQUENCE, text
    from .zoo.spec import QUIET

    hidden, layers, intermediate, vocab = SIZES[name]
    config = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 32,
        intermediate_size=intermediate,
        max_position_embeddings=max(16, SEQUENCE),
        initializer_range=0.5 * math.sqrt(8 / hidden),
        **QUIET,
    )
    arch = dataclasses.replace(ARCHS["bert"], config=config, inputs=text(vocab, token_types=True))
    return make_port(arch, name)


def __getattr__(name):  # built when asked for: importing this module imports no framework
    if name in SIZES:
        return port(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
