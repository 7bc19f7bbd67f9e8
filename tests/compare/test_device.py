"""The device model (``crosscheck._compare.device``): what a device's arithmetic permits a re-run's
difference, as rounding, keyed by framework and platform; a CPU adds nothing."""

from __future__ import annotations

import numpy as np

from crosscheck._compare import device, terms


def test_the_device_model_permits_bfloat16_products_and_nothing_on_a_cpu():
    assert device.Arithmetic("cpu").unit is None and device.Arithmetic("cpu").permit(1e-5) == 1e-5
    tpu = device.Arithmetic("tpu", device.level(None))
    assert tpu.precision == "default" and tpu.unit == 2.0**-8
    assert device.Arithmetic("tpu", device.level("highest")).unit == 4096 * 2.0**-24  # its log, not products
    assert device.level("bfloat16_3x") == "high" and device.level("float32") == "highest"
    wide = np.linspace(-1.0, 1.0, 101)
    on_tpu = wide * (1 + 2.0**-9)  # half a bfloat16 unit: one pass's product error
    assert terms.capped(on_tpu - wide, wide)[1] is not None  # beyond float32's permit: "another computation"
    assert terms.capped(on_tpu - wide, wide, device=tpu)[1] is None  # within the TPU's arithmetic
