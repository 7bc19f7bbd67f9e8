"""What a model of a device's reduced-precision products leaves a healthy port (``crosscheck._compare.
modelled``), on the TPU the tests simulate (``tests/support/simulated_device.py``: every float32 product
JAX makes at its default precision takes its inputs rounded to bfloat16, on the "chip", and the JAX side
says it runs on a TPU v5 lite).

For each port and seed, the whole check (``--reference torch``) on the simulated TPU at JAX's default
precision, classified as a real TPU's would be. From the JSON report: the as-asked run's device model
(``notes.device_model``: per parameter, the run's median difference from float32 and the model's, in
units of 2^-8 of an entry's scale), the share of what the model permits that the worst parameter uses
(``modelled.used``: beyond 1, the check fails as ``beyond``), the classification's kind and the verdict.
A healthy port must stay below 1 on every seed. Run from the repository root::

    python benchmarks/device_model.py --ports examples.port.zoo:bert,examples.port.convnet:port --seeds 0,1

Prints one line per port and seed; ``--json`` keeps the rows.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

PORTS = (
    "examples.port.zoo:bert",
    "examples.port.zoo:gpt2",
    "examples.port.zoo:llama",
    "examples.port.zoo:t5",
    "examples.port.zoo:vit",
    "examples.port.zoo:resnet",
    "examples.port.convnet:port",
    "examples.port.transformer_linen:port",
)


def load(spec: str):
    """The port an import string ``module:attribute`` names."""
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)


def measure(spec: str, seed: int) -> dict:
    """One check of the port ``spec`` on the simulated TPU: its device model's worst parameter, its
    classification and verdict."""
    import pytest
    from simulated_device import bfloat16_products, pretend_tpu

    import crosscheck
    from crosscheck._compare import modelled

    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as patch, bfloat16_products():
        pretend_tpu(patch)
        report = crosscheck.run(workload=load(spec), reference="torch", backends=["jax"], seed=seed)
    first = (report.classification.get("runs") or [{}])[0]  # the report may be a re-run's: its own model
    side = report.backends.get("jax")
    notes = side.notes if side is not None else {}
    model = first.get("device_model") or notes.get("device_model") or {}
    rows = modelled.worst(model.get("parameters", {}))
    name, asked, made = rows[0] if rows else ("", 0.0, 0.0)
    return {
        "port": spec,
        "seed": seed,
        "used": modelled.used(asked, made) if rows else None,
        "worst": name,
        "asked": asked,
        "modelled": made,
        "parameters": len(rows),
        "kind": report.classification.get("kind", ""),
        "passed": report.passed,
        "model_error": notes.get("device_model_error", ""),
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", default=",".join(PORTS))
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for spec in args.ports.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            row = measure(spec, seed)
            rows.append(row)
            used = "n/a" if row["used"] is None else f"{row['used']:.3f}"
            print(
                f"{spec} seed {seed}: used {used} at `{row['worst']}` (a median {row['asked']:.3g} units "
                f"against {row['modelled']:.3g} modelled, {row['parameters']} parameters); "
                f"{row['kind'] or 'not classified'}, {'PASSED' if row['passed'] else 'FAILED'} "
                f"{row['model_error']}({row['seconds']:.0f} s)",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
