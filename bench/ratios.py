"""The benchmarks' ratios as data: each run writes ``build/bench/<name>.json`` (measure ->
leveled-ray / peer in the same run), and :mod:`compare` checks them against the last landed
figures (``bench/landed.json``)."""

from __future__ import annotations

import json
import math
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "build", "bench")
LANDED = os.path.join(HERE, "landed.json")
#: A measure whose ratio is better lower: a time (ms, s), a pause, a cost, an abort rate, or
#: one its benchmark says is better lower. Every other ratio is better higher (a rate).
LOWER_IS_BETTER = re.compile(r"\(ms\)|\bms\b|\(s\)|latency|pause|abort|cpu|cost|p50|p99|"
                             r"seconds|reopen|open\b|bytes", re.IGNORECASE)


def write(name: str, rows: list[tuple[str, float]]) -> str:
    """Write ``(measure, ratio)`` rows of benchmark ``name``; returns the file's path."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    found = {measure: ratio for measure, ratio in rows
             if isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0}
    with open(path, "w") as f:
        json.dump(found, f, indent=1, sort_keys=True)
    return path


def read(name: str) -> dict[str, float]:
    with open(os.path.join(RESULTS, f"{name}.json")) as f:
        return json.load(f)


def worse(measure: str, now: float, landed: float, by: float = 0.2) -> bool:
    """Whether ``now`` is more than ``by`` worse than ``landed`` for ``measure``."""
    if LOWER_IS_BETTER.search(measure):
        return now > landed * (1 + by)
    return now < landed * (1 - by)
