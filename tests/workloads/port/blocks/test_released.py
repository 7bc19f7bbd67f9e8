"""A blockwise check holds one block at a time: once a block's record is made, nothing of that block's
check stays referenced (its ``Port``, its JAX module, the adapters of its two sides and their compiled
functions), so what a check holds does not grow with the number of blocks."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import blocks_tiny  # tests/support/: imports no framework until a model is asked for
import pytest

import crosscheck

pytest.importorskip("torch")
jax = pytest.importorskip("jax")
pytest.importorskip("flax")


def _count(kind: type) -> int:
    # `type(o)`, not `isinstance`: that reads `__class__`, which some of torch's module objects warn on
    return sum(type(o) is kind for o in gc.get_objects())


def test_no_block_of_a_blockwise_check_stays_referenced_once_checked():
    from crosscheck._workloads.port.declare.build import Prepared

    healthy = blocks_tiny.make()
    modules: list[weakref.ref] = []  # each block's JAX module, as its `port` factory made it

    def port(index, name, block):
        kwargs = healthy.port(index, name, block)
        modules.append(weakref.ref(kwargs["jax"]))
        return kwargs

    compiled = type(jax.jit(lambda x: x))
    after: list[tuple[int, int, int, int]] = []  # after each block: modules, ports, prepared, jitted

    def progress(done, total):
        gc.collect()
        alive = sum(m() is not None for m in modules)
        after.append((alive, _count(crosscheck.Port), _count(Prepared), _count(compiled)))

    watched = dataclasses.replace(healthy, port=port)
    gc.collect()  # what the session holds already (a module-level port an earlier test imported)
    before = (0, _count(crosscheck.Port), _count(Prepared))
    result = crosscheck.check_blocks(watched, reference="torch", progress=progress)
    assert result.passed, result.lines()
    assert len(modules) == blocks_tiny.BLOCKS  # each block's port was made, and checked
    assert [a[:3] for a in after] == [before] * blocks_tiny.BLOCKS
    # the functions JAX compiled for a block go with it: as many alive after the last block as the first
    assert len({a[3] for a in after}) == 1, after
