"""The device model (``crosscheck._compare.device``): what a device's arithmetic permits a re-run's
difference, as rounding, keyed by framework and platform; a CPU adds nothing."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._backends import FRAMEWORKS, framework_named
from crosscheck._compare import device, terms

TPU = device.Arithmetic("tpu", "default", "TPU v5 lite", framework="jax")


def test_the_device_model_permits_bfloat16_products_and_nothing_on_a_cpu():
    assert device.Arithmetic("cpu").unit is None and device.Arithmetic("cpu").permit(1e-5) == 1e-5
    tpu = device.Arithmetic("tpu", device.level(None), framework="jax")
    assert tpu.precision == "default" and tpu.unit == 2.0**-8
    highest = device.Arithmetic("tpu", device.level("highest"), framework="jax")
    assert highest.unit == 4096 * 2.0**-24  # its log, not products
    assert device.level("bfloat16_3x") == "high" and device.level("float32") == "highest"
    wide = np.linspace(-1.0, 1.0, 101)
    on_tpu = wide * (1 + 2.0**-9)  # half a bfloat16 unit: one pass's product error
    assert terms.capped(on_tpu - wide, wide)[1] is not None  # beyond float32's permit: "another computation"
    assert terms.capped(on_tpu - wide, wide, device=tpu)[1] is None  # within the TPU's arithmetic


TABLES = [
    "PRODUCT_UNITS",
    "PRODUCT_WORDS",
    "ELEMENTWISE_ULPS",
    "EMULATED_FLOAT64",
    "CONV_UNITS",
    "UNMEASURED",
]


@pytest.mark.parametrize("table", TABLES)
def test_the_tables_are_keyed_by_a_declared_framework_and_a_platform(table):
    """A platform as its framework names it: JAX's ``gpu``, PyTorch's ``cuda`` (a device's type)."""
    for framework, platform in getattr(device, table):
        assert framework in FRAMEWORKS and platform in ("cpu", "gpu", "tpu", "cuda")


def test_a_platform_the_tables_list_for_another_framework_adds_nothing():
    """What a chip does to float32 is the compiler's: JAX's TPU rows are not another framework's, and a
    side that names no framework is judged as float32 alone."""
    for other in (device.Arithmetic("tpu", "default", framework="torch"), device.Arithmetic("tpu")):
        assert other.unit is None and other.permit(1e-5) == 1e-5
        assert other.float64_on_host == "" and other.hides() == ""
    assert TPU.unit == 2.0**-8 and "emulated" in TPU.float64_on_host


def test_what_a_tpu_hides_is_said_in_the_frameworks_own_words_and_options():
    assert TPU.words() == "a TPU (TPU v5 lite) at JAX's default matmul precision"
    assert TPU.hides() == (
        "the JAX side ran on a TPU (TPU v5 lite) at JAX's default matmul precision (float32 products in "
        "one bfloat16 pass, its elementwise functions up to 4096 ulps): it was judged within that "
        "arithmetic, so a difference smaller than about 6.2e-02 of a value's scale is not seen; check at "
        "`--jax-precision highest`, or with `--jax-platform cpu`, too"
    )
    highest = device.Arithmetic("tpu", "highest", framework="jax")
    assert highest.hides().endswith("; check with the JAX side on the CPU too (`--jax-platform cpu`)")
    assert "float32 products in float32," in highest.hides()


def test_the_options_it_names_are_the_frameworks_declared_ones():
    """The options ``hides`` suggests are the JAX declaration's ``highest`` and ``host`` values, as the
    command line spells them: a setting renamed there is renamed here."""
    settings = framework_named("jax").placement
    highest = next(s for s in settings if s.highest)
    host = next(s for s in settings if s.host)
    assert f"`--jax-{highest.name} {highest.highest}`" in TPU.hides()
    assert f"`--jax-{host.name} {host.host}`" in TPU.hides()
