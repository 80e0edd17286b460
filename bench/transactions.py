"""Transactions: transfers between accounts against SlateDB's ``DbTransaction``, in one run.

A transfer reads two accounts and writes both (serializable). Keys are picked uniformly or
Zipf-skewed (s = 1.1) over ``--accounts``; 1, 8 and 32 transfers are in flight (asyncio
tasks in one process, for both stores). For each: committed transfers per second and the
abort rate (conflicts per attempt), on a plain store against SlateDB's serializable snapshot
isolation (each commit awaited durable, as ours is), then on 4 shards against 1. Then the
commit's p50: a one-shard transaction against a plain ``put_many`` of the same keys, and a
cross-shard one against a cross-shard ``put_many``.

Run: ``python bench/transactions.py`` (``--quick`` for a smaller run). Prints ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import tempfile
import time

import leveled_ray as lr
from leveled_ray.client.ray_connection import ensure_ray

import plots


def zipf_picker(n: int, skew: float, rng: random.Random):
    """Draws account numbers: uniform (``skew`` 0) or Zipf-skewed."""
    if not skew:
        return lambda: rng.randrange(n)
    # Cumulative weights, summed once: given plain weights, each draw sums all n of them,
    # which took a quarter of the client's event loop at 32 in flight.
    cum_weights = list(itertools.accumulate(1 / (i + 1) ** skew for i in range(n)))
    return lambda: rng.choices(range(n), cum_weights=cum_weights)[0]


def pair(pick) -> tuple[int, int]:
    a = pick()
    b = pick()
    while b == a:
        b = pick()
    return a, b


async def run_for(seconds: float, in_flight: int, attempt) -> tuple[float, float]:
    """Committed transfers per second and aborts per attempt: ``attempt()`` answers whether
    it committed, from ``in_flight`` tasks at once for ``seconds``."""
    done = {"committed": 0, "aborted": 0}
    deadline = time.perf_counter() + seconds

    async def client():
        while time.perf_counter() < deadline:
            done["committed" if await attempt() else "aborted"] += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(in_flight)))
    elapsed = time.perf_counter() - started
    tries = done["committed"] + done["aborted"]
    return done["committed"] / elapsed, done["aborted"] / max(1, tries)


def ours(store, pick):
    async def attempt() -> bool:
        a, b = pair(pick)
        keys = [("acct", f"a{a:05d}"), ("acct", f"a{b:05d}")]
        t = store.transaction()
        try:
            va, vb = await t.get_many_async(keys)
            t.put(*keys[0], b"%d" % (int(va) - 1))
            t.put(*keys[1], b"%d" % (int(vb) + 1))
            await t.commit_async()
            return True
        except lr.ConflictError:
            return False
    return attempt


def theirs(db, pick):
    from slatedb.uniffi import IsolationLevel

    async def attempt() -> bool:
        a, b = pair(pick)
        keys = [b"a%05d" % a, b"a%05d" % b]
        t = await db.begin(IsolationLevel.SERIALIZABLE_SNAPSHOT)
        try:
            va, vb = [await t.get(k) for k in keys]
            await t.put(keys[0], b"%d" % (int(va) - 1))
            await t.put(keys[1], b"%d" % (int(vb) + 1))
            handle = await t.commit()
            if handle is not None:
                await handle.await_durable()
            return True
        except Exception as exc:  # noqa: BLE001 - SlateDB's conflict error
            if "onflict" not in str(exc) and "onflict" not in type(exc).__name__:
                raise
            return False
    return attempt


async def open_slate(root: str):
    from slatedb.uniffi import DbBuilder, ObjectStore, WriteBatch

    db = await DbBuilder(root.lstrip("/") + "/slatedb", ObjectStore.resolve("file:///")).build()
    return db, WriteBatch


async def fill_slate(db, WriteBatch, accounts: int) -> None:
    batch = WriteBatch()
    for i in range(accounts):
        batch.put(b"a%05d" % i, b"1000")
    await (await db.write(batch)).await_durable()


def commit_p50(store, keys: list, n: int) -> tuple[float, float]:
    """Commit p50 of a transaction writing ``keys`` (read first), and of a ``put_many``."""
    async def run():
        commits, puts = [], []
        for i in range(n):
            t = store.transaction()
            await t.get_many_async(keys)
            for k in keys:
                t.put(*k, b"%d" % i)
            started = time.perf_counter()
            await t.commit_async()
            commits.append(time.perf_counter() - started)
            started = time.perf_counter()
            await store.put_many_async([lr.Put(*k, b"%d" % i) for k in keys])
            puts.append(time.perf_counter() - started)
        return statistics.median(commits) * 1e3, statistics.median(puts) * 1e3
    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds = 1.5 if args.quick else args.seconds
    ensure_ray()
    root = tempfile.mkdtemp(prefix="lr-bench-txn-")
    rows = []
    plain = lr.open(f"file://{root}/plain")
    sharded = lr.open(f"file://{root}/sharded", shards=4)
    one = lr.open(f"file://{root}/one", shards=1)
    db, WriteBatch = asyncio.run(open_slate(root))
    try:
        for store in (plain, sharded, one):
            store.put_many([lr.Put("acct", f"a{i:05d}", b"1000") for i in range(args.accounts)])
        asyncio.run(fill_slate(db, WriteBatch, args.accounts))
        for skew, label in ((0.0, "uniform"), (1.1, "zipf")):
            for in_flight in (1, 8, 32):
                pick = zipf_picker(args.accounts, skew, random.Random(in_flight))
                mine, my_aborts = asyncio.run(run_for(seconds, in_flight, ours(plain, pick)))
                slate, slate_aborts = asyncio.run(run_for(seconds, in_flight, theirs(db, pick)))
                rows.append((f"transfers/s {label} x{in_flight}", mine, slate, "slatedb",
                             ">= 3" if in_flight > 1 else ""))
                rows.append((f"abort rate {label} x{in_flight}", my_aborts, slate_aborts,
                             "slatedb", "<= 1"))
            four, _ = asyncio.run(run_for(seconds, 8, ours(sharded, zipf_picker(
                args.accounts, skew, random.Random(4)))))
            single, _ = asyncio.run(run_for(seconds, 8, ours(one, zipf_picker(
                args.accounts, skew, random.Random(4)))))
            rows.append((f"transfers/s {label} x8, 4 shards", four, single, "1 shard", ""))
        n = 20 if args.quick else 60
        same = [("acct", "a00001"), ("acct", "a00002")]
        mine, puts = commit_p50(plain, same, n)
        rows.append(("commit p50 (ms), one shard", mine, puts, "put_many", "<= 1.5"))
        apart = [("acct", f"a{i:05d}") for i in range(8)]
        assert len({sharded.shard_of(*k) for k in apart}) > 1
        mine, puts = commit_p50(sharded, apart, n)
        rows.append(("commit p50 (ms), across shards", mine, puts, "cross-shard put_many",
                     "<= 1.5"))
    finally:
        asyncio.run(db.shutdown())
        for store in (plain, sharded, one):
            store.close()
    print(f"{'measure':44} {'ours':>10} {'peer':>10} {'ratio':>7}  peer, target")
    for name, a, b, peer, target in rows:
        ratio = a / b if b else float("inf")
        print(f"{name:44} {a:10.3f} {b:10.3f} {ratio:7.2f}  {peer}, {target}")
    path = plots.save_ratios("transactions", "transactions: leveled-ray / peer (abort rates "
                             "and ms: lower is better)",
                             [(name, a / b) for name, a, b, _, _ in rows if b])
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
