"""Transactions through the public API, on a plain store and across the shards of a sharded
one, sync and async: reads from one snapshot, their own writes read back, commit on leaving
the block, a conflict with nothing written, the retry loop, and bad input refused."""

from __future__ import annotations

import asyncio
import threading

import pytest

import leveled_ray as lr

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", params=["plain", "sharded"])
def store(request, ray_cluster, tmp_path_factory):
    """One store per layout for the module: each test writes the keys it reads first."""
    shards = None if request.param == "plain" else 4
    s = lr.open(f"file://{tmp_path_factory.mktemp('txn')}/db", shards=shards)
    yield s
    s.close()


def balances(store, n: int) -> list[int]:
    return [int(v) for v in store.get_many([("acct", f"a{i}") for i in range(n)])]


def test_a_transfer_commits_whole_and_reads_its_own_writes(store):
    if isinstance(store, lr.ShardedStore):  # the commit spans shards
        assert store.shard_of("acct", "a0") != store.shard_of("acct", "a4")
    store.put_many([lr.Put("acct", f"a{i}", b"100") for i in range(6)])
    with store.transaction() as t:
        a, b = (int(v) for v in t.get_many([("acct", "a0"), ("acct", "a4")]))
        t.put("acct", "a0", b"%d" % (a - 30))
        t.put("acct", "a4", b"%d" % (b + 30))
        assert t.get("acct", "a0") == b"70"  # its own write
        assert store.get("acct", "a0") == b"100"  # no one else sees it yet
        assert t.head("acct", "a4").sqn == 0 and t.head("acct", "a1").sqn > 0
        t.delete("acct", "a1")
        assert t.get("acct", "a1") is None and t.head("acct", "a1") is None
    assert t.state == "committed"
    assert store.get_many([("acct", "a0"), ("acct", "a1"), ("acct", "a4")]) == [
        b"70", None, b"130"]


def test_a_conflict_writes_nothing_and_run_transaction_tries_again(store):
    store.put_many([lr.Put("acct", f"a{i}", b"100") for i in range(4)])
    t = store.transaction()
    a = int(t.get("acct", "a0"))
    store.put("acct", "a0", b"90")  # another writer, after t's snapshot
    t.put("acct", "a0", b"%d" % (a - 10))
    t.put("acct", "a3", b"110")
    with pytest.raises(lr.ConflictError):
        t.commit()
    assert t.state == "rolled back"
    assert balances(store, 4) == [90, 100, 100, 100]

    tries = []

    def transfer(t: lr.Transaction) -> int:
        tries.append(1)
        a, b = (int(v) for v in t.get_many([("acct", "a0"), ("acct", "a3")]))
        if len(tries) == 1:
            store.put("acct", "a3", b"%d" % (b + 1))  # makes the first try conflict
        t.put("acct", "a0", b"%d" % (a - 5))
        t.put("acct", "a3", b"%d" % (b + 5))
        return a

    assert store.run_transaction(transfer) == 90
    assert len(tries) == 2 and balances(store, 4) == [85, 100, 100, 106]


def test_serializable_refuses_write_skew_and_snapshot_allows_it(store):
    if isinstance(store, lr.ShardedStore):  # each checks a key of the other's shard
        assert store.shard_of("oncall", "x") != store.shard_of("oncall", "y")
    store.put_many([lr.Put("oncall", "x", b"1"), lr.Put("oncall", "y", b"1")])
    for isolation, committed in (("serializable", 1), ("snapshot", 2)):
        store.put_many([lr.Put("oncall", "x", b"1"), lr.Put("oncall", "y", b"1")])
        t1, t2 = store.transaction(isolation), store.transaction(isolation)
        for t, mine in ((t1, "x"), (t2, "y")):  # each sees both on call, and leaves
            assert t.get_many([("oncall", "x"), ("oncall", "y")]) == [b"1", b"1"]
            t.put("oncall", mine, b"0")
        outcomes = []
        for t in (t1, t2):
            try:
                t.commit()
                outcomes.append("committed")
            except lr.ConflictError:
                outcomes.append("conflict")
        assert outcomes.count("committed") == committed, (isolation, outcomes)


def test_snapshot_refuses_a_lost_update_of_a_key_written_unread(store):
    store.put("acct", "a0", b"1")
    t = store.transaction("snapshot")
    t.get("acct", "other")  # takes the snapshot
    store.put("acct", "a0", b"2")
    t.put("acct", "a0", b"3")  # a blind write over a later one
    with pytest.raises(lr.ConflictError):
        t.commit()
    assert store.get("acct", "a0") == b"2"


def test_async_transactions_and_read_only_ones(store):
    store.put_many([lr.Put("acct", f"a{i}", b"100") for i in range(4)])

    async def run():
        async with store.transaction() as t:
            assert await t.get_async("acct", "a2") == b"100"
            t.put("acct", "a2", b"1")

        async def move(t: lr.Transaction) -> bytes | None:
            t.put("acct", "a3", b"2")
            return await t.get_async("acct", "a3")

        assert await store.run_transaction_async(move) == b"2"
        async with store.transaction("snapshot") as r:  # only reads: commits with no call
            assert await r.get_many_async([("acct", "a2"), ("acct", "a3")]) == [b"1", b"2"]

    asyncio.run(run())
    assert balances(store, 4) == [100, 100, 1, 2]


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_concurrent_commits_that_share_a_call_lose_no_update(ray_cluster, tmp_url, isolation):
    """Many transactions of one handle on a plain store read one counter at the same
    version, then all commit at once, behind a put in flight: their commits travel together
    (one call, each checked after those before it), so exactly one of them commits, and the
    counter ends at the number of commits. Under serializable, each also checks a key it
    read and left alone."""
    with lr.open(tmp_url) as store:
        commits_share_calls(store, isolation)


def commits_share_calls(store, isolation: str) -> None:
    store.put_many([lr.Put("ctr", "n", b"0"), lr.Put("ctr", "watched", b"w")])

    async def read(i: int) -> lr.Transaction:
        t = store.transaction(isolation)
        n = int(await t.get_async("ctr", "n"))
        await t.get_async("ctr", "watched")
        t.put("ctr", "n", b"%d" % (n + 1))
        t.put("ctr", f"{isolation}{i}", b"%d" % n)
        return t

    async def commit(t: lr.Transaction) -> bool:
        try:
            await t.commit_async()
            return True
        except lr.ConflictError:
            return False

    async def run() -> list[bool]:
        done = []
        for batch in range(4):
            read_all = await asyncio.gather(*(read(32 * batch + i) for i in range(32)))
            in_flight = asyncio.ensure_future(store.put_async("ctr", "other", b"x"))
            await asyncio.sleep(0)  # sent: the commits queue behind it
            done += await asyncio.gather(*(commit(t) for t in read_all))
            await in_flight
        return done

    before, reads = dict(store._writes.counters), dict(store._reads.counters)
    committed = sum(asyncio.run(run()))
    assert committed == 4  # one of each batch: the others read what it changed
    assert int(store.get("ctr", "n")) == committed
    mine = store.get_many([("ctr", f"{isolation}{i}") for i in range(128)])
    assert sorted(int(v) for v in mine if v is not None) == list(range(committed))
    after = store._writes.counters  # the commits of a batch went in one call
    assert after["parts"] - before["parts"] >= after["calls"] - before["calls"] + 4 * 30
    if isolation == "serializable":  # their reads of the store as it is shared calls too
        after = store._reads.counters
        assert after["parts"] - reads["parts"] > after["calls"] - reads["calls"]


def test_bad_input_is_refused_and_changes_nothing(store):
    store.put("acct", "a0", b"100")
    with pytest.raises(lr.InvalidArgumentError):
        store.transaction("read committed")
    for lifetime in (0, -1, float("nan"), "1"):
        with pytest.raises(lr.InvalidArgumentError):
            store.transaction(lifetime_s=lifetime)
    with pytest.raises(lr.InvalidArgumentError):
        store.run_transaction(lambda t: None, retries=0)
    t = store.transaction()
    with pytest.raises(lr.InvalidArgumentError):
        t.put("acct", "a0", b"1", ttl=-5)
    with pytest.raises(lr.InvalidArgumentError):
        t.put_many([lr.Put("acct", "a0", b"1", if_sqn=3)])
    with pytest.raises(lr.InvalidArgumentError):
        t.get_many(["acct"])
    t.put("acct", "a0", b"1")
    t.commit()
    for use in (lambda: t.get("acct", "a0"), lambda: t.put("acct", "a0", b"2"), t.commit):
        with pytest.raises(lr.InvalidArgumentError):
            use()
    assert store.get("acct", "a0") == b"1"

    # an exception inside the block rolls back
    with pytest.raises(KeyError), store.transaction() as t:
        t.put("acct", "a0", b"lost")
        raise KeyError("the app's own error")
    assert t.state == "rolled back" and store.get("acct", "a0") == b"1"


def test_a_transaction_used_from_two_threads_at_once_is_refused(store):
    t = store.transaction()
    t._user.acquire()  # as if another thread were inside a call now
    errors = []
    thread = threading.Thread(target=lambda: errors.append(_refused(t)))
    thread.start()
    thread.join()
    t._user.release()
    assert errors == [True]
    t.rollback()


def _refused(t) -> bool:
    try:
        t.get("acct", "a0")
    except lr.InvalidArgumentError:
        return True
    return False


def test_a_transaction_past_its_lifetime_is_refused(store):
    store.put("acct", "a0", b"1")
    t = store.transaction(lifetime_s=0.05)
    t.get("acct", "a0")
    t.deadline = 0  # its lifetime has passed (the clock it reads is monotonic)
    t.put("acct", "a0", b"2")
    with pytest.raises(lr.TransactionExpiredError):
        t.commit()
    assert store.get("acct", "a0") == b"1"


def test_serializable_refuses_a_phantom_in_a_range_it_folded(store):
    store.put_many([lr.Put("orders", f"o{i}", b"open") for i in range(5)])
    for isolation, conflicts in (("serializable", True), ("snapshot", False)):
        t = store.transaction(isolation)
        assert [k for _, k in t.fold_keys("orders", "o0", "o9")] == [f"o{i}" for i in range(5)]
        store.put("orders", "o7", b"open")  # a phantom: a new object in the range
        t.put("summary", "orders", b"5 open")
        if conflicts:
            with pytest.raises(lr.ConflictError):
                t.commit()
        else:
            t.commit()
        store.delete("orders", "o7")
    # a change outside the range is no conflict; own writes are in the fold
    t = store.transaction()
    store.put("orders", "p1", b"open")
    t.put("orders", "o2", b"closed")
    t.delete("orders", "o3")
    rows = t.fold_objects("orders", "o0", "o9")
    assert [(k, v) for _, k, v in rows] == [
        ("o0", b"open"), ("o1", b"open"), ("o2", b"closed"), ("o4", b"open")]
    t.commit()
    assert store.get_many([("orders", "o2"), ("orders", "o3")]) == [b"closed", None]


def test_serializable_refuses_a_phantom_in_an_index_range(store):
    store.put_many([lr.Put("people", f"p{i}", b"v", indexes=[("add", "age_int", 30 + i)])
                    for i in range(4)])
    t = store.transaction()
    assert t.index_query("people", "age_int", 30, 40) == ["p0", "p1", "p2", "p3"]
    assert t.index_query("people", "age_int", 30, 40, return_terms=True,
                         max_results=1) == [(30, "p0")]
    store.put("people", "p9", b"v", indexes=[("add", "age_int", 35)])  # joins the range
    t.put("stats", "people", b"4")
    with pytest.raises(lr.ConflictError):
        t.commit()
    t = store.transaction()
    t.index_query("people", "age_int", 50, 60)
    store.put("people", "p8", b"v", indexes=[("add", "age_int", 20)])  # outside it
    t.put("stats", "people", b"5")
    t.commit()
    t = store.transaction()
    t.put("people", "p7", b"v")
    with pytest.raises(lr.InvalidArgumentError):
        t.index_query("people", "age_int", 0, 99)
    t.rollback()
