"""The public API on file:// and s3:// (moto), through real Ray actors; memory:// too for the
basic round trip and a clean restart."""

import asyncio
import threading

import pytest
from support.stores import persisted
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.clock import ManualClock

pytestmark = pytest.mark.ray

SMALL = lr.Options(ledger=dict(l0_max_keys=300, push_keys=50, push_ms=5))


def _open(backend):
    url, options = backend
    s = lr.open(url, options.replace(ledger=dict(l0_max_keys=300, push_keys=50, push_ms=5)),
                clock=ManualClock())  # tests advance it instead of sleeping
    yield s
    s.close()


@pytest.fixture
def store(ray_cluster, durable_backend):
    yield from _open(durable_backend)


@pytest.fixture
def any_store(ray_cluster, backend):
    yield from _open(backend)


def test_put_get_head_delete(any_store):
    store = any_store
    sqn = store.put("users", "alice", b"v1", indexes=[("add", "city_bin", "paris")],
                    metadata={"owner": "ops"})
    assert store.get("users", "alice") == b"v1"
    head = store.head("users", "alice")
    assert (head.sqn, head.size, head.metadata) == (sqn, 2, {"owner": "ops"})
    assert head.expires_at is None and head.last_modified > 0
    assert store.get("users", "bob") is None and store.head("users", "bob") is None
    dsqn = store.delete("users", "alice")
    assert dsqn > sqn
    assert store.get("users", "alice") is None and store.head("users", "alice") is None


def test_bytes_and_str_keys_are_separate(store):
    store.put("b", "k", b"str")
    store.put(b"b", b"k", b"bytes")
    assert store.get("b", "k") == b"str" and store.get(b"b", b"k") == b"bytes"


def test_put_many_and_get_many_across_l0_files(store):
    sqns = store.put_many([lr.Put("users", f"u{i}", b"v%d" % i) for i in range(1000)])
    assert sqns == list(range(sqns[0], sqns[0] + 1000))
    wait_until(lambda: persisted(store, sqns[-1]))  # the lookups below go through SSTs too
    store.put_many([lr.Put("users", f"u{i}", b"new%d" % i) for i in range(0, 1000, 10)])
    keys = [("users", f"u{i}") for i in range(1000)] + [("users", "missing")]
    values = store.get_many(keys)
    assert values[-1] is None
    for i in range(1000):
        assert values[i] == (b"new%d" % i if i % 10 == 0 else b"v%d" % i)
    heads = store.head_many(keys[:3])
    assert [h.sqn for h in heads] == [sqns[-1] + 1, sqns[1], sqns[2]]
    assert store.stats()["penciller"]["l0_flushes"] >= 1


def test_conditional_writes(store):
    sqn = store.put("users", "alice", b"v1")
    with pytest.raises(lr.ConditionFailedError) as err:
        store.put("users", "alice", b"v2", if_sqn=sqn + 1)
    assert err.value.failures == (("users", "alice", sqn + 1, sqn),)
    assert store.get("users", "alice") == b"v1"
    sqn2 = store.put("users", "alice", b"v2", if_sqn=sqn)
    assert store.get("users", "alice") == b"v2"
    with pytest.raises(lr.ConditionFailedError):
        store.put("users", "alice", b"v3", if_absent=True)
    assert store.put("users", "bob", b"b", if_absent=True) > sqn2
    store.delete("users", "bob")
    assert store.put("users", "bob", b"again", if_absent=True)
    # A put_many whose conditions do not all hold writes nothing.
    with pytest.raises(lr.ConditionFailedError):
        store.put_many([lr.Put("users", "carol", b"c"),
                        lr.Put("users", "alice", b"x", if_absent=True)])
    assert store.get("users", "carol") is None
    # The same with values large enough to travel through Ray's object store.
    with pytest.raises(lr.ConditionFailedError):
        store.put_many([lr.Put("users", f"big{i}", b"x" * 1024) for i in range(100)]
                       + [lr.Put("users", "alice", b"x", if_absent=True)])
    assert store.get("users", "big0") is None
    # Conditions see earlier changes of the same group.
    with pytest.raises(lr.ConditionFailedError) as err:
        store.put_many([lr.Put("users", "dave", b"d1", if_absent=True),
                        lr.Put("users", "dave", b"d2", if_absent=True)])
    assert err.value.failures[0][:2] == ("users", "dave")
    assert store.get("users", "dave") is None


def test_conditions_see_values_persisted_in_ssts(store):
    sqn = store.put("users", "old", b"x")
    last = store.put_many([lr.Put("filler", f"f{i}", b"f") for i in range(1200)])[-1]
    wait_until(lambda: persisted(store, last))
    wait_until(lambda: store.stats()["cache_keys"] < 1200)  # "old" now lives in an SST
    with pytest.raises(lr.ConditionFailedError):
        store.put("users", "old", b"y", if_absent=True)
    assert store.put("users", "old", b"y", if_sqn=sqn)


def test_ttl_expires_objects(store):
    store.put("tmp", "k", b"v", ttl=600)
    assert store.get("tmp", "k") == b"v"
    assert store.head("tmp", "k").expires_at is not None
    store.clock.advance(601.1)  # expiry is rounded up to whole seconds
    assert store.get("tmp", "k") is None and store.head("tmp", "k") is None
    assert store.put("tmp", "k", b"v2", if_absent=True)  # expired counts as absent


def test_async_api(store):
    async def run():
        sqns = await asyncio.gather(*(store.put_async("a", f"k{i}", b"%d" % i)
                                      for i in range(50)))
        assert len(set(sqns)) == 50
        assert await store.get_async("a", "k7") == b"7"
        assert (await store.head_async("a", "k7")).size == 1
        assert await store.get_many_async([("a", "k1"), ("a", "nope")]) == [b"1", None]
        await store.delete_async("a", "k1")
        assert await store.get_async("a", "k1") is None
        assert (await store.put_many_async([lr.Put("a", "z", b"z")]))[0] > max(sqns)
        assert (await store.stats_async())["changes"] >= 52
        with pytest.raises(lr.InvalidArgumentError):
            await store.put_async("", "k", b"v")
        await store.put_async("a", "i1", b"v", indexes=[("add", "f_bin", "x")])
        assert [k async for k in store.index_query_async("a", "f_bin", "a", "z",
                                                          max_results=10)] == ["i1"]
        batches = [b async for b in store.fold_keys_batches_async("a")]
        assert sum(b.num_rows for b in batches) == 51  # 50 puts, one delete, z and i1
        done = await store.backup_async(store.url.rstrip("/") + "-backup", progress=False)
        assert done["files"] >= 1 and done["max_sqn"] >= max(sqns)
        with pytest.raises(lr.InvalidArgumentError):  # not a head_only store
            await store.trim_journal_async()
    asyncio.run(run())



def test_a_synchronous_call_inside_a_running_loop_answers(store):
    """A notebook cell runs in an event loop: a synchronous call made there blocks the loop
    until it answers, as any blocking call does; a synchronous fold refuses, naming its async
    form."""
    async def cell():
        store.put("n", "k", b"v")  # one Bookie call
        with store.snapshot() as snap:  # a coroutine's twin (snapshot_async)
            assert snap.get("n", "k") == b"v"
        assert store.list_buckets() == ["n"]
        with pytest.raises(RuntimeError, match="fold_keys_async|_async form"):
            list(store.fold_keys())
    asyncio.run(cell())


def test_every_operation_has_a_sync_and_an_async_form():
    """Each comes from one definition (``*_async`` or a Bookie call); a form never drifts
    away by being missing. (``actors()`` and a reader's ``stats()`` do no I/O; ``listen()``
    returns a listener that is both an iterator and an async iterator; ``transaction()``
    makes one, whose calls have both forms.)"""
    from leveled_ray.admin.handle import Admin
    from leveled_ray.client.reader import Reader

    local = ("actors", "stats", "shard", "shard_of", "listen", "transaction")  # no I/O
    for cls in (lr.Store, Admin, Reader, lr.Snapshot, lr.ShardedStore, lr.ShardedSnapshot,
                lr.ShardedReader, lr.ShardedAdmin):
        for name in dir(cls):
            if name.startswith("_"):
                continue
            twin = name.removesuffix("_async") if name.endswith("_async") else f"{name}_async"
            method = getattr(cls, name)
            if callable(method) and name not in local:
                assert hasattr(cls, twin), f"{cls.__name__}.{name} has no {twin}"


def test_plain_and_sharded_handles_offer_the_same_calls():
    """Each sharded handle answers every call of its plain twin, so code written against one
    runs against the other (a Store's shard-side calls are on its ShardSide, not on it)."""
    from leveled_ray.admin.handle import Admin
    from leveled_ray.client.reader import Reader

    def public(cls) -> set:
        return {n.removesuffix("_async") for n in dir(cls) if not n.startswith("_")}

    for plain, sharded in ((lr.Store, lr.ShardedStore), (lr.Snapshot, lr.ShardedSnapshot),
                           (Reader, lr.ShardedReader), (Admin, lr.ShardedAdmin)):
        missing = public(plain) - public(sharded)
        assert not missing, f"{sharded.__name__} lacks {sorted(missing)}"


def test_concurrent_writers_share_calls_and_journal_groups(store):
    async def run():
        await asyncio.gather(*(store.put_async("c", f"k{i}", b"x" * 100) for i in range(400)))
        # A failed condition fails its own put only, in the same coalesced calls as the rest.
        return await asyncio.gather(
            *(store.put_async("c", f"k{i}", b"y", if_absent=True) for i in range(50)),
            *(store.put_async("d", f"k{i}", b"y") for i in range(50)), return_exceptions=True)
    results = asyncio.run(run())
    assert all(isinstance(r, lr.ConditionFailedError) for r in results[:50])
    assert all(isinstance(r, int) for r in results[50:])
    stats = store.stats()
    assert stats["changes"] == 450
    assert stats["groups"] < 450  # group commit: fewer journal files than writes
    assert all(v == b"x" * 100 for v in store.get_many([("c", f"k{i}") for i in range(400)]))
    calls = store._writes.counters
    assert calls["parts"] == 500 and calls["calls"] < 500  # puts travel together


def test_threads_keep_their_order_and_one_if_absent_wins(store):
    sqns: dict[int, list[int]] = {}
    wins, losses = [], []

    def writer(t):
        sqns[t] = [store.put("t", f"{t}-{i}", b"%d" % i) for i in range(15)]
        try:
            wins.append(store.put("t", "race", b"%d" % t, if_absent=True))
        except lr.ConditionFailedError:
            losses.append(t)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(s == sorted(s) and len(set(s)) == 15 for s in sqns.values())
    assert len(sqns) == 16 and len(wins) == 1 and len(losses) == 15
    winner = store.head("t", "race")
    assert winner.sqn == wins[0]
    assert store.get("t", "race") not in (b"%d" % t for t in losses)


def test_store_handle_is_picklable(store, ray_cluster):
    @ray_cluster.remote
    def writer(s, i):
        return s.put("remote", f"k{i}", b"from task %d" % i)

    sqns = ray_cluster.get([writer.remote(store, i) for i in range(4)])
    assert len(set(sqns)) == 4
    assert store.get("remote", "k3") == b"from task 3"


def test_clean_close_replays_nothing(ray_cluster, backend):
    url, options = backend
    s = lr.open(url, options)
    s.put_many([lr.Put("b", f"k{i}", b"v") for i in range(100)])
    s.close()
    with pytest.raises(lr.StoreClosedError):
        s.get("b", "k1")
    s2 = lr.open(url, options)
    try:
        assert s2.open_info["replayed"] == 0
        assert s2.get("b", "k99") == b"v"
        assert s2.stats()["epoch"] == 2
    finally:
        s2.close()


def test_compression_can_change_on_an_existing_store(ray_cluster, tmp_url):
    s = lr.open(tmp_url, lr.Options(compression="lz4"))
    s.put_many([lr.Put("b", f"k{i}", b"lz4 " * 50) for i in range(200)])
    s.close()
    s = lr.open(tmp_url, lr.Options(compression="zstd"))
    s.put_many([lr.Put("b", f"z{i}", b"zstd " * 50) for i in range(200)])
    s.close()
    s = lr.open(tmp_url, lr.Options(compression="none"))
    try:
        assert s.get("b", "k5") == b"lz4 " * 50 and s.get("b", "z5") == b"zstd " * 50
    finally:
        s.close()


def test_named_detached_store_and_connect(ray_cluster, tmp_url):
    s = lr.open(tmp_url, name="orders-test", detached=True)
    try:
        with pytest.raises(lr.InvalidArgumentError, match="already running"):
            lr.open(tmp_url, name="orders-test")
        other = lr.connect("orders-test")
        s.put("o", "1", b"one")
        assert other.get("o", "1") == b"one"
        assert other.url == tmp_url
    finally:
        s.close()
    with pytest.raises(lr.InvalidArgumentError, match="no running store"):
        lr.connect("orders-test")
