"""A serializable transaction on a plain store reads the writes of its process's commits that
are still in flight, and commits only if they land (see ``client/in_flight_writes.py``).
Each commit here queues behind a put in flight, so it is still in flight when read."""

from __future__ import annotations

import asyncio

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
