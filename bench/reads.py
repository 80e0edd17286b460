"""Read benchmark: batched gets, point gets and folds, against their peers in one run.

On file://, ``--objects`` keys of 1 KiB written with ``put_many`` of 1 000, then both stores
restarted (nothing is served from a write cache):

* ``get_many`` of 1 000 random keys, **cold** (the first pass over ``--keys`` distinct keys)
  and **warm** (the same batches again: every value cached), against SlateDB's async ``get``
  loop over the same keys, cold and warm; the object-store requests of the cold pass;
* ``head_many``, warm, the same way;
* single ``get`` p50 (cached values) against a bare Ray actor round trip;
* ``fold_objects`` and ``fold_heads`` of every key, against reading the same rows from a
  Parquet file with pyarrow in this process, row by row as Python values;
* the Bookie's resident memory after each phase, and its caches against their byte bounds.

Run: ``python bench/reads.py`` (``--quick`` for a smaller run). Prints a table of ratios and
saves ``docs/img/reads.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

import leveled_ray as lr
from leveled_ray.client.ray_connection import ensure_ray

import plots
from put_get import SlateRun, paired_rates, percentile, ray_rtt, values

BATCH = 1000


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def rss_mb(store) -> float:
    return store.stats()["process"]["rss_bytes"] / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys read")
    parser.add_argument("--latency", type=int, default=500, help="single gets timed")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.objects, args.keys, args.latency = 20_000, 4_000, 200
    ensure_ray()
    root = tempfile.mkdtemp(prefix="lr-bench-reads-")
    url = f"file://{root}/leveled"
    names = [f"k{i:08d}" for i in range(args.objects)]
    vals = values(args.objects, 1024, 1)
    rows, memory = [], []
    slate = SlateRun("file", root, "")
    try:
        store = lr.open(url)
        for lo in range(0, args.objects, BATCH):
            store.put_many([lr.Put("bench", k, v) for k, v in
                            zip(names[lo:lo + BATCH], vals[lo:lo + BATCH])])
        asyncio.run(slate.open())
        asyncio.run(slate.load([k.encode() for k in names], vals, BATCH, 1))
        store.close()
        asyncio.run(slate.close())
        store = lr.open(url)
        asyncio.run(slate.open())
        memory.append(("opened", rss_mb(store)))

        picked = random.Random(7).sample(names, min(args.keys, args.objects))
        batches = [[("bench", k) for k in picked[lo:lo + BATCH]]
                   for lo in range(0, len(picked), BATCH)]
        raw = [k.encode() for k in picked]

        def get_all():
            for batch in batches:
                got = store.get_many(batch)
                assert got[0] is not None

        before = store.stats()["io"]["gets"]
        cold = len(picked) / timed(get_all)
        requests = store.stats()["io"]["gets"] - before
        slate_cold = len(picked) / asyncio.run(slate.get_loop(raw))
        rows.append(("get_many cold (gets/s)", cold, slate_cold, "SlateDB get loop", ">= 3"))
        memory.append(("get_many cold", rss_mb(store)))
        warm = max(len(picked) / timed(get_all) for _ in range(3))
        slate_warm = len(picked) / asyncio.run(slate.get_loop(raw))
        rows.append(("get_many warm (gets/s)", warm, slate_warm, "SlateDB get loop", ">= 10"))

        def head_all():
            for batch in batches:
                store.head_many(batch)

        heads = max(len(picked) / timed(head_all) for _ in range(3))
        rows.append(("head_many warm (heads/s)", heads, slate_warm, "SlateDB get loop", ">= 10"))
        memory.append(("get_many, head_many warm", rss_mb(store)))

        rtt = ray_rtt(args.latency)
        times = []
        for _, key in batches[0][:args.latency]:
            t = time.perf_counter()
            store.get("bench", key)
            times.append(time.perf_counter() - t)
        rows.append(("get p50 (ms), cached", percentile(times, 0.5) * 1e3,
                     percentile(rtt, 0.5) * 1e3, "bare Ray round trip", "<= 1.3"))

        path = f"{root}/same.parquet"
        pq.write_table(pa.table({"bucket": ["bench"] * args.objects, "key": names,
                                 "value": vals}), path)

        def parquet_rows():
            n = 0
            for batch in pq.ParquetFile(path).iter_batches():
                for _ in zip(*(c.to_pylist() for c in batch.columns)):
                    n += 1
            assert n == args.objects

        rate = paired_rates(args.objects, {
            "parquet": parquet_rows,
            "objects": lambda: sum(1 for _ in store.fold_objects("bench")),
            "heads": lambda: sum(1 for _ in store.fold_heads("bench"))})
        for kind in ("objects", "heads"):
            rows.append((f"fold_{kind} (rows/s)", rate[kind], rate["parquet"],
                         "Parquet rows (pyarrow)", ">= 0.5"))
        memory.append(("folds", rss_mb(store)))
        stats = store.stats()
        options = lr.Options()
        caches = (f"value cache {stats['value_cache']['bytes'] / 2**20:.1f} of "
                  f"{options.cache_size // 4 / 2**20:.1f} MiB, file cache "
                  f"{stats['file_cache']['bytes'] / 2**20:.1f} of "
                  f"{(options.cache_size - options.cache_size // 4) / 2**20:.1f} MiB")
        store.close()
    finally:
        asyncio.run(slate.close())
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{args.objects} objects of 1 KiB, file://, get_many of {BATCH} over "
          f"{len(picked)} distinct keys; the cold pass sent {requests} GETs "
          f"({requests / len(picked) * 1000:.0f} per 1 000 keys)\n")
    print("| measure | leveled-ray | peer | ratio | target |")
    print("|---|---|---|---|---|")
    ratios = []
    for what, ours, theirs, peer, target in rows:
        ratio = ours / theirs
        print(f"| {what} vs {peer} | {ours:,.3g} | {theirs:,.3g} | {ratio:.2f} | {target} |")
        ratios.append((f"{what} vs {peer}", ratio))
    print("\nBookie resident memory (MiB): " + ", ".join(f"{p} {m:.0f}" for p, m in memory))
    print(f"Caches at the end: {caches}")
    print("saved", plots.save_ratios("reads", "Reads: leveled-ray / peer", ratios))


if __name__ == "__main__":
    main()
