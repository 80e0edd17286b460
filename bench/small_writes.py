"""Small writes: single and concurrent durable puts, against SlateDB, a bare Ray round trip and a
raw object-store create, all measured in the same run.

For each object store (file://, and S3 on a local moto server), with 1 KiB values:
* single ``put`` p50 against 2 x a bare Ray round trip + one raw create of a journal file's size;
* concurrent single puts from one process, threads and asyncio, 1/8/32/128 in flight, against
  SlateDB ``put`` + ``await_durable`` at the same concurrency (asyncio);
* sequential puts from 4 Ray tasks at once against one task alone, and the same for bare Ray
  calls (Ray's own scaling on this machine);
* the journal files kept, against those written (merges of small files keep few);
* ``put_many`` of 1 KiB values against SlateDB ``WriteBatch``, awaited until durable;
* single ``get`` p50 against a bare Ray round trip: of recent writes, and after a restart
  (every value read from its journal file).

Latency phases start on a settled store: no merge of small journal files still running.

Run: ``python bench/small_writes.py`` (``--quick`` for a smaller run). Prints ratios and
writes ``docs/img/small_writes.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import obstore
import ray
from obstore.store import LocalStore, S3Store

import leveled_ray as lr

import plots
from put_get import Echo, SlateRun, bounded, leveled_load, percentile, ray_rtt, run_backends, values

SIZE = 1024
LEVELS = (1, 8, 32, 128)


def raw_creates(kind, root, endpoint, n):
    """Create-if-absent of ``n`` objects the size of a one-put journal file, straight through
    obstore: the object store's own cost of one durable put."""
    if kind == "file":
        os.makedirs(f"{root}/raw", exist_ok=True)
        store = LocalStore(f"{root}/raw")
    else:
        store = S3Store("bench", endpoint=endpoint, region="us-east-1", access_key_id="bench",
                        secret_access_key="bench", client_options={"allow_http": True})
    data = values(1, SIZE + 200, 3)[0]
    times = []
    for i in range(n):
        t = time.perf_counter()
        obstore.put(store, f"raw/{os.getpid()}-{i:06d}", data, mode="create")
        times.append(time.perf_counter() - t)
    return times


def single_puts(store, n, prefix):
    val = values(1, SIZE, 1)[0]
    times = []
    for i in range(n):
        t = time.perf_counter()
        store.put("bench", f"{prefix}-{i:06d}", val)
        times.append(time.perf_counter() - t)
    return times


def thread_puts(store, in_flight, total, prefix):
    val = values(1, SIZE, 2)[0]
    per = max(1, total // in_flight)
    barrier = threading.Barrier(in_flight)

    def worker(w):
        barrier.wait()
        for i in range(per):
            store.put("bench", f"{prefix}-{w:03d}-{i:06d}", val)

    with ThreadPoolExecutor(in_flight) as pool:
        t = time.perf_counter()
        list(pool.map(worker, range(in_flight)))
        return per * in_flight / (time.perf_counter() - t)


def async_puts(store, in_flight, total, prefix):
    val = values(1, SIZE, 2)[0]

    async def one(i):
        await store.put_async("bench", f"{prefix}-{i:06d}", val)

    t = time.perf_counter()
    asyncio.run(bounded(one, range(total), in_flight))
    return total / (time.perf_counter() - t)


def slate_puts(slate, in_flight, total, prefix):
    val = values(1, SIZE, 2)[0]

    async def run():
        async def one(i):
            await (await slate.db.put(f"{prefix}-{i:06d}".encode(), val)).await_durable()

        t = time.perf_counter()
        await bounded(one, range(total), in_flight)
        return total / (time.perf_counter() - t)

    return asyncio.run(run())


def get_p50(store, keys):
    times = []
    for k in keys:
        t = time.perf_counter()
        store.get("bench", k)
        times.append(time.perf_counter() - t)
    return percentile(times, 0.5)


@ray.remote(num_cpus=0)
def task_puts(store, n, prefix):
    """Sequential puts from one Ray task: ``(start, end)`` wall-clock times."""
    val = values(1, SIZE, 4)[0]
    start = time.time()
    for i in range(n):
        store.put("bench", f"{prefix}-{i:06d}", val)
    return start, time.time()


@ray.remote(num_cpus=0)
def task_calls(echo, n):
    """Sequential bare Ray calls (a 1 KiB argument) from one Ray task, as ``task_puts``."""
    val = values(1, SIZE, 4)[0]
    start = time.time()
    for i in range(n):
        ray.get(echo.put.remote(i, val))
    return start, time.time()


def tasks_rate(store, tasks, n, prefix):
    spans = ray.get([task_puts.remote(store, n, f"{prefix}-{t}") for t in range(tasks)])
    return tasks * n / (max(e for _, e in spans) - min(s for s, _ in spans))


def bare_tasks_rate(echo, tasks, n):
    """The same from Ray tasks to an actor that answers at once: Ray's own scaling here."""
    spans = ray.get([task_calls.remote(echo, n) for _ in range(tasks)])
    return tasks * n / (max(e for _, e in spans) - min(s for s, _ in spans))


def settle(store, timeout_s=120.0):
    """Compact the Journal and wait until nothing runs in the background: the merges of small
    journal files an earlier phase started must not share the next phase's object store
    (moto serves one request at a time)."""
    store.compact_journal()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = store.stats()
        if not stats["inker"]["compacting"] and not stats["clerks"].get("delete_pending"):
            return
        time.sleep(0.1)


def bench_backend(kind, args, endpoint, root):
    rows = []
    if kind == "file":
        url, options = f"file://{root}/leveled", lr.Options()
    else:
        url = "s3://bench/leveled"
        options = lr.Options(object_store=dict(
            s3_endpoint=endpoint, s3_region="us-east-1", s3_access_key_id="bench",
            s3_secret_access_key="bench"))
    scale = 1 if kind == "file" else 4
    slate = SlateRun(kind, root, endpoint)
    asyncio.run(slate.open())
    store = lr.open(url, options)
    try:
        # put_many first, on both fresh stores, after one batch each to warm up.
        n = args.objects // scale
        keys = [f"many-{i:08d}" for i in range(n + args.batch)]
        vals = values(n + args.batch, SIZE, 5)
        leveled_load(store, keys[n:], vals[n:], args.batch, 1)
        asyncio.run(slate.load([k.encode() for k in keys[n:]], vals[n:], args.batch, 1))
        keys, vals = keys[:n], vals[:n]
        ours = n / leveled_load(store, keys, vals, args.batch, 1)
        theirs = n / asyncio.run(slate.load([k.encode() for k in keys], vals, args.batch, 1))
        rows.append((kind, f"put_many x{args.batch} (puts/s)", ours, theirs, "slatedb", ">= 10"))
        single_puts(store, 20, "warm")
        settle(store)
        rtt = percentile(ray_rtt(args.samples), 0.5)
        create = percentile(raw_creates(kind, root, endpoint, args.samples // scale), 0.5)
        put = percentile(single_puts(store, args.samples // scale, "single"), 0.5)
        rows.append((kind, "put p50 (ms)", put * 1e3, (2 * rtt + create) * 1e3,
                     "2 RTT + create", "<= 1"))
        for in_flight in LEVELS:
            total = max(200, 40 * in_flight) // scale
            theirs = slate_puts(slate, in_flight, total, f"slate{in_flight}")
            target = ">= 3" if in_flight >= 8 else ""
            ours = async_puts(store, in_flight, total, f"async{in_flight}")
            rows.append((kind, f"put_async x{in_flight} (puts/s)", ours, theirs, "slatedb",
                         target))
            ours = thread_puts(store, in_flight, total, f"thread{in_flight}")
            rows.append((kind, f"put {in_flight} threads (puts/s)", ours, theirs, "slatedb",
                         target))
        n = args.task_puts // scale
        settle(store)
        tasks_rate(store, 4, 5, "warm")  # start the tasks' workers
        # The best of two rounds each: a background merge of small journal files may start
        # during any one of them.
        one = max(tasks_rate(store, 1, n, f"task1-{r}") for r in range(2))
        four = max(tasks_rate(store, 4, n, f"task4-{r}") for r in range(2))
        rows.append((kind, "put from 4 Ray tasks (puts/s)", four, one, "1 task", ">= 2"))
        echo = Echo.remote()
        bare_tasks_rate(echo, 4, 5)
        one = max(bare_tasks_rate(echo, 1, n) for _ in range(2))
        four = max(bare_tasks_rate(echo, 4, n) for _ in range(2))
        ray.kill(echo)
        rows.append((kind, "bare Ray calls, 4 tasks (/s)", four, one, "1 task", ""))
        reads = args.samples // scale
        recent = [f"recent-{i:06d}" for i in range(reads)]
        settle(store)
        store.put_many([lr.Put("bench", k, v) for k, v in zip(recent, values(reads, SIZE, 6))])
        rows.append((kind, "get p50, recent (ms)", get_p50(store, recent) * 1e3, rtt * 1e3,
                     "Ray RTT", "<= 1.5"))
        written = store.stats()["inker"]["groups"]
        store.close()  # after a restart, every value is read from its journal file
        store = lr.open(url, options)
        rows.append((kind, "get p50, from journal (ms)", get_p50(store, keys[:reads]) * 1e3,
                     rtt * 1e3, "Ray RTT", ""))
        # Each single put wrote a journal file; merges of small files keep few of them.
        inker = store.stats()["inker"]
        rows.append((kind, "journal files kept / written", inker["journal_files"],
                     written + inker["groups"], "written", ""))
    finally:
        store.close()
        asyncio.run(slate.close())
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1000, help="single put/get samples")
    parser.add_argument("--objects", type=int, default=20_000, help="put_many objects")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--task-puts", type=int, default=1000, help="puts per Ray task")
    parser.add_argument("--backends", default="file,s3")
    parser.add_argument("--quick", action="store_true", help="a small run (CI smoke)")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.objects, args.task_puts = 200, 4000, 200
    rows = run_backends(bench_backend, args)
    print()
    print(f"{'store':<6} {'measure':<30} {'leveled-ray':>12} {'peer':>12} {'ratio':>7}  "
          f"{'peer':<15} target")
    for kind, what, ours, theirs, peer, target in rows:
        print(f"{kind:<6} {what:<30} {ours:>12.2f} {theirs:>12.2f} {ours / theirs:>7.2f}  "
              f"{peer:<15} {target}")
    print(f"\n{len(rows)} rows; {SIZE} B values; {os.cpu_count()} cores; "
          f"python {sys.version.split()[0]}")
    path = plots.save_ratios("small_writes", "small writes: leveled-ray / peer "
                             "(ms rows: lower is better)",
                             [(f"{kind} {what} vs {peer}", ours / theirs)
                              for kind, what, ours, theirs, peer, _ in rows])
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
