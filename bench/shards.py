"""Sharded stores against one shard and against a plain store, in one run, on file://.

Measures (1 KiB values):

- ``put_many`` ingest, 1 000 items a call, from 2 Ray tasks: 1, 2 and 4 shards;
- sequential single puts from 4 Ray tasks: 1, 2 and 4 shards;
- CPU seconds per 1 000 puts of each shard's Bookie (from its process's CPU time), which
  projects the scaling on a machine with a core per shard;
- single ``get`` and ``put`` p50, a 4-shard store against a plain one (and a bare Ray round
  trip);
- a cross-shard ``put_many`` of 1 000 items against a single-shard one of the same size;
- a consistent checkpoint of 4 shards against a plain store's checkpoint, and the longest
  write pause a cut caused;
- a fold of every key, 4 shards against plain;
- a reopen after every actor of the store was killed (``ray.kill``: no close, the Ledger's
  memory lost, the Journal replayed), to the first read answered by every shard: 4 shards
  against plain (median of ``--reopens``, alternating).

Prints each figure with its ratio and writes ``docs/img/shards.png``.
Run: ``python bench/shards.py`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import ray

import leveled_ray as lr

import plots

VALUE = b"v" * 1024


@ray.remote(num_cpus=0)
class Echo:
    async def ping(self):
        return None


@ray.remote(num_cpus=0)
def ingest(store, worker: int, calls: int) -> int:
    for c in range(calls):
        store.put_many([lr.Put("b", f"w{worker}-{c}-{i}", VALUE) for i in range(1000)])
    return calls * 1000


@ray.remote(num_cpus=0)
def single_puts(store, worker: int, n: int) -> int:
    for i in range(n):
        store.put("s", f"w{worker}-{i}", VALUE)
    return n


def rate(store, task, workers: int, per_worker: int) -> float:
    """Items per second of ``workers`` Ray tasks running ``task`` on ``store`` at once."""
    t = time.perf_counter()
    done = sum(ray.get([task.remote(store, w, per_worker) for w in range(workers)]))
    return done / (time.perf_counter() - t)


def bookie_cpu_s(store) -> list[float]:
    """CPU seconds so far of each shard's Bookie process."""
    return [s["process"]["cpu_s"] for s in store.stats()["shards"]]


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(fn, n: int) -> float:
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return p50_ms(out)


def alternating(first, second, n: int) -> tuple[float, float]:
    """p50 ms of ``first(i)`` and ``second(i)``, called in turn ``n`` times each."""
    a, b = [], []
    for i in range(n):
        for fn, out in ((first, a), (second, b)):
            t = time.perf_counter()
            fn(i)
            out.append(time.perf_counter() - t)
    return p50_ms(a), p50_ms(b)


def keys_in(store, shard: int, count: int, prefix: str) -> list[str]:
    out, i = [], 0
    while len(out) < count:
        if store.shard_of("x", f"{prefix}{i}") == shard:
            out.append(f"{prefix}{i}")
        i += 1
    return out


def killed_then_reopened(url: str, shards: int | None, round_: int) -> float:
    """Seconds from ``lr.open`` of a store whose every actor was killed with unpersisted
    changes (its Journal replayed) to the first read answered by each shard."""
    store = lr.open(url, shards=shards) if shards else lr.open(url)
    store.put_many([lr.Put("z", f"r{round_}-{i}", VALUE) for i in range(2000)])
    for actor in store.actors():
        ray.kill(actor, no_restart=True)
    started = time.perf_counter()
    store = lr.open(url, shards=shards) if shards else lr.open(url)
    keys = [keys_in(store, s, 1, "k")[0] for s in range(shards)] if shards else ["k0"]
    assert all(store.get_many([("x", k) for k in keys]))
    took = time.perf_counter() - started
    assert store.get("z", f"r{round_}-1999") == VALUE  # replayed
    store.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10, help="put_many calls per task")
    parser.add_argument("--puts", type=int, default=1500, help="single puts per task")
    parser.add_argument("--ops", type=int, default=1000, help="single gets/puts for p50")
    parser.add_argument("--rounds", type=int, default=10, help="timed put_many/checkpoints")
    parser.add_argument("--reopens", type=int, default=5, help="kills and reopens of each")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.puts, args.ops, args.rounds, args.reopens = 3, 300, 300, 4, 3
    tmp = tempfile.mkdtemp(prefix="lr-shards-")
    ray.init(include_dashboard=False, logging_level="ERROR", _temp_dir=tmp)
    echo = Echo.remote()
    rtt = timed(lambda _: ray.get(echo.ping.remote()), 1000)
    rows: list[tuple[str, float, float, str]] = []  # measure, value, peer value, unit

    ingest_rate, single_rate, cpu = {}, {}, {}
    for shards in (1, 2, 4):
        store = lr.open(f"file://{tmp}/ingest{shards}", shards=shards)
        try:
            rate(store, ingest, 2, 1)  # warm: the tasks' workers and the shards' caches
            rate(store, single_puts, 4, 50)
            before = bookie_cpu_s(store)
            ingest_rate[shards] = rate(store, ingest, 2, args.calls)
            single_rate[shards] = rate(store, single_puts, 4, args.puts)
            used = [a - b for a, b in zip(bookie_cpu_s(store), before)]
            puts = (2 * args.calls * 1000 + 4 * args.puts) / shards  # per shard
            cpu[shards] = statistics.mean(u / puts * 1000 for u in used)
        finally:
            store.close()
    for shards in (2, 4):
        rows.append((f"put_many ingest, {shards} shards / 1", ingest_rate[shards],
                     ingest_rate[1], "items/s"))
        rows.append((f"single puts x4 tasks, {shards} shards / 1", single_rate[shards],
                     single_rate[1], "puts/s"))
    for shards in (1, 2, 4):
        print(f"CPU s per 1 000 puts, per shard's Bookie ({shards} shards): {cpu[shards]:.3f}")

    plain = lr.open(f"file://{tmp}/plain")
    four = lr.open(f"file://{tmp}/four", shards=4)
    try:
        for store in (plain, four):
            store.put_many([lr.Put("x", f"k{i}", VALUE) for i in range(5000)])
        # Alternating, so both see the same machine.
        get_plain, get_four = alternating(lambda i: plain.get("x", f"k{i % 5000}"),
                                          lambda i: four.get("x", f"k{i % 5000}"), args.ops)
        put_plain, put_four = alternating(lambda i: plain.put("y", f"k{i}", VALUE),
                                          lambda i: four.put("y", f"k{i}", VALUE), args.ops)
        rows.append(("get p50, 4 shards / plain", get_four, get_plain, "ms"))
        rows.append(("put p50, 4 shards / plain", put_four, put_plain, "ms"))
        one_shard = keys_in(four, 0, 1000 * args.rounds, "one")
        across = [f"all{i}" for i in range(1000 * args.rounds)]
        t_one, t_across = alternating(
            lambda r: four.put_many([lr.Put("x", k, VALUE)
                                     for k in one_shard[r * 1000:(r + 1) * 1000]]),
            lambda r: four.put_many([lr.Put("x", k, VALUE)
                                     for k in across[r * 1000:(r + 1) * 1000]]), args.rounds)
        rows.append(("put_many 1000, across 4 shards / one shard", t_across, t_one, "ms"))
        cp_plain, cp_four = alternating(lambda _: plain.checkpoint(lifetime=600),
                                        lambda _: four.checkpoint(lifetime=600), args.rounds)
        rows.append(("checkpoint, 4 shards (a cut) / plain", cp_four, cp_plain, "ms"))
        fold = {}
        for name, store in (("plain", plain), ("four", four)):
            t = time.perf_counter()
            n = sum(1 for _ in store.fold_keys())
            fold[name] = n / (time.perf_counter() - t)
        rows.append(("fold of all keys, 4 shards / plain", fold["four"], fold["plain"],
                     "keys/s"))
        pause = max(s["cut_pause_ms_max"] for s in four.stats()["shards"])
    finally:
        plain.close()
        four.close()

    reopens: dict[str, list[float]] = {"plain": [], "four": []}
    for r in range(args.reopens):
        reopens["plain"].append(killed_then_reopened(f"file://{tmp}/plain", None, r))
        reopens["four"].append(killed_then_reopened(f"file://{tmp}/four", 4, r))
    print(f"reopen after every actor was killed (s): plain {reopens['plain']}, "
          f"4 shards {reopens['four']}")
    rows.append(("reopen after a kill, 4 shards / plain", statistics.median(reopens["four"]),
                 statistics.median(reopens["plain"]), "s"))
    print(f"bare Ray round trip p50: {rtt:.3f} ms; longest write pause of a cut: "
          f"{pause:.2f} ms")
    plots.report_ratios("shards", "sharded against one shard / plain, same run", rows,
                        xlabel="sharded / peer (time rows: lower is better)")
    ray.shutdown()


if __name__ == "__main__":
    main()
