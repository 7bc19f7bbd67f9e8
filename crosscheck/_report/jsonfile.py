"""The report as a JSON file: JSON's own values only (no NaN nor infinity), written as it is encoded."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from crosscheck._types import Parsed


def dump_json(data: Any, path: str | Path) -> None:
    """``data`` as indented JSON in ``path``, written as it is encoded (``json.dump``: a real model's
    report is never one string in memory as well), with a final newline."""
    with Path(path).open("w") as out:
        json.dump(data, out, indent=2)
        out.write("\n")


def finite(value: Parsed) -> Parsed:
    """JSON has no NaN or infinity: write them as strings rather than emit invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
