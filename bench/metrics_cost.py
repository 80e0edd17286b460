"""What metrics cost the hot path: the same workload on a store publishing its metrics and on
one that does not, in one run, alternating rounds so both see the same machine.

Each round, on file:// with 1 KiB values: sequential single ``put`` and ``get`` latency, and
``put_async`` throughput with 32 writes in flight. The store with metrics publishes every
``--interval`` seconds (default 1 s, five times as often as the default). Prints each figure
for both and the ratio (metrics on / off), next to a bare Ray round trip.

Run: ``python bench/metrics_cost.py`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import asyncio
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


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def single_ops(store, n: int, tag: str) -> tuple[float, float]:
    """p50 ms of ``n`` sequential puts, then of ``n`` gets of them."""
    puts, gets = [], []
    for i in range(n):
        t = time.perf_counter()
        store.put("b", f"{tag}-{i}", VALUE)
        puts.append(time.perf_counter() - t)
    for i in range(n):
        t = time.perf_counter()
        store.get("b", f"{tag}-{i}")
        gets.append(time.perf_counter() - t)
    return p50(puts), p50(gets)


def concurrent_puts(store, n: int, in_flight: int, tag: str) -> float:
    """puts/s of ``n`` ``put_async`` calls, ``in_flight`` at a time."""

    async def run():
        sem = asyncio.Semaphore(in_flight)

        async def one(i):
            async with sem:
                await store.put_async("b", f"{tag}-c{i}", VALUE)

        await asyncio.gather(*(one(i) for i in range(n)))

    t = time.perf_counter()
    asyncio.run(run())
    return n / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=2000, help="single puts/gets per round")
    parser.add_argument("--concurrent", type=int, default=8000, help="put_async per round")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.ops, args.concurrent = 2, 300, 2000
    tmp = tempfile.mkdtemp(prefix="lr-mc-")
    ray.init(include_dashboard=False, logging_level="ERROR", _temp_dir=tmp)
    echo = Echo.remote()
    ray.get(echo.ping.remote())
    rtt = []
    for _ in range(1000):
        t = time.perf_counter()
        ray.get(echo.ping.remote())
        rtt.append(time.perf_counter() - t)
    stores = {
        "on": lr.open(f"file://{tmp}/on", lr.Options(metrics_interval_s=args.interval),
                      name="metrics-on"),
        "off": lr.open(f"file://{tmp}/off", lr.Options(metrics_interval_s=0), name="metrics-off"),
    }
    results = {k: {"put p50 ms": [], "get p50 ms": [], "put_async x32 /s": []} for k in stores}
    try:
        for r in range(args.rounds):
            for key in (("on", "off") if r % 2 == 0 else ("off", "on")):
                store = stores[key]
                put, get = single_ops(store, args.ops, f"r{r}")
                results[key]["put p50 ms"].append(put)
                results[key]["get p50 ms"].append(get)
                results[key]["put_async x32 /s"].append(
                    concurrent_puts(store, args.concurrent, 32, f"r{r}"))
        published = stores["on"].stats()
    finally:
        for store in stores.values():
            store.close()
    print(f"bare Ray round trip p50: {p50(rtt):.3f} ms")
    print(f"{'figure':<20} {'metrics on':>12} {'metrics off':>12} {'on / off':>9}")
    for figure in results["on"]:
        on = statistics.median(results["on"][figure])
        off = statistics.median(results["off"][figure])
        print(f"{figure:<20} {on:>12.3f} {off:>12.3f} {on / off:>9.3f}")
    print(f"(metrics published every {args.interval:g} s; the store with them recorded "
          f"{published['changes']} puts)")
    path = plots.save_ratios("metrics_cost", "metrics on / off, same run (1 = no cost)", [
        (figure, statistics.median(results["on"][figure])
         / statistics.median(results["off"][figure])) for figure in results["on"]],
        xlabel="metrics on / metrics off")
    if path:
        print(f"plot: {path}")
    ray.shutdown()


if __name__ == "__main__":
    main()
