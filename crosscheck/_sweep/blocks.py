"""The blockwise check (``crosscheck.Blocks``): record every block's inputs once, then check each block
as a ``crosscheck.Port`` from its recording, one block at a time here or each block a task on a Dask
cluster (the sweep's executor: a worker builds and holds its block only), and name the first block
that differs.

A block whose check did not happen (not recorded, its port refused, its check raised, its worker
died) is a record that fails the whole check: it never passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from crosscheck._backends import ORACLE
from crosscheck._errors import describe, reraise_user_interrupt
from crosscheck._records import placement_keywords
from crosscheck._sweep.block_rules import check_options
from crosscheck._sweep.task import CaseRecord, Task, _record, within
from crosscheck._types import TorchModule

if TYPE_CHECKING:
    from crosscheck._workloads.port.blocks.declare import Blocks

#: What the blockwise check does not see, compared with checking the model whole (said in every summary).
BLIND = (
    "checked block by block, each on the PyTorch model's recorded inputs and cotangent: the wiring "
    "between blocks, the modules outside them, inputs the JAX model computes at model level (masks, "
    "positions) and gradients across blocks are not seen"
)


@dataclasses.dataclass(frozen=True)
class BlocksResult:
    """Every block's record (in the order the model's forward pass calls the blocks) and how they ran.

    ``passed`` only when every block was checked and passed; ``first`` is the first block that did not.
    A record (``records``, the JSON's ``blocks``) is a sweep case's record (``status``: passed, failed,
    error, crashed, timeout) plus ``block``, ``verdict`` (the block's port verdict), ``module`` (where
    a failing block first differs, in the model's names) and ``calls``.

    Example:
        >>> result = crosscheck.check_blocks("examples.port.gpt2_blocks:gelu_exact")  # doctest: +SKIP
        >>> result.first["module"]  # doctest: +SKIP
        'transformer.h.1.mlp.act'
    """

    name: str
    pattern: str
    records: list[CaseRecord]
    options: dict[str, Any]
    engine: dict[str, Any]

    @property
    def passed(self) -> bool:
        return bool(self.records) and all(r["passed"] for r in self.records)

    @property
    def first(self) -> CaseRecord | None:
        """The first block (in model order) that differs or was not checked; None when all passed."""
        return next((r for r in self.records if not r["passed"]), None)

    def verdict(self) -> str:
        """The check's verdict, in a line."""
        n = len(self.records)
        first = self.first
        if first is None:
            return f"PASSED: each of the {n} blocks of `{self.name}` ({self.pattern}) agrees with its port"
        bad = sum(not r["passed"] for r in self.records)
        where = f" at `{first['module']}`" if first.get("module") else ""
        what = "differs" if first["status"] == "failed" else "was not checked"
        return (
            f"FAILED: the first block that {what} is `{first['block']}`{where} ({bad} of {n} blocks did "
            f"not pass): {first['verdict'] or first['error']}"
        )

    def lines(self) -> list[str]:
        """The summary: one line per block, the verdict, and what a blockwise check cannot see."""
        width = max((len(r["block"]) for r in self.records), default=0)
        out = [
            f"blockwise check of `{self.name}`: {len(self.records)} blocks ({self.pattern}), reference "
            f"{self.options['reference']}, {self.options['dtype']}, {self._how()}"
        ]
        for r in self.records:
            said = r["verdict"] or r["error"]
            calls = f" (called {r['calls']} times: the first call checked)" if r.get("calls", 1) > 1 else ""
            out.append(f"  {r['block']:<{width}}  {r['status'].upper():<7}  {said}{calls}")
        return [*out, f"verdict: {self.verdict()}", f"note: {BLIND}."]

    def _how(self) -> str:
        if self.engine.get("kind") == "dask":
            return f"each block a task on the Dask cluster at {self.engine['scheduler']}"
        return "one block at a time in this process"

    def to_dict(self) -> dict[str, Any]:
        """The JSON: ``passed``, ``verdict``, ``first`` (its block), ``blocks`` (the records), ``blind``."""
        first = self.first
        return {
            "schema_version": 1,
            "name": self.name,
            "blocks_pattern": self.pattern,
            "passed": self.passed,
            "verdict": self.verdict(),
            "first": first["block"] if first else None,
            "blind": BLIND,
            "options": self.options,
            "engine": self.engine,
            "blocks": self.records,
        }


def check_blocks(
    blocks: Any,
    *,
    backends: list[str] | None = None,
    reference: str = ORACLE,
    dtype: str = "float32",
    seed: int = 0,
    strict: bool = False,
    scheduler: str | None = None,
    directory: str | None = None,
    timeout: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    jax_platform: str = "default",
    jax_precision: str = "default",
    jax_deterministic: str = "default",
    torch_device: str = "default",
    torch_matmul_tf32: str = "default",
    torch_cudnn_tf32: str = "default",
    torch_deterministic: str = "default",
) -> BlocksResult:
    """Check a ``crosscheck.Blocks`` block by block (see its docstring for what that can and cannot see).

    Args:
        blocks: a ``crosscheck.Blocks``, or an import string ``module:attribute`` naming one (needed
            with ``scheduler``: each worker loads it by name and builds only its block).
        backends: as for ``crosscheck.check``, for each block's port (names or import strings); with
            ``reference`` they must compare the port with the original (``check_sides``).
        reference: as for ``crosscheck.check``; with a backend as the reference no oracle runs, and a
            block that differs says which of the two is wrong is unknown.
        dtype: float32 or float64, each block's case.
        seed: each block's case's seed.
        strict: unjudgeable entries fail a block.
        scheduler: the address of a Dask distributed scheduler (``tcp://HOST:8786``): each block is a
            task there; default: one block after the other in this process.
        directory: where the blocks' recordings are written (with ``scheduler``: a folder every worker
            reads); default: a temporary folder, removed afterwards.
        timeout: seconds each block's check may take (default: no limit); a block past it fails by
            name (status ``timeout``, "not checked"), and the other blocks go on.
        progress: called as ``progress(done, total)`` as each block finishes (in the order they finish).
        jax_platform: where each block's JAX side runs (``crosscheck.Execution``).
        jax_precision: each block's JAX side's matmul precision (``crosscheck.Execution``).
        jax_deterministic: XLA's deterministic GPU ops for each block's JAX side (``crosscheck.Execution``).
        torch_device, torch_matmul_tf32, torch_cudnn_tf32, torch_deterministic: where each block's
            PyTorch side runs, its TF32 switches and its deterministic mode (``crosscheck.Execution``).

    Returns:
        A ``BlocksResult``: ``.passed``, ``.first``, ``.lines()``, ``.to_dict()``.

    Raises:
        ValueError, TypeError: bad arguments (a check that would not compare the port with the
            original, a ``directory`` that is no folder), the model or its inputs failed, ``blocks``
            matches no module (one line). A block's failure is its record, never raised.

    Example:
        >>> result = crosscheck.check_blocks(blocks, reference="torch")  # doctest: +SKIP
        >>> result.passed, result.first  # doctest: +SKIP
        >>> cluster = crosscheck.check_blocks(  # doctest: +SKIP
        ...     "mymodels:blocks", scheduler="tcp://10.0.0.1:8786", directory="/shared/blocks"
        ... )
    """
    from crosscheck._workloads.port.blocks.declare import Blocks

    spec = blocks if isinstance(blocks, str) else None
    declared = load_blocks(blocks) if spec is not None else blocks
    if not isinstance(declared, Blocks):
        raise TypeError(
            f"`blocks` must be a crosscheck.Blocks or an import string, found {type(blocks).__name__}."
        )
    check_options(spec, backends, reference, dtype, scheduler, directory, timeout)
    placement = placement_keywords(locals())  # the keywords above
    options = {
        "backends": backends,
        "reference": reference,
        "dtype": dtype,
        "seed": seed,
        "strict": strict,
        "timeout": timeout,
        **placement,
    }
    from crosscheck._workloads.port.blocks.record import record

    with _folder(directory) as folder:
        model = declared.model()
        entries = record(declared, model, folder, seed=seed, weights=scheduler is not None)
        records: list[CaseRecord] = []

        def done(got: CaseRecord) -> None:
            for key, value in (
                ("block", got["case"]["block"]),
                ("verdict", ""),
                ("module", None),
                ("calls", 1),
            ):
                got.setdefault(key, value)  # a record the cluster made (a worker died) has only the task's
            records.append(got)
            if progress is not None:
                progress(len(records), len(entries))

        if scheduler is None:
            engine: dict[str, Any] = {"kind": "in-process"}
            for entry in entries:
                done(check_block(declared, _task(spec, entry, options), model=model))
                gc.collect()  # the block's port and arrays go before the next one is built
        else:
            from crosscheck._sweep.engine import run_dask

            engine = {"kind": "dask", "scheduler": scheduler}
            del model  # the workers build their blocks: this process need not hold the model
            run_dask([_task(spec, e, options) for e in entries], done, scheduler=scheduler, fn=run_block_task)
    records.sort(key=lambda r: r["index"])
    return BlocksResult(declared.name, declared.blocks, records, options, engine)


@contextlib.contextmanager
def _folder(directory: str | None) -> Iterator[str]:
    if directory is not None:
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="crosscheck-blocks-") as folder:
        yield folder


def _task(spec: str | None, entry: dict[str, Any], options: dict[str, Any]) -> Task:
    """A block's check as plain data: what loads the Blocks, the block's recording, the options."""
    case = {"workload": spec, "block": entry["block"]}
    timeout = options.get("timeout")
    return {"index": entry["index"], "case": case, "entry": entry, "options": options, "timeout": timeout}


def load_blocks(spec: str) -> Blocks:
    """The ``crosscheck.Blocks`` an import string names (a function of no arguments returning one is
    called).

    Raises:
        ValueError: it cannot be imported, or names something else.
    """
    from crosscheck._backends.strings import import_attribute
    from crosscheck._errors import user_call
    from crosscheck._workloads.port.blocks.declare import Blocks

    value = import_attribute(spec, spec=spec, kind="workload")
    if callable(value) and not isinstance(value, Blocks):
        value = user_call(f"workload `{spec}`", "its factory", value)
    if not isinstance(value, Blocks):
        raise ValueError(
            f"`{spec}` must name a crosscheck.Blocks (or a function returning one), found "
            f"{type(value).__name__}."
        )
    return value


def run_block_task(task: Task) -> CaseRecord:
    """A Dask worker's task: load the Blocks by name, build its block alone and check it (never raises)."""
    try:
        declared = load_blocks(task["case"]["workload"])
    except BaseException as exc:
        reraise_user_interrupt(exc)
        return _block_record(task, "error", error=describe(exc))
    return check_block(declared, task)


def check_block(blocks: Blocks, task: Task, *, model: TorchModule = None) -> CaseRecord:
    """Check one block from its recording as a ``crosscheck.Port`` (the block taken from ``model``, or
    built alone: ``blocks_record.block_module``); its record (never raises but for the user's Ctrl-C)."""
    entry, start = task["entry"], time.perf_counter()
    if entry["problem"] is not None:
        return _block_record(task, "error", error=f"not checked: {entry['problem']}")
    found = within(task, lambda: _guarded(blocks, task, model), said="its time limit")
    if found["status"] == "timeout":
        found = _block_record(task, "timeout", error=f"not checked: it {found['error']}")
    found["seconds"] = time.perf_counter() - start
    return found


def _guarded(blocks: Blocks, task: Task, model: TorchModule) -> CaseRecord:
    try:
        return _check(blocks, task, model)
    except BaseException as exc:  # a record, not a crash: the other blocks go on, and this one fails
        reraise_user_interrupt(exc)
        return _block_record(task, "error", error=f"not checked: {describe(exc)}")


def _check(blocks: Blocks, task: Task, model: TorchModule) -> CaseRecord:
    from crosscheck._backends import as_options, placements
    from crosscheck._engine.run import check
    from crosscheck._records import Execution
    from crosscheck._workloads.port.blocks.record import block_module, load

    entry, options = task["entry"], task["options"]
    recorded = load(entry["path"])
    placement: dict[str, Any] = as_options(placements(options))  # jax_platform, ...: Execution's fields
    port = blocks.block_port(entry["index"], entry["block"], block_module(blocks, recorded, model), recorded)
    report = check(
        port,
        backends=options["backends"],
        reference=options["reference"],
        dtype=options["dtype"],
        seed=options["seed"],
        strict=options["strict"],
        execution=Execution(isolate=False, **placement),
    )
    found = report.to_dict()
    notes = [b.get("notes", {}).get("port") for b in found.get("backends", {}).values()]
    verdict = next((n for n in notes if isinstance(n, dict) and n.get("starts_in") != "nowhere"), None)
    verdict = verdict or next((n for n in notes if isinstance(n, dict)), None)
    inside = verdict.get("module") if verdict else None
    module = entry["block"] + (f".{inside}" if inside else "") if inside is not None else None
    text = "; ".join(report.problems) if not report.passed else "; ".join(report.verdicts().values())
    if not report.passed and options["reference"] != ORACLE:
        # No oracle ran: a disagreement says which two differ, not which is wrong (run's verdict words it).
        said = found.get("oracle", {}).get("verdict", [])
        text = "; ".join([text, *(v for v in said if isinstance(v, str))])
    return _block_record(
        task,
        "passed" if report.passed else "failed",
        verdict=text or ("agrees" if report.passed else "did not pass"),
        module=module if not report.passed else None,
        calls=recorded.calls,
        report=found,
    )


def _block_record(
    task: Task,
    status: str,
    *,
    error: str = "",
    verdict: str = "",
    module: Any = None,
    calls: int = 1,
    report: Any = None,
) -> CaseRecord:
    out = _record(task, status, error=error, report=report)
    out.update(block=task["entry"]["block"], verdict=verdict, module=module, calls=calls)
    return out
