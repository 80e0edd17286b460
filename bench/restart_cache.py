"""Restart benchmark: the first reads of a restarted store against a warm store's, on S3-like
latency, with the node's disk cache and without it, in one run.

moto's S3 on 127.0.0.1 behind the fault proxy, which holds every request ``--latency-ms``
(S3's first-byte latency; no faults). ``--objects`` keys of 1 KiB are written with
``put_many``, and the store is reopened (a new Bookie process; nothing in memory). Then, in
batches of 1 000 random keys (``--keys`` distinct keys):

* **cold**: the first ``get_many`` pass of the reopened store, its disk cache empty (every
  footer and block from S3);
* **warm**: the same batches again, from the Bookie's memory;
* **restarted**: the store closed and reopened (a new process: its memory is empty), the same
  batches again, once the open returned: what its warm start loaded from the node's disk
  cache is in memory, the rest comes from that cache;
* **restarted, no disk cache**: the same with ``disk_cache.size=0``: from S3 again.

Target (issue 55): restarted / warm >= 0.8 (keys/s). Run: ``python bench/restart_cache.py``
(``--quick`` for a smaller run). Prints the table and saves ``docs/img/restart_cache.png``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import leveled_ray as lr  # noqa: E402
from leveled_ray.client.ray_connection import ensure_ray  # noqa: E402
from leveled_ray.testing.fault_proxy import FaultProxy  # noqa: E402

import plots  # noqa: E402
from put_get import start_moto  # noqa: E402

BATCH = 1000


def options(endpoint: str, cache_dir: str, size: int = 1 << 30) -> lr.Options:
    return lr.Options(
        object_store=dict(s3_endpoint=endpoint, s3_region="us-east-1", s3_access_key_id="bench",
                          s3_secret_access_key="bench"),
        disk_cache=dict(path=cache_dir, size=size),
        gc=dict(interval_s=0), journal=dict(compaction_interval_s=0))


def keys_per_s(store, batches) -> float:
    store.get_many([("b", "none")])  # the first call to a new Bookie: not the cache's to pay
    started = time.perf_counter()
    for batch in batches:
        got = store.get_many(batch)
        assert all(v is not None for v in got)
    return sum(map(len, batches)) / (time.perf_counter() - started)


def settle_disk(store) -> None:
    """Wait until the Bookie's disk writes are done (they go in the background)."""
    for _ in range(200):
        stats = store.stats()["disk_cache"]
        if stats["puts"] + stats.get("dropped", 0) >= stats["misses"]:
            return
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys read")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.objects, args.keys = 20_000, 4_000
    ensure_ray()
    cache_dir = tempfile.mkdtemp(prefix="lr-bench-disk-cache-")
    server, endpoint = start_moto()
    rng = random.Random(1)
    keys = [("b", f"k{i:07d}") for i in range(args.objects)]
    picked = rng.sample(keys, args.keys)
    batches = [picked[i:i + BATCH] for i in range(0, len(picked), BATCH)]
    rates: dict[str, float] = {}
    try:
        with FaultProxy(endpoint, latency_s=args.latency_ms / 1000) as proxy:
            url = f"s3://bench/restart-{uuid.uuid4().hex[:8]}"
            opts = options(proxy.endpoint, cache_dir)
            with lr.open(url, opts) as store:
                for i in range(0, len(keys), BATCH):
                    store.put_many([lr.Put(b, k, os.urandom(1024)) for b, k in keys[i:i + BATCH]])
            with lr.open(url, opts) as store:
                rates["cold"] = keys_per_s(store, batches)
                rates["warm"] = keys_per_s(store, batches)
                settle_disk(store)
            with lr.open(url, opts) as store:
                opened = store.stats()["opened"]
                rates["restarted"] = keys_per_s(store, batches)
                disk = store.stats()["disk_cache"]
            with lr.open(url, options(proxy.endpoint, cache_dir, size=0)) as store:
                rates["restarted, no disk cache"] = keys_per_s(store, batches)
    finally:
        server.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)
    print(f"\nget_many of {BATCH}, {args.keys} distinct keys of {args.objects}, "
          f"S3 at {args.latency_ms:g} ms a request (moto via proxy); the restarted store's disk "
          f"cache: {disk['hits']} hits, {disk['misses']} misses, {disk['errors']} errors; its "
          f"open took {opened['open_s']} s, of which its warm start {opened.get('warm_s')} s "
          f"({opened.get('warmed', 0)} blocks, {disk.get('warmed_values', 0)} values)")
    for name, rate in rates.items():
        print(f"  {name:26} {rate:10,.0f} keys/s")
    rows = [("restarted / warm (keys/s)", rates["restarted"] / rates["warm"]),
            ("restarted / cold (keys/s)", rates["restarted"] / rates["cold"]),
            ("restarted / restarted without it (keys/s)",
             rates["restarted"] / rates["restarted, no disk cache"])]
    for label, ratio in rows:
        print(f"  {label:44} {ratio:6.2f}x")
    print(f"  target: restarted / warm >= 0.8: {'met' if rows[0][1] >= 0.8 else 'not met'}")
    plots.save_ratios("restart_cache", "first reads of a restarted store, node disk cache",
                      rows, xlabel="ratio of keys/s in the same run")


if __name__ == "__main__":
    main()
