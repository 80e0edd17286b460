"""Write amplification, object-store requests and Penciller memory: leveled-ray against SlateDB,
in one run, on a file:// store.

* **Write amplification**: bytes written to the object store / bytes ingested, for ``--keys``
  values of ``--size`` bytes (random, so compression plays no part), with a share of
  ``--overwrite`` writes replacing earlier keys, so that merges and journal compaction have work.
  Both stores get the same writes in the same order, and both are left to settle (merges and
  compactions finish) before counting. leveled-ray counts the bytes its actors put; SlateDB's
  runs in a child process whose kernel counter of bytes written to storage
  (``write_bytes``) is read.
* **Requests per 1k durable writes**: single-key puts, each acknowledged once durable, one at a
  time and ``--concurrency`` in flight (group commit), counted by leveled-ray's object-store
  counters and by SlateDB's ``slatedb.object_store.request_count`` metric.
* **Penciller memory at ``--memory-keys`` keys** (default 1M, small values: the Ledger holds
  keys and metadata only), resident and private, next to the Penciller's idle footprint.

Run: ``python bench/write_amp.py`` (1M x 8 KiB: several GiB of disk and a long SlateDB run),
or ``--preset ci`` / ``--preset medium`` for smaller runs. Prints ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import queue
import shutil
import tempfile
import time

import numpy as np
import ray

import leveled_ray as lr
from leveled_ray.admin.progress import progress_bar
from leveled_ray.client.ray_connection import ensure_ray

import plots
from put_get import bounded  # bench/ is the script's directory

MIB = 2**20
PRESETS = {  # keys, memory_keys, durable writes
    "full": (1_000_000, 1_000_000, 500),
    "medium": (100_000, 1_000_000, 500),
    "ci": (10_000, 100_000, 200),
}
ACTORS = ("inker", "penciller", "merges", "compaction")


def batches(keys: int, size: int, batch: int, overwrite: float, seed: int = 7):
    """The workload, batch by batch: ``(key names, values)``. The same arguments give the same
    writes, so both stores ingest identical data without holding it all in memory."""
    rng = np.random.default_rng(seed)
    next_id = 0
    written = 0
    while written < keys:
        n = min(batch, keys - written)
        reuse = (rng.random(n) < overwrite) & (next_id > 0)
        ids = np.empty(n, dtype=np.int64)
        fresh = int((~reuse).sum())
        ids[~reuse] = np.arange(next_id, next_id + fresh)
        ids[reuse] = rng.integers(0, max(next_id, 1), int(reuse.sum()))
        next_id += fresh
        blob = rng.bytes(n * size)
        yield ([f"key{i:010d}" for i in ids],
               [blob[j * size:(j + 1) * size] for j in range(n)])
        written += n


# --- leveled-ray -------------------------------------------------------------------------------


def io_totals(stats: dict) -> dict:
    """Object-store requests and bytes written, summed over the Bookie and its actors."""
    parts = [stats["io"]] + [stats[a]["io"] for a in ACTORS if "io" in stats.get(a, {})]
    requests = sum(p["puts"] + p["gets"] + p["lists"] + p["deletes"] + p["heads"] for p in parts)
    return {"put_bytes": sum(p["put_bytes"] for p in parts), "requests": requests}


def settle(store, timeout: float = 600.0) -> None:
    """Wait until the Ledger has persisted every write and no merge is due or running."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        s = store.stats()
        p = s["penciller"]
        idle = (not p["merging"] and not s["inker"]["compacting"] and p["l0_files"] == 0
                and s["clerks"].get("delete_pending", 0) == 0)
        quiet = quiet + 1 if idle else 0
        if quiet >= 3:  # three quiet polls in a row: nothing more is coming
            return
        time.sleep(1.0)
    raise TimeoutError("leveled-ray did not settle")


def leveled_write_amp(url, args) -> dict:
    options = lr.Options(journal=dict(compaction_interval_s=args.compaction_interval))
    store = lr.open(url, options)
    ingested = 0
    started = time.perf_counter()
    try:
        show = progress_bar("leveled-ray writes")

        async def load():
            nonlocal ingested
            done = 0

            async def write(item):
                nonlocal ingested, done
                keys, vals = item
                await store.put_many_async([lr.Put("bench", k, v) for k, v in zip(keys, vals)])
                ingested += sum(map(len, vals))
                done += len(keys)
                show(done, args.keys)

            await bounded(write, batches(args.keys, args.size, args.batch, args.overwrite),
                          args.in_flight)

        asyncio.run(load())
        load_s = time.perf_counter() - started
        store.compact_journal()  # one last compaction, as the schedule would run
        settle(store)
        totals = io_totals(store.stats())
    finally:
        store.close()
    return {"ingested": ingested, "written": totals["put_bytes"], "load_s": load_s}


def leveled_requests(url, writes: int, concurrency: int) -> dict:
    store = lr.open(url, lr.Options())
    try:
        before = io_totals(store.stats())["requests"]

        async def run():
            await bounded(lambda i: store.put_async("bench", f"d{concurrency}-{i}", b"x" * 1024),
                          range(writes), concurrency)

        asyncio.run(run())
        after = io_totals(store.stats())["requests"]
    finally:
        store.close()
    return {"requests": after - before}


def penciller_memory(url, keys: int) -> dict:
    options = lr.Options(journal=dict(compaction_interval_s=3600))
    store = lr.open(url, options)
    try:
        idle = store.stats()["penciller"]["process"]
        show = progress_bar("Penciller memory keys")
        batch = 20_000
        for lo in range(0, keys, batch):
            n = min(batch, keys - lo)
            store.put_many([lr.Put("bench", f"m{lo + i:010d}", b"v%d" % (lo + i))
                            for i in range(n)])
            show(lo + n, keys)
        settle(store)
        stats = store.stats()["penciller"]
        return {"idle": idle, "loaded": stats["process"], "levels": stats["level_files"]}
    finally:
        store.close()


# --- SlateDB (in a child process, so its kernel write counter is its own) ----------------------


def _written() -> int:
    """Bytes this process has sent to storage. (Not ``wchar``: SlateDB's runtime keeps writing a
    few bytes to wake-up pipes, which are not the object store.)"""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("write_bytes"))


def _slate_requests(recorder) -> int:
    return sum(m.value[0] for m in recorder.snapshot()
               if m.name == "slatedb.object_store.request_count")


def slatedb_child(job: str, path: str, args: dict, out) -> None:
    from slatedb.uniffi import (
        DbBuilder,
        DefaultMetricsRecorder,
        FlushOptions,
        FlushType,
        ObjectStore,
        WriteBatch,
    )

    async def main():
        recorder = DefaultMetricsRecorder()
        builder = DbBuilder(path.lstrip("/"), ObjectStore.resolve("file:///"))
        builder.with_metrics_recorder(recorder)
        db = await builder.build()
        start_bytes, start_requests = _written(), _slate_requests(recorder)
        if job == "write_amp":
            ingested = 0
            started = time.perf_counter()

            async def write(item):
                nonlocal ingested
                keys, vals = item
                wb = WriteBatch()
                for k, v in zip(keys, vals):
                    wb.put(k.encode(), v)
                await (await db.write(wb)).await_durable()
                ingested += sum(map(len, vals))

            await bounded(write, batches(args["keys"], args["size"], args["batch"],
                                         args["overwrite"]), args["in_flight"])
            load_s = time.perf_counter() - started
            await db.flush_with_options(FlushOptions(flush_type=FlushType.MEM_TABLE))
            # Let the compactor finish: wait until nothing has been written for 12 s (two of
            # its 5 s polls), bounded.
            last, quiet_since = _written(), time.monotonic()
            deadline = time.monotonic() + args["settle_s"]
            while time.monotonic() < deadline and time.monotonic() - quiet_since < 12:
                await asyncio.sleep(1)
                now = _written()
                if now != last:
                    last, quiet_since = now, time.monotonic()
            result = {"ingested": ingested, "written": _written() - start_bytes, "load_s": load_s}
        else:
            n, concurrency = args["writes"], args["concurrency"]
            async def put(i):
                handle = await db.put(f"d{concurrency}-{i}".encode(), b"x" * 1024)
                await handle.await_durable()

            await bounded(put, range(n), concurrency)
            result = {"requests": _slate_requests(recorder) - start_requests}
        await db.shutdown()
        out.put(result)

    asyncio.run(main())


def slatedb(job: str, path: str, **args) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=slatedb_child, args=(job, path, args, out))
    child.start()
    while True:
        try:
            result = out.get(timeout=2)
            break
        except queue.Empty:
            if not child.is_alive():
                raise RuntimeError(f"the SlateDB process failed (exit code {child.exitcode})")
    child.join()
    return result


# --- the run -----------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--keys", type=int, help="writes in the write-amplification run")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--overwrite", type=float, default=0.25,
                        help="share of writes that replace an earlier key")
    parser.add_argument("--compaction-interval", type=float, default=30.0,
                        help="leveled-ray's journal compaction schedule, seconds")
    parser.add_argument("--memory-keys", type=int)
    parser.add_argument("--durable-writes", type=int)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--dir", help="where the stores go (default: a temporary directory)")
    args = parser.parse_args()
    keys, memory_keys, durable = PRESETS[args.preset]
    args.keys = args.keys or keys
    args.memory_keys = args.memory_keys or memory_keys
    args.durable_writes = args.durable_writes or durable

    root = tempfile.mkdtemp(prefix="lr-wamp-", dir=args.dir)
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="lr-ray-"))
    ensure_ray()
    rows = []
    try:
        ours = leveled_write_amp(f"file://{root}/leveled", args)
        theirs = slatedb("write_amp", f"{root}/slatedb", keys=args.keys, size=args.size,
                         batch=args.batch, overwrite=args.overwrite, in_flight=args.in_flight,
                         settle_s=600)
        wa_ours = ours["written"] / ours["ingested"]
        wa_theirs = theirs["written"] / theirs["ingested"]
        rows.append(("write amplification", wa_ours, wa_theirs, "<= 1/3 of peer, <= 1.3"))
        rows.append(("ingest MiB/s", ours["ingested"] / ours["load_s"] / MIB,
                     theirs["ingested"] / theirs["load_s"] / MIB, ""))
        shutil.rmtree(f"{root}/leveled", ignore_errors=True)
        shutil.rmtree(f"{root}/slatedb", ignore_errors=True)

        for c in (1, args.concurrency):
            ours = leveled_requests(f"file://{root}/req-{c}", args.durable_writes, c)
            theirs = slatedb("requests", f"{root}/slate-req-{c}", writes=args.durable_writes,
                             concurrency=c)
            per_k = 1000 / args.durable_writes
            rows.append((f"requests / 1k durable puts x{c}", ours["requests"] * per_k,
                         theirs["requests"] * per_k, ""))

        mem = penciller_memory(f"file://{root}/memory", args.memory_keys)
        rows.append((f"Penciller private MiB @ {args.memory_keys:,} keys",
                     mem["loaded"]["private_bytes"] / MIB, mem["idle"]["private_bytes"] / MIB,
                     "<= 150 (peer: idle)"))
        rows.append((f"Penciller resident MiB @ {args.memory_keys:,} keys",
                     mem["loaded"]["rss_bytes"] / MIB, mem["idle"]["rss_bytes"] / MIB,
                     "(peer: idle)"))
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{'measure':<40} {'leveled-ray':>12} {'peer':>12} {'ratio':>8}  target")
    for what, a, b, target in rows:
        print(f"{what:<40} {a:>12.3f} {b:>12.3f} {a / b if b else float('nan'):>8.3f}  {target}")
    print(f"\npreset={args.preset} keys={args.keys} size={args.size} overwrite={args.overwrite} "
          f"batch={args.batch} in_flight={args.in_flight}; peer is SlateDB unless noted; "
          f"{os.cpu_count()} cores")
    path = plots.save_ratios("write_amp", "write amplification and ingest: leveled-ray / peer",
                             [(what, a / b) for what, a, b, _ in rows if b])
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
