"""The change feed through real Ray actors: ``changes()`` on a store, a snapshot, a reader and
an admin handle; ``listen()`` under concurrent writers (no gap, no duplicate, SQN order),
resuming across a reopen; and history leases that hold journal compaction until they expire."""

import threading

import pytest
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.clock import ManualClock

pytestmark = pytest.mark.ray

#: Compaction on demand only, and willing to rewrite any run that drops something.
OPTIONS = lr.Options(ledger=SMALL["ledger"],
                     journal=dict(compaction_interval_s=0, singlefile_compactionpercentage=95.0,
                                  maxrunlength_compactionpercentage=99.0))


def compact(store) -> dict:
    return store.compact_journal(wait=True)


def test_changes_from_a_store_a_snapshot_a_reader_and_an_admin(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    store = lr.open(url, OPTIONS)
    try:
        first = store.put_many([lr.Put("b", f"k{i}", b"one") for i in range(5)])
        with store.snapshot() as snap:
            store.delete("b", "k0")
            last = store.put("b", "k1", b"two", metadata={"n": 2})
            everything = list(store.changes())
            assert [c.sqn for c in everything] == [*first, last - 1, last]
            assert [(c.kind, c.key) for c in everything[-2:]] == [("delete", "k0"),
                                                                   ("put", "k1")]
            assert everything[-1].metadata == {"n": 2}
            assert [c.sqn for c in snap.changes(first[1])] == first[2:]  # its own moment
        assert [c.sqn for c in store.changes(first[-1], last - 1)] == [last - 1]
        table = next(store.changes_batches(first[-1]))
        assert table.column("kind").to_pylist() == ["delete", "put"]
        with lr.reader(url) as r:
            assert [c.sqn for c in r.changes(first[2])] == [first[3], first[4], last - 1, last]
        assert [c.value for c in lr.admin(url).changes(last - 1)] == [b"two"]
        assert lr.admin(url).list_checkpoints() == []  # the admin read's pin is gone
        with pytest.raises(lr.InvalidArgumentError):
            store.changes(5, 2)
        with pytest.raises(lr.InvalidArgumentError):
            store.changes(-1)
    finally:
        store.close()


def test_listen_sees_every_change_of_concurrent_writers_once_in_order(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    store = lr.open(url, OPTIONS)
    acked: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for i in range(40):
            sqns = store.put_many([lr.Put("b", f"w{w}-{i}-{j}", b"x") for j in range(3)])
            with lock:
                acked.extend(sqns)

    try:
        before = store.put_many([lr.Put("b", f"old{i}", b"o") for i in range(20)])
        seen = []
        with store.listen(before[4]) as feed:
            threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
            for t in threads:
                t.start()
            for change in feed:
                seen.append(change.sqn)
                if len(seen) == 15 + 3 * 40 * 3:
                    break
            for t in threads:
                t.join()
            assert feed.sqn == seen[-1]
        assert seen == sorted(set(seen))  # SQN order, no duplicate
        assert seen == sorted(before[5:] + acked)  # no gap: every acknowledged change
        # Nothing more was written: a poll finds nothing and says so.
        with store.listen(seen[-1]) as feed:
            assert feed.poll(timeout=0.2) == []
    finally:
        store.close()


def test_listen_resumes_across_a_reopen_from_the_journal(ray_cluster, tmp_path):
    """A reopened store keeps no recent changes in memory: a listener behind reads them from
    the Journal, then follows live writes."""
    url = f"file://{tmp_path}/db"
    store = lr.open(url, OPTIONS)
    sqns = store.put_many([lr.Put("b", f"k{i}", b"%d" % i) for i in range(50)])
    store.close()
    store = lr.open(url, OPTIONS)
    try:
        with store.listen(sqns[9], batch_size=7) as feed:
            got = [c.sqn for c in feed.poll(timeout=5)]
            while len(got) < 40:
                got += [c.sqn for c in feed.poll(timeout=5)]
            assert got == sqns[10:]
            later = store.put("b", "after", b"live")
            assert [c.sqn for c in feed.poll(timeout=5)] == [later]
            batch = None
            store.put("b", "arrow", b"a")
            while batch is None:
                batch = feed.poll_batch(timeout=5)
            assert batch.column("key").to_pylist() == ["arrow"]
            assert feed.sqn == batch.column("sqn")[-1].as_py()  # the batch is handed out
    finally:
        store.close()


def test_a_lease_holds_compaction_and_an_expired_one_does_not(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    clock = ManualClock()
    store = lr.open(url, OPTIONS, clock=clock)
    try:
        rounds = [store.put_many([lr.Put("b", f"k{i}", b"r%d" % r) for i in range(30)])
                  for r in range(6)]
        held = rounds[0][-1]  # a consumer that has read round 0
        store.set_history_lease("consumer", held, 60)
        assert [h.name for h in store.list_history_leases()] == ["consumer"]
        assert compact(store)["history_sqn"] <= held
        assert store.stats()["history"]["leases"] == {"consumer": held}
        assert [c.sqn for c in store.changes(held)] == [s for r in rounds[1:] for s in r]

        clock.advance(61)  # the consumer stopped renewing: its lease is gone
        assert store.list_history_leases() == []
        assert compact(store)["history_sqn"] > held
        with pytest.raises(lr.HistoryUnavailableError) as e:
            list(store.changes(held))
        assert e.value.history_sqn == store.stats()["history"]["history_sqn"]
        with pytest.raises(lr.HistoryUnavailableError):  # nor can a listener start there
            store.listen(held).poll(timeout=1)
    finally:
        store.close()


def test_a_view_of_an_earlier_sqn_folds_as_the_store_was_while_later_changes_are_in_memory(
        ray_cluster, tmp_path):
    """The changes after a past view's SQN are still in the Bookie's memory (not in a Ledger
    file): its folds, index queries and compare show the store as it was then, as its point
    reads do: a key put later is absent, a key changed later has its older value and
    terms."""
    store = lr.open(f"file://{tmp_path}/db")
    try:
        then = store.put_many([lr.Put("b", "k", b"v1", indexes=[("add", "t_bin", "old")])])[-1]
        store.put("b", "k", b"v2", indexes=[("remove", "t_bin", "old"), ("add", "t_bin", "new")])
        store.put("b", "later", b"x")
        # Each on a view of its own, before any point read (which reads the overlay apart).
        with store.snapshot(at_sqn=then) as past:
            assert list(past.fold_keys("b")) == [("b", "k")]
        with store.snapshot(at_sqn=then) as past:
            assert list(past.index_query("b", "t_bin", "a", "z", return_terms=True)) == [
                ("old", "k")]
        with store.snapshot(at_sqn=then) as past, store.snapshot() as now:
            found = lr.compare(past, now)
            assert {(d.key, d.kind) for d in found.differences} == {
                ("k", "different"), ("later", "missing_in_a")}
            assert [h.hash for _, _, h in past.fold_heads("b")] == [past.head("b", "k").hash]
            assert past.get("b", "later") is None
    finally:
        store.close()


def test_point_in_time_views_inside_the_history_window(ray_cluster, tmp_path):
    """With history_s, compaction keeps every change of the window: a snapshot, a reader
    and a sharded reader see the store as it was at an SQN or a time in it; a store without
    a window refuses what compaction dropped."""
    url = f"file://{tmp_path}/db"
    store = lr.open(url, OPTIONS.replace(history_s=3600))
    try:
        ends, times = [], []
        for r in range(5):
            ends.append(store.put_many([lr.Put("b", f"k{i}", b"r%d" % r) for i in range(30)])[-1])
            times.append(clock_now(store))
            if r == 2:
                store.delete("b", "k0")
        compact(store)
        keys = [("b", f"k{i}") for i in range(30)]
        with store.snapshot(at_sqn=ends[1]) as snap:
            assert snap.get_many(keys) == [b"r1"] * 30 and snap.sqn == ends[1]
            assert sum(1 for _ in snap.fold_keys("b")) == 30
        with store.snapshot(at_time=times[3]) as snap:
            assert snap.sqn == ends[3] and snap.get("b", "k5") == b"r3"
        with store.snapshot(at_sqn=ends[2] + 1) as snap:  # just after the delete
            assert snap.get("b", "k0") is None and snap.get("b", "k1") == b"r2"
        assert store.stats()["history"]["window_sqn"] == 0  # everything is in the window
    finally:
        store.close()
    with lr.reader(url, at_sqn=ends[2]) as r:
        assert r.get("b", "k7") == b"r2" and r.get("b", "k0") == b"r2"
    restored = lr.clone(url, f"file://{tmp_path}/restored", at_sqn=ends[2] + 1)
    try:  # a clone of the store as it was just after the delete
        assert restored.get("b", "k0") is None
        assert restored.get_many(keys[1:]) == [b"r2"] * 29
        assert sum(1 for _ in restored.fold_keys("b")) == 29
        from leveled_ray.cluster.clone import revert

        top = restored.put("other", "x", b"x")
        assert revert(restored, at_sqn=ends[2] + 1) == 1  # run again: writes back only x
        assert restored.head("other", "x") is None and restored.put("o", "y", b"y") > top
    finally:
        restored.close()

    plain = f"file://{tmp_path}/plain"
    store = lr.open(plain, OPTIONS)
    try:
        first = [store.put_many([lr.Put("b", f"k{i}", b"r%d" % r) for i in range(30)])[-1]
                 for r in range(5)]
        assert compact(store)["history_sqn"] > first[0]
        with pytest.raises(lr.HistoryUnavailableError):
            store.snapshot(at_sqn=first[0])
        with pytest.raises(lr.InvalidArgumentError):
            store.snapshot(at_sqn=first[-1] + 10)
    finally:
        store.close()


def clock_now(store) -> float:
    """The store's time now, a moment after its last write (last_modified has ms): once the
    clock has passed the millisecond after the one it was called in."""
    import time

    called = int(time.time() * 1000)
    return wait_until(lambda: (now := time.time()) * 1000 >= called + 2 and now,
                      interval=0.0005)


@pytest.mark.parametrize("shards", [None, 2])
def test_a_listeners_position_is_the_last_change_it_handed_out(ray_cluster, tmp_path, shards):
    """Taking changes one at a time moves ``.sqn`` one change at a time, so a consumer that
    saves it after each change and resumes there gets every later change once."""
    store = lr.open(f"file://{tmp_path}/db", shards=shards)
    try:
        sqns = [store.put("b", f"k{i}", b"v") for i in range(5)]
        start = 0 if shards is None else {str(s): 0 for s in range(shards)}
        with store.listen(start) as feed:
            feed_iter = iter(feed)
            first = next(feed_iter)
            saved = feed.sqn
            if shards is None:
                assert saved == first.sqn == sqns[0]
            else:
                assert saved == {**start, str(first.shard): first.sqn}
        with store.listen(saved) as resumed:
            rest = [next(iter(resumed)) for _ in range(4)]
        assert sorted(c.key for c in [first] + rest) == [f"k{i}" for i in range(5)]
    finally:
        store.close()


def test_a_bulk_write_into_a_store_older_than_its_history_window_stays_in_the_window(
        ray_cluster, tmp_path):
    """The files a bulk write installs are written now, however long the Bookie has run:
    compaction keeps the changes of the window after them, and a view at the bulk write's
    SQN still reads its values."""
    import uuid

    import pyarrow as pa

    from leveled_ray.bulk import write as bulk

    url, name = f"file://{tmp_path}/db", f"hist-{uuid.uuid4().hex[:8]}"
    clock = ManualClock()
    store = lr.open(url, OPTIONS.replace(history_s=3600), clock=clock, name=name)
    try:
        keys = [("b", f"k{i}") for i in range(30)]
        store.put_many([lr.Put(b, k, b"r0") for b, k in keys])
        clock.advance(7200)  # the Bookie, and round 0, are older than the window now
        plan = bulk.begin(url, store_name=name)
        rows = pa.record_batch({"bucket": [b for b, _ in keys], "key": [k for _, k in keys],
                                "value": [b"bulk"] * 30})
        bulk.commit(plan, [bulk.write_partition(plan, 0, [rows])])
        at_bulk = max(h.sqn for h in store.head_many(keys))
        store.put_many([lr.Put(b, k, b"later") for b, k in keys])
        compact(store)
        with store.snapshot(at_sqn=at_bulk) as snap:
            assert snap.get_many(keys) == [b"bulk"] * 30
        assert store.stats()["history"]["window_sqn"] < at_bulk
    finally:
        store.close()
