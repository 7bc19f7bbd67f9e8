"""The zoo's other half: the ports that are not Hugging Face transformers (``examples/port/``: the mini
UNet in eval and training mode, the custom op with a hand-written backward (in Flax linen, and in
Equinox: ``custom_op_equinox``), AdamW against optax, diffusers' Flax twins, the scanned nnx Llama),
healthy and with their planted bugs, each case in its own subprocess through the command line with
``--json``, as a user runs it; one row per case, reference, dtype and seed.

Run from the repository root (rows, tables and ``--side-by-side`` as ``benchmarks/zoo.py``'s)::

    python benchmarks/other_half.py                 # every family, --reference torch,numpy-fd, float32
    python benchmarks/other_half.py --family unet,custom_op,adam --case healthy --reference numpy-fd
    python benchmarks/other_half.py --family diffusers_twins --case bugs --timeout 900 --markdown t.md
    python benchmarks/other_half.py --case train --side-by-side s.md     # the UNet's training-mode pairs
    python benchmarks/other_half.py --case unet:attention_scale,custom_op:eps_outside_sqrt --dtype float64

A case is healthy (its ``HEALTHY`` table, ``port`` or diffusers' two pairs, and a ``Planted`` record of
the UNet's ``TRAINING`` table that names no module) or a planted bug (``BUGS``, ``TRAINING``), whose
record names the module the verdict must name (the JSON's ``notes.port.module``); for an optimizer's
bug (``adam``, run as ``--quantity update``), the optimizer part (``notes.update.part``), and for its
running statistics' bug their module (``notes.update.module``). An update has no finite-difference
oracle (``--reference numpy-fd`` means PyTorch there, and its record says so): each ``adam`` case runs
once, with the default reference (or the first one asked for), in float32 only (a ``Train`` refuses
float64). A bug whose record's dtype is float64 (``custom_op:eps_outside_sqrt``) is below float32's
rounding: in float32 its pass is right, and said.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import zoo  # noqa: E402  (imports no framework)

FAMILIES = ("unet", "custom_op", "custom_op_equinox", "adam", "diffusers_twins", "llama_nnx_scanned")
#: The healthy pairs of a family whose module has no ``HEALTHY`` table (``port`` otherwise).
HEALTHY = {"diffusers_twins": ("unet", "vae")}
#: The families checked as a ``crosscheck.Train`` (``--quantity update``).
TRAINS = ("adam",)
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class Case:
    """One example: its family (the module of ``examples/port``), its attribute, and for a planted bug
    the module (or optimizer part) a verdict must name and the lowest dtype it shows in."""

    family: str
    name: str
    expected: str | None = None
    quantity: str = "grad"
    seen_in: str = "float32"
    #: Why no check can see this bug (its pass is then the right verdict), or "".
    unseen: str = ""

    @property
    def healthy(self) -> bool:
        return self.expected is None

    @property
    def training(self) -> bool:
        """A training-mode pair of the UNet (its ``TRAINING`` table)."""
        return self.family == "unet" and self.name.startswith("train")


@dataclass
class Row(zoo.Row):
    #: The one-minute load average when the case started and when it ended.
    load: str = ""


def family_cases(family: str) -> list[Case]:
    """Every case of one family, the healthy ones first, in its tables' order."""
    module = importlib.import_module(f"examples.port.{family}")
    quantity = "update" if family in TRAINS else "grad"
    healthy = HEALTHY.get(family) or tuple(getattr(module, "HEALTHY", None) or ("port",))
    found = [Case(family, name, quantity=quantity) for name in healthy]
    for table in (getattr(module, "BUGS", {}), getattr(module, "TRAINING", {})):
        for name, planted in table.items():
            expected = planted.module if hasattr(planted, "module") else planted[1]
            seen_in = getattr(planted, "dtype", "float32")
            found.append(Case(family, name, expected or None, quantity, seen_in, _unseen(planted)))
    return sorted(found, key=lambda case: not case.healthy)


def _unseen(planted) -> str:
    """A running-statistics bug of a port declared in eval mode (the UNet's ``train_workaround_*``: its
    ``torch_call`` turns PyTorch's statistics off for the call) is invisible to any check: an eval-mode
    check compares no running statistics, and says so."""
    change = getattr(planted, "change", {})
    # ``train``: a UNet pair in training mode; ``training``: a train of one (``adam``)
    in_training = change.get("train") or change.get("training")
    if getattr(planted, "shows_in", "") == "running statistics" and not in_training:
        return "a running-statistics bug of a port declared in eval mode: no statistics are compared"
    return ""


def cases(families: list[str], which: str) -> list[Case]:
    """The cases chosen: ``healthy``, ``bugs``, ``train`` (the UNet's training-mode pairs), ``all``, or
    ``family:name`` (a bare name: in every family that has it), comma-separated."""
    chosen = []
    for family in families:
        for case in family_cases(family):
            for part in which.split(","):
                if (
                    part == "all"
                    or (part == "healthy" and case.healthy)
                    or (part == "bugs" and not case.healthy)
                    or (part == "train" and case.training)
                    or part in (case.name, f"{case.family}:{case.name}")
                ):
                    chosen.append(case)
    return list(dict.fromkeys(chosen))


def runs(chosen: list[Case], references: list[str], dtypes: list[str], seeds: list[int]):
    """(case, reference, dtype, seed) of each run: a ``Train`` once, in float32 (above)."""
    for case, dtype, seed in itertools.product(chosen, dtypes, seeds):
        if case.quantity == "update":
            if dtype == "float32":
                yield case, ("numpy-fd" if "numpy-fd" in references else references[0]), dtype, seed
            continue
        for reference in references:
            yield case, reference, dtype, seed


def describe(row: Row, case: Case, data: dict | None, last: str) -> None:
    """The row's verdict and the module (or optimizer part) it names, against the expected one."""
    if data is None:
        row.verdict = last[:200]
        return
    row.parameters = str(len(data["case"].get("parameters") or ()))
    row.module = module_named(case, data)
    if data["passed"]:
        row.verdict = "passed"
    else:
        problems = data["problems"] or [last]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        row.verdict = f"FAILED: {problems[0][:300]}{more}"
    if case.healthy:
        return
    if case.unseen:
        row.verdict += f" ({case.unseen})"
        return
    if DTYPES.index(row.dtype) < DTYPES.index(case.seen_in):  # below this dtype's rounding: passing is right
        row.verdict += f" (the bug is seen in {case.seen_in} only)"
        return
    named = row.module or "(top module)"
    row.module = (
        f"{named} (expected)" if row.module == case.expected else f"{named} (expected `{case.expected}`)"
    )


def module_named(case: Case, data: dict) -> str:
    """The module the report names: the port verdict's (``notes.port.module``, the module of the first
    running statistic that differs where only those do); for a ``Train``, the optimizer part, or the
    module of the running statistic that differs first (``notes.update``)."""
    notes = (data["backends"].get("jax") or {}).get("notes", {})
    if case.quantity == "update":
        update = notes.get("update") or {}
        return update.get("part") or update.get("module") or ""
    return (notes.get("port") or {}).get("module") or ""


def right(row: Row, case: Case) -> bool:
    """Whether the row's verdict is the one its case must get: a healthy pair passes; a bug fails naming
    its module, or passes where it cannot be seen (a dtype whose rounding hides it, ``Case.unseen``)."""
    if case.healthy or case.unseen or DTYPES.index(row.dtype) < DTYPES.index(case.seen_in):
        return row.verdict.startswith("passed")
    return row.verdict.startswith("FAILED") and row.module.endswith("(expected)")


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "?"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--family", default=",".join(FAMILIES), help="families, comma-separated (default: all)"
    )
    parser.add_argument(
        "--case", default="all", help="healthy, bugs, train, all (default) or [family:]name, comma-separated"
    )
    parser.add_argument(
        "--reference", default="torch,numpy-fd", help="torch, numpy-fd (the default oracle), comma-separated"
    )
    parser.add_argument("--dtype", default="float32", help="comma-separated (default float32)")
    parser.add_argument("--seed", default="0", help="seeds, comma-separated (default 0)")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for the whole run; later cases are not run"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for one case (default 1800)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")
    parser.add_argument("--side-by-side", type=Path, default=None, help="also write one row per case here")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument(
        "--reports", type=Path, default=None, help="keep each case's JSON report in this folder"
    )
    args = parser.parse_args(argv)
    families = args.family.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown family {unknown[0]!r}; expected one of {', '.join(FAMILIES)}")
    if any(d not in DTYPES for d in args.dtype.split(",")):
        parser.error(f"--dtype takes {' and '.join(DTYPES)}; found {args.dtype!r}")
    chosen = cases(families, args.case)
    if not chosen:
        parser.error(f"no case of {args.family} is {args.case!r}")
    rows, good, start = [], 0, time.perf_counter()
    plan = runs(
        chosen, args.reference.split(","), args.dtype.split(","), [int(s) for s in args.seed.split(",")]
    )
    for case, reference, dtype, seed in plan:
        row = Row(case.family, case.name, reference, dtype, seed, case.quantity, load=_load())
        if args.budget is not None and time.perf_counter() - start > args.budget:
            row.verdict = "not run: the time budget was spent"
        else:
            module = f"examples.port.{case.family}"
            data, last, row.seconds, row.cpu = zoo.run_case(
                case.name, reference, dtype, seed, args.timeout, args.reports, case.quantity, module
            )
            describe(row, case, data, last)
        row.load += f" to {_load()}"
        good += right(row, case)
        rows.append(row)
        print(
            f"{case.family} {case.name} {case.quantity} {reference} {dtype} seed {seed}: {row.verdict[:160]} "
            f"[{row.module}] ({row.seconds:.1f} s, CPU {row.cpu:.1f} s, load {row.load})",
            flush=True,
        )
    zoo.write_outputs(rows, f"{zoo.heading()}: {good} of {len(rows)} runs gave their case's verdict", args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
