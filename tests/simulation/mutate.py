"""``make mutate [SEEDS=200] [ONLY=text]``: proof that the checks can fail.

Each mutant of the catalogue (:mod:`mutants`) is applied, alone, to a copy of the package; the
simulation runs up to ``SEEDS`` seeds against it (stopping at the first seed that breaks an
invariant), and if none does, the mutant's named tests run against it. The report says what
caught each mutant, in how many seeds, and which survived; it fails when less than 90% of the
catalogue (equivalent mutants aside) is caught.

    python tests/simulation/mutate.py --seeds 200 --jobs 2 --report build/mutants.md
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from mutants import MUTANTS, Mutant  # noqa: E402

#: What the copy leaves out: not the package, or made by tools.
SKIP = shutil.ignore_patterns(".venv", ".git", "build", "img", "*.egg-info", "__pycache__",
                              ".pytest_cache", ".mypy_cache", ".ruff_cache")
TEST_TIMEOUT_S = 900
#: Wall seconds the simulation gets per mutant; past them, its seeds hang (each ends only at
#: the simulation's own time limit): caught, and reported so.
SIMULATION_TIMEOUT_S = 600
CAUGHT_SHARE = 0.9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run the mutants whose name this regular "
                        "expression matches")
    parser.add_argument("--report", default="", help="also write the report to this file")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if re.search(args.only, m.name)]
    with tempfile.TemporaryDirectory(prefix="lr-mutate-") as parent:
        copy = os.path.join(parent, "leveled_ray")
        shutil.copytree(ROOT, copy, ignore=SKIP)
        env = {**os.environ, "PYTHONPATH": parent, "PYTHONHASHSEED": "0"}
        rows = [_try(m, copy, env, args.seeds, args.jobs) for m in chosen]
    return _report(rows, args.report)


def _try(mutant: Mutant, copy: str, env: dict, seeds: int, jobs: int) -> tuple:
    """``(mutant, what caught it or None, seconds)``, the mutant applied to ``copy`` only
    while its checks run."""
    path = os.path.join(copy, mutant.path)
    with open(path) as f:
        original = f.read()
    if original.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: its text is not found once in {mutant.path}")
    started = time.monotonic()
    try:
        with open(path, "w") as f:
            f.write(original.replace(mutant.old, mutant.new))
        caught = _simulation(copy, env, seeds, jobs) or _tests(mutant, copy, env)
    finally:
        with open(path, "w") as f:
            f.write(original)
    took = time.monotonic() - started
    print(f"{'caught' if caught else 'SURVIVED':8} {mutant.name}: {caught or '-'} "
          f"({took:.0f}s)", flush=True)
    return mutant, caught, took


def _simulation(copy: str, env: dict, seeds: int, jobs: int) -> str | None:
    try:
        run = _run([sys.executable, "tests/simulation/run.py", "--seeds", str(seeds), "--jobs",
                    str(jobs), "--stop-first"], copy, env, SIMULATION_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        done = re.findall(r"^(\d+) seeds, ", exc.stdout or "", re.M) if isinstance(
            exc.stdout, str) else []
        return (f"simulation: its seeds hang (not {seeds} seeds in {SIMULATION_TIMEOUT_S}s"
                + (f", {done[-1]} done" if done else "") + ")")
    found = re.search(r"stopped at seed (\d+), the (\d+)th run", run.stdout)
    if found:
        return f"simulation, seed {found.group(1)} (run {found.group(2)} of up to {seeds})"
    if run.returncode != 0:  # it could not run at all: the mutant broke an import, say
        return "simulation: " + (run.stderr.strip().splitlines() or ["failed"])[-1][:120]
    return None


def _tests(mutant: Mutant, copy: str, env: dict) -> str | None:
    if not mutant.tests:
        return None
    tmp = tempfile.mkdtemp(prefix="lr-mt-")
    try:
        run = _run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p",
                    "no:cacheprovider", *mutant.tests], copy, {**env, "RAY_TMPDIR": tmp},
                   TEST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"tests {' '.join(mutant.tests)} (they hung past {TEST_TIMEOUT_S}s)"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if run.returncode == 1:  # tests ran and one failed
        failed = re.findall(r"^FAILED (\S+)", run.stdout, re.M)
        return "test " + (failed[0] if failed else " ".join(mutant.tests))
    if run.returncode not in (0, 1):
        raise SystemExit(f"mutant {mutant.name!r}: pytest could not run {mutant.tests} "
                         f"(exit {run.returncode}):\n{run.stdout[-2000:]}")
    return None


def _run(args: list[str], cwd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a process group of its own, which is killed whole at the timeout
    (a simulation's workers, a test's Ray processes: none outlives its mutant)."""
    with subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(args, timeout, out, err) from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # what the run left behind, if anything
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _uncaught(mutant: Mutant) -> str:
    if mutant.equivalent:
        return f"equivalent: {mutant.equivalent}"
    return "**survived**" + (f": {mutant.unreached}" if mutant.unreached else "")


def _report(rows: list, path: str) -> int:
    counted = [(m, c) for m, c, _ in rows if not m.equivalent]
    caught = sum(1 for _, c in counted if c)
    lines = ["| mutant | module | caught by |", "| --- | --- | --- |"]
    lines += [f"| {m.name} | `{m.path}` | {c or _uncaught(m)} |" for m, c, _ in rows]
    share = caught / len(counted) if counted else 1.0
    lines.append(f"\n{caught} of {len(counted)} caught ({share:.0%}); "
                 f"{len(rows) - len(counted)} equivalent; "
                 f"{sum(t for _, _, t in rows) / 60:.1f} min")
    text = "\n".join(lines)
    print(text)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
    return 0 if share >= CAUGHT_SHARE else 1


if __name__ == "__main__":
    sys.exit(main())
