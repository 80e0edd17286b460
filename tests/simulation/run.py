"""``make simulate SEEDS=N [FIRST=K] [JOBS=J]``: run seeds K .. K+N-1 of the protocol
simulation (in J processes) and report each invariant broken, with the command that replays
the seed. A seed runs alike in any process: each draws its randomness from its seed alone.

    python tests/simulation/run.py --seeds 10000 --jobs 2
    python tests/simulation/run.py --seed 1234 --trace    # replay one seed, with its trace
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scenario  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--trace", action="store_true", help="print the run's trace")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run seeds in")
    parser.add_argument("--stop-first", action="store_true",
                        help="stop at the first seed that breaks an invariant")
    parser.add_argument("--config", default="", help="a Config as JSON (a test's fixed "
                        "one), for every seed; default: each seed's own")
    args = parser.parse_args(argv)
    config = scenario.Config(**json.loads(args.config)) if args.config else None
    run = functools.partial(scenario.run, config=config)
    seeds = [args.seed] if args.seed is not None else range(args.first,
                                                            args.first + args.seeds)
    started = time.perf_counter()
    failed, checks, steps = [], Counter(), 0
    for n, (seed, report) in enumerate(zip(seeds, _reports(run, seeds, args.jobs)), 1):
        steps += _report(seed, report, args.trace, failed, checks)
        if failed and args.stop_first:
            print(f"stopped at seed {seed}, the {n}th run", flush=True)
            break
        if n % 100 == 0:
            print(f"{n} seeds, {len(failed)} failed, "
                  f"{n / (time.perf_counter() - started):.1f} seeds/s", flush=True)
    took = time.perf_counter() - started
    print(f"{len(seeds)} seeds in {took:.1f}s ({len(seeds) / took:.1f} seeds/s, "
          f"{steps / took:.0f} steps/s), {len(failed)} with a broken invariant"
          + (f": {failed[:20]}" if failed else ""))
    print("checks: " + ", ".join(f"{k} {v}" for k, v in sorted(checks.items())))
    return 1 if failed else 0


#: Seeds a worker process runs before a new one takes over: a long run's memory stays
#: bounded (not all of a run's world is freed with it).
SEEDS_PER_WORKER = 200


def _reports(run, seeds, jobs: int):
    """The seeds' reports, in order: from ``jobs`` worker processes, new ones every
    ``SEEDS_PER_WORKER`` seeds each (a pool's own ``max_tasks_per_child`` hangs on 3.11)."""
    if jobs <= 1:
        yield from map(run, seeds)
        return
    seeds = list(seeds)
    step = jobs * SEEDS_PER_WORKER
    for start in range(0, len(seeds), step):
        pool = ProcessPoolExecutor(jobs)
        try:
            yield from pool.map(run, seeds[start:start + step], chunksize=10)
        finally:  # a run stopped early (--stop-first) runs no more seeds
            pool.shutdown(cancel_futures=True)


def _report(seed: int, report, trace: bool, failed: list, checks: Counter) -> int:
    """Print what one seed broke; returns its step count."""
    checks.update(report.checks)
    if trace:
        print("\n".join(report.trace))
    if report.violations:
        failed.append(seed)
        print(f"seed {seed} {report.config}:", flush=True)
        for violation in report.violations:
            print(f"  {violation}", flush=True)
        print(f"  replay: {scenario.replay_command(seed, report.config)}", flush=True)
    return report.steps


if __name__ == "__main__":
    sys.exit(main())
