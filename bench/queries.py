"""Queries: fold throughput against SlateDB's scan, and index-query latency, in one run.

* **Fold rows/s**: ``--keys`` objects of ``--size`` random bytes in one bucket, on file://, then
  one full pass of each fold: ``fold_objects`` (Python tuples), ``fold_objects_batches``
  (Arrow), ``fold_objects(order="sqn")`` and ``fold_keys_batches``. The peer is SlateDB holding
  the same keys and values, read with ``scan`` and ``next_batch(1000)`` until exhausted.
* **Index-query latency**: ``--index-keys`` objects with 8 index terms each (four ``_bin`` and
  four ``_int`` fields), then the latency of ``index_query`` for one term (about
  ``--index-keys / 1000`` results) and for a term range stopped at 100 results, both on the
  store (each query takes and releases its own snapshot) and on one held snapshot. SlateDB
  has no secondary indexes: the peer is a bare Ray round trip, measured in the same run.

Run: ``python bench/queries.py`` (1M objects each), or ``--preset ci`` for a small run.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import shutil
import statistics
import tempfile
import time

import numpy as np
import ray

import leveled_ray as lr
from leveled_ray.admin.progress import progress_bar
from leveled_ray.client.ray_connection import ensure_ray

import plots
from put_get import SlateRun, bounded, ray_rtt  # bench/ is the script's directory

PRESETS = {"full": (1_000_000, 1_000_000), "ci": (20_000, 20_000)}  # fold keys, index keys
BATCH = 1000
IN_FLIGHT = 4


def workload(keys: int, size: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    names = [f"key{i:010d}" for i in range(keys)]
    blob = rng.bytes(keys * size)
    return names, [blob[i * size:(i + 1) * size] for i in range(keys)]


def load(store, items_of, count: int, label: str) -> float:
    bar = progress_bar(label)
    done = 0

    async def write(lo):
        nonlocal done
        hi = min(lo + BATCH, count)
        await store.put_many_async(items_of(lo, hi))
        done += hi - lo
        bar(done, count)

    started = time.perf_counter()
    asyncio.run(bounded(write, range(0, count, BATCH), IN_FLIGHT))
    return time.perf_counter() - started


def timed_pass(iterator, rows_of=lambda item: 1) -> tuple[float, int]:
    started = time.perf_counter()
    rows = sum(rows_of(item) for item in iterator)
    return time.perf_counter() - started, rows


def fold_bench(root: str, keys: int, size: int, options: lr.Options) -> list[tuple]:
    names, values = workload(keys, size)
    store = lr.open(f"file://{root}/folds", options)
    load(store, lambda lo, hi: [lr.Put("bench", k, v) for k, v in
                                zip(names[lo:hi], values[lo:hi])], keys, "load (folds)")
    results = {}
    for label, make, rows_of in [
        ("fold_objects", lambda: store.fold_objects("bench"), lambda _: 1),
        ("fold_objects_batches", lambda: store.fold_objects_batches("bench"),
         lambda b: b.num_rows),
        ("fold_objects order=sqn", lambda: store.fold_objects("bench", order="sqn"),
         lambda _: 1),
        ("fold_keys_batches", lambda: store.fold_keys_batches("bench"), lambda b: b.num_rows),
    ]:
        seconds, rows = timed_pass(make(), rows_of)
        assert rows == keys, (label, rows)
        results[label] = rows / seconds
    store.close()

    slate = SlateRun("file", f"{root}/slate", None)

    async def slate_scan():
        await slate.open()
        await slate.load([n.encode() for n in names], values, BATCH, IN_FLIGHT)
        from slatedb.uniffi import KeyRange

        started = time.perf_counter()
        it = slate.db.scan(KeyRange(start=None, start_inclusive=True, end=None,
                                    end_inclusive=False))
        it = await it if inspect.isawaitable(it) else it
        rows = 0
        while True:
            got = it.next_batch(1000)
            got = await got if inspect.isawaitable(got) else got
            if not got:
                break
            rows += len(got)
        seconds = time.perf_counter() - started
        await slate.close()
        assert rows == keys, rows
        return rows / seconds

    theirs = asyncio.run(slate_scan())
    return [(label, ours, theirs) for label, ours in results.items()]


def index_bench(root: str, keys: int, options: lr.Options, samples: int) -> list[tuple]:
    rng = np.random.default_rng(5)
    cards = keys // 1000 or 1  # one term of a field holds about 1000 objects

    def items(lo, hi):
        return [lr.Put("idx", f"obj{i:09d}", b"v", indexes=[
            *(("add", f"f{j}_bin", f"t{(i * 7919 + j * 31) % cards:07d}") for j in range(4)),
            *(("add", f"n{j}_int", int(x)) for j, x in enumerate(rng.integers(0, cards, 4))),
        ]) for i in range(lo, hi)]

    store = lr.open(f"file://{root}/index", options)
    load_s = load(store, items, keys, "load (8 index terms per object)")

    def latencies(target, max_results=None) -> list[float]:
        out = []
        for _ in range(samples):
            term = f"t{int(rng.integers(0, cards)):07d}"
            started = time.perf_counter()
            found = list(target.index_query("idx", "f1_bin", term, term,
                                            max_results=max_results))
            out.append(time.perf_counter() - started)
            assert found
        return out

    def paged(target) -> list[float]:
        out = []
        for _ in range(samples):
            lo = int(rng.integers(0, cards))
            started = time.perf_counter()
            found = list(target.index_query("idx", "n2_int", lo, lo + 50, max_results=100,
                                            return_terms=True))
            out.append(time.perf_counter() - started)
            assert found
        return out

    runs = [("one term, store (max_results=10000: the Bookie answers)",
             latencies(store, 10_000)),
            ("one term, store (unbounded: streams from its own snapshot)", latencies(store)),
            ("100 of a term range, store", paged(store))]
    with store.snapshot() as snap:
        runs += [("one term, on a held snapshot", latencies(snap)),
                 ("100 of a term range, on a held snapshot", paged(snap))]
    store.close()
    trip = statistics.median(ray_rtt(max(samples, 200)))
    rows = []
    for label, times in runs:
        rows.append((label, statistics.median(times), np.percentile(times, 99), trip))
    print(f"index load: {keys} objects x 8 terms in {load_s:.1f}s "
          f"({keys / load_s:,.0f} objects/s)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--keys", type=int, help="objects for the folds")
    parser.add_argument("--index-keys", type=int, help="objects for the index queries")
    parser.add_argument("--size", type=int, default=256, help="value bytes (folds)")
    parser.add_argument("--samples", type=int, default=200, help="queries per latency")
    parser.add_argument("--only", choices=["folds", "index"], help="run one half")
    args = parser.parse_args()
    keys, index_keys = PRESETS[args.preset]
    keys, index_keys = args.keys or keys, args.index_keys or index_keys
    options = lr.Options(journal=dict(compaction_interval_s=0), gc=dict(interval_s=0))
    root = tempfile.mkdtemp(prefix="lr-bench-queries-")
    ensure_ray()
    try:
        folds = [] if args.only == "index" else fold_bench(root, keys, args.size, options)
        index = [] if args.only == "folds" else index_bench(root, index_keys, options,
                                                            args.samples)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ray.shutdown()
    print(f"\nfolds over {keys:,} objects of {args.size} B (file://), rows/s:")
    print("| fold | leveled-ray | SlateDB scan next_batch(1000) | ratio |\n|---|---|---|---|")
    for label, ours, theirs in folds:
        print(f"| {label} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} |")
    print(f"\nindex queries on {index_keys:,} objects x 8 terms (file://), milliseconds:")
    print("| query | p50 | p99 | bare Ray round trip p50 | p50 ratio |\n|---|---|---|---|---|")
    for label, p50, p99, trip in index:
        print(f"| {label} | {p50 * 1e3:.2f} | {p99 * 1e3:.2f} | {trip * 1e3:.2f} | "
              f"{p50 / trip:.1f} |")
    path = plots.save_ratios(
        "queries", "folds vs SlateDB scans (rows/s; higher is better), index query p50 vs a "
        "Ray round trip (lower is better)",
        [(f"fold: {label}", ours / theirs) for label, ours, theirs in folds]
        + [(f"index p50: {label}", p50 / trip) for label, p50, _, trip in index])
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
