"""Ledger merges and delete_pending: a model-based test against a dict, level invariants, and
files deleted only when no snapshot needs them. In one process, without Ray."""

import asyncio
import contextlib
import os
import shutil
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import ValueBatch, pack, wait_set
from leveled_ray.clock import ManualClock
from leveled_ray.codec import make_change, object_key
from leveled_ray.manifest.levels import check_level

TINY = lr.Options(ledger=dict(l0_max_keys=16, push_keys=4, push_ms=1, sst_max_keys=12,
                              sst_block_bytes=256))


async def write(bookie, items, options=TINY, clock=time.time):
    pairs = [make_change(x, options, clock()) for x in items]
    return await bookie.put_many(pack([c for c, _ in pairs]),
                                 ValueBatch(inline=[v for _, v in pairs]))


async def swept_twice(bookie, timeout=20.0):
    """Until the reaper has looked at the files waiting for deletion twice more."""
    target = bookie.reaper.counters["reaper_sweeps"] + 2
    await until(lambda: bookie.reaper.counters["reaper_sweeps"] >= target, timeout)


async def settle(bookie, timeout=20.0):
    """Wait until changes are pushed, L0 memory is under its limit, no merge is due or running,
    the Bookie has the newest Ledger files, and retired files are deleted."""
    def settled() -> bool:
        p = bookie.penciller
        flushing = p._flush_task is not None and not p._flush_task.done()
        pushing = bookie.cache._push_lock.locked()
        if (len(bookie.cache.unpushed) or bookie.writes.writer.queue or pushing or flushing
                or p.l0_keys >= p.options.ledger.l0_max_keys):
            return False
        work = p.merge_work()  # reserve the next merge, if any, then hand it back
        if work is not None:
            p.merge_failed(work, "peek")
            p.counters["merge_failures"] -= 1
        return (work is None and not p.merging and not bookie.view.host.pending_deletes()
                and bookie.view.files.version == p.latest.id)

    with contextlib.suppress(AssertionError):
        await until(settled, timeout, interval=0.02)
        return
    p = bookie.penciller
    raise AssertionError(
        f"merges did not settle: merging={p.merging} due={p.merge_work() is not None} "
        f"pending={bookie.view.host.pending_deletes()} view={bookie.view.files.version} "
        f"manifest={p.latest.id} error={p.last_error} snapshots={p.snapshots.snapshots}")


def ledger_files_on_disk(root):
    path = os.path.join(root, "ledger")
    return set(os.listdir(path)) if os.path.isdir(path) else set()


operations = st.lists(
    st.tuples(st.sampled_from(["put", "put", "put", "delete", "pause", "compact"]),
              st.integers(0, 40),
              st.integers(0, 3)),
    min_size=1, max_size=250,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_merges_and_compactions_match_a_dict(ops):
    check_against_a_dict(ops)


def test_the_model_runs_compactions():
    """A fixed, write-heavy sequence, so that compactions surely run inside the model test."""
    ops = [("put", i % 25, i % 4) for i in range(120)] + [("compact", 0, 0)]
    ops += [("delete", i, 0) for i in range(0, 25, 3)] + [("compact", 0, 0)]
    ops += [("put", i % 25, 1) for i in range(60)]
    assert check_against_a_dict(ops)["compactions"] >= 1


def check_against_a_dict(ops) -> dict:
    """Run the operations on a Bookie and on a dict, compare every key after merges settle and
    after a restart; returns the Inker's counters."""
    root = tempfile.mkdtemp(prefix="lr-model-")

    async def run():
        bookie = Bookie(f"file://{root}", TINY, local=True)
        await bookie.start()
        model: dict[str, bytes | None] = {}
        group = []
        for n, (op, key, size) in enumerate(ops):
            k = f"k{key:03d}"
            if op == "pause":
                if group:
                    await write(bookie, group)
                    group = []
                await until(lambda: not bookie.cache.unpushed)  # pushed to the Penciller
                continue
            if op == "compact":  # journal compaction, racing the writes that follow
                if group:
                    await write(bookie, group)
                    group = []
                await settle(bookie)  # so the Ledger has persisted some of the Journal
                await bookie.compact_journal()
                continue
            if op == "put":
                value = b"v%d-" % n + b"x" * size
                group.append(lr.Put("b", k, value))
                model[k] = value
            else:
                group.append(lr.Delete("b", k))
                model[k] = None
            if len(group) >= 7:
                await write(bookie, group)
                group = []
        if group:
            await write(bookie, group)
        await bookie.inker.wait_compaction()
        await settle(bookie)
        counters = dict(bookie.inker.counters)
        keys = sorted(model) + ["never-written"]
        got = await bookie.get_many([object_key("b", k) for k in keys])
        assert dict(zip(keys, got)) == {**model, "never-written": None}
        levels = bookie.penciller.latest.manifest.levels
        for n, level in enumerate(levels):
            check_level(level, n)  # levels 1 and below never overlap
        names = {f.name.split("/")[1] for level in levels for f in level}
        assert ledger_files_on_disk(root) == names  # replaced files were deleted
        await bookie.close()
        # The same answers after a restart (from the files alone).
        again = Bookie(f"file://{root}", TINY, local=True)
        await again.start()
        assert await again.get_many([object_key("b", k) for k in keys]) == got
        await again.close()
        return counters

    try:
        return asyncio.run(run())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_files_wait_for_the_snapshot_that_reads_them(tmp_path):
    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", TINY, local=True)
        await bookie.start()
        await write(bookie, [lr.Put("b", f"k{i}", b"first") for i in range(40)])
        await settle(bookie)
        held = ledger_files_on_disk(root)
        assert held
        penciller = bookie.penciller
        penciller.register_snapshot("reader", timeout_s=60)
        for r in range(4):  # rewrite everything: every held file is replaced
            await write(bookie, [lr.Put("b", f"k{i}", b"again %d" % r) for i in range(40)])
        # the merges that replace the held files land
        assert await until(bookie.view.host.pending_deletes, timeout=20)
        await swept_twice(bookie)
        assert held <= ledger_files_on_disk(root)  # still there: the snapshot may read them
        penciller.release_snapshot("reader")
        await settle(bookie)
        assert not held & ledger_files_on_disk(root)
        assert bookie.reaper.counters["files_deleted"] >= len(held)
        assert await bookie.get(object_key("b", "k3")) == b"again 3"
        await bookie.close()

    asyncio.run(run())


def test_a_dead_holders_snapshot_expires(tmp_path):
    root = str(tmp_path / "db")
    clock = ManualClock()

    async def run():
        bookie = Bookie(f"file://{root}", TINY, local=True, clock=clock)
        await bookie.start()
        await write(bookie, [lr.Put("b", f"k{i}", b"1") for i in range(40)])
        await settle(bookie)
        held = ledger_files_on_disk(root)
        assert held
        bookie.penciller.register_snapshot("holder-that-died", timeout_s=1.0)
        await write(bookie, [lr.Put("b", f"k{i}", b"2") for i in range(40)])
        await until(bookie.view.host.pending_deletes)  # the merges that replace them land
        await swept_twice(bookie)
        assert held <= ledger_files_on_disk(root)
        clock.advance(1.0)  # the timeout passes; the next check drops it
        await settle(bookie)
        assert not held & ledger_files_on_disk(root)
        assert len(bookie.penciller.snapshots) == 0
        await bookie.close()

    asyncio.run(run())


def test_merge_tables_keeps_the_newest_and_reaps_only_at_the_basement():
    from leveled_ray.actors.pclerk import merge_tables
    from leveled_ray.codec import LedgerRows

    def table(rows):
        r = LedgerRows()
        for key, sqn, status, expiry in rows:
            r.add(key, sqn, status, expiry, 0, 1, 0, b"")
        import pyarrow as pa
        return pa.Table.from_batches([r.to_batch()])

    newer = table([(b"a", 5, 1, 0), (b"b", 6, 0, 0), (b"c", 7, 0, 100)])  # a deleted, c expired
    older = table([(b"a", 1, 0, 0), (b"b", 2, 0, 0), (b"d", 3, 0, 0)])
    kept = merge_tables([newer, older], basement=False, now_s=200)
    assert kept.column("key").to_pylist() == [b"a", b"b", b"c", b"d"]
    assert kept.column("sqn").to_pylist() == [5, 6, 7, 3]  # the newest entry of each key
    reaped = merge_tables([newer, older], basement=True, now_s=200)
    assert reaped.column("key").to_pylist() == [b"b", b"d"]
    assert merge_tables([newer], basement=True, now_s=50).column("key").to_pylist() == [b"b",
                                                                                          b"c"]


def test_basement_merges_reap_tombstones_and_expired_entries(tmp_path):
    root = str(tmp_path / "db")
    # One L1 file: every L0 merge is a basement one.
    options = TINY.replace(ledger=dict(sst_max_keys=10_000))

    clock = ManualClock()

    async def run():
        bookie = Bookie(f"file://{root}", options, local=True, clock=clock)
        await bookie.start()
        await write(bookie, [lr.Put("b", f"k{i}", b"v") for i in range(30)])
        await write(bookie, [lr.Put("t", f"e{i}", b"v", ttl=600) for i in range(10)], options,
                    clock=clock)
        await write(bookie, [lr.Delete("b", f"k{i}") for i in range(0, 30, 2)])
        clock.advance(601.1)  # expiry is rounded up to whole seconds
        # Later writes whose range covers both buckets: every file is merged again, at the
        # basement, where tombstones and expired entries have nothing left to hide.
        await write(bookie, [lr.Put("b", f"z{i}", b"v") for i in range(60)]
                    + [lr.Put("t", f"f{i}", b"v") for i in range(10)])
        await settle(bookie)
        levels = bookie.penciller.latest.manifest.levels
        entries = sum(f.entries for level in levels for f in level)
        tombstones = sum(f.tombstones for level in levels for f in level)
        assert tombstones == 0 and entries == 15 + 60 + 10
        assert await bookie.get(object_key("t", "e1")) is None
        assert await bookie.get(object_key("b", "k1")) == b"v"
        assert await bookie.get(object_key("b", "k2")) is None
        await bookie.close()

    asyncio.run(run())


def test_backpressure_slows_then_holds_writers_while_merges_are_stalled(tmp_path):
    root = str(tmp_path / "db")
    options = TINY.replace(ledger=dict(max_unpersisted_keys=120, max_l0_files=1,
                                       max_write_delay_ms=20.0))

    async def run():
        bookie = Bookie(f"file://{root}", options, local=True)
        await bookie.start()
        clerk = bookie._merge_clerk().local
        clerk.stop()  # merges stall: L0 fills up, then L0 memory, then the Bookie's backlog
        await bookie._merges  # the clerk's loop has ended
        written = 0
        held = None
        for n in range(40):
            task = asyncio.ensure_future(
                write(bookie, [lr.Put("b", f"k{n}-{i}", b"v") for i in range(10)], options))
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if not done:
                held = task
                break
            written += 10
        assert held is not None, "writes were never held back"
        stats = await bookie.stats()
        assert stats["backlog"]["unpersisted"] <= options.ledger.max_unpersisted_keys + 10
        assert stats["throttled_writes"] > 0 and stats["throttle_ms"] > 0
        clerk.stopped = False  # merges resume: the held write completes
        resumed = asyncio.ensure_future(clerk.run())
        await asyncio.wait_for(held, timeout=20)
        await settle(bookie)
        got = await bookie.get_many([object_key("b", f"k{n}-3") for n in range(written // 10)])
        assert got == [b"v"] * (written // 10)
        clerk.stop()
        await resumed
        await bookie.close()

    asyncio.run(run())


def test_a_long_poll_passes_on_a_cancel_that_arrives_as_its_event_is_set():
    """Close cancels the Bookie's watch loops while they long-poll the Penciller and Inker: a
    cancel that lands as the event is set must still end the loop (asyncio.wait_for on
    Python 3.11 returns normally then, and the loop would poll once more, for 30 s)."""
    async def run():
        event = asyncio.Event()
        assert not await wait_set(event, 0.01)  # timed out
        poll = asyncio.ensure_future(wait_set(event, 30))
        await asyncio.sleep(0)
        event.set()
        poll.cancel()
        try:
            await poll
        except asyncio.CancelledError:
            return await wait_set(event, 30)  # already set: at once
        raise AssertionError("the cancel was swallowed")

    assert asyncio.run(run())


def test_an_ask_for_merge_work_waits_for_the_levels_to_change(tmp_path):
    """The merge clerk's ask is a long poll: with no merge due it waits, returns the merge a
    flush made due as soon as the flush commits, and returns ``None`` when the Bookie closes.
    (An idle clerk so makes one call per MERGE_POLL_S, not one every few milliseconds.)"""
    async def idle_bookie(name: str) -> Bookie:
        bookie = Bookie(f"file://{tmp_path / name}", TINY, local=True)
        await bookie.start()
        bookie._merge_clerk().local.stop()
        await bookie._merges  # its own ask ended: the Penciller's work is ours
        return bookie

    async def run():
        bookie = await idle_bookie("flushed")
        asking = asyncio.ensure_future(bookie.penciller.wait_merge_work(60))
        await asyncio.sleep(0)  # it asks with nothing due (else it would answer None)
        await write(bookie, [lr.Put("b", f"k{i:03d}", b"v") for i in range(40)])
        job = await asyncio.wait_for(asking, 20)  # the flush's commit answers it
        assert job is not None and job.source_level == 0
        bookie.penciller.merge_failed(job, "handed back")
        await bookie.close()

        bookie = await idle_bookie("closed")
        asking = asyncio.ensure_future(bookie.penciller.wait_merge_work(60))
        await asyncio.sleep(0)  # it waits for work
        await bookie.close()
        assert await asyncio.wait_for(asking, 20) is None

    asyncio.run(run())


def test_close_does_not_wait_for_merges_that_will_not_come(tmp_path):
    """L0 full and merges stalled: close still persists L0 memory and returns."""
    root = str(tmp_path / "db")
    options = TINY.replace(ledger=dict(max_l0_files=1))

    async def run():
        bookie = Bookie(f"file://{root}", options, local=True)
        await bookie.start()
        bookie._merge_clerk().local.stop()
        await bookie._merges  # the clerk's loop has ended
        for n in range(6):
            await write(bookie, [lr.Put("b", f"k{n}-{i}", b"v") for i in range(20)], options)
        await asyncio.wait_for(bookie.close(), timeout=20)
        again = Bookie(f"file://{root}", options, local=True)
        info = await again.start()
        assert info["replayed"] == 0  # everything reached an SST at close
        assert await again.get(object_key("b", "k5-19")) == b"v"
        await again.close()

    asyncio.run(run())


@pytest.mark.timeout(60)  # the bug spun without yielding: only this timeout ends it
def test_a_bulk_install_during_a_close_with_a_merge_in_flight_is_refused(tmp_path):
    """A bulk write's install that reaches the Penciller once close began, while a merge is in
    flight, raises StoreClosedError at once (close sets the merges' event for good: waiting
    for it again would spin for ever)."""
    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", TINY, local=True)
        await bookie.start()
        bookie._merge_clerk().local.stop()
        await bookie._merges  # the clerk's loop has ended: the merge below stays in flight
        for n in range(6):
            await write(bookie, [lr.Put("b", f"k{n}-{i}", b"v") for i in range(20)])
        penciller = bookie.penciller
        async def due():  # taken once due, as a clerk takes one
            if penciller.merge_work() is not None:
                return True
            await write(bookie, [lr.Put("b", f"more{time.monotonic()}", b"v")])
            return False

        await until(due, timeout=20, interval=0.02)
        await asyncio.wait_for(bookie.close(), timeout=20)
        with pytest.raises(lr.StoreClosedError, match="closing"):
            await asyncio.wait_for(penciller.ingest((), (), 0), timeout=5)

    asyncio.run(run())


def test_stats_does_not_wait_for_a_clerk_still_starting(tmp_path):
    """A clerk whose process is still starting is reported ``starting``, with no counters of
    its own: a call to it would wait for that (seconds on a loaded node, as after a
    failover), and stats() with it."""
    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", TINY, local=True)
        await bookie.start()
        assert "starting" not in (await bookie.stats())["merges"]  # no clerk yet
        bookie._merge_clerk()
        bookie.clerks_made["pclerk"] = asyncio.get_running_loop().create_future()  # starting
        merges = (await asyncio.wait_for(bookie.stats(), timeout=5))["merges"]
        assert merges["starting"] and merges["merges"] == 0
        bookie.clerks_made["pclerk"].set_result(None)  # made: its own figures
        merges = (await bookie.stats())["merges"]
        assert "starting" not in merges and "process" in merges
        await bookie.close()

    asyncio.run(run())


def test_a_write_waiting_for_a_cut_when_the_store_closes_is_refused(tmp_path):
    """A write held by a cut (or a bulk install, or a prepared batch's lock) when close
    begins is refused at once with StoreClosedError: it would otherwise wait for the thaw,
    then queue a group for a writer that has stopped, and never be answered."""
    root = str(tmp_path / "db")

    async def run():
        bookie = Bookie(f"file://{root}", TINY, local=True)
        await bookie.start()
        await write(bookie, [lr.Put("b", "k", b"v")])
        assert (await bookie.freeze("cut-1", 30.0))["pending"] == []  # holds writes 30 s
        held = asyncio.ensure_future(write(bookie, [lr.Put("b", "k2", b"v")]))
        await asyncio.sleep(0)  # the write reaches its admission and waits there
        await asyncio.wait_for(bookie.close(), timeout=20)
        with pytest.raises(lr.StoreClosedError):
            await asyncio.wait_for(held, timeout=5)

    asyncio.run(run())


def test_the_merge_clerk_starts_when_a_merge_comes_due_not_at_every_open(tmp_path):
    """A store reopened with its levels within their sizes starts no merge clerk (a process
    each, on a cluster): the first flush that makes a merge due starts it."""
    url = f"file://{tmp_path / 'db'}"

    async def run():
        bookie = Bookie(url, TINY, local=True)
        await bookie.start()
        await write(bookie, [lr.Put("b", f"k{i:03d}", b"v") for i in range(40)])
        await settle(bookie)
        assert bookie.pclerk is not None and any(bookie.penciller.latest.manifest.levels)
        await bookie.close()

        bookie = Bookie(url, TINY, local=True)
        await bookie.start()
        assert (bookie.pclerk is not None) == bookie.penciller.merge_due()
        await settle(bookie)
        await bookie.close()  # settled, and nothing written since: nothing due

        bookie = Bookie(url, TINY, local=True)
        await bookie.start()
        assert bookie.pclerk is None and any(bookie.penciller.latest.manifest.levels)
        assert await bookie.get_many([object_key("b", "k007")]) == [b"v"]
        await write(bookie, [lr.Put("b", f"n{i:03d}", b"v") for i in range(40)])
        await until(lambda: bookie.pclerk is not None, 20)  # a flush made a merge due
        await settle(bookie)
        await bookie.close()

    asyncio.run(run())
