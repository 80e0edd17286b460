"""A shard that a cut holds prepares no cross-shard part until it thaws, so the parts it
listed when it froze are all it holds for that cut. (Else a batch prepared here after the
freeze, then decided, would be applied by the cut in the other shards only.) With the other
answers of a shard to a cross-shard batch: a resent prepare, a busy key, a restart after an
apply, a late commit, a part that lands after its Bookie was fenced. Local Bookies, without
Ray."""

import asyncio
import contextlib
import time

import pytest
from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import pack
from leveled_ray.cluster.txn import BUSY
from leveled_ray.codec import make_change

OPTIONS = lr.Options(journal=dict(compaction_interval_s=0), gc=dict(interval_s=0))


@contextlib.asynccontextmanager
async def local_bookie(url: str):
    """A started Bookie of ``url`` in this process, closed at the end."""
    bookie = Bookie(url, OPTIONS, local=True)
    await bookie.start()
    try:
        yield bookie
    finally:
        await bookie.close()


def test_a_frozen_shard_prepares_no_part_until_it_thaws(tmp_path):
    url = f"file://{tmp_path}/db"

    async def run():
        async with local_bookie(url) as bookie:
            change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
            frozen = await bookie.freeze("cut-1", 60.0)
            prepare = asyncio.ensure_future(
                bookie.prepare("txn-1", url, pack([change]), [value]))
            # The prepare's first step runs to its first suspension: held by the cut, that is
            # the admission gate, before it locks a key or holds a part.
            await asyncio.sleep(0)
            assert not bookie.writes.locked([change.lkey])
            assert bookie.participant.pending() == [] and not prepare.done()
            assert bookie.thaw("cut-1")
            assert isinstance(await prepare, tuple)  # prepared once the cut let go
            assert frozen["pending"] == []
            assert bookie.participant.pending() == ["txn-1"]
            assert bookie.writes.locked([change.lkey])
            await bookie.abort_part("txn-1")
            assert not bookie.writes.locked([change.lkey])

    asyncio.run(run())


def test_a_committed_part_whose_shard_died_before_deleting_it_is_not_applied_again(tmp_path):
    """The shard applied its part and answered, and the part object's delete keeps failing
    (access denied): the keys unlock all the same. Then the shard died: the next writer
    finds the part and its record (commit), sees that the part's keys were written since it
    was prepared (they were locked until it was applied), and applies nothing again."""
    from leveled_ray.files.store import ObjectStore
    from leveled_ray.manifest.txn_records import COMMIT, decide
    from leveled_ray.testing.faults import Fault, FaultInjectingStore

    url = f"file://{tmp_path}/db"
    # every delete of a part object fails: the part outlives its apply
    stuck = FaultInjectingStore.wrap(url, Fault("delete", "txn/", count=10**6), options=OPTIONS)

    async def run():
        first = Bookie(url, OPTIONS, local=True, store=stuck)
        await first.start()
        change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
        assert isinstance(await first.prepare("txn-1", url, pack([change]), [value]), tuple)
        assert await decide(ObjectStore.from_url(url, OPTIONS), "txn-1", COMMIT) == COMMIT
        (sqn,) = await first.commit_part("txn-1", None)
        # the keys unlock once applied, though the part's delete fails
        await until(lambda: not first.writes.locked([change.lkey]), timeout=5)
        await first.close()  # close stops it trying
        assert await parts(url)

        second = Bookie(url, OPTIONS, local=True)
        await second.start()  # recovers the part: committed, and applied already
        try:
            await until(lambda: second.participant.parts == {})  # released after recovery
            assert not await parts(url)
            assert second.writes.next_sqn == sqn + 1  # nothing was written again
            stats = second.participant.counters
            assert stats["txn_recovered"] == 1 and stats["txn_applied_before"] == 1
        finally:
            await second.close()

    asyncio.run(run())


def test_a_part_a_cut_applied_first_still_notes_its_batch_and_answers_the_client(tmp_path):
    """A cut (or a timeout) applies a committed part before the client's own commit call:
    the part's keys are noted with every shard's part number, read from the commit record,
    so a batched read can still tell a half-read batch; and the client's late call gets the
    part's SQNs, not nothing."""
    from leveled_ray.files.store import ObjectStore
    from leveled_ray.manifest.txn_records import COMMIT, decide

    url = f"file://{tmp_path}/db"

    async def run():
        async with local_bookie(url) as bookie:
            change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
            number = await bookie.prepare("txn-1", url, pack([change]), [value])
            numbers = {"0": number, "1": (7, 3)}  # by shard label
            root = ObjectStore.from_url(url, OPTIONS)
            assert await decide(root, "txn-1", COMMIT, numbers) == COMMIT
            applied = await bookie.participant.commit("txn-1")  # the cut's call: no numbers
            assert bookie.participant.notes([change.lkey]) == {0: numbers}
            await until(lambda: "txn-1" not in bookie.participant.parts, timeout=5)  # released
            assert await bookie.participant.commit("txn-1", numbers) == applied != []

    asyncio.run(run())


def test_a_bulk_install_waits_for_a_prepared_batch_holding_keys_in_its_range(tmp_path):
    """A conditional batch checked its condition when it was prepared: a bulk write of the
    same key installed before the batch is applied would be overwritten by it. The install
    waits for the batch, then goes in above it."""
    import pyarrow as pa

    from leveled_ray.bulk import write as bulk

    url = f"file://{tmp_path}/db"

    async def run():
        async with local_bookie(url) as bookie:
            change, value = make_change(lr.Put("b", "k", b"txn", if_absent=True), OPTIONS,
                                        time.time())
            assert isinstance(await bookie.prepare("txn-1", url, pack([change]), [value]),
                              tuple)
            plan = bulk.BulkWrite(url, OPTIONS, bookie.reserve_bulk()["base"], None, False,
                                  None, None)
            files = await bulk.write_partition_async(plan, 0, [pa.record_batch(
                {"bucket": ["b"], "key": ["k"], "value": [b"bulk"]})])
            waiting = asyncio.Event()  # set once the install waits for a locked key
            wait_unlocked = bookie.writes.wait_unlocked

            async def watched(*args, **kwargs):
                waiting.set()
                return await wait_unlocked(*args, **kwargs)

            bookie.writes.wait_unlocked = watched
            install = asyncio.ensure_future(bookie.ingest(pack((files.journal, files.ssts,
                                                                None))))
            await asyncio.wait_for(waiting.wait(), timeout=5)
            assert not install.done()  # it waits for the batch holding k
            await bookie.commit_part("txn-1", None)
            await install
            assert await bookie.get(change.lkey) == b"bulk"  # installed after, above it

    asyncio.run(run())


def test_a_frozen_shard_thaws_after_hold_s_even_while_a_journal_write_is_slow(tmp_path):
    """The cutter may die: a shard thaws by itself ``hold_s`` after it froze, counted from
    when it stopped admitting writes, not from when the writes it had admitted are durable
    (on a slow object store that may be long after)."""
    from leveled_ray.actors.remote import ValueBatch

    url = f"file://{tmp_path}/db"

    async def run():
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        slow, append = asyncio.Event(), bookie.inker.append
        try:

            async def slow_append(*args):
                await slow.wait()
                return await append(*args)

            bookie.inker.append = slow_append
            change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
            put = asyncio.ensure_future(bookie.put_many(pack([change]),
                                                        ValueBatch(inline=[value])))
            await until(lambda: not bookie.writes.writer.idle.is_set())  # the write is slow
            freeze = asyncio.ensure_future(bookie.freeze("cut-1", 0.1))
            await until(lambda: bookie.writes.frozen is not None)
            await until(lambda: bookie.writes.frozen is None)  # thawed by itself, write slow
            assert not put.done()
            slow.set()
            await put
            await freeze
            assert not bookie.thaw("cut-1")  # the cut learns it did not hold throughout
        finally:
            slow.set()
            bookie.writes.thaw("cut-1")
            await bookie.close()

    asyncio.run(run())



async def parts(url: str) -> list:
    from leveled_ray.files.store import ObjectStore

    return [m for m in await ObjectStore.from_url(url, OPTIONS).list_async("txn/")
            if m.path.endswith(".part")]


def test_a_resent_prepare_gets_its_part_and_another_batch_is_told_busy(tmp_path):
    """A resent prepare gets the same part; another batch's prepare of a held key is told
    ``busy``, until the key is free."""
    url = f"file://{tmp_path}/db"

    async def run():
        async with local_bookie(url) as bookie:
            change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
            first = await bookie.prepare("txn-1", url, pack([change]), [value])
            assert await bookie.prepare("txn-1", url, pack([change]), [value]) == first
            assert bookie.participant.prepared == 1
            other, value2 = make_change(lr.Put("b", "k", b"w"), OPTIONS, time.time())
            assert await bookie.prepare("txn-2", url, pack([other]), [value2]) == BUSY
            assert bookie.participant.pending() == ["txn-1"]
            await bookie.abort_part("txn-1")
            assert isinstance(await bookie.prepare("txn-2", url, pack([other]), [value2]),
                              tuple)  # the key is free again
            await bookie.abort_part("txn-2")

    asyncio.run(run())


def test_a_part_that_lands_after_its_bookie_learned_it_was_fenced_is_refused(tmp_path):
    """A shard opened again elsewhere lists its parts when it opens: a part of the old Bookie
    that lands after that is unknown to it, and would be answered "done" at commit without
    being applied. So the old Bookie, fenced while the part's object was on its way, refuses
    the part (the client aborts the batch, and the new writer settles the object by that
    decision) and holds nothing."""
    from leveled_ray.actors.remote import ValueBatch

    url = f"file://{tmp_path}/db"

    async def run():
        first = Bookie(url, OPTIONS, local=True)
        await first.start()
        gate, create = asyncio.Event(), first.participant.store.put_if_absent_async

        async def held(name, *args, **kwargs):  # the part's object waits for the gate
            if name.startswith("txn/"):
                await gate.wait()
            return await create(name, *args, **kwargs)
        first.participant.store.put_if_absent_async = held
        change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
        prepare = asyncio.ensure_future(first.prepare("txn-1", url, pack([change]), [value]))
        await until(lambda: first.writes.locked([change.lkey]))  # its object is on its way
        async with local_bookie(url) as second:  # the shard opened again: it fences the first
            assert second.participant.pending() == []
            other, value2 = make_change(lr.Put("b", "other", b"w"), OPTIONS, time.time())
            with pytest.raises(lr.FencedError):  # the first learns it at its next write
                await first.put_many(pack([other]), ValueBatch(inline=[value2]))
            gate.set()
            with pytest.raises(lr.FencedError):
                await prepare
            assert first.participant.pending() == [] and not first.writes.locked([change.lkey])
            assert first.participant.counters["txn_refused_stopped"] == 1
        await first.close()

    asyncio.run(run())


def test_a_clean_close_decides_and_settles_the_parts_it_holds(tmp_path):
    """A clean close leaves no part behind: an undecided batch is aborted (its client is told
    it conflicted), a committed one applied, and their objects deleted, so a split or a move
    that follows need not wait for them."""
    from leveled_ray.files.store import ObjectStore
    from leveled_ray.manifest.txn_records import ABORT, COMMIT, decide

    url = f"file://{tmp_path}/db"

    async def run():
        root = ObjectStore.from_url(url, OPTIONS)
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        undecided, v1 = make_change(lr.Put("b", "k1", b"1"), OPTIONS, time.time())
        committed, v2 = make_change(lr.Put("b", "k2", b"2"), OPTIONS, time.time())
        assert isinstance(await bookie.prepare("txn-1", url, pack([undecided]), [v1]), tuple)
        assert isinstance(await bookie.prepare("txn-2", url, pack([committed]), [v2]), tuple)
        assert await decide(root, "txn-2", COMMIT) == COMMIT
        assert len(await parts(url)) == 2
        await bookie.close()
        assert await parts(url) == []
        assert await decide(root, "txn-1", COMMIT) == ABORT  # its late client is refused
        async with local_bookie(url) as again:
            assert again.participant.counters["txn_recovered"] == 0
            assert await again.get_many([undecided.lkey, committed.lkey]) == [None, b"2"]

    asyncio.run(run())
