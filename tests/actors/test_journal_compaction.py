"""Journal compaction: scoring rules (pure), and rewriting runs in one process without Ray."""

import asyncio
import os
import time

import pytest
from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import ValueBatch, pack
from leveled_ray.codec import OP_DELETE, OP_KEY_DELTA, OP_PUT, index_key, make_change, object_key
from leveled_ray.codec.head_only import ledger_change
from leveled_ray.files.names import journal_slot_name
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest import ManifestStore
from leveled_ray.manifest import journal_compaction as jc
from leveled_ray.options import RECOVR, RETAIN

from test_merges import TINY, settle, swept_twice, write

OPTIONS = TINY.replace(journal=dict(compaction_interval_s=0))


async def within(what, awaitable, seconds=30):
    """Await a step, failing the test with its name if it takes longer than ``seconds``."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise AssertionError(f"{what} took over {seconds}s") from None


def test_scores_targets_and_the_best_run():
    assert jc.file_score(25, 100) == 25.0 and jc.file_score(0, 0) == 0.0
    assert jc.run_target(1, 4, 50, 70) == 50 and jc.run_target(4, 4, 50, 70) == 70
    assert jc.best_run([90, 95, 88], 4, 50, 70) is None  # nothing is worth rewriting
    run = jc.best_run([90, 10, 20, 95], 4, 50, 70)
    assert (run.start, run.length) == (1, 2)  # the two mostly-dead files, not the live ones
    assert jc.best_run([40], 4, 50, 70).length == 1


def test_runs_of_small_files():
    small, big = 100, 5000
    assert jc.small_run([small] * 3, 1000, 4, 10_000) is None  # too few yet
    assert jc.small_run([small] * 6, 1000, 4, 10_000) == (0, 4)  # the oldest, no more
    # A big file breaks a run: the files before it wait for no more company.
    assert jc.small_run([small, small, big] + [small] * 4, 1000, 4, 10_000) == (3, 4)
    assert jc.small_run([small, small, big, small, small], 1000, 4, 10_000) is None
    # A run whose file would not be small goes, however few its files.
    assert jc.small_run([400, 400, 400, 400], 1000, 10, 10_000) == (0, 3)
    # Small is under half of the largest file, so that the rewritten file fits.
    assert jc.small_run([600, 600, 600], 1000, 2, 1000) is None
    assert jc.small_run([400, 400, 400], 1000, 8, 1000) == (0, 2)
    assert jc.small_run([], 1000, 2, 1000) is None


def test_what_an_entry_keeps():
    idx = ((0, "a_bin", "x"),)

    def fate(op, sqn, indexes, current, persisted, strategy):
        fates, _ = jc.plan_rewrite([(sqn, op, b"k", indexes)], {b"k": current}, persisted,
                                   strategy, None)
        return fates[0]
    # Current, or above the persisted SQN: kept whole.
    assert fate(OP_PUT, 5, idx, 5, 10, RECOVR) == jc.Fate(OP_PUT, True, idx)
    assert fate(OP_PUT, 12, idx, 20, 10, RECOVR) == jc.Fate(OP_PUT, True, idx)
    # Replaced: dropped under recovr, a key delta under retain.
    assert fate(OP_PUT, 5, idx, 9, 10, RECOVR).op is None
    assert fate(OP_PUT, 5, idx, 9, 10, RETAIN) == jc.Fate(OP_KEY_DELTA, False, idx)
    assert fate(OP_PUT, 5, (), 9, 10, RETAIN).op is None
    assert fate(OP_DELETE, 5, idx, 9, 10, RETAIN) == jc.Fate(OP_KEY_DELTA, False,
                                                             ((1, "a_bin", "x"),))


async def _load_rounds(bookie, rounds=8, keys=30):
    for r in range(rounds):
        await write(bookie, [lr.Put("b", f"k{i}", b"round %d" % r, indexes=[("add", "r_int", r)])
                             for i in range(keys)], OPTIONS)
    await settle(bookie)


async def drop_the_ledger(root):
    """Delete every SST, and the Ledger's state in the manifest: reopening replays the
    Journal."""
    store = ObjectStore.from_url(f"file://{root}")
    for meta in await store.list_async("ledger/"):
        await store.delete_async(meta.path)
    await ManifestStore(store).update(lambda m: m.with_changes(levels=((),), ledger_sqn=0))


def _journal_names(root):
    out = set()
    for dirpath, _, names in os.walk(os.path.join(root, "journal")):
        out |= {os.path.join(dirpath, n) for n in names}
    return out


def test_compaction_rewrites_dead_runs_and_keeps_every_value(tmp_path):
    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", OPTIONS, local=True)
        await bookie.start()
        await _load_rounds(bookie)
        before = _journal_names(root)
        assert await bookie.compact_journal() == "started"
        result = await bookie.inker.wait_compaction()
        assert len(result.removed) == OPTIONS.journal.max_run_length and len(result.added) == 1
        await settle(bookie)
        # the replaced files are deleted once nothing reads them
        await until(lambda: len(_journal_names(root)) < len(before), timeout=10)
        after = _journal_names(root)
        assert len(after) < len(before)
        assert all(f"round {7}".encode() == v for v in
                   await bookie.get_many([object_key("b", f"k{i}") for i in range(30)]))
        await bookie.close()

    asyncio.run(run())


@pytest.mark.parametrize("strategy", ["retain", "recovr"])
def test_ledger_rebuilt_from_the_journal(tmp_path, strategy):
    """leveled's recovery scenario: every Ledger object is deleted, the store is reopened, and
    the Ledger is rebuilt from the Journal: values always, index history under retain."""
    root = str(tmp_path / "db")
    options = OPTIONS.replace(journal=dict(recovery_strategy=strategy))

    async def run():
        bookie = Bookie(f"file://{root}", options, local=True)
        await within("start", bookie.start())
        await within("load", _load_rounds(bookie))
        await within("compact", bookie.compact_journal())
        assert (await within("compaction", bookie.inker.wait_compaction())).removed
        await within("close", bookie.close())

        await within("drop the Ledger", drop_the_ledger(root))

        rebuilt = Bookie(f"file://{root}", options, local=True)
        info = await within("reopen", rebuilt.start())
        assert info["replayed"] > 0
        values = await within("get_many", rebuilt.get_many([object_key("b", f"k{i}")
                                                             for i in range(30)]))
        assert values == [b"round 7"] * 30
        terms = await within("index terms", rebuilt.current_sqns(
            [index_key("b", "r_int", r, "k3") for r in range(8)]))
        if strategy == "retain":  # the whole index history came back from key deltas
            assert all(sqn is not None for sqn in terms)
        else:  # only what the compacted-away entries did not hold
            assert terms[-1] is not None and any(sqn is None for sqn in terms)
        await within("close again", rebuilt.close())

    asyncio.run(run())


def test_replaced_journal_files_wait_for_the_inkers_snapshots(tmp_path):
    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", OPTIONS, local=True)
        await bookie.start()
        await _load_rounds(bookie)
        inker = bookie.inker
        inker.register_snapshot("journal-reader", timeout_s=60)
        before = _journal_names(root)
        await bookie.compact_journal()
        result = await inker.wait_compaction()
        await until(bookie.view.host.pending_deletes)  # the Bookie's view adopted it
        await swept_twice(bookie)
        removed = {os.path.join(root, n) for n in result.removed}
        assert removed <= before and removed <= _journal_names(root)  # still held
        inker.release_snapshot("journal-reader")
        await until(lambda: not removed & _journal_names(root), timeout=5)
        await bookie.close()

    asyncio.run(run())


def test_small_files_are_merged_as_they_are_catalogued(tmp_path):
    """Single puts write one journal file each; once enough of them are catalogued,
    compaction merges them without being asked, even before the Ledger persists them (every
    entry above its persisted SQN is kept), and every value stays readable."""
    root = str(tmp_path / "db")
    options = OPTIONS.replace(journal=dict(small_files=8, catalog_files=4),
                              ledger=dict(l0_max_keys=100_000))
    keys = [object_key("b", f"k{i}") for i in range(40)]

    async def run():
        bookie = Bookie(f"file://{root}", options, local=True)
        await within("start", bookie.start())
        for i in range(40):  # one group, so one journal file, each
            await write(bookie, [lr.Put("b", f"k{i}", b"value %d" % i)], options)
        inker = bookie.inker
        await until(lambda: inker.counters["compactions"] >= 4
                    and not inker.stats()["compacting"], timeout=10)
        assert bookie.view.files.persisted_sqn == 0  # the Ledger is all in memory still
        # Tiny values: each merged file is small still, and is merged again with the next
        # files, so a few files hold everything.
        files = inker.data_files()
        merged = [f for f in files if f.entries > 1]
        assert merged and sum(f.entries for f in files) == 40
        assert len(files) <= options.journal.small_files + len(merged)
        # The Bookie's view of the Journal lost every replaced file, however many rewrites
        # one compaction committed before it looked.
        view = await inker.wait_journal(-1)
        slots = {journal_slot_name(slot) for slot in range(inker.next_slot)}
        assert len(slots & set(view.removed)) == sum(f.entries for f in merged)
        assert not {f.name for f in view.files} & set(view.removed)
        await until(lambda: bookie.view.journal_version == inker.journal_version, timeout=5)
        assert ({f.name for f in bookie.view.journal.files}
                == {f.name for f in inker.data_files()})
        expected = [b"value %d" % i for i in range(40)]
        assert await bookie.get_many(keys) == expected
        await within("close", bookie.close())

        # With the Ledger's files gone, reopening rebuilds it from the merged files.
        await within("drop the Ledger", drop_the_ledger(root))
        reopened = Bookie(f"file://{root}", options, local=True)
        assert (await within("reopen", reopened.start()))["replayed"] == 40
        assert len(reopened.inker.data_files()) == len(inker.data_files())
        assert await reopened.get_many(keys) == expected
        await within("close again", reopened.close())

    asyncio.run(run())


def test_a_compaction_asked_for_while_one_runs_runs_again_after_it(tmp_path):
    """A head-only store's trim that decided while a history lease held the Journal, then was
    asked for again once the lease was dropped, must not answer "busy" and leave the files:
    the request runs once the running one ends, and sees the dropped lease."""
    root = str(tmp_path / "db")
    options = OPTIONS.replace(max_head_only_value_bytes=64)

    async def run():
        bookie = Bookie(f"file://{root}", options, local=True, head_only="no_lookup")
        await within("start", bookie.start())
        await bookie.set_history_lease("feed", 0, 300)
        for r in range(8):
            changes = [make_change(lr.Put("b", f"k{i}", b"round %d" % r), options, time.time())
                       for i in range(30)]
            await bookie.put_many(pack([ledger_change(c, v, 64) for c, v in changes]),
                                  ValueBatch(inline=[v for _, v in changes]))
        await within("settle", settle(bookie))
        inker = bookie.inker
        await within("the trims the load started", inker.wait_compaction())
        held = inker.stats()["journal_files"]
        assert held > 4  # the lease kept every file

        decided, go_on, replace = asyncio.Event(), asyncio.Event(), inker._replace

        async def paused(result, started=None):  # the running trim, after it decided
            decided.set()
            await go_on.wait()
            return await replace(result, started)

        inker._replace = paused
        assert inker.compact() == "started"
        await within("the trim decides", decided.wait())
        inker._replace = replace
        await bookie.drop_history_lease("feed")
        assert inker.compact() == "busy"
        go_on.set()
        result = await within("both trims", inker.wait_compaction())
        assert result.removed
        assert inker.stats()["journal_files"] < held
        await within("close", bookie.close())

    asyncio.run(run())


def test_a_file_is_read_once_for_its_scores_which_follow_later_writes(tmp_path):
    """Journal compaction samples a file once: a later score of it reads nothing from the
    store, and still counts the sampled entries that later writes replaced as dead."""
    from leveled_ray.actors.iclerk import InkerClerk
    from leveled_ray.actors.remote import self_handle

    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", OPTIONS, local=True)
        await bookie.start()
        await _load_rounds(bookie, rounds=1)  # every entry current
        store = ObjectStore.from_url(f"file://{root}")
        clerk = InkerClerk(store, OPTIONS, self_handle(bookie, True))
        persisted = bookie.view.files.persisted_sqn
        files = bookie.inker.data_files()
        assert files and max(f.max_sqn for f in files) <= persisted, (files, persisted)
        assert [await clerk.score(f, persisted, None) for f in files] == [100.0] * len(files)
        reads = store.stats.gets
        assert reads > 0
        await _load_rounds(bookie, rounds=1)  # every entry of those files replaced
        persisted = bookie.view.files.persisted_sqn
        assert [await clerk.score(f, persisted, None) for f in files] == [0.0] * len(files)
        assert store.stats.gets == reads
        await bookie.close()

    asyncio.run(run())
