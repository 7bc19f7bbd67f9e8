"""Real size: Hugging Face GPT-2 small (124M) and medium (355M) and a Llama-shaped model of about 1B
parameters, built from their configs (random weights, nothing downloaded), checked by ``crosscheck.Port``
as a user runs it, beside the cost of the models' own forward and backward passes (issue 38).

Run from the repository root (the port extra installed: torch, jax, flax, transformers)::

    python benchmarks/real_size.py                                   # every model, both references
    python benchmarks/real_size.py --models gpt2-small --references torch --layers 2
    python benchmarks/real_size.py --mode own --models gpt2-small    # the models' own fwd+bwd only
    python benchmarks/real_size.py --mode stages --models gpt2-small --layers 1 --references torch

Modes:

- ``check`` (default): each (model, reference) is one ``crosscheck run --workload
  benchmarks.real_size:<model> --reference <ref> --json ...`` in its own process (the reference
  ``output``: ``--quantity output`` instead, the forward check); its wall time and the
  peak resident memory of that process and its workers (``os.wait4``'s ``ru_maxrss``), with its verdict,
  its CPU seconds, the system's share of them and its page faults (``ru_stime``, ``ru_minflt``: on a
  virtual machine that gives freed memory back to its host, mostly the first touch of fresh pages,
  which moves more between runs than the rest).
  Before them (``--own``, default on) the model's own forward+backward: PyTorch and JAX (Flax), each
  in float32 and float64, each in its own process (first call, JIT compile included, and the best of
  two more), and their peak memory.
- ``own``: only the models' own forward+backward.
- ``evaluations``: the cost of one of the oracle's evaluations of each side's own float64 loss (every
  tensor in turn written in place, as the oracle does entry by entry), and JAX's with every array sent
  each call; then one evaluation along a direction that moves every tensor (the screen of the group of
  every tensor: what runs at scale), the point handed whole or formed on the adapter's side
  (``oracle.line``), beside the forward pass alone, each on one thread as the oracle evaluates.
- ``stages``: one check in this process (``crosscheck.check(port, execution=Execution(isolate=False))``)
  with its stages timed and its resident memory sampled every 10 ms (``/proc/self/status`` through
  psutil): building both sides, the reference, the candidates' gradients, the module captures, the
  comparisons, the report and its JSON. A stage's peak is the highest sample while it ran, its rise the
  most one call of it added to the memory it started from (RSS before: at its first call).

``--rounds N`` (check mode) runs the references N times in turn, each round every reference once (in
the order given, and the other way round in every second round: here the first run after a pause
was the slowest), then prints each reference's median wall time and the median of the rounds' ratios
to the first reference (the issue's "default reference at most 1.5 times ``--reference torch``"):
on a machine whose speed drifts between runs, a ratio within one round is steadier than one run each.

``--layers N`` keeps the model's width, heads and vocabulary and changes its depth (the per-parameter
cost of a check scales: measure at depth 1 or 2 before the whole model); ``--seq`` the tokens of the one
sequence (default 32). A model whose estimated peak (``--bytes-per-parameter`` times its parameters)
is above ``--max-gb`` is skipped with that reason, not run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# ``--mode stages`` and ``evaluations`` run the check in this process: this tree's crosscheck, not the
# copy installed in the environment (the other modes' processes get it through ``PYTHONPATH``).
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

#: The models, from their published configs (no dropout, no cache; the weights' std is the model's own).
MODELS: dict[str, dict[str, Any]] = {
    "gpt2-small": dict(
        arch="gpt2", config=dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    ),
    "gpt2-medium": dict(
        arch="gpt2", config=dict(n_layer=24, n_embd=1024, n_head=16, vocab_size=50257, n_positions=1024)
    ),
    # TinyLlama-1.1B's shape: 22 layers, width 2048, 32 heads (4 key/value heads), MLP 5632, 32000 tokens.
    "llama-1b": dict(
        arch="llama",
        config=dict(
            num_hidden_layers=22,
            hidden_size=2048,
            intermediate_size=5632,
            num_attention_heads=32,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=2048,
        ),
    ),
}
DEPTH = {"gpt2": "n_layer", "llama": "num_hidden_layers"}
#: The estimate of the models' own forward+backward per parameter (float64 JAX, the largest of the four,
#: measured at 25 bytes a parameter on whole GPT-2 small): ``--mode own`` skips by this, not a check's.
OWN_BYTES = 32.0
QUIET = {
    "gpt2": dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False),
    "llama": dict(attention_dropout=0.0, use_cache=False),
}
#: The environment variables a check's process reads (the workload is built there, by name).
LAYERS_ENV, SEQ_ENV = "REAL_SIZE_LAYERS", "REAL_SIZE_SEQ"


def config(model: str, layers: int | None) -> dict[str, Any]:
    spec = MODELS[model]
    out = {**spec["config"], **QUIET[spec["arch"]]}
    if layers:
        out[DEPTH[spec["arch"]]] = layers
    return out


def parameters(model: str, layers: int | None) -> int:
    """The parameter count from the config (no model built)."""
    c = config(model, layers)
    if MODELS[model]["arch"] == "gpt2":
        d, v, p, n = c["n_embd"], c["vocab_size"], c["n_positions"], c["n_layer"]
        per = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
        return v * d + p * d + n * per + 2 * d
    d, f, v, n = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    per = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    return v * d + n * per + d


def tokens(vocab: int, seq: int):
    """One sequence of ``seq`` token ids (from 2: ids 0 and 1 are padding ids of some models), all
    positions attended, explicit positions."""

    def make(rng, dtype):
        import numpy as np

        ids = rng.integers(2, vocab, size=(1, seq)).astype(np.int32)
        return {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(seq, dtype=np.int32)[None],
        }

    return make


def build(model: str, layers: int | None = None, seq: int = 32):
    """``(torch module, flax module, config, inputs(rng, dtype))`` of ``model``, random weights (seed 0)."""
    import torch
    import transformers

    arch = MODELS[model]["arch"]
    stem = {"gpt2": "GPT2", "llama": "Llama"}[arch]
    flax = __import__(f"transformers.models.{arch}.modeling_flax_{arch}", fromlist=["x"])
    c = config(model, layers)
    torch.manual_seed(0)
    original = getattr(transformers, f"{stem}Model")(
        getattr(transformers, f"{stem}Config")(**c, attn_implementation="eager")
    ).eval()
    port = getattr(flax, f"Flax{stem}Module")(getattr(transformers, f"{stem}Config")(**c))
    return original, port, c, tokens(c["vocab_size"], seq)


def make_port(model: str, layers: int | None = None, seq: int = 32):
    import crosscheck

    original, port, _, inputs = build(model, layers, seq)
    overrides = {"h.*.attn.c_proj.weight": "transpose"} if MODELS[model]["arch"] == "gpt2" else None
    return crosscheck.Port(
        name=model,
        torch=original,
        jax=port,
        inputs=inputs,
        jax_call=lambda module, arrays: module(**arrays, deterministic=True),
        overrides=overrides,
        description=f"{model} at its real width ({parameters(model, layers):,} parameters), random weights",
    )


def __getattr__(name: str):  # ``benchmarks.real_size:gpt2_small``: the port, built when asked for
    model = name.replace("_", "-")
    if model in MODELS:
        layers = int(os.environ.get(LAYERS_ENV, "0")) or None
        return make_port(model, layers, int(os.environ.get(SEQ_ENV, "32")))
    raise AttributeError(name)


# --- the models' own forward and backward ------------------------------------------------------------


def own_torch(model: str, layers: int | None, seq: int, dtype: str) -> dict[str, float]:
    import numpy as np
    import torch

    original, _, _, inputs = build(model, layers, seq)
    if dtype == "float64":
        original = original.double()
    arrays = {k: torch.from_numpy(v) for k, v in inputs(np.random.default_rng(0), dtype).items()}
    times = []
    for _ in range(3):
        start = time.perf_counter()
        out = original(**arrays).last_hidden_state
        torch.manual_seed(1)
        (out * torch.randn_like(out)).sum().backward()
        times.append(time.perf_counter() - start)
        original.zero_grad(set_to_none=True)
    return {"first": times[0], "best": min(times[1:])}


def own_jax(model: str, layers: int | None, seq: int, dtype: str) -> dict[str, float]:
    import jax
    import numpy as np

    wide = dtype == "float64"
    jax.config.update("jax_enable_x64", wide)
    import jax.numpy as jnp

    original, port, c, inputs = build(model, layers, seq)
    del original
    if wide:
        port = port.clone(dtype=jnp.float64)
    arrays = {k: jnp.asarray(v) for k, v in inputs(np.random.default_rng(0), dtype).items()}
    params = jax.jit(lambda key: port.init(key, **arrays, deterministic=True))(jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(lambda a: a.astype(dtype), params)
    cot = None

    def loss(p):
        out = port.apply(p, **arrays, deterministic=True)[0]
        return jnp.sum(out * cot)

    step = jax.jit(jax.value_and_grad(loss))
    shape = (1, seq, c.get("n_embd") or c["hidden_size"])
    cot = jnp.asarray(np.random.default_rng(1).standard_normal(shape), dtype)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(step(params))
        times.append(time.perf_counter() - start)
    return {"first": times[0], "best": min(times[1:])}


# --- one process per case: wall time and peak memory -------------------------------------------------


def watch(pid: int, limit: float | None, done: threading.Event) -> None:
    """Kill process ``pid`` and its children when together they hold more than ``limit`` bytes (the
    machine is shared: a case that would take it all is stopped, and its row says so)."""
    import psutil

    while limit is not None and not done.wait(0.05):
        try:
            parent = psutil.Process(pid)
            family = [parent, *parent.children(recursive=True)]
            if sum(p.memory_info().rss for p in family) > limit:
                for p in reversed(family):
                    p.kill()
                return
        except psutil.Error:
            continue


def measured(
    command: list[str], env: dict[str, str], timeout: float, limit: float | None = None
) -> dict[str, Any]:
    """Run ``command``; its wall time, peak RSS (bytes, the process and its waited-for workers), exit
    status and output's tail; it is killed past ``timeout`` seconds or ``limit`` bytes."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        done = threading.Event()
        threading.Thread(target=watch, args=(process.pid, limit, done), daemon=True).start()
        _, status, usage = os.wait4(process.pid, 0)
        done.set()
        timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        tail = out.read().decode(errors="replace").strip().splitlines()[-3:]
    cpu = usage.ru_utime + usage.ru_stime  # the process and its waited-for workers: robust to the load
    return {
        "seconds": seconds,
        "cpu": cpu,
        "system": usage.ru_stime,  # mostly the first touch of fresh pages on this machine
        "faults": usage.ru_minflt,
        "peak": usage.ru_maxrss * 1024,
        "rc": process.returncode,
        "tail": tail,
    }


def environment(layers: int | None, seq: int) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "support"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, SEQ_ENV: str(seq)}
    env[LAYERS_ENV] = str(layers or 0)
    return env


def run_own(model: str, layers: int | None, seq: int, timeout: float, limit: float) -> list[dict[str, Any]]:
    rows = []
    for framework in ("torch", "jax"):
        for dtype in ("float32", "float64"):
            code = (
                "import json, sys; sys.path.insert(0, '.'); from benchmarks import real_size as r; "
                f"print('OWN', json.dumps(r.own_{framework}({model!r}, {layers!r}, {seq}, {dtype!r})))"
            )
            got = measured([sys.executable, "-c", code], environment(layers, seq), timeout, limit)
            line = next((t for t in got["tail"] if t.startswith("OWN ")), None)
            times = json.loads(line[4:]) if line else {"first": float("nan"), "best": float("nan")}
            problem = "" if line else (got["tail"][-1] if got["tail"] else f"exit {got['rc']}")
            rows.append(
                {"framework": framework, "dtype": dtype, **times, "peak": got["peak"], "problem": problem}
            )
    return rows


def run_check(
    model: str, reference: str, layers: int | None, seq: int, timeout: float, limit: float
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "crosscheck", "run"]
        command += ["--workload", f"benchmarks.real_size:{model.replace('-', '_')}"]
        # ``output``: the forward check (``--quantity output``), every module's output against PyTorch's.
        command += ["--quantity", "output"] if reference == "output" else ["--reference", reference]
        command += ["--json", str(report), "--quiet"]
        got = measured(command, environment(layers, seq), timeout, limit)
        got["verdict"] = verdict(report) if report.exists() else f"no report: {' | '.join(got['tail'])}"
        got["json_bytes"] = report.stat().st_size if report.exists() else 0
    return got


def _label(reference: str) -> str:
    return "--quantity output" if reference == "output" else f"--reference {reference}"


def verdict(path: Path) -> str:
    data = json.loads(path.read_text())
    comparisons = data.get("comparisons", [])
    modules = sum(1 for c in comparisons if c.get("module") is not None)
    word = "PASSED" if data.get("passed") else "FAILED"
    return f"{word}, {len(comparisons) - modules} gradient comparisons, {modules} module outputs"


# --- stages, in this process -------------------------------------------------------------------------


class Sampler:
    """The process's resident memory every ``every`` seconds, on a thread; stages read its peak."""

    def __init__(self, every: float = 0.01, limit: float | None = None) -> None:
        import psutil

        self.process, self.every, self.limit = psutil.Process(), every, limit
        self.lock = threading.Lock()
        self.peak = self.now()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def now(self) -> int:
        return int(self.process.memory_info().rss)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            now = self.now()
            with self.lock:  # never a stage's peak written over with one read before it was set
                self.peak = peak = max(self.peak, now)
            if self.limit is not None and peak > self.limit:  # the machine is shared: stop here
                print(f"stopped: resident memory {gb(peak)} passed --max-gb", flush=True)
                os._exit(3)

    def reset(self) -> int:
        """The current RSS, and the peak from now on starts there."""
        return self.swap(self.now())

    def swap(self, peak: int) -> int:
        """The peak so far, and ``peak`` the peak from now on, in one step (the sampling thread
        neither loses a sample between them nor writes back a peak read before)."""
        with self.lock:
            old, self.peak = self.peak, peak
        return old

    def rise_to(self, floor: int) -> int:
        """The peak since the last ``swap`` (the current RSS counted), and the peak from now on at
        least ``floor`` (an enclosing stage's peak so far), in one step."""
        now = self.now()
        with self.lock:
            peak = max(self.peak, now)
            self.peak = max(floor, peak)
        return peak


class Stages:
    """Named stages: calls, seconds, RSS at entry and exit, peak while running (nested stages count
    in their parents too)."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler, self.rows, self.depth = sampler, {}, 0

    @contextmanager
    def stage(self, name: str):
        before = self.sampler.now()
        outer_peak = self.sampler.swap(before)
        start, cpu = time.perf_counter(), time.process_time()
        self.rows.setdefault(
            name, {"depth": self.depth, "calls": 0, "seconds": 0.0, "cpu": 0.0, "before": before, "peak": 0}
        )
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            seconds = time.perf_counter() - start
            peak = self.sampler.rise_to(outer_peak)  # the enclosing stage keeps this one's peak
            after = self.sampler.now()
            row = self.rows[name]
            row["calls"] += 1
            row["seconds"] += seconds
            row["cpu"] += time.process_time() - cpu
            row["peak"] = max(row["peak"], peak)
            row["rise"] = max(row.get("rise", 0), peak - before)
            row["after"] = after

    def wrap(self, owner: Any, attribute: str, name: str | None = None, label: Any = None) -> None:
        """Time every call of ``owner.attribute`` as stage ``name`` (``label(args, kwargs)`` names it)."""
        original = getattr(owner, attribute)
        stages = self

        def wrapped(*args, **kwargs):
            with stages.stage(label(args, kwargs) if label else (name or attribute)):
                return original(*args, **kwargs)

        setattr(owner, attribute, wrapped)


def run_stages(model: str, reference: str, layers: int | None, seq: int, limit: float) -> dict[str, Any]:
    import crosscheck
    from crosscheck._engine import driver
    from crosscheck._workloads.model import judge as model_judge
    from crosscheck._workloads.port.judge import compare as port_compare
    from crosscheck._workloads.port.judge import gradient as port_judge

    sampler = Sampler(limit=limit)
    stages = Stages(sampler)
    start_rss = sampler.now()
    g = model_judge.GenericJudge
    stages.wrap(g, "reference", "reference (its gradients; the oracle: its evaluations)")
    stages.wrap(g, "prepare", "anchor (the oracle's same-function check)")
    stages.wrap(g, "evaluate", "candidate gradients (each call, repeats included)")
    stages.wrap(g, "compare", "per-entry gradient comparison (with its rounding and terms)")
    stages.wrap(g, "rounding", "rounding (the gradients re-run in the other dtype)")
    p = port_judge.PortJudge
    stages.wrap(
        p,
        "_runs",
        label=lambda a, k: f"module captures, {'PyTorch' if k.get('torch') else 'JAX'} (two dtypes)",
    )
    stages.wrap(port_compare, "each_module", "module output comparisons")
    stages.wrap(driver, "_report", "report assembly")
    with stages.stage("build both sides and the mapping (Port + prepared)"):
        port = make_port(model, layers, seq)
        port.prepared  # noqa: B018  (the mapping table and the copies, as a check makes them)
    with stages.stage("check (everything)"):
        report = crosscheck.check(port, reference=reference, execution=crosscheck.Execution(isolate=False))
    with stages.stage("JSON (to_dict + dumps + write)"), tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "report.json"
        report.write_json(str(target))
        size = target.stat().st_size
    sampler.stop.set()
    return {
        "verdict": "PASSED" if report.passed else "FAILED",
        "start_rss": start_rss,
        "rows": stages.rows,
        "json_bytes": size,
        "parameters": parameters(model, layers),
    }


# --- the oracle's evaluations, in this process ----------------------------------------------------------


def run_evaluations(model: str, layers: int | None, seq: int) -> dict[str, dict[str, float]]:
    """Seconds (process CPU and wall) of one evaluation of each side's own float64 loss, as the oracle
    makes them: every parameter tensor in turn written in place, the loss evaluated, the tensor put
    back. For JAX also with every array sent on each call (``resident.clear()`` first: what each
    evaluation cost before the adapter kept what it had sent)."""
    import numpy as np

    from crosscheck._compare.dtypes import as_dtype
    from crosscheck._workloads.model.workload import GenericWorkload

    workload = GenericWorkload(make_port(model, layers, seq).prepared.workload)
    point = workload.point(dtype="float64", seed=0)
    params = {k: np.array(v, np.float64) for k, v in point.params.items()}
    inputs = as_dtype(point.inputs, "float64")
    out = {}
    for side, fresh in (("jax", False), ("jax, every array sent", True), ("torch", False)):
        backend = workload.resolve(side.split(",")[0])
        backend.loss(params, inputs)  # compiled, and the arrays sent once
        cpu, wall = time.process_time(), time.perf_counter()
        for name in params:
            if fresh:
                backend.resident.clear()
            params[name].flat[0] += 1e-6
            backend.loss(params, inputs)
            params[name].flat[0] -= 1e-6
        count = len(params)
        out[side] = {"cpu": (time.process_time() - cpu) / count, "wall": (time.perf_counter() - wall) / count}
    out.update(run_along(workload, params, inputs))
    return out


def run_along(workload: Any, params: dict, inputs: dict, count: int = 4) -> dict[str, dict[str, float]]:
    """Seconds of one evaluation along a direction (every tensor moved, as the oracle's screen of the
    group of every tensor): the point formed here and handed whole (``loss``, as before issue 38's
    ``oracle.line``) and formed on the adapter's side (``hold_point``/``hold_direction`` once, then
    ``loss_along``); and the forward pass itself (``loss`` with nothing moved: nothing sent). On one
    thread, as the oracle evaluates."""
    import numpy as np

    from crosscheck._workloads.model.oracle.one_thread import one_thread

    rng = np.random.default_rng(0)
    signs = {
        k: (rng.integers(0, 2, size=v.shape, dtype=np.int8) * 2 - 1).astype(np.int8)
        for k, v in params.items()
    }
    steps = {k: float(np.sqrt(np.mean(np.square(v)))) if v.size else 1.0 for k, v in params.items()}
    out = {}

    def timed(side: str, what: str, evaluate) -> None:
        evaluate(0)  # compiled, and what is held sent
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(1, count + 1):
            evaluate(i)
        out[f"{side}, {what}"] = {
            "cpu": (time.process_time() - cpu) / count,
            "wall": (time.perf_counter() - wall) / count,
        }

    with one_thread():
        for side in ("jax", "torch"):
            backend = workload.resolve(side)
            timed(side, "every tensor moved, handed whole", _whole(backend, params, inputs, signs, steps))
            backend.release_evaluations()
            backend.hold_point({k: v.copy() for k, v in params.items()}, inputs)
            backend.hold_direction("d", signs)
            timed(side, "every tensor moved, formed on its side", _moved(backend, steps))
            timed(side, "the forward pass (nothing moved)", _moved(backend, {}))
            backend.release_evaluations()
    return out


def _whole(backend: Any, params: dict, inputs: dict, signs: dict, steps: dict) -> Any:
    """An evaluation along ``signs`` as the oracle's evaluator makes it: formed here, handed whole."""
    import numpy as np

    work = {k: v.copy() for k, v in params.items()}

    def evaluate(i: int) -> None:
        for k, v in params.items():
            np.multiply(signs[k], (i * 1e-6) * steps[k], out=work[k], casting="unsafe")
            work[k] += v
        backend.loss(work, inputs)
        for k, v in params.items():
            np.copyto(work[k], v)

    return evaluate


def _moved(backend: Any, steps: dict) -> Any:
    """An evaluation along the held direction, formed on the adapter's side (nothing moved: no steps)."""
    return lambda i: backend.loss_along("d", {k: (i * 1e-6) * s for k, s in steps.items()})


# --- output -------------------------------------------------------------------------------------------


def rounds_summary(rounds: list[dict[str, float]], references: list[str]) -> dict[str, Any]:
    """Each reference's median wall seconds over ``rounds`` (``{reference: seconds}`` a round, every
    reference in each), and the median of each round's ratio of a reference to the first one."""
    import statistics

    if not rounds or any(set(r) != set(references) for r in rounds):
        raise ValueError(f"every round must time each of {references}, found {rounds}")
    ratios = {ref: [r[ref] / r[references[0]] for r in rounds] for ref in references[1:]}
    return {
        "median": {ref: statistics.median(r[ref] for r in rounds) for ref in references},
        "ratios": ratios,
        "median_ratio": {ref: statistics.median(each) for ref, each in ratios.items()},
    }


def gb(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s" if seconds >= 60 else f"{seconds:.1f} s"


def header(args: argparse.Namespace) -> list[str]:
    load = os.getloadavg()
    return [
        f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; load at start "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; seq {args.seq}"
        + (f"; depth {args.layers}" if args.layers else "")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument(
        "--references",
        default="torch,numpy-fd",
        help="comma-separated, of torch, numpy-fd and output (the forward check, --quantity output); "
        "default torch,numpy-fd",
    )
    parser.add_argument("--mode", choices=("check", "own", "stages", "evaluations"), default="check")
    parser.add_argument("--no-own", dest="own", action="store_false", help="check mode: skip the own fwd+bwd")
    parser.add_argument("--layers", type=int, default=None, help="depth instead of the model's own")
    parser.add_argument("--seq", type=int, default=32, help="tokens of the one sequence (default 32)")
    parser.add_argument(
        "--max-gb", type=float, default=12.0, help="skip a model estimated above this; stop a process past it"
    )
    parser.add_argument(
        "--bytes-per-parameter",
        type=float,
        default=64.0,
        help="the estimate of a check's peak per parameter (default 64: whole GPT-2 small measured 62 and "
        "medium 53 with --reference torch, docs/measurements/real-size.md; issue 38's target is 48)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="check mode: run the references this many times in turn"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per process")
    parser.add_argument("--json", metavar="PATH", help="write the rows here")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--models: expected some of {', '.join(MODELS)}, found {unknown[0]!r}")
    references = [r for r in args.references.split(",") if r]
    unknown = [r for r in references if r not in ("torch", "numpy-fd", "output")]
    if unknown:
        parser.error(f"--references: expected some of torch, numpy-fd, output, found {unknown[0]!r}")
    if args.mode == "stages" and "output" in references:
        parser.error("--references: the stages mode times a gradient check, found 'output'")
    if args.rounds < 1:
        parser.error(f"--rounds: expected a whole number of at least 1, found {args.rounds}")
    for line in header(args):
        print(line)
    rows: list[dict[str, Any]] = []
    for model in models:
        count = parameters(model, args.layers)
        print(f"\n{model}: {count:,} parameters" + (f" (depth {args.layers})" if args.layers else ""))
        # The models' own passes need far less than a check (OWN_BYTES): they run even when a check
        # of the same model is skipped.
        per = OWN_BYTES if args.mode in ("own", "evaluations") else args.bytes_per_parameter
        estimate = count * per
        row: dict[str, Any] = {"model": model, "parameters": count, "layers": args.layers, "seq": args.seq}
        if estimate > args.max_gb * 2**30:
            row["skipped"] = (
                f"skipped: estimated {gb(estimate)} ({per:g} bytes a parameter) is above "
                f"--max-gb {args.max_gb:g}"
            )
            print(f"  {row['skipped']}")
            if args.mode != "check" or not args.own or count * OWN_BYTES > args.max_gb * 2**30:
                rows.append(row)
                continue
        if args.mode in ("own", "check") and (args.own or args.mode == "own"):
            own = run_own(model, args.layers, args.seq, args.timeout, args.max_gb * 2**30)
            row["own"] = own
            for r in own:
                print(
                    f"  own fwd+bwd {r['framework']:5} {r['dtype']}: first {r['first']:.2f} s, best "
                    f"{r['best']:.2f} s, peak {gb(r['peak'])} {r['problem']}"
                )
            first, best = sum(r["first"] for r in own), sum(r["best"] for r in own)
            print(f"  own fwd+bwd, the four together: first calls {first:.1f} s, best calls {best:.1f} s")
        if args.mode == "check" and estimate <= args.max_gb * 2**30:
            row["checks"], row["rounds"] = {}, []
            for n in range(args.rounds):
                timed: dict[str, float] = {}
                for reference in references if n % 2 == 0 else references[::-1]:
                    got = run_check(
                        model, reference, args.layers, args.seq, args.timeout, args.max_gb * 2**30
                    )
                    row["checks"][reference] = got  # the last round's
                    timed[reference] = got["seconds"]
                    print(
                        f"  check {_label(reference)}"
                        + (f" (round {n + 1})" if args.rounds > 1 else "")
                        + f": {minutes(got['seconds'])} ({got['cpu']:.0f} s CPU, "
                        f"{got['system']:.0f} s of it system; {got['faults'] / 1e6:.2f} M page faults), "
                        f"peak {gb(got['peak'])} "
                        f"({got['peak'] / count:.0f} bytes a parameter), {got['verdict']}, JSON "
                        f"{got['json_bytes'] / 2**20:.1f} MiB"
                    )
                row["rounds"].append(timed)
            if args.rounds > 1:
                summary = row["summary"] = rounds_summary(row["rounds"], references)
                medians = ", ".join(f"{ref} {minutes(t)}" for ref, t in summary["median"].items())
                print(f"  median wall over {args.rounds} rounds: {medians}")
                for ref, ratios in summary["ratios"].items():
                    each = ", ".join(f"{r:.2f}" for r in ratios)
                    print(
                        f"  {_label(ref)} / {_label(references[0])}, each round: {each}; "
                        f"median {summary['median_ratio'][ref]:.2f}"
                    )
        if args.mode == "evaluations":
            row["evaluations"] = run_evaluations(model, args.layers, args.seq)
            for side, got in row["evaluations"].items():
                print(f"  one evaluation, {side}: {got['cpu']:.3f} s CPU, {got['wall']:.3f} s wall")
        if args.mode == "stages":
            row["stages"] = {}
            for reference in references:
                got = run_stages(model, reference, args.layers, args.seq, args.max_gb * 2**30)
                row["stages"][reference] = got
                print(f"  --reference {reference}: {got['verdict']}, RSS at start {gb(got['start_rss'])}")
                print(
                    f"  {'stage':72} {'calls':>5} {'seconds':>8} {'CPU s':>7} {'RSS before':>11} "
                    f"{'peak':>10} {'rise':>10} {'after':>10}"
                )
                for name, s in got["rows"].items():
                    print(
                        f"  {'  ' * s['depth'] + name:72} {s['calls']:5} {s['seconds']:8.1f} {s['cpu']:7.1f} "
                        f"{gb(s['before']):>11} {gb(s['peak']):>10} {gb(s['rise']):>10} {gb(s['after']):>10}"
                    )
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
