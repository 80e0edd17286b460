"""``make simulate SEEDS=N [FIRST=K]``: run seeds K .. K+N-1 of the protocol simulation and
report each invariant broken, with the command that replays the seed.

    python tests/simulation/run.py --seeds 10000
    python tests/simulation/run.py --seed 1234 --trace    # replay one seed, with its trace
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scenario  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--trace", action="store_true", help="print the run's trace")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first,
                                                            args.first + args.seeds)
    started = time.perf_counter()
    failed, checks, steps = [], Counter(), 0
    for n, seed in enumerate(seeds, 1):
        report = scenario.run(seed)
        checks.update(report.checks)
        steps += report.steps
        if args.trace:
            print("\n".join(report.trace))
        if report.violations:
            failed.append(seed)
            print(f"seed {seed} {report.config}:", flush=True)
            for violation in report.violations:
                print(f"  {violation}", flush=True)
            print(f"  replay: make simulate SEEDS=1 FIRST={seed}", flush=True)
        if n % 100 == 0:
            print(f"{n} seeds, {len(failed)} failed, "
                  f"{n / (time.perf_counter() - started):.1f} seeds/s", flush=True)
    took = time.perf_counter() - started
    print(f"{len(seeds)} seeds in {took:.1f}s ({len(seeds) / took:.1f} seeds/s, "
          f"{steps / took:.0f} steps/s), {len(failed)} with a broken invariant"
          + (f": {failed[:20]}" if failed else ""))
    print("checks: " + ", ".join(f"{k} {v}" for k, v in sorted(checks.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
