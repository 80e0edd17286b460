"""Kept tictac trees (codec/kept_tree.py, actors/tree_keeper.py): the tree a store keeps as
writes land equals the tree folded from the store, through flushes, merges, journal compaction,
bulk writes and reopens, and compares start from it instead of folding."""

from __future__ import annotations

import asyncio
import uuid

import pyarrow as pa
import pytest
from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import LocalHandle
from leveled_ray.admin.compare import DIFFERENT, FoldedSide, compare_views
from leveled_ray.bulk import write as bulk
from leveled_ray.client.store import Store
from leveled_ray.clock import ManualClock
from leveled_ray.codec import kept_tree as rules
from leveled_ray.codec import object_key
from leveled_ray.codec.entries import ACTIVE
from leveled_ray.codec.tictac import TicTacTree, tree_key_hashes

#: Small files, so that a few hundred writes flush and merge many times.
OPTIONS = lr.Options(metrics_interval_s=0, journal=dict(compaction_interval_s=0),
                     ledger=dict(l0_max_keys=40, push_keys=10, push_ms=5, sst_max_keys=60))
TOMBSTONE = 1


def rows(*entries) -> pa.Table:
    """Ledger rows ``(key, status, expiry, hash)`` as a table."""
    keys, status, expiry, hashes = zip(*entries)
    return pa.table({"key": pa.array(keys, pa.binary()), "status": pa.array(status, pa.uint8()),
                     "expiry": pa.array(expiry, pa.uint32()),
                     "hash": pa.array(hashes, pa.uint64())})


def test_a_flush_changes_the_tree_by_what_it_replaces():
    a, b, c = (object_key("b", k) for k in "abc")
    own = object_key(rules.REPLICATION_BUCKET, "position")
    tree = TicTacTree("xxsmall")
    rules.add_rows(tree, rows((a, ACTIVE, 0, 1), (b, ACTIVE, 0, 2)))
    # a changes, b is deleted, c is new with a TTL, and leveled-ray's own object is left out.
    flushed = rows((a, ACTIVE, 0, 9), (b, TOMBSTONE, 0, 0), (c, ACTIVE, 99, 3), (own, ACTIVE, 0, 4))
    before = [(5, ACTIVE, 0, 1), (6, ACTIVE, 0, 2), None, None]
    change, has_ttl = rules.delta(flushed, before)
    assert has_ttl
    expected = TicTacTree("xxsmall")
    rules.add_rows(expected, rows((a, ACTIVE, 0, 9)))
    hashed = tree.merge(TicTacTree("xxsmall"))  # a copy, changed by the flush's own hashes
    change.xor_into(tree)
    assert tree == expected
    given, _ = rules.delta(flushed, before, tree_key_hashes(flushed.column("key").to_pylist()))
    given.xor_into(hashed)
    assert hashed == expected
    # A larger tree folds down to a smaller one exactly.
    large = TicTacTree("small")
    rules.add_rows(large, rows((a, ACTIVE, 0, 9), (b, ACTIVE, 0, 2)))
    small = TicTacTree("xxsmall")
    rules.add_rows(small, rows((a, ACTIVE, 0, 9), (b, ACTIVE, 0, 2)))
    assert large.resized("xxsmall") == small
    with pytest.raises(lr.InvalidArgumentError):
        small.resized("small")


async def folded(view, size="small") -> TicTacTree:
    """``view``'s tree by a fold of its heads (what a compare does without a kept tree)."""
    return await FoldedSide(size, [view], (None, None, None))._fold_tree(view)


async def opened(url, clock) -> tuple[Bookie, Store]:
    bookie = Bookie(url, OPTIONS, local=True, clock=clock)
    await bookie.start()
    return bookie, Store(LocalHandle(bookie), OPTIONS, url, None, {"head_only": None}, clock)


async def settled(bookie) -> None:
    """Until the Penciller has flushed and merged what it holds, and no rebuild runs."""
    await until(lambda: not (stats := bookie.penciller.stats())["merging"]
                and stats["tree"] != "rebuilding", timeout=4)


def test_the_kept_tree_equals_the_folded_one_through_merges_compaction_bulk_and_reopens():
    clock, url = ManualClock(), f"memory://kept-{uuid.uuid4().hex}"

    async def same(store, size="small") -> TicTacTree:
        kept = await store.kept_tree_async(size)
        assert kept is not None and kept == await folded(store, size)
        return kept

    async def run():
        bookie, store = await opened(url, clock)
        for round_ in range(4):  # overwrites and deletes across many flushes and merges
            await store.put_many_async([lr.Put("b", f"k{i}", b"v%d.%d" % (i, round_))
                                        for i in range(0, 300, round_ + 1)])
            await store.put_many_async([lr.Delete("b", f"k{i}") for i in range(round_, 300, 7)])
        await bookie.compact_journal(wait=True)
        await settled(bookie)
        assert bookie.penciller.stats()["merges"] > 0
        assert bookie.penciller.stats()["tree_upkeep_s"] > 0
        await same(store, "xxsmall")
        kept = await same(store)
        await bookie.close()
        # At rest, a reader starts from the tree saved at close; a clean reopen loads it.
        with lr.reader(url, clock=clock) as at_rest:
            assert await same(at_rest) == kept
        bookie, store = await opened(url, clock)
        assert bookie.penciller.stats()["tree_loads"] == 1
        assert await same(store) == kept
        await bookie.close()
        # A bulk write at rest joins the Ledger as it is: the next open folds the tree again.
        plan = await bulk.begin_async(url, OPTIONS)
        batch = pa.record_batch({"bucket": ["bulk"] * 50, "key": [f"x{i}" for i in range(50)],
                                 "value": [b"x"] * 50})
        await bulk.commit_async(plan, [await bulk.write_partition_async(plan, 0, [batch])])
        bookie, store = await opened(url, clock)
        await settled(bookie)
        assert bookie.penciller.stats()["tree_rebuilds"] == 1
        assert await same(store) != kept
        await store.put_many_async([lr.Put("b", "k1", b"after the reopen")])
        # A reopen without a close (the writer crashed) folds it again too.
        crashed, again = await opened(url, clock)
        await settled(crashed)
        assert crashed.penciller.stats()["tree_rebuilds"] == 1
        await same(again)
        await crashed.close()

    asyncio.run(run())


def test_compares_start_from_kept_trees_and_fold_where_a_ttl_forbids():
    clock = ManualClock()
    url_a, url_b = (f"memory://kept-{uuid.uuid4().hex}" for _ in range(2))

    async def run():
        for url, changed in ((url_a, b"v"), (url_b, b"other")):
            bookie, store = await opened(url, clock)
            await store.put_many_async([lr.Put("b", f"k{i}", b"v") for i in range(200)])
            await store.put_many_async([lr.Put("b", "k5", changed)])
            await bookie.close()
        with lr.reader(url_a, clock=clock) as a, lr.reader(url_b, clock=clock) as b:
            found = await compare_views(a, b)
        assert found.kept_sides == 2
        assert [(d.key, d.kind) for d in found.differences] == [("k5", DIFFERENT)]
        # An object with a TTL: that side's kept tree cannot follow its expiry, so it folds.
        bookie, store = await opened(url_b, clock)
        await store.put_many_async([lr.Put("b", "brief", b"x", ttl=10)])
        running = await compare_views(store, store)
        assert running.kept_sides == 0 and running.equal
        await bookie.close()

    asyncio.run(run())


def test_trees_can_be_off():
    clock, url = ManualClock(), f"memory://kept-{uuid.uuid4().hex}"
    options = OPTIONS.replace(ledger={"tree_size": "off"})

    async def run():
        bookie = Bookie(url, options, local=True, clock=clock)
        await bookie.start()
        store = Store(LocalHandle(bookie), options, url, None, {"head_only": None}, clock)
        await store.put_many_async([lr.Put("b", f"k{i}", b"v") for i in range(100)])
        assert await store.kept_tree_async() is None
        assert bookie.penciller.stats()["tree"] == "off"
        assert (await compare_views(store, store)).kept_sides == 0
        await bookie.close()

    asyncio.run(run())
    with pytest.raises(lr.InvalidArgumentError):
        lr.Options(ledger={"tree_size": "huge"})
