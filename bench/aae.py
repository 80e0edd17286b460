"""Anti-entropy: ``lr.compare`` of two stores at rest, against a full fold, in one run (file://).

Two plain stores hold the same ``--keys`` objects of ``--value-bytes``, except for 100 keys
(40 with another value, 30 deleted from the second, 30 only in the second). Measures:

- the bytes the exchange moved, against one store's size on disk;
- the compare's time (both sides folding their heads into trees, then the exchange), against
  a full fold of one store's objects (``fold_objects_batches``) in the same run;
- whether it found exactly the 100 keys.

Trees are folded per compare, not yet kept as writes land: the put-throughput cost of kept
trees has nothing to measure yet. Run: ``python bench/aae.py`` (``--quick`` for a smaller
run; ``--keys 1000000`` for the issue's size).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import ray

import leveled_ray as lr

import plots


def load(url: str, keys: int, value: bytes, changed: set, deleted: set, extra: list) -> None:
    store = lr.open(url)
    try:
        batch = []
        for i in range(keys):
            key = f"k{i:08d}"
            if key in deleted:
                continue
            batch.append(lr.Put("b", key, value + b"!" if key in changed else value))
            if len(batch) == 5000:
                store.put_many(batch)
                batch = []
        batch += [lr.Put("b", k, value) for k in extra]
        if batch:
            store.put_many(batch)
    finally:
        store.close()


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--size", default="small", help="tree size")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.keys = 20_000
    tmp = tempfile.mkdtemp(prefix="lr-aae-")
    ray.init(include_dashboard=False, logging_level="ERROR", _temp_dir=tmp)
    value = os.urandom(args.value_bytes)
    step = args.keys // 70
    changed = {f"k{i:08d}" for i in range(0, 40 * step, step)}
    deleted = {f"k{i:08d}" for i in range(40 * step + 1, 70 * step, step)}
    extra = [f"new{i:03d}" for i in range(30)]
    url_a, url_b = f"file://{tmp}/a", f"file://{tmp}/b"
    load(url_a, args.keys, value, set(), set(), [])
    load(url_b, args.keys, value, changed, deleted, extra)
    ray.shutdown()  # both at rest: compared, and folded, without Ray

    t = time.perf_counter()
    found = lr.compare(url_a, url_b, size=args.size)
    compare_s = time.perf_counter() - t
    with lr.reader(url_a) as r:
        t = time.perf_counter()
        rows = sum(b.num_rows for b in r.fold_objects_batches(batch_size=10_000))
        fold_s = time.perf_counter() - t
    size = disk_bytes(f"{tmp}/a")
    right = ({(d.key, d.kind) for d in found.differences}
             == {(k, "different") for k in changed} | {(k, "missing_in_b") for k in deleted}
             | {(k, "missing_in_a") for k in extra})
    rows_out = [("bytes exchanged / store size", found.bytes_exchanged, size, "bytes"),
                ("compare time / full fold of one store", compare_s, fold_s, "s")]
    print(f"{args.keys} keys x {args.value_bytes} B, tree {args.size}; {len(found)} "
          f"differences found ({'exactly the 100' if right else 'NOT the 100 planted'}), "
          f"{found.dirty_segments} dirty segments, {found.rounds} rounds; fold read {rows} "
          f"objects")
    print(f"{'measure':<40} {'value':>14} {'peer':>14} {'ratio':>9}")
    for measure, v, p, unit in rows_out:
        print(f"{measure:<40} {v:>14.3f} {p:>14.3f} {v / p:>9.5f}  {unit}")
    path = plots.save_ratios("aae", f"compare against the store's size and a full fold "
                             f"({os.cpu_count()} cores)", [(m, v / p) for m, v, p, _ in rows_out],
                             xlabel="ratio (lower is better)")
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
