"""How long taking a snapshot, a checkpoint and a reader takes, at 10k keys and at 1M keys.

Creation must not depend on the store's size: the ratio of the two sizes' times should be at
most 1.5, and each should take under 50 ms. The peer is the same operation on the small store;
a bare Ray round trip is printed for scale. Run: ``python bench/points_in_time.py``
(``--large 100000`` for a quicker run). Stores are on file://.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import ray

import leveled_ray as lr
from leveled_ray.progress import progress_bar


@ray.remote(num_cpus=0)
class Echo:
    async def ping(self):
        return 0


def median_ms(fn, repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def load(store, keys: int) -> None:
    show = progress_bar(f"loading {keys:,} keys")
    batch = 20_000
    for lo in range(0, keys, batch):
        n = min(batch, keys - lo)
        store.put_many([lr.Put("bench", f"k{lo + i:010d}", b"v%d" % (lo + i)) for i in range(n)])
        show(lo + n, keys)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # let merges settle: the cache holds little
        s = store.stats()
        if not s["penciller"]["merging"] and s["backlog"]["unpersisted"] < 5_000:
            return
        time.sleep(0.5)


def measure(url: str, keys: int, repeat: int) -> dict:
    store = lr.open(url)
    try:
        load(store, keys)

        def snapshot():
            store.snapshot().release()

        def checkpoint():
            store.delete_checkpoint(store.checkpoint().id)

        pinned = store.checkpoint()

        def reader():
            lr.reader(url, pinned.id).head("bench", "k0000000001")

        return {"snapshot": median_ms(snapshot, repeat),
                "checkpoint": median_ms(checkpoint, repeat),
                "reader at a checkpoint": median_ms(reader, repeat)}
    finally:
        store.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="lr-pit-")
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="lr-ray-"))
    lr.api.ensure_ray()
    try:
        echo = Echo.remote()
        rtt = median_ms(lambda: ray.get(echo.ping.remote()), 200)
        small = measure(f"file://{root}/small", args.small, args.repeat)
        large = measure(f"file://{root}/large", args.large, args.repeat)
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'operation':<24} {f'{args.large:,} keys':>14} {f'{args.small:,} keys':>14} "
          f"{'ratio':>7}  target")
    for op in small:
        print(f"{op:<24} {large[op]:>11.2f} ms {small[op]:>11.2f} ms "
              f"{large[op] / small[op]:>7.2f}  <= 1.5 and < 50 ms")
    print(f"{'Ray round trip':<24} {rtt:>11.2f} ms\n{os.cpu_count()} cores; python "
          f"{sys.version.split()[0]}")


if __name__ == "__main__":
    main()
