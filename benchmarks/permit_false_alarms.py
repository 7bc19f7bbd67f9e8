"""How often the "below float32 precision" check fails a healthy pair: every healthy port of the zoo
(``examples/port/zoo``) and a CLIP at width 32, over seeds, ``--reference torch`` in float32.

A side's measured rounding (its float32 gradient against its float64 re-run) fails the check where a
parameter's typical entry is beyond what float32 permits (``terms.PERMIT_ULPS`` unit roundoffs of the
entry's scale). A report's ``rounding_of_permitted`` is the largest such median ratio over the side's
parameters (healthy: far below 1; above 1 the side fails). Per architecture the table prints the runs
that failed on that check (false alarms: every pair is healthy), the other failures, and the largest
and median ratio over its seeds and sides. Run from the repository root::

    python benchmarks/permit_false_alarms.py                       # every healthy pair, seeds 0..2
    python benchmarks/permit_false_alarms.py --arch clip,clip-32 --seeds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import crosscheck
from examples.port.zoo import ARCHS
from examples.port.zoo.spec import make_port
from examples.port.zoo.vision import CLIP_TEXT, CLIP_VISION

WIDE = {"hidden_size": 32, "intermediate_size": 37, "num_attention_heads": 4}


def port(name: str):
    """The zoo's healthy pair ``name``; ``clip-32``: CLIP with both towers 32 wide."""
    if name != "clip-32":
        return make_port(ARCHS[name])
    config = dict(ARCHS["clip"].config)
    config.update(text_config={**CLIP_TEXT, **WIDE}, vision_config={**CLIP_VISION, **WIDE})
    return make_port(dataclasses.replace(ARCHS["clip"], config=config), "clip-32")


def row(name: str, seeds: int) -> tuple[str, int, int, int, float, float, float]:
    alarms = others = 0
    used: list[float] = []
    start = time.perf_counter()
    for seed in range(seeds):
        report = crosscheck.run(workload=port(name), reference="torch", dtype="float32", seed=seed)
        said = " ".join(report.problems)
        alarms += "below float32 precision" in said
        others += not report.passed and "below float32 precision" not in said
        notes = [r.notes for r in report.backends.values()]
        used += [n["rounding_of_permitted"] for n in notes if "rounding_of_permitted" in n]
    top = max(used, default=float("nan"))
    middle = statistics.median(used) if used else float("nan")
    return name, seeds, alarms, others, top, middle, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=",".join([*ARCHS, "clip-32"]))
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("| pair | runs | false alarms (below float32) | other failures | largest | median | s |")
    print("|---|---|---|---|---|---|---|")
    total = alarms = 0
    for name in args.arch.split(","):
        r = row(name, args.seeds)
        total, alarms = total + r[1], alarms + r[2]
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.4f} | {r[5]:.4f} | {r[6]:.0f} |", flush=True)
    print(f"false-alarm rate: {alarms} / {total}")


if __name__ == "__main__":
    main()
