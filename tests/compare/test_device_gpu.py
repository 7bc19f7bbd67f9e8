"""The device model's GPU rows: JAX's TF32 products at its default matmul precision (and ``high``), and
PyTorch's on CUDA as its two TF32 switches say (products off by default, cuDNN convolutions on), each a
named rounding term; their elementwise functions said unmeasured, with the probe that measures them."""

from __future__ import annotations

import pytest

from crosscheck._compare.device import Arithmetic, scale

FLOAT32_PERMIT = 2.0**-24 * 16


def test_jax_on_a_gpu_makes_float32_products_in_tf32_below_highest():
    assert Arithmetic("gpu", "default", "H200", "jax").unit == 2.0**-11
    assert Arithmetic("gpu", "high", "H200", "jax").unit == 2.0**-11
    assert Arithmetic("gpu", "highest", "H200", "jax").unit == 2.0**-24
    assert scale(Arithmetic("gpu", "default", "H200", "jax"), "float32") == 2.0**13


@pytest.mark.parametrize(
    ("precision", "conv", "unit"),
    [("highest", "off", 2.0**-24), ("default", "off", 2.0**-11), ("highest", "on", 2.0**-11)],
)
def test_pytorch_on_cuda_rounds_as_its_tf32_switches_say(precision, conv, unit):
    assert Arithmetic("cuda", precision, "H200", "torch", conv=conv).unit == unit


def test_the_cpu_and_the_tpu_are_as_they_were():
    assert Arithmetic("cpu", "default", "", "torch", conv="on").unit is None
    assert Arithmetic("cpu", "default", "", "jax").unit is None
    assert Arithmetic("tpu", "default", "TPU v5 lite", "jax").unit == 2.0**-8
    assert Arithmetic("tpu", "default", "TPU v5 lite", "jax").permit(FLOAT32_PERMIT) == 16 * 2.0**-8


def test_what_a_gpu_hides_names_tf32_and_the_unmeasured_functions_and_where_else_to_check():
    jax_words = Arithmetic("gpu", "default", "H200", "jax").hides()
    assert "float32 products in TF32" in jax_words and "unmeasured on a GPU yet" in jax_words
    assert "gpu_probe.py" in jax_words and "`--jax-precision highest`" in jax_words
    torch_words = Arithmetic("cuda", "highest", "H200", "torch", conv="on").hides()
    assert "convolutions in TF32 (cuDNN's flag on)" in torch_words
    assert "`--torch-matmul-tf32 off`, `--torch-cudnn-tf32 off`" in torch_words
    assert "`--torch-device cpu`" in torch_words
