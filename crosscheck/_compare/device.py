"""The arithmetic of the device a side ran on, as rounding: what a TPU does to float32, as a permit.

A TPU computes a float32 matrix product at JAX's default matmul precision in one bfloat16 pass (each
input rounded to bfloat16's 8 bits), at ``high`` in three (about 16 bits) and at ``highest`` in six
(float32's 24); its float32 elementwise functions are approximations (``log`` up to ~4,000 float32 ulps
on a TPU v5e, ``tanh`` ~1,350, ``exp`` ~60; a CPU's at most ~4). A side that ran there carries that
rounding in its float32 results, on top of float32's own, and its float64 re-run does not: the
difference between the two is the device's arithmetic, not another computation.

The model (``Arithmetic``): a side's effective unit roundoff is its products' at the precision in
effect, or its elementwise functions' error, whichever is larger (``unit``). What it permits a re-run's
difference (``permit``, per unit of an entry's scale, as ``terms.bound`` takes it) is
``DEVICE_PERMIT_ULPS`` of that unit: the 16-bit cap's reasoning (every product rounded once at that
unit, the differences of healthy models a few units), never less than float32's own permit. A CPU adds
nothing. The tables are keyed by framework and platform: what a chip does to float32 depends on the
compiler that made the program (JAX's default float32 product on a TPU is one bfloat16 pass; another
framework's on the same chip need not be). The figures are measured: ``docs/measurements/accelerator.md``.

That permit is flat; what a reduced precision does to a result is not (a product of length K rounds each
of its K inputs; a softmax or a cancellation amplifies it). So what a reduced precision may explain, when
a classification's ``highest`` re-run agrees, is bounded per case by a model of the device's products
(``Arithmetic.products``: the unit they round their inputs to; ``crosscheck._compare.modelled``: the side's
program run on the host with them).
On an NVIDIA GPU a float32 product may be made in TF32 (10 bits of mantissa, unit 2^-11): JAX's at its
default precision, PyTorch's where its matmul flag is on, and PyTorch's cuDNN convolutions where their
own flag is on (its default: ``Arithmetic.conv``). Those rows are the frameworks' documented behaviour,
not yet measured on a card; the GPU's elementwise functions are said unmeasured (``UNMEASURED``) and add
nothing until ``../shared/device/gpu_probe.py`` has measured them.
"""

from __future__ import annotations

import contextlib
import dataclasses

from crosscheck._backends import Framework, framework_named
from crosscheck._backends.placement import Setting
from crosscheck._compare.dtypes import unit_roundoff

#: TF32's unit roundoff: float32's exponent, 10 bits of mantissa.
TF32_UNIT = 2.0**-11

#: A float32 product's unit roundoff at each matmul precision level, by framework and platform: JAX's
#: one, three or six bfloat16 passes on a TPU (measured relative errors of a product: 2.3e-3, 1.3e-5,
#: 1.4e-7).
#: On an NVIDIA GPU, TF32 (10 bits of mantissa, unit 2^-11): JAX's at its default precision and at
#: ``high`` (its documentation's "tensorfloat32 where available"), PyTorch's where its matmul flag is on
#: (its level ``default``; off, its ``highest``). The GPU rows are documented figures, still to be
#: measured on a card (``../shared/device/gpu_probe.py``).
PRODUCT_UNITS = {
    ("jax", "tpu"): {"default": 2.0**-8, "high": 2.0**-16, "highest": 2.0**-24},
    ("jax", "gpu"): {"default": TF32_UNIT, "high": TF32_UNIT, "highest": 2.0**-24},
    ("torch", "cuda"): {"default": TF32_UNIT, "highest": 2.0**-24},
}
#: How those products are made, in words, by framework and platform and level.
PRODUCT_WORDS = {
    ("jax", "tpu"): {"default": "one bfloat16 pass", "high": "three bfloat16 passes", "highest": "float32"},
    ("jax", "gpu"): {"default": "TF32", "high": "TF32", "highest": "float32"},
    ("torch", "cuda"): {"default": "TF32 (its matmul flag on)", "highest": "float32 (its matmul flag off)"},
}
#: A convolution's unit roundoff where a framework's convolutions run in TF32 by a flag of their own
#: (PyTorch's cuDNN flag, on by default): ``Arithmetic.conv``.
CONV_UNITS = {("torch", "cuda"): TF32_UNIT}
#: Where the error of a side's float32 elementwise functions is not measured yet, by framework and
#: platform: said, and nothing added for them (the probe that measures it named).
UNMEASURED = {
    ("jax", "gpu"): "unmeasured on a GPU yet (../shared/device/gpu_probe.py measures them)",
    ("torch", "cuda"): "unmeasured on a GPU yet (../shared/device/gpu_probe.py measures them)",
}
#: The largest error of float32 elementwise functions, in float32 ulps, by framework and platform (JAX
#: on a TPU v5e: its ``log`` measured 4,017).
ELEMENTWISE_ULPS = {("jax", "tpu"): 4096.0}
#: A device's permit, in its own units of an entry's scale: as ``LOW_PERMIT_ULPS`` for a 16-bit dtype.
DEVICE_PERMIT_ULPS = 16.0
#: Where a side's float64 is emulated, by framework and platform, and what that is: that side's
#: float64 re-runs there (the references its float32 results are measured against) are made on the
#: host CPU, in IEEE float64.
EMULATED_FLOAT64 = {
    ("jax", "tpu"): "a TPU's float64 is emulated in float32 pairs (float32's exponent range, about 48 "
    "bits), and compiles slowly (GPT-2 small's float64 capture: over 220 s on a TPU v5e, against 8 s in "
    "float32)"
}
#: JAX's names of a matmul precision, by the three levels (``jax.default_matmul_precision``).
PRECISIONS = {
    "default": ("default", "fastest", "bfloat16", "none"),
    "high": ("high", "bfloat16_3x", "tensorfloat32"),
    "highest": ("highest", "float32"),
}


def level(precision: object) -> str:
    """JAX's matmul precision setting (``jax.config.jax_default_matmul_precision``: None or a name) as
    one of ``default``, ``high``, ``highest``; an unknown name is ``default`` (the least precise)."""
    name = str(precision).lower() if precision is not None else "default"
    return next((k for k, names in PRECISIONS.items() if name in names), "default")


@dataclasses.dataclass(frozen=True)
class Arithmetic:
    """Where a side computed: its ``platform`` (``cpu``, ``tpu``, ``gpu``), the matmul ``precision``
    level in effect (``level``), the device's ``kind`` (``TPU v5 lite``) and the ``framework`` whose
    side it is (``jax``), as that framework's folder reads it back (``environment.arithmetic()``).
    The device model's tables are keyed by framework and platform: a pair they do not list adds
    nothing."""

    platform: str = "cpu"
    precision: str = "default"
    kind: str = ""
    framework: str = ""
    #: Whether its convolutions ran in TF32 by a flag of their own (``"on"``: PyTorch's cuDNN flag).
    conv: str = "off"

    @property
    def _where(self) -> tuple[str, str]:
        return (self.framework, self.platform)

    @property
    def unit(self) -> float | None:
        """The effective unit roundoff of its float32 results beyond float32's own (None: none)."""
        products = PRODUCT_UNITS.get(self._where, {}).get(self.precision)
        if self.conv == "on" and self._where in CONV_UNITS:
            products = max(products or 0.0, CONV_UNITS[self._where])
        elementwise = ELEMENTWISE_ULPS.get(self._where)
        if products is None and elementwise is None:
            return None
        return max(products or 0.0, (elementwise or 0.0) * unit_roundoff("float32"))

    @property
    def products(self) -> float | None:
        """The unit its products round their float32 inputs to at its precision, where that is coarser
        than float32's own (a TPU at JAX's default precision: 2^-8); None elsewhere: the unit a device model
        of its products simulates (``crosscheck._compare.modelled``)."""
        unit = PRODUCT_UNITS.get(self._where, {}).get(self.precision)
        return unit if unit is not None and unit > unit_roundoff("float32") else None

    @property
    def float64_on_host(self) -> str:
        """Why its float64 re-runs are made on the host CPU (its float64 is emulated), or ``""``."""
        return EMULATED_FLOAT64.get(self._where, "")

    def permit(self, float32_permit: float) -> float:
        """What its rounding permits a re-run's difference, per unit of scale (``float32_permit``:
        float32's own, ``terms.bound``'s)."""
        unit = self.unit
        return float32_permit if unit is None else max(float32_permit, DEVICE_PERMIT_ULPS * unit)

    def words(self) -> str:
        """Where it ran, in a phrase: ``a TPU (TPU v5 lite) at JAX's default matmul precision``."""
        kind = f" ({self.kind})" if self.kind else ""
        return f"a {self.platform.upper()}{kind} at {self._title}'s {self.precision} matmul precision"

    def hides(self) -> str:
        """What its arithmetic hides, in a sentence: the size of a difference the check cannot see."""
        unit = self.unit
        if unit is None:
            return ""
        passes = PRODUCT_WORDS.get(self._where, {}).get(self.precision, self.precision)
        if self.conv == "on" and self._where in CONV_UNITS:
            passes += ", convolutions in TF32 (cuDNN's flag on)"
        elementwise = UNMEASURED.get(self._where) or f"up to {ELEMENTWISE_ULPS.get(self._where, 0):.0f} ulps"
        return (
            f"the {self._title} side ran on {self.words()} (float32 products in {passes}, its "
            f"elementwise functions {elementwise}): it was "
            f"judged within that arithmetic, so a difference smaller than about "
            f"{DEVICE_PERMIT_ULPS * unit:.1e} of a value's scale is not seen; {self._also()}"
        )

    @property
    def _declared(self) -> Framework | None:
        return framework_named(self.framework)

    @property
    def _title(self) -> str:
        declared = self._declared
        return declared.title if declared is not None else self.framework

    def _also(self) -> str:
        """Where else to check, to see what this arithmetic hides: the framework's own settings for its
        highest arithmetic and for the host CPU, as the command line spells them."""
        declared = self._declared
        settings = declared.placement if declared is not None else ()
        highest = _spelled(self.framework, [(s, s.highest) for s in settings])
        host = _spelled(self.framework, [(s, s.host) for s in settings])
        if (self.precision == "highest" and self.conv != "on") or not highest:
            return f"check with the {self._title} side on the CPU too ({host})"
        return f"check at {highest}, or with {host}, too"


def _spelled(framework: str, asked: list[tuple[Setting, str | None]]) -> str:
    """Settings as the command line gives them: ``--jax-platform cpu`` in backquotes."""
    return ", ".join(f"`--{s.option(framework).replace('_', '-')} {v}`" for s, v in asked if v is not None)


def arithmetic(backend: object, call: object = None) -> Arithmetic | None:
    """Where ``backend`` computes, when it says (its optional ``arithmetic()``: a backend that runs on an
    accelerator); None for one that does not say, or says nothing usable. ``call``: the engine's guarded
    call, whose ``placed()`` puts the run's placement of each side in effect (``--jax-precision``,
    ``--jax-platform``), so that the answer is where the backend's calls ran, not the process's default."""
    says = getattr(backend, "arithmetic", None)
    if not callable(says):
        return None
    placed = getattr(call, "placed", None)
    try:
        with placed() if callable(placed) else contextlib.nullcontext():
            found = says()
    except Exception:  # a capability that fails says nothing: judged as before
        return None
    return found if isinstance(found, Arithmetic) else None


def scale(device: Arithmetic | None, dtype: str) -> float:
    """How many times float32's unit roundoff ``device`` rounds a ``dtype`` (float32) result at: what a
    rounding model made for float32 is scaled by (1: no device, or no float32 case)."""
    if device is None or device.unit is None or dtype != "float32":
        return 1.0
    return max(1.0, device.unit / unit_roundoff("float32"))
