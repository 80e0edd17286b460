"""Anti-entropy: ``lr.compare`` of two stores at rest, against a full fold, in one run (file://).

Two plain stores hold the same ``--keys`` objects of ``--value-bytes``, except for 100 keys
(40 with another value, 30 deleted from the second, 30 only in the second). Measures:

- the bytes the exchange moved, against one store's size on disk;
- the compare's time, both sides starting from the trees their stores kept (saved at close),
  and with both sides folding their heads into trees instead, each against a full fold of one
  store's objects (``fold_objects_batches``) in the same run (medians of three runs each);
- whether it found exactly the 100 keys;
- tree upkeep: put throughput (``put_many`` of 5 000, new keys then overwrites) of a store
  keeping its tree against one with ``ledger.tree_size="off"``;
- replication (``lr.replicate``) of a store taking ``--rate`` puts a second (1 KiB) for
  ``--seconds``: the delay from a change's acknowledgement on the source to its batch's on the
  target, p50 and p99, and the lag once the writes stop.

Run: ``python bench/aae.py`` (``--quick`` for a smaller run; ``--keys 1000000`` for the
issue's size).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import ray

import leveled_ray as lr
from leveled_ray.admin.compare import compare_views
from leveled_ray.codec.tictac import DEFAULT_SIZE
from leveled_ray.files.sync import run_sync

import plots


def load(url: str, keys: int, values: list[bytes], changed: set, deleted: set,
         extra: list) -> None:
    store = lr.open(url)
    try:
        batch = []
        for i in range(keys):
            key = f"k{i:08d}"
            if key in deleted:
                continue
            batch.append(lr.Put("b", key, values[i] + b"!" if key in changed else values[i]))
            if len(batch) == 5000:
                store.put_many(batch)
                batch = []
        batch += [lr.Put("b", k, values[0]) for k in extra]
        if batch:
            store.put_many(batch)
    finally:
        store.close()


async def steady_puts(store, rate: int, seconds: float) -> int:
    """``rate`` puts a second for ``seconds``, sent in ticks of 10 ms; how many."""
    loop, sent, pending = asyncio.get_running_loop(), 0, []
    start = loop.time()
    while loop.time() - start < seconds:
        due = int((loop.time() - start) * rate)
        pending += [asyncio.ensure_future(store.put_async("r", f"k{i % 5000}", b"v" * 1024))
                    for i in range(sent, due)]
        sent = due
        await asyncio.sleep(0.01)
    await asyncio.gather(*pending)
    return sent


def replication_delays(tmp: str, rate: int, seconds: float) -> dict:
    source = lr.open(f"file://{tmp}/rsrc")
    try:
        rep = lr.replicate(source, f"file://{tmp}/rdst", name="bench", full_sync_s=0)
        sent = asyncio.run(steady_puts(source, rate, seconds))
        deadline = time.monotonic() + 60
        while rep.stats()["position"] != source.stats()["durable_sqn"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the replica did not catch up within 60 s")
            time.sleep(0.05)
        stats = rep.stats()
        rep.close()
        return {"sent": sent, **{k: stats[k] for k in ("delay_p50_s", "delay_p99_s",
                                                     "applied", "batches")}}
    finally:
        source.close()


class Folded:
    """A side that folds: the view without its kept tree."""

    def __init__(self, view):
        self.fold_heads_batches_async = view.fold_heads_batches_async


def upkeep(tmp: str, keys: int, rounds: int = 3) -> dict:
    """Seconds to put ``keys`` new objects, then overwrite them, with trees kept and off;
    the best of ``rounds`` each, alternating."""
    times = {"kept": [], "off": []}
    value = b"v" * 1024
    for n in range(rounds):
        for kind, size in (("kept", DEFAULT_SIZE), ("off", "off")):
            store = lr.open(f"file://{tmp}/upkeep-{kind}-{n}",
                            lr.Options(ledger={"tree_size": size}))
            try:
                t = time.perf_counter()
                for _ in range(2):  # new keys, then every one overwritten
                    for i in range(0, keys, 5000):
                        store.put_many([lr.Put("u", f"k{j:08d}", value)
                                        for j in range(i, min(i + 5000, keys))])
                times[kind].append(time.perf_counter() - t)
                assert (store.kept_tree() is None) == (kind == "off")
            finally:
                store.close()
    return {kind: min(ts) for kind, ts in times.items()}


def timed(run, times: int = 3):
    """``run()``'s result and its median time over ``times`` runs (the first run of each
    pays the process's first imports and caches)."""
    took = []
    for _ in range(times):
        t = time.perf_counter()
        result = run()
        took.append(time.perf_counter() - t)
    return result, statistics.median(took)


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--size", default=DEFAULT_SIZE, help="tree size")
    parser.add_argument("--rate", type=int, default=1000, help="puts a second, replicated")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.keys, args.seconds = 20_000, 5.0
    tmp = tempfile.mkdtemp(prefix="lr-aae-")
    ray.init(include_dashboard=False, logging_level="ERROR", _temp_dir=tmp)
    blob = os.urandom(args.value_bytes * args.keys)  # a random value per key
    values = [blob[i * args.value_bytes:(i + 1) * args.value_bytes] for i in range(args.keys)]
    step = args.keys // 70
    changed = {f"k{i:08d}" for i in range(0, 40 * step, step)}
    deleted = {f"k{i:08d}" for i in range(40 * step + 1, 70 * step, step)}
    extra = [f"new{i:03d}" for i in range(30)]
    url_a, url_b = f"file://{tmp}/a", f"file://{tmp}/b"
    load(url_a, args.keys, values, set(), set(), [])
    load(url_b, args.keys, values, changed, deleted, extra)
    replicated = replication_delays(tmp, args.rate, args.seconds)
    upkept = upkeep(tmp, min(args.keys, 100_000))
    ray.shutdown()  # both at rest: compared, and folded, without Ray

    found, compare_s = timed(lambda: lr.compare(url_a, url_b, size=args.size))
    with lr.reader(url_a) as a, lr.reader(url_b) as b:
        folded, folded_s = timed(
            lambda: run_sync(compare_views(Folded(a), Folded(b), size=args.size)))
    assert folded.differences == found.differences and folded.kept_sides == 0
    with lr.reader(url_a) as r:
        rows, fold_s = timed(
            lambda: sum(b.num_rows for b in r.fold_objects_batches(batch_size=10_000)))
    size = disk_bytes(f"{tmp}/a")
    right = ({(d.key, d.kind) for d in found.differences}
             == {(k, "different") for k in changed} | {(k, "missing_in_b") for k in deleted}
             | {(k, "missing_in_a") for k in extra})
    rows_out = [("bytes exchanged / one store's size on disk", found.bytes_exchanged, size,
                 "bytes"),
                ("compare time (kept trees) / full fold of one store", compare_s, fold_s, "s"),
                ("compare time (folded trees) / full fold of one store", folded_s, fold_s,
                 "s"),
                ("put time, trees kept / trees off", upkept["kept"], upkept["off"], "s")]
    print(f"{args.keys} keys x {args.value_bytes} B, tree {args.size}; {len(found)} "
          f"differences found ({'exactly the 100' if right else 'NOT the 100 planted'}), "
          f"{found.dirty_segments} dirty segments, {found.rounds} rounds, "
          f"{found.kept_sides} kept trees; fold read {rows} objects")
    print(f"put throughput with trees kept / off: {upkept['off'] / upkept['kept']:.3f}")
    print(f"replication at {args.rate} puts/s for {args.seconds:g} s: {replicated['sent']} "
          f"puts in {replicated['batches']} batches; delay p50 "
          f"{replicated['delay_p50_s'] * 1000:.1f} ms, p99 {replicated['delay_p99_s'] * 1000:.1f} "
          f"ms")
    plots.report_ratios("aae", "compare against the store's size and a full fold", rows_out,
                        xlabel="ratio (lower is better)")


if __name__ == "__main__":
    main()
