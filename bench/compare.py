"""``make bench-compare``: run the quick benchmarks (three times each, keeping each ratio's
median) and name every ratio more than 20% worse than the last landed figures
(``bench/landed.json``); exit status 1 if there is one.

Each benchmark writes its ratios to ``build/bench/<name>.json`` (:mod:`ratios`); a ratio is
leveled-ray's figure over its peer's in the same run, so a slower or faster machine moves
both. ``--update`` writes the figures of this run as the landed ones (after a change lands).

Run: ``python bench/compare.py [--update] [--only NAME] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import ratios

HERE = os.path.dirname(os.path.abspath(__file__))
#: The quick benchmarks, each with the arguments of its quick run.
QUICK = {
    "put_get": ["--quick", "--backends", "file"],
    "transactions": ["--quick"],
}


def run(name: str, repeats: int) -> dict[str, float]:
    """Each ratio of ``repeats`` quick runs of benchmark ``name``: their median (one quick
    run's ratios swing by more than the 20% looked for)."""
    runs = []
    for _ in range(repeats):
        subprocess.run([sys.executable, os.path.join(HERE, f"{name}.py"), *QUICK[name]],
                       check=True)
        runs.append(ratios.read(name))
    return {measure: statistics.median(r[measure] for r in runs if measure in r)
            for measure in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="land this run's figures")
    parser.add_argument("--only", default="", help="one benchmark of " + ", ".join(QUICK))
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, medians kept")
    args = parser.parse_args()
    landed = {}
    if os.path.exists(ratios.LANDED):
        with open(ratios.LANDED) as f:
            landed = json.load(f)
    now = {name: run(name, args.repeats) for name in QUICK if not args.only or name == args.only}
    regressions = []
    print(f"\n{'benchmark':14} {'measure':46} {'landed':>8} {'now':>8}")
    for name, found in now.items():
        for measure, ratio in sorted(found.items()):
            before = landed.get(name, {}).get(measure)
            flag = ""
            if before is not None and ratios.worse(measure, ratio, before):
                regressions.append(f"{name}: {measure}")
                flag = "  << more than 20% worse"
            shown = "-" if before is None else f"{before:.3g}"
            print(f"{name:14} {measure:46} {shown:>8} {ratio:8.3g}{flag}")
    if args.update:
        with open(ratios.LANDED, "w") as f:
            json.dump({**landed, **now}, f, indent=1, sort_keys=True)
        print(f"landed: {ratios.LANDED}")
    print("\n" + ("; ".join(regressions) + ": more than 20% worse than landed"
                  if regressions else "no ratio more than 20% worse than landed"))
    return 1 if regressions and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
