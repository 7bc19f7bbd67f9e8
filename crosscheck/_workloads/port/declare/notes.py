"""What a run's report says of a prepared port: its case notes (the mapping table, the loss, the
precision each side computes in) and the parameters an override left unchecked."""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._workloads.port.declare.build import SEED, TORCH_FLOAT64, Prepared


def case_notes(prepared: Prepared, dtype: str | None = None) -> dict[str, Any]:
    """What the report records of the port: the mapping table, the loss, how PyTorch's float64 passes
    run (``torch_float64``), and (``jax_dtype``) a linen
    module's float ``dtype`` field (Hugging Face's Flax default, float32) that the check replaced by the
    case's ``dtype``: the port as written computes in the other precision (``jax_side._in_dtype``)."""
    port = prepared.port
    loss = (
        "custom"
        if port.loss is not None
        else f"projection of every output array: sum_i sum(R_i * output_i), R_i ~ N(0, 1) seed {SEED} + i"
    )
    notes = {
        "mapping": prepared.table.rows(),
        "loss": loss,
        "jax_kind": prepared.jax_side.kind,
        "torch_float64": TORCH_FLOAT64,
    }
    current = getattr(prepared.jax_side.model, "dtype", None) if prepared.jax_side.kind == "linen" else None
    try:
        written = np.dtype(current).name if current is not None else None
    except TypeError:  # not a dtype: nothing is cloned
        written = None
    if dtype is not None and written in ("float16", "bfloat16", "float32", "float64") and written != dtype:
        notes["jax_dtype"] = f"{written}, cloned to {dtype} for this check"
    return notes


def not_checked(oracle: dict[str, Any], prepared: Prepared, *, strict: bool) -> dict[str, Any]:
    """The judge's findings with the PyTorch parameters left unmapped by an override: ``not_checked``
    (name -> why), a line said with the findings, and under ``--strict`` a problem that fails the run."""
    unmapped = prepared.unmapped()
    if not unmapped:
        return oracle
    names = ", ".join(f"`{k}`" for k in unmapped)
    line = (
        f"not checked: {len(unmapped)} PyTorch parameter{'s' * (len(unmapped) > 1)} left unmapped by an "
        f"override (their values are constants of the check): {names}"
    )
    out = {**oracle, "not_checked": unmapped, "lines": [*oracle.get("lines", []), line]}
    if strict:
        out["problems"] = [*oracle.get("problems", []), f"{line} (--strict)"]
    return out
