"""Journal writes on a faulty object store, in one process without Ray: the Bookie, Inker and
Penciller run as plain objects over the in-process fault store (a wrapping client)."""

import asyncio
import time

import pytest
from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import ValueBatch, pack
from leveled_ray.codec import make_change, object_key, range_check
from leveled_ray.testing.faults import Fault, FaultInjectingStore

from test_merges import write

OPTIONS = lr.Options(object_store=dict(retry_backoff_s=0.001, retry_max_backoff_s=0.01,
                                       write_resolve_s=2.0, max_retries=3, retry_timeout_s=2.0),
                     gc=dict(interval_s=0), journal=dict(compaction_interval_s=0))
#: The first journal create is the fence written at open; data slots come after it.
DATA = dict(op="put_if_absent", prefix="journal/", after=1)


async def _open(url, *faults):
    store = FaultInjectingStore.wrap(url, *faults, options=OPTIONS)
    bookie = Bookie(url, OPTIONS, local=True, store=store)
    await bookie.start()
    return bookie


async def _values(bookie, keys):
    return await bookie.get_many([object_key("b", k) for k in keys])


def _reopened_values(url, keys):
    async def run():
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        try:
            return await _values(bookie, keys)
        finally:
            await bookie.close()
    return asyncio.run(run())


def test_a_lost_reply_is_a_durable_write(tmp_url):
    async def run():
        bookie = await _open(tmp_url, Fault(**DATA, applied=True))
        await write(bookie, [lr.Put("b", "k1", b"1")], OPTIONS)  # resolved, not an error
        assert await _values(bookie, ["k1"]) == [b"1"]
        assert bookie.store.stats.resolved >= 1
        await bookie.close()
    asyncio.run(run())
    assert _reopened_values(tmp_url, ["k1"]) == [b"1"]


def test_a_write_whose_outcome_stays_unknown_is_sealed_and_fails_definitely(tmp_url):
    attempts = OPTIONS.object_store.max_retries + 1

    async def run():
        bookie = await _open(tmp_url, Fault(**DATA, count=attempts, reply="timeout"))
        with pytest.raises(lr.ObjectStoreError) as err:
            await write(bookie, [lr.Put("b", "lost", b"x")], OPTIONS)
        assert err.value.definite
        await write(bookie, [lr.Put("b", "k2", b"2")], OPTIONS)  # the next slot: no reopen
        assert await _values(bookie, ["lost", "k2"]) == [None, b"2"]
        stats = await bookie.stats()
        assert stats["state"] == "open" and stats["inker"]["sealed_slots"] == 1
        await bookie.close()
    asyncio.run(run())
    assert _reopened_values(tmp_url, ["lost", "k2"]) == [None, b"2"]


def test_an_unreachable_store_fails_writes_definitely_and_they_resume(tmp_url):
    refused = 2 * (OPTIONS.object_store.max_retries + 1)  # two writes' worth of refused connections

    async def run():
        bookie = await _open(tmp_url, Fault(**DATA, count=refused))
        for key in ("a", "b"):
            started = time.monotonic()
            with pytest.raises(lr.ObjectStoreError) as err:
                await write(bookie, [lr.Put("b", key, b"x")], OPTIONS)
            assert err.value.definite
            assert time.monotonic() - started < OPTIONS.object_store.retry_timeout_s + 1
        await write(bookie, [lr.Put("b", "c", b"3")], OPTIONS)  # answered again: it works
        assert await _values(bookie, ["a", "b", "c"]) == [None, None, b"3"]
        await bookie.close()
    asyncio.run(run())
    assert _reopened_values(tmp_url, ["a", "b", "c"]) == [None, None, b"3"]


def test_a_write_that_cannot_even_be_sealed_is_settled_before_the_next(tmp_url):
    # Data and seal time out, and read-backs fail, for a while: the caller is told the
    # outcome is unknown; later writes wait, boundedly, and fail definitely; once the store
    # answers, the slot is settled and writing goes on without a reopen.
    n = 4 * (OPTIONS.object_store.max_retries + 1)

    async def run():
        bookie = await _open(tmp_url, Fault(**DATA, count=n, reply="timeout"),
                             Fault("get_range", "journal/", count=n, reply="timeout"),
                             Fault("get", "journal/", count=n, reply="timeout"))
        with pytest.raises(lr.ObjectStoreError) as err:
            await write(bookie, [lr.Put("b", "doubt", b"?")], OPTIONS)
        assert not err.value.definite
        outcome = "unsettled"
        for _ in range(20):
            try:
                await write(bookie, [lr.Put("b", "after", b"a")], OPTIONS)
                outcome = "written"
                break
            except lr.ObjectStoreError as exc:
                assert exc.definite  # never sent while the earlier write is in doubt
        assert outcome == "written"
        stats = await bookie.stats()
        assert stats["state"] == "open" and not stats["in_doubt"]
        seen = await _values(bookie, ["doubt", "after"])
        assert seen[1] == b"a" and seen[0] in (None, b"?")
        await bookie.close()
        return seen
    seen = asyncio.run(run())
    assert _reopened_values(tmp_url, ["doubt", "after"]) == seen  # the same, after recovery


def test_queued_writes_of_other_keys_survive_a_failed_group(tmp_url):
    async def run():
        bookie = await _open(tmp_url, Fault(**DATA, count=OPTIONS.object_store.max_retries + 1))
        first = asyncio.ensure_future(write(bookie, [lr.Put("b", "x", b"1")], OPTIONS))
        for _ in range(1000):  # until the writer has taken it: the others queue behind it
            await asyncio.sleep(0)
            if not bookie.writes.writer.queue and not bookie.writes.writer.idle.is_set():
                break
        results = await asyncio.gather(
            first,
            write(bookie, [lr.Put("b", "x", b"2")], OPTIONS),  # depends on the failed one
            write(bookie, [lr.Put("b", "y", b"3")], OPTIONS),  # does not
            return_exceptions=True)
        assert isinstance(results[0], lr.ObjectStoreError) and results[0].definite
        assert isinstance(results[1], lr.ObjectStoreError) and results[1].definite
        assert isinstance(results[2], list)
        assert await _values(bookie, ["x", "y"]) == [None, b"3"]
        await bookie.close()
    asyncio.run(run())


def test_a_part_whose_apply_was_in_doubt_and_landed_is_not_applied_again(tmp_url):
    """A cross-shard part's apply is told its journal write's outcome is unknown (the write
    landed, and nothing could read it back for a while). The next commit call (the client's
    retry, a cut or the part's timeout) must find that it landed, not write it again."""
    from leveled_ray.actors.remote import pack
    from leveled_ray.codec import make_change
    from leveled_ray.files.store import ObjectStore
    from leveled_ray.manifest.txn_records import COMMIT, decide

    n = 4 * (OPTIONS.object_store.max_retries + 1)

    async def run():
        bookie = await _open(tmp_url, Fault(**DATA, count=n, applied=True, reply="timeout"),
                             Fault("get_range", "journal/", count=n, reply="timeout"),
                             Fault("get", "journal/", count=n, reply="timeout"))
        change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
        first = bookie.writes.next_sqn
        assert isinstance(await bookie.prepare("txn-1", tmp_url, pack([change]), [value]),
                          tuple)
        assert await decide(ObjectStore.from_url(tmp_url, OPTIONS), "txn-1", COMMIT) == COMMIT
        with pytest.raises(lr.ObjectStoreError) as err:
            await bookie.commit_part("txn-1")
        assert not err.value.definite
        async def retried():  # the retry, once the store answers again
            try:
                return await bookie.commit_part("txn-1")
            except lr.ObjectStoreError as exc:
                assert not exc.definite
                return None

        assert await until(retried, timeout=10) == [first]
        assert bookie.writes.next_sqn == first + 1  # written once
        assert await _values(bookie, ["k"]) == [b"v"]
        await bookie.close()

    asyncio.run(run())


def test_a_transaction_reads_a_key_being_written_once_that_write_is_durable(tmp_url):
    """A transaction's read of a key whose change has its SQN but is not yet durable waits
    for that write and reads it, not the version before it, with which its commit would
    conflict for certain (a hot key under Zipf-skewed transfers)."""
    async def run():
        bookie = await _open(tmp_url)
        await write(bookie, [lr.Put("b", "k", b"1")], OPTIONS)
        gate, create = asyncio.Event(), bookie.store.create_or_seal_async

        async def held(*args, **kwargs):  # the next journal file waits for the gate
            await gate.wait()
            return await create(*args, **kwargs)
        bookie.store.create_or_seal_async = held
        lkey = object_key("b", "k")
        second = asyncio.create_task(write(bookie, [lr.Put("b", "k", b"2")], OPTIONS))
        await until(lambda: lkey in bookie.writes.cache.pending)
        asyncio.get_running_loop().call_later(0.3, gate.set)  # the longest the write is held
        entries, found = await bookie.read_versions([lkey])
        assert found.to_pylist() == [b"2"] and entries[0][0] == (await second)[0]
        await bookie.close()
    asyncio.run(run())


def test_a_range_check_sees_a_write_into_its_range_that_is_not_yet_durable(tmp_url):
    """A transaction's range check waits for the writes given SQNs before it, so one into
    the range whose journal write is still in flight makes the check fail (a phantom), rather
    than being missed because the check read only what was durable."""
    async def run():
        bookie = await _open(tmp_url)
        await write(bookie, [lr.Put("b", "k1", b"1")], OPTIONS)
        lo, hi = object_key("b", "k"), object_key("b", "l")
        read = await bookie.view.live_range(lo, hi, bookie.writes.durable_sqn)  # one key
        gate, create = asyncio.Event(), bookie.store.create_or_seal_async

        async def held(*args, **kwargs):  # the next journal file waits for the gate
            await gate.wait()
            return await create(*args, **kwargs)
        bookie.store.create_or_seal_async = held
        phantom = asyncio.create_task(write(bookie, [lr.Put("b", "k2", b"2")], OPTIONS))
        await until(lambda: object_key("b", "k2") in bookie.writes.cache.pending)
        asyncio.get_running_loop().call_later(0.3, gate.set)  # the longest the write is held
        check, value = make_change(lr.Put("b", "other", b"x"), OPTIONS, time.time())
        with pytest.raises(lr.ConditionFailedError):
            await bookie.put_many(pack([range_check(lo, hi, read), check]),
                                  ValueBatch(inline=[value]))
        await phantom
        assert await _values(bookie, ["k2", "other"]) == [b"2", None]  # nothing of it written
        await bookie.close()
    asyncio.run(run())
