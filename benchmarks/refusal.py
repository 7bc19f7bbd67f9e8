"""How long a refused port takes on the command line, and where the seconds go.

The port is ``examples/port/block_equinox.py``'s with declaration mistakes planted: ``override`` (an
override naming a JAX leaf that does not exist), ``shape`` (a listed intermediate returned with the
wrong shape: ``fc1``'s output cut to 4 features), or both. Each case runs ``crosscheck run --workload
MODULE:port --reference torch`` as a user does (a worker process loads the port), ``--runs`` times;
the module stamps the time when the worker starts importing it, when it is imported (PyTorch, JAX and
Equinox imported, both models built) and when the port is refused (``Port.prepared`` raised), so that
the wall time splits into: starting (the command and its worker), importing the user's module,
preparing and refusing the port, and what comes after (the refusal sent to the command, the worker's
exit waited for or not, the lines printed). Run from the repository root::

    python benchmarks/refusal.py            # prints a Markdown table
    python benchmarks/refusal.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULE = """
import sys, time
sys.stderr.write(f"STAMP import {{time.time()}}\\n")
import crosscheck
from examples.port import block_equinox as b

_prepared = crosscheck.Port.prepared


def _stamped(port):  # the port prepared: where the worker refuses it
    try:
        return _prepared.fget(port)
    finally:
        sys.stderr.write(f"STAMP refused {{time.time()}}\\n")


crosscheck.Port.prepared = property(_stamped)


def _cut(model, inputs):
    import jax

    out, found = jax.vmap(model)(inputs["x"])
    if {shape}:
        found = {{**found, "fc1": found["fc1"][..., :4]}}
    return out, found


port = crosscheck.Port(
    name="refused-block", torch=b.torch_model(), jax=b.equinox_model(), inputs=b.tokens, jax_call=_cut,
    jax_intermediates=b.LISTED, overrides={{"fc2.weight": "fc9/weight"}} if {override} else None,
)
sys.stderr.write(f"STAMP imported {{time.time()}}\\n")
"""

CASES = {"override": (True, False), "shape": (False, True), "both": (True, True)}


def run_once(folder: Path, case: str) -> dict[str, float | int | list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    argv = [sys.executable, "-m", "crosscheck", "run", "--workload", f"refused_{case}:port"]
    start = time.time()
    done = subprocess.run([*argv, "--reference", "torch"], capture_output=True, text=True, env=env, cwd=ROOT)
    end = time.time()
    stamps = {}
    for line in done.stderr.splitlines():
        if line.startswith("STAMP "):
            _, what, when = line.split()
            stamps[what] = float(when)
    said = [line for line in done.stderr.splitlines() if not line.startswith("STAMP ")]
    if "import" not in stamps or done.returncode != 2:
        raise SystemExit(f"case {case}: the port was not refused as planted:\n" + "\n".join(said[-20:]))
    # a mistake ``Port(...)`` refuses itself raises while the module is imported: no later stamp
    imported = stamps.get("imported", stamps.get("refused", end))
    refused = stamps.get("refused", imported)
    return {
        "status": done.returncode,
        "total": end - start,
        "start": stamps["import"] - start,
        "module": imported - stamps["import"],
        "refuse": refused - imported,
        "after": end - refused,
        "said": said,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the start, ", end=""
    )
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for case, (override, shape) in CASES.items():
            (folder / f"refused_{case}.py").write_text(MODULE.format(override=override, shape=shape))
        for _ in range(args.runs):  # the cases interleaved, so that a change of load touches them alike
            for case in CASES:
                rows.setdefault(case, []).append(run_once(folder, case))
    print(f"load {os.getloadavg()[0]:.1f} at the end\n")
    print(
        "| mistakes | exit | problems said | total s | start s | module s | prepare and refuse s | after s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for case, runs in rows.items():
        med = {
            k: statistics.median(r[k] for r in runs) for k in ("total", "start", "module", "refuse", "after")
        }
        said = runs[0]["said"]
        problems = len(said) - 1 if len(said) > 1 else len(said)
        print(
            f"| {case} | {runs[0]['status']} | {problems} | {med['total']:.1f} | {med['start']:.1f} | "
            f"{med['module']:.1f} | {med['refuse']:.2f} | {med['after']:.1f} |"
        )
    print()
    for case, runs in rows.items():
        print(f"{case}: " + " / ".join(runs[0]["said"]))


if __name__ == "__main__":
    main()
