"""A serializable transaction on a plain store reads the writes of its process's commits that
are still in flight, and commits only if they land (see ``client/in_flight_writes.py``).
Each commit here queues behind a put in flight, so it is still in flight when read."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import leveled_ray as lr

pytestmark = pytest.mark.ray

A0, A1, A2 = ("acct", "a0"), ("acct", "a1"), ("acct", "a2")


@pytest.fixture(scope="module")
def store(ray_cluster, tmp_path_factory):
    s = lr.open(f"file://{tmp_path_factory.mktemp('inflight')}/db")
    yield s
    s.close()


async def commit_behind_a_put(store, t: lr.Transaction) -> asyncio.Future:
    """Start ``t``'s commit behind a put in flight: it is sent once the put answers. The
    future gives the commit's outcome."""
    put = asyncio.ensure_future(store.put_async("other", "k", b"x"))
    await asyncio.sleep(0)
    commit = asyncio.ensure_future(t.commit_async())
    await asyncio.sleep(0)

    async def outcome():
        try:
            return await commit
        finally:
            await put
    return asyncio.ensure_future(outcome())


async def debit(store, key, amount: int) -> lr.Transaction:
    t = store.transaction()
    t.put(*key, b"%d" % (int(await t.get_async(*key)) - amount))
    return t


def test_a_write_in_flight_is_read_and_the_reader_commits_after_it(store):
    store.put_many([lr.Put(*A0, b"100"), lr.Put(*A1, b"100")])

    async def run():
        first = await commit_behind_a_put(store, await debit(store, A0, 10))
        t = store.transaction()
        assert await t.get_async(*A0) == b"90"  # the write in flight, not the store's 100
        assert store.get(*A0) == b"100"
        t.put(*A0, b"80")
        t.put(*A1, b"110")
        reader = store.transaction()  # only reads: it commits once that write landed
        assert await reader.get_async(*A0) == b"90"
        await asyncio.gather(first, reader.commit_async())
        assert reader.state == "committed"
        await t.commit_async()

    asyncio.run(run())
    assert store.get_many([A0, A1]) == [b"80", b"110"]


def test_the_head_of_a_key_read_in_flight_is_that_write_once_it_landed(store):
    store.put(*A0, b"100")

    async def run():
        first = await commit_behind_a_put(store, await debit(store, A0, 10))
        t = store.transaction()
        assert await t.get_async(*A0) == b"90"
        head = await t.head_async(*A0)  # waits for the write: its SQN is the version
        await first
        assert head == store.head(*A0) and head.sqn > 0
        await t.commit_async()

    asyncio.run(run())


@pytest.mark.parametrize("reader_sent", [False, True])
def test_a_reader_of_a_write_that_failed_conflicts_and_writes_nothing(store, reader_sent):
    """The first commit read a version that a put replaced: it fails, and so does every
    commit that read its write in flight, refused before it is sent (``reader_sent`` false)
    or by the Bookie, in the same call."""
    store.put_many([lr.Put(*A0, b"100"), lr.Put(*A2, b"old")])

    async def run():
        stale = await debit(store, A0, 10)
        await store.put_async(*A0, b"50")
        first = await commit_behind_a_put(store, stale)
        t = store.transaction()
        assert await t.get_async(*A0) == b"90"
        t.put(*A0, b"80")
        t.put(*A2, b"new")
        reader = store.transaction()
        assert await reader.get_async(*A0) == b"90"
        if reader_sent:
            outcomes = await asyncio.gather(first, t.commit_async(), reader.commit_async(),
                                            return_exceptions=True)
        else:
            outcomes = await asyncio.gather(first, return_exceptions=True)
            outcomes += await asyncio.gather(t.commit_async(), reader.commit_async(),
                                             return_exceptions=True)
        assert [type(o) for o in outcomes] == [lr.ConflictError] * 3
        assert t.state == reader.state == "rolled back"

    asyncio.run(run())
    assert store.get_many([A0, A2]) == [b"50", b"old"]


def test_threads_moving_money_on_one_handle_keep_the_total(store):
    """8 threads run transfers between 4 accounts through one handle (sync calls, each on an
    event loop of its own), and a ninth audits: they read each other's writes in flight, and
    every audit and the end hold the same total; each transfer committed is applied once."""
    accounts = [("bank", f"a{i}") for i in range(4)]
    store.put_many([lr.Put(*k, b"1000") for k in accounts])
    store.put("bank", "moves", b"0")
    done = threading.Event()
    audits: list[int] = []

    def transfer(t: lr.Transaction, a, b) -> None:
        va, vb, moves = (int(v) for v in t.get_many([a, b, ("bank", "moves")]))
        t.put(*a, b"%d" % (va - 1))
        t.put(*b, b"%d" % (vb + 1))
        t.put("bank", "moves", b"%d" % (moves + 1))

    def mover(i: int) -> int:
        committed = 0
        for n in range(25):
            a, b = accounts[(i + n) % 4], accounts[(i + 2 * n + 1) % 4]
            if a != b:
                store.run_transaction(lambda t: transfer(t, a, b), retries=50)
                committed += 1
        return committed

    def auditor() -> None:
        while not done.is_set():
            try:
                with store.transaction() as t:
                    total = sum(int(v) for v in t.get_many(accounts))
            except lr.ConflictError:  # what it read changed before it committed
                continue
            audits.append(total)

    reads = store._in_flight_writes.counters["read"]
    watcher = threading.Thread(target=auditor)
    watcher.start()
    with ThreadPoolExecutor(8) as pool:
        committed = sum(pool.map(mover, range(8)))
    done.set()
    watcher.join()
    assert audits and set(audits) == {4000}
    assert sum(int(v) for v in store.get_many(accounts)) == 4000
    assert int(store.get("bank", "moves")) == committed
    assert store._in_flight_writes.counters["read"] > reads
