"""The zoo: every Hugging Face architecture of ``examples/port/zoo`` and its planted bugs, each case in its
own subprocess through the command line with ``--json``, as a user runs it; one row per architecture,
case, reference, dtype and seed. The ports that are not Hugging Face transformers (image models, custom ops,
training mode, AdamW, diffusers' twins) are ``benchmarks/other_half.py``'s, with the same rows.

Run from the repository root (``nox -s zoo`` runs it with the port extra installed)::

    python benchmarks/zoo.py              # every case, --reference torch, float32 and float64
    python benchmarks/zoo.py --arch bert,llama --case healthy --reference torch,numpy-fd
    python benchmarks/zoo.py --case bugs --dtype float32 --markdown table.md --budget 1800
    python benchmarks/zoo.py --quantity output,grad --reference torch,numpy-fd --side-by-side s.md

``--quantity output`` runs the forward check (module outputs against PyTorch's forward, no gradient, no
oracle; its reference is always ``torch``); with ``grad`` beside it, ``--side-by-side`` writes one row per
case with the seconds of each check and, for a planted bug, whether the forward check names the module
the full check names. A planted bug the forward pass cannot show (``Bug.in_forward`` False: a bug only in
the backward pass) is said to be unseen by it, never counted as missed or as found.

A row: the architecture and its family, the case (``healthy`` or the planted bug), parameters, the
mapping (``automatic`` or how many tensors by override), the reference, the dtype and seed, the verdict
(``passed``, ``FAILED`` with its first problem, or why nothing was judged), the module the verdict names
(for a planted bug: whether it is the expected one), and the wall time of the subprocess.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.port.zoo import ARCHS, BUGS  # noqa: E402  (imports no framework)

REFERENCES = ("torch", "numpy-fd")


#: The forward check's one reference (``--quantity output`` takes PyTorch's forward only).
FORWARD = "output"


@dataclass
class Row:
    arch: str
    case: str
    reference: str
    dtype: str
    seed: int
    quantity: str = "grad"
    #: CPU seconds (user + system) of the case's process: what the load of a shared machine moves least.
    cpu: float = 0.0
    parameters: str = ""
    mapping: str = ""
    verdict: str = ""
    module: str = ""
    seconds: float = 0.0


def cases(archs: list[str], which: str) -> list[tuple[str, str]]:
    """(architecture, workload attribute) pairs: ``healthy``, ``bugs``, ``all`` or names, comma-separated."""
    chosen = []
    for arch in archs:
        healthy = [(arch, arch)]
        bugs = [(arch, name) for name, bug in BUGS.items() if bug.arch == arch]
        for part in which.split(","):
            if part in ("healthy", "all"):
                chosen += healthy
            if part in ("bugs", "all"):
                chosen += bugs
            if part in BUGS and BUGS[part].arch == arch:
                chosen.append((arch, part))
    return list(dict.fromkeys(chosen))


def run_case(
    attribute: str,
    reference: str,
    dtype: str,
    seed: int,
    timeout: float,
    keep: Path | None = None,
    quantity: str = "grad",
    module: str = "examples.port.zoo",
) -> tuple[dict | None, str, float, float]:
    """One ``crosscheck run`` of ``module:attribute`` in its own process: its JSON report (None when it
    wrote none), its output's last line, its wall time and its CPU time; the report is kept in ``keep``
    when given. ``--reference`` is passed with every quantity but the forward check's."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "crosscheck", "run", "--workload", f"{module}:{attribute}"]
        command += ["--quantity", quantity] if quantity != "grad" else []
        command += ["--reference", reference] if quantity != FORWARD else []
        command += ["--dtype", dtype, "--seed", str(seed)]
        command += ["--json", str(report), "--quiet"]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        start, used = time.perf_counter(), _children_cpu()
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            last = f"exit {done.returncode}: {tail[0]}"
        except subprocess.TimeoutExpired:
            last = f"not judged: stopped after {timeout:.0f} s"
        seconds, cpu = time.perf_counter() - start, _children_cpu() - used
        data = json.loads(report.read_text()) if report.exists() else None
        if keep is not None and data is not None:
            keep.mkdir(parents=True, exist_ok=True)
            stem = attribute if module == "examples.port.zoo" else f"{module.rsplit('.', 1)[-1]}-{attribute}"
            (keep / f"{stem}-{quantity}-{reference}-{dtype}-{seed}.json").write_text(report.read_text())
    return data, last, seconds, cpu


def _children_cpu() -> float:
    """CPU seconds, user and system, of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def describe(row: Row, data: dict | None, last: str) -> None:
    if data is None:
        row.verdict = last[:200]
        return
    mapping = data["case"].get("mapping") or []
    row.parameters = str(len(data["case"]["parameters"]))
    overridden = sum("override" in (entry.get("how") or "") for entry in mapping)
    row.mapping = f"{len(mapping)} tensors, " + (f"{overridden} by override" if overridden else "automatic")
    note = (data["backends"].get("jax") or {}).get("notes", {}).get("port") or {}
    row.module = note.get("module") or ""
    if data["passed"]:
        row.verdict = "passed"
    else:
        problems = data["problems"] or [last]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        row.verdict = f"FAILED: {problems[0][:300]}{more}"
    if row.case != "healthy":
        bug = BUGS[f"{row.arch}_{row.case}"]
        if row.quantity == FORWARD and not bug.in_forward:  # said, never counted as missed or found
            row.verdict += " (a bug only in the backward pass: a forward check cannot see it)"
            return
        if row.dtype not in bug.seen_in:  # not a bug in this dtype: passing is right, failing a false alarm
            row.verdict += f" (the bug is seen in {', '.join(bug.seen_in)} only)"
            return
        expected = bug.module
        named = row.module or "(top module)"
        row.module = (
            f"{named} (expected)"
            if row.module == expected
            else f"{named} (expected `{expected or '(top module)'}`)"
        )


def table(rows: list[Row], title: str):
    from rich.table import Table

    grid = Table(title=title, show_lines=False)
    for column in (
        "arch",
        "case",
        "check",
        "params",
        "mapping",
        "reference",
        "dtype",
        "seed",
        "verdict",
        "module",
        "s",
    ):
        grid.add_column(column, overflow="fold")
    for r in rows:
        cells = (
            r.arch,
            r.case,
            r.quantity,
            r.parameters,
            r.mapping,
            r.reference,
            r.dtype,
            str(r.seed),
            r.verdict,
        )
        grid.add_row(
            *cells, r.module or ("(top module)" if r.verdict.startswith("FAILED") else ""), f"{r.seconds:.0f}"
        )
    return grid


def markdown(rows: list[Row]) -> str:
    lines = [
        "| architecture | case | check | parameters | mapping | reference | dtype | seed | verdict | module "
        "named | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = r.verdict.replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {r.arch} | {r.case} | {r.quantity} | {r.parameters} | {r.mapping} | `{r.reference}` | "
            f"{r.dtype} | {r.seed} | {verdict} | {r.module} | {r.seconds:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _outcome(row: Row | None) -> str:
    if row is None:
        return "not run"
    if row.verdict.startswith("not run"):
        return "not run"
    said = "passed" if row.verdict.startswith("passed") else "FAILED"
    return f"{said} {row.seconds:.0f} s (CPU {row.cpu:.0f} s)"


def side_by_side(rows: list[Row]) -> str:
    """One row per case (architecture, case, dtype, seed): each check's verdict, wall and CPU seconds,
    the forward check's speed-up over the fastest full check (in CPU time, which the load of a shared
    machine moves least), and, for a planted bug, the module the forward check
    names beside the full checks' ("same in every check" when they all name one)."""
    variants = list(dict.fromkeys((r.quantity, r.reference) for r in rows))
    by = {(r.arch, r.case, r.dtype, r.seed, r.quantity, r.reference): r for r in rows}
    keys = list(dict.fromkeys((r.arch, r.case, r.dtype, r.seed) for r in rows))
    names = [f"forward (`{FORWARD}`)" if q == FORWARD else f"`{q}`, `{ref}`" for q, ref in variants]
    lines = [
        "| architecture | case | dtype | seed | "
        + " | ".join(names)
        + " | forward speed-up (CPU) | module named |",
        "|---|---|---|---|" + "---|" * len(names) + "---|---|",
    ]
    for key in keys:
        found = [by.get((*key, q, ref)) for q, ref in variants]
        cells = [_outcome(r) for r in found]
        forward = next((r for (q, _), r in zip(variants, found, strict=True) if q == FORWARD and r), None)
        full = [r for (q, _), r in zip(variants, found, strict=True) if q != FORWARD and r and r.seconds]
        speed = (
            f"{min(r.cpu for r in full) / forward.cpu:.1f}x"
            if forward and forward.cpu and full and all(r.cpu for r in full)
            else ""
        )
        modules = list(dict.fromkeys(r.module for r in found if r is not None and r.module))
        named = (
            modules[0]
            if len(modules) == 1 and "(expected)" in modules[0]
            else "; ".join(
                f"{q}/{ref}: {r.module}"
                for (q, ref), r in zip(variants, found, strict=True)
                if r is not None and r.module
            )
        )
        if key[1] != "healthy" and len(modules) == 1:
            named += " (same in every check)"
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(cells) + f" | {speed} | {named} |"
        )
    return "\n".join(lines) + "\n"


def heading() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"crosscheck zoo, {platform.node()}, {os.cpu_count()} CPUs, load {load:.1f} at the end, {when}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--arch", default=",".join(ARCHS), help="architectures, comma-separated (default: all)"
    )
    parser.add_argument(
        "--case", default="all", help="healthy, bugs, all (default) or bug names, comma-separated"
    )
    parser.add_argument(
        "--reference", default="torch", help="torch, numpy-fd (the default oracle), comma-separated"
    )
    parser.add_argument(
        "--quantity",
        default="grad",
        help="grad (the full check, default), output (the forward check: module outputs only, against "
        "PyTorch's forward, whatever --reference says), comma-separated",
    )
    parser.add_argument(
        "--rows",
        type=Path,
        action="append",
        default=None,
        help="run nothing: read the rows of earlier runs' --json files (repeatable) and write the tables",
    )
    parser.add_argument(
        "--side-by-side",
        type=Path,
        default=None,
        help="also write one row per case with each check's verdict and seconds as Markdown here",
    )
    parser.add_argument(
        "--dtype", default="float32,float64", help="comma-separated (default float32,float64)"
    )
    parser.add_argument("--seed", default="0", help="seeds, comma-separated (default 0)")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for the whole run; later cases are not run"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for one case (default 1800)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument(
        "--reports", type=Path, default=None, help="keep each case's JSON report in this folder"
    )
    args = parser.parse_args(argv)
    unknown = [a for a in args.arch.split(",") if a not in ARCHS]
    if unknown:
        parser.error(f"unknown architecture {unknown[0]!r}; expected one of {', '.join(ARCHS)}")
    quantities = args.quantity.split(",")
    if any(q not in ("grad", FORWARD) for q in quantities):
        parser.error(f"--quantity takes grad and {FORWARD}; found {args.quantity!r}")
    # each case's checks one after the other (the forward check first), so that the rows of a case that
    # a --budget cuts short are cut together
    variants = [
        (q, r) for q in sorted(quantities, key=lambda q: q != FORWARD) for r in args.reference.split(",")
    ]
    variants = list(dict.fromkeys((q, "torch" if q == FORWARD else r) for q, r in variants))
    rows, start = [], time.perf_counter()
    for earlier in args.rows or ():
        rows += [Row(**data) for data in json.loads(earlier.read_text())]
    runs = itertools.product(
        cases(args.arch.split(","), args.case),
        args.dtype.split(","),
        [int(s) for s in args.seed.split(",")],
        variants,
    )
    for (arch, attribute), dtype, seed, (quantity, reference) in () if args.rows else runs:
        case = "healthy" if attribute == arch else attribute[len(arch) + 1 :]
        row = Row(arch, case, reference, dtype, seed, quantity)
        if args.budget is not None and time.perf_counter() - start > args.budget:
            row.verdict = "not run: the time budget was spent"
        else:
            data, last, row.seconds, row.cpu = run_case(
                attribute, reference, dtype, seed, args.timeout, args.reports, quantity
            )
            describe(row, data, last)
        rows.append(row)
        print(
            f"{arch} {case} {quantity} {reference} {dtype} seed {seed}: {row.verdict[:160]} "
            f"({row.seconds:.1f} s, CPU {row.cpu:.1f} s)",
            flush=True,
        )
    write_outputs(rows, heading(), args)
    return 0


def write_outputs(rows: list, title: str, args: argparse.Namespace) -> None:
    """The rows' table on the terminal, and in the files ``--markdown``, ``--json`` and
    ``--side-by-side`` name (those given)."""
    from rich.console import Console

    Console(width=200).print(table(rows, title))
    if args.markdown:
        args.markdown.write_text(f"{title}\n\n{markdown(rows)}")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    if args.side_by_side:
        args.side_by_side.write_text(f"{title}\n\n{side_by_side(rows)}")


if __name__ == "__main__":
    sys.exit(main())
