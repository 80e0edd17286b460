"""Put/get benchmark: leveled-ray against SlateDB and against a bare Ray round trip, in one run.

For each object store (file://, and S3 on a local moto server):
* put_many throughput (durable, batches of --batch) vs SlateDB's WriteBatch, 1 KiB and 8 KiB,
  one batch at a time (x1) and four in flight (x4), the same for both stores;
* get_many throughput vs SlateDB's async get loop, after restarting both stores;
* GET and HEAD p50/p99 vs a bare Ray actor round trip;
* on file://, a durable single PUT p50 vs two bare round trips plus one raw local create
  (obstore's create-if-absent of a journal-sized object, as the Journal writes), with the
  time inside the Bookie (arrival to answer, its ``stats()``) beside it: the rest is Ray's
  and the client's.

Run: ``python bench/put_get.py`` (``--quick`` for a smaller run). Prints ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import socket
import sys
import tempfile
import time

import ray

import leveled_ray as lr
from leveled_ray.client.ray_connection import ensure_ray

import plots

MIB = 2**20


def percentile(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def paired_rates(n, fns: dict, runs: int = 3) -> dict:
    """Rows/s of each of ``fns`` (each handles ``n`` rows), best of ``runs``, run in turn
    (a, b, a, b, ...): this machine's speed drifts within a minute, and taking turns keeps
    a ratio of two of them meaningful."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(runs):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return {name: n / t for name, t in best.items()}


def values(n, size, seed):
    rng = random.Random(seed)
    half = size // 2  # half random, half repeated: compressible like typical records
    return [rng.randbytes(half) + b"r" * (size - half) for _ in range(n)]


# --- peers ------------------------------------------------------------------------------------


@ray.remote(num_cpus=0)
class Echo:
    """The bare Ray round trip: an async actor that answers at once."""

    async def get(self, key):
        return b"x" * 1024

    async def put(self, key, value):
        return 1


def local_create_times(root, n, size=1536):
    """Raw creates of ``size``-byte objects in a local directory: obstore's create-if-absent,
    as the file:// store writes a journal file."""
    import obstore
    from obstore.store import LocalStore

    local = LocalStore(os.path.join(root, "raw-creates"), mkdir=True)
    data = os.urandom(size)
    times = []
    for i in range(n):
        t = time.perf_counter()
        obstore.put(local, f"c{i:08d}", data, mode="create", use_multipart=False)
        times.append(time.perf_counter() - t)
    return times


def ray_rtt(n):
    echo = Echo.remote()
    ray.get(echo.get.remote(b"k"))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(echo.get.remote(b"k"))
        times.append(time.perf_counter() - t)
    ray.kill(echo)
    return times


class SlateRun:
    def __init__(self, kind, root, endpoint):
        from slatedb.uniffi import DbBuilder, ObjectStore, ObjectStoreBuilder

        self._builder = DbBuilder
        if kind == "file":
            self.store = ObjectStore.resolve("file:///")
            self.path = root.lstrip("/") + "/slatedb"
        else:
            b = ObjectStoreBuilder.from_url("s3://bench")
            for k, v in (("aws_endpoint", endpoint), ("aws_allow_http", "true"),
                         ("aws_access_key_id", "bench"), ("aws_secret_access_key", "bench"),
                         ("aws_region", "us-east-1")):
                b.with_config(k, v)  # the builder is changed in place
            self.store = b.build()
            self.path = f"slatedb-{os.getpid()}"

    async def open(self):
        self.db = await self._builder(self.path, self.store).build()

    async def load(self, keys, vals, batch, in_flight):
        from slatedb.uniffi import WriteBatch

        async def write(lo):
            wb = WriteBatch()
            for k, v in zip(keys[lo:lo + batch], vals[lo:lo + batch]):
                wb.put(k, v)
            await (await self.db.write(wb)).await_durable()  # acknowledged once durable

        t = time.perf_counter()
        await bounded(write, range(0, len(keys), batch), in_flight)
        return time.perf_counter() - t

    async def get_loop(self, keys):
        t = time.perf_counter()
        for k in keys:
            await self.db.get(k)
        return time.perf_counter() - t

    async def close(self):
        await self.db.shutdown()


async def bounded(fn, items, in_flight):
    """Run ``fn(item)`` for every item with at most ``in_flight`` running at once."""
    sem = asyncio.Semaphore(in_flight)

    async def one(item):
        async with sem:
            await fn(item)

    await asyncio.gather(*(one(i) for i in items))


def leveled_load(store, keys, vals, batch, in_flight):
    async def write(lo):
        await store.put_many_async([lr.Put("bench", k, v) for k, v in
                                    zip(keys[lo:lo + batch], vals[lo:lo + batch])])

    t = time.perf_counter()
    asyncio.run(bounded(write, range(0, len(keys), batch), in_flight))
    return time.perf_counter() - t


# --- one object store ---------------------------------------------------------------------------


def bench_backend(kind, args, endpoint, root):
    rows = []
    if kind == "file":
        url = f"file://{root}/leveled"
        options = lr.Options()
    else:
        url = "s3://bench/leveled"
        options = lr.Options(object_store=dict(
            s3_endpoint=endpoint, s3_region="us-east-1", s3_access_key_id="bench",
            s3_secret_access_key="bench"))
    n = args.objects if kind == "file" else max(1000, args.objects // 4)
    slate = SlateRun(kind, root, endpoint)
    asyncio.run(slate.open())
    store = lr.open(url, options)
    try:
        for size in (1024, 8192):
            for in_flight in (1, 4):
                keys = [f"k{size}-{in_flight}-{i:08d}" for i in range(n)]
                vals = values(n, size, size)
                ours = n * size / leveled_load(store, keys, vals, args.batch, in_flight) / MIB
                theirs = n * size / asyncio.run(slate.load(
                    [k.encode() for k in keys], vals, args.batch, in_flight)) / MIB
                rows.append((kind, f"put_many {size // 1024} KiB x{in_flight} (MiB/s)", ours,
                             theirs, "slatedb", ">= 10"))
        # Reads after a restart of both stores: nothing is served from a write cache.
        store.close()
        asyncio.run(slate.close())
        store = lr.open(url, options)
        asyncio.run(slate.open())
        keys = [f"k1024-1-{i:08d}" for i in random.Random(7).sample(range(n), min(n, 4000))]
        t = time.perf_counter()
        for lo in range(0, len(keys), 1000):
            store.get_many([("bench", k) for k in keys[lo:lo + 1000]])
        ours = len(keys) / (time.perf_counter() - t)
        theirs = len(keys) / asyncio.run(slate.get_loop([k.encode() for k in keys]))
        rows.append((kind, "get_many (gets/s)", ours, theirs, "slatedb", ""))

        rtt = ray_rtt(args.latency)
        # Keys not read before (the value comes from the Journal), then the same keys again
        # (the value comes from the Bookie's cache). HEAD never reads the Journal.
        fresh = [f"k1024-4-{i:08d}" for i in random.Random(8).sample(range(n), args.latency)]
        for op, label, fn in (("GET", "uncached", store.get), ("GET", "cached", store.get),
                              ("HEAD", "", store.head)):
            times = []
            for k in fresh:
                t0 = time.perf_counter()
                fn("bench", k)
                times.append(time.perf_counter() - t0)
            for q, pct in ((0.5, "p50"), (0.99, "p99")):
                target = "<= 1.3" if (op, pct) == ("GET", "p50") else ""
                rows.append((kind, f"{op} {label} {pct} (ms)".replace("  ", " "),
                             percentile(times, q) * 1e3, percentile(rtt, q) * 1e3, "Ray RTT",
                             target))
        if kind == "file":
            rows += single_put_rows(store, args.latency, rtt, root)
    finally:
        store.close()
        asyncio.run(slate.close())
    return rows


def single_put_rows(store, n, rtt, root):
    """A durable single put's p50 against two bare Ray round trips plus one raw create, and
    its part inside the Bookie (the p50 of the Bookie's last 1 024 write calls, nearly all of
    them these puts)."""
    value = values(1, 1024, 9)[0]
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        store.put("bench", f"single-{i:08d}", value)
        times.append(time.perf_counter() - t0)
    inside = store.stats()["latency_ms"]["put"]["p50"]
    create = local_create_times(root, n)
    floor = 2 * percentile(rtt, 0.5) + percentile(create, 0.5)
    put = percentile(times, 0.5) * 1e3
    return [("file", "PUT p50 (ms)", put, floor * 1e3, "2 RTT + create", "<= 1.0"),
            ("file", "PUT p50, in the Bookie (ms)", inside, percentile(create, 0.5) * 1e3,
             "create", ""),
            ("file", "PUT p50, Ray and client (ms)", put - inside, percentile(rtt, 0.5) * 1e3,
             "Ray RTT", "")]


def start_moto():
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench",
                 aws_secret_access_key="bench", region_name="us-east-1").create_bucket(
        Bucket="bench")
    return server, endpoint


def run_backends(bench, args) -> list:
    """``bench(kind, args, endpoint, root)``'s rows for each store of ``args.backends``, on a
    local Ray started here (and a moto server for ``s3``), all removed afterwards."""
    root = tempfile.mkdtemp(prefix="lr-bench-")
    os.environ.setdefault("RAY_TMPDIR", root)
    ensure_ray()
    rows, server = [], None
    try:
        for kind in args.backends.split(","):
            endpoint = None
            if kind == "s3":
                server, endpoint = start_moto()
            rows += bench(kind, args, endpoint, root)
    finally:
        if server:
            server.stop()
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--latency", type=int, default=1000, help="single GET/HEAD samples")
    parser.add_argument("--backends", default="file,s3")
    parser.add_argument("--quick", action="store_true", help="a small run (CI smoke)")
    args = parser.parse_args()
    if args.quick:
        args.objects, args.latency = 2000, 200
    rows = run_backends(bench_backend, args)
    print()
    print(f"{'store':<6} {'measure':<28} {'leveled-ray':>12} {'peer':>12} {'ratio':>8}  "
          f"{'peer':<8} target")
    for kind, what, ours, theirs, peer, target in rows:
        ratio = ours / theirs if peer and theirs else float("nan")
        print(f"{kind:<6} {what:<28} {ours:>12.2f} {theirs:>12.2f} {ratio:>8.2f}  "
              f"{peer:<8} {target}")
    print(f"\n{len(rows)} rows; objects={args.objects} batch={args.batch}; "
          f"{os.cpu_count()} cores; python {sys.version.split()[0]}")
    path = plots.save_ratios("put_get", "put/get: leveled-ray / peer (ms rows: lower is better)",
                             [(f"{kind} {what} vs {peer}", ours / theirs)
                              for kind, what, ours, theirs, peer, _ in rows if peer and theirs])
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
