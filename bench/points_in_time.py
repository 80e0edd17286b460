"""How long taking a snapshot, a checkpoint, a clone and a reader takes, at 10k and 1M keys.

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
from leveled_ray.admin.clone import create_clone
from leveled_ray.admin.progress import progress_bar
from leveled_ray.client.ray_connection import ensure_ray
from leveled_ray.files.sync import run_sync

import plots


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
    while time.monotonic() < deadline:  # let merges settle: the cache holds one L0's worth
        s = store.stats()
        if (not s["penciller"]["merging"]
                and s["backlog"]["unpersisted"] <= store.options.ledger.l0_max_keys):
            return
        time.sleep(0.5)


def measure(url: str, keys: int, repeat: int) -> dict:
    store = lr.open(url)
    try:
        load(store, keys)

        def snapshot():  # taking it, and releasing it (two round trips each way)
            store.snapshot().release()

        def checkpoint():
            store.delete_checkpoint(store.checkpoint().id)

        clones = iter(range(10**6))

        def clone():  # the parent's pin and the clone's two manifest versions; no file copied
            run_sync(create_clone(url, f"{url}-clone-{next(clones)}"))

        pinned = store.checkpoint()

        def reader():
            lr.reader(url, pinned.id).head("bench", "k0000000001")

        return {"snapshot": median_ms(snapshot, repeat),
                "checkpoint": median_ms(checkpoint, repeat),
                "clone": median_ms(clone, repeat),
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
    ensure_ray()
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
        target = ("(replays the journal above the persisted SQN)" if op.startswith("reader")
                  else "<= 1.5 and < 50 ms")
        print(f"{op:<24} {large[op]:>11.2f} ms {small[op]:>11.2f} ms "
              f"{large[op] / small[op]:>7.2f}  {target}")
    print(f"{'Ray round trip':<24} {rtt:>11.2f} ms\n{os.cpu_count()} cores; python "
          f"{sys.version.split()[0]}")
    path = plots.save_groups("points_in_time", "creation time by store size (ms)", {
        op: {f"{args.small:,} keys": small[op], f"{args.large:,} keys": large[op]}
        for op in small}, ylabel="ms")
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
