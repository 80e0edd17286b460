"""The change feed against a model: for random puts and deletes (with metadata and index
changes), the changes after any SQN equal the model's log after that SQN, before and after
journal compaction, from the running store's view and from a reader without Ray. In one
process, without Ray."""

import asyncio
import json
import random

import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.codec import object_key, split_object_key
from leveled_ray.files.store import ObjectStore
from leveled_ray.read.changes import (
    CHANGES_SCHEMA,
    SPAN_BYTES,
    changes_batch,
    file_groups,
    files_between,
    journal_changes,
    python_changes,
    python_feed,
)
from leveled_ray.read.history_view import view_at
from leveled_ray.read.key_ranges import object_range
from leveled_ray.read.queries import index_entries
from leveled_ray.read.store_reader import StoreReader
from leveled_ray.testing.faults import Fault, FaultInjectingStore

from test_merges import TINY, settle, write

OPTIONS = TINY.replace(journal=dict(compaction_interval_s=0, max_run_length=4,
                                   singlefile_compactionpercentage=95.0,
                                   maxrunlength_compactionpercentage=99.0))
KEYS = [("b", "k1"), ("b", "k2"), (b"raw", b"\x00k3"), ("c", "k4")]


@st.composite
def histories(draw):
    """Groups of changes: each a put (with metadata and an index change sometimes) or a
    delete of one of a few keys."""
    groups = []
    for g in range(draw(st.integers(1, 20))):
        group = {}
        for _ in range(draw(st.integers(1, 4))):
            bucket, key = draw(st.sampled_from(KEYS))
            if draw(st.integers(0, 3)) == 0:
                group[(bucket, key)] = lr.Delete(bucket, key)
            else:
                meta = {"g": g} if draw(st.booleans()) else None
                idx = [("add", "g_int", g)] if draw(st.booleans()) else []
                group[(bucket, key)] = lr.Put(bucket, key, b"v%d" % g, indexes=idx,
                                              metadata=meta)
        groups.append(list(group.values()))
    return groups


async def started(url: str) -> Bookie:
    bookie = Bookie(url, OPTIONS, local=True)
    await bookie.start()
    return bookie


async def pinned_view(bookie):
    """A view of now, registered as a snapshot: merges keep its files until the next
    :func:`compacted` releases it."""
    taken = await bookie.snapshot(600.0, True)
    bookie.test_snapshots = [*getattr(bookie, "test_snapshots", []), taken["id"]]
    return taken["view"]


async def compacted(bookie):
    """Compact the Journal now (releasing the views taken so far), and wait until the
    Bookie's view has the result."""
    for snapshot_id in getattr(bookie, "test_snapshots", []):
        await bookie.release_snapshot(snapshot_id)
    bookie.test_snapshots = []
    await settle(bookie)
    await bookie.compact_journal()
    result = await bookie.inker.wait_compaction()
    await until(lambda: bookie.view.journal_version >= bookie.inker.journal_version)
    return result


def expected(log, after):
    return [c for c in log if c[2] > after]


def as_model(change):
    return (change.bucket, change.key, change.sqn, change.kind, change.value, change.metadata,
            change.indexes)


def state_at(log, s):
    """The model at SQN ``s``: each live object's value, and each index term's objects."""
    objects, terms = {}, {}
    for bucket, key, sqn, kind, value, _, indexes in log:
        if sqn > s:
            break
        objects[(bucket, key)] = value if kind == "put" else None
        for change, field, term in indexes:
            held = terms.setdefault((field, term), set())
            (held.add if change == "add" else held.discard)((bucket, key))
    return ({k: v for k, v in objects.items() if v is not None},
            {t: keys for t, keys in terms.items() if keys})


async def check_view_at(view, log, s):
    """A view of SQN ``s`` answers as the model at ``s`` does: point reads, a fold, and an
    index query."""
    past = await view_at(view, s)
    objects, terms = state_at(log, s)
    assert past.sqn == s
    got = await past.get_many([object_key(b, k) for b, k in KEYS])
    assert dict(zip(KEYS, got)) == {k: objects.get(k) for k in KEYS}
    lo, hi = object_range(None, None, None, max_key_bytes=4096)
    live = [split_object_key(k) for t in [t async for t in past.scan(lo, hi)]
            for k in t.column("key").to_pylist()]
    assert sorted(live, key=repr) == sorted(objects, key=repr)
    for g in range(20):
        found = [k for batch in [b async for b in index_entries(past, "b", "g_int", g, g)]
                 for k in batch]
        assert sorted(found) == sorted(k for b, k in terms.get(("g_int", g), ()) if b == "b")


async def changes_of(view, after, until=None, batch_size=3, span_bytes=SPAN_BYTES):
    """The changes as ``changes()`` makes them: spans of the Journal cut into batches (a
    small ``span_bytes`` makes spans of parts of files, and of a few files)."""
    return [c async for batch in python_feed(view, after, until, batch_size, True,
                                             span_bytes=span_bytes)
            for c in batch]


async def listened_changes_of(view, after):
    """The changes as a listener's catch-up makes them: batches of rows, each made
    ``Change`` tuples by itself."""
    return [c async for rows in journal_changes(view, after, None, 3)
            for c in python_changes(rows, True)]


@settings(max_examples=15, deadline=None)
@given(histories(), st.data())
def test_changes_after_any_sqn_equal_the_model(tmp_path_factory, groups, data):
    root = tmp_path_factory.mktemp("changes")
    url = f"file://{root}/db"

    async def run():
        bookie = await started(url)
        log, held = [], {}  # held: the index terms each object holds
        for group in groups:
            sqns = await write(bookie, group, OPTIONS)
            for change, sqn in zip(group, sqns):
                name = (change.bucket, change.key)
                had = held.pop(name, set())
                if isinstance(change, lr.Delete):  # a delete removes every term held
                    log.append((*name, sqn, "delete", None, None,
                                tuple(("remove", f, t) for f, t in sorted(had))))
                else:  # the journal records the terms the put adds
                    added = {(f, t) for _, f, t in change.indexes}
                    held[name] = had | added
                    log.append((*name, sqn, "put", change.value, change.metadata,
                                tuple(("add", f, t) for f, t in sorted(added - had))))
        top = log[-1][2]
        view = await pinned_view(bookie)
        for after in {0, top, data.draw(st.integers(0, top))}:
            batch_size = data.draw(st.integers(1, 8))
            span_bytes = data.draw(st.sampled_from([SPAN_BYTES, 64, 300, 2000]))
            assert [as_model(c) for c in await changes_of(view, after, None, batch_size,
                                                          span_bytes)] == expected(log, after)
            assert [as_model(c) for c in await listened_changes_of(view, after)
                    ] == expected(log, after)
        await check_view_at(view, log, data.draw(st.integers(0, top)))
        until = data.draw(st.integers(0, top))
        assert [as_model(c) for c in await changes_of(view, 0, until)] == [
            c for c in log if c[2] <= until]
        # The Arrow form holds the same rows.
        arrow = [changes_batch(rows, False, True) async for rows in
                 journal_changes(view, 0, None, 1000)]
        assert all(b.schema == CHANGES_SCHEMA for b in arrow)
        rows = [r for b in arrow for r in b.to_pylist()]
        assert [r["sqn"] for r in rows] == [c[2] for c in log]
        assert [json.loads(r["metadata"]) if r["metadata"] else None for r in rows] == [
            c[5] for c in log]

        # A lease at a random position: compaction keeps every change after it, and moves
        # history up to at most it.
        leased = data.draw(st.integers(0, top))
        await bookie.set_history_lease("model", leased, 600)
        await compacted(bookie)
        view = await pinned_view(bookie)
        assert view.history_sqn <= leased
        event(f"history moved: {view.history_sqn > 0}")
        assert [as_model(c) for c in await changes_of(view, leased)] == expected(log, leased)
        await check_view_at(view, log, data.draw(st.integers(view.history_sqn, top)))
        if view.history_sqn:
            with pytest.raises(lr.HistoryUnavailableError):
                await view_at(view, view.history_sqn - 1)
            with pytest.raises(lr.HistoryUnavailableError):
                await changes_of(view, view.history_sqn - 1)
        await bookie.close()

        # A reader without Ray sees the same history.
        reader = await StoreReader.open(ObjectStore.from_url(url, OPTIONS), OPTIONS)
        assert reader.history_sqn == view.history_sqn
        assert [as_model(c) for c in await changes_of(reader, leased)] == expected(log, leased)

    asyncio.run(run())


def test_history_gone_is_a_typed_error_that_says_where_it_begins(tmp_path):
    url = f"file://{tmp_path}/db"

    async def run():
        bookie = await started(url)
        for r in range(8):  # every key overwritten each round: compaction drops old rounds
            await write(bookie, [lr.Put("b", f"k{i}", b"r%d" % r) for i in range(10)], OPTIONS)
        assert (await compacted(bookie)).removed
        view = await pinned_view(bookie)
        assert view.history_sqn > 0
        with pytest.raises(lr.HistoryUnavailableError) as e:
            await changes_of(view, 0)
        assert e.value.history_sqn == view.history_sqn and e.value.after == 0
        assert "restart from a snapshot" in str(e.value)
        # From where history begins, every change is there, in SQN order.
        got = await changes_of(view, view.history_sqn)
        assert [c.sqn for c in got] == list(range(view.history_sqn + 1, 81))
        assert {c.value for c in got if c.key == "k3"} <= {b"r%d" % r for r in range(8)}
        await bookie.close()

    asyncio.run(run())


def test_changes_reach_object_keys_and_values_of_every_kind(tmp_path):
    """Binary names, TTLs, deletes and values=False in one feed."""
    url = f"file://{tmp_path}/db"

    async def run():
        bookie = await started(url)
        await write(bookie, [lr.Put(b"\xffb", b"k", b"x", ttl=3600),
                             lr.Put("b", "j", b"y", indexes=[("add", "t_bin", "red")])], OPTIONS)
        await write(bookie, [lr.Delete("b", "j", indexes=[("remove", "t_bin", "red")])],
                    OPTIONS)
        view = await pinned_view(bookie)
        got = await changes_of(view, 0)
        assert [(c.bucket, c.key, c.kind) for c in got] == [
            (b"\xffb", b"k", "put"), ("b", "j", "put"), ("b", "j", "delete")]
        assert got[0].expires_at is not None and got[1].expires_at is None
        assert got[1].indexes == (("add", "t_bin", "red"),)
        assert got[2].indexes == (("remove", "t_bin", "red"),) and got[2].value is None
        batches = [changes_batch(r, True, False) async for r in
                   journal_changes(view, 0, None, 10)]
        table = pa.Table.from_batches(batches).to_pydict()
        assert table["value"] == [None, None, None] and table["bucket"][0] == b"\xffb"
        assert table["indexes"][1] == [{"change": "add", "field": "t_bin", "term_bin": "red",
                                        "term_int": None}]
        await bookie.close()

    asyncio.run(run())


def test_a_failed_read_of_one_of_a_spans_files_is_the_stores_typed_error(tmp_path):
    """Small files are read together into one span: a read that keeps failing fails the feed
    with the store's own error, and the same feed reads every change once it no longer
    fails."""
    url = f"file://{tmp_path}/db"
    fast = OPTIONS.replace(object_store=dict(retry_backoff_s=0.001, retry_max_backoff_s=0.01,
                                             max_retries=2))

    async def run():
        bookie = await started(url)
        for g in range(6):  # a file each
            await write(bookie, [lr.Put("b", f"k{g}{i}", b"v") for i in range(3)], OPTIONS)
        await bookie.close()
        broken = FaultInjectingStore.wrap(url, Fault("get", prefix="journal/", after=2,
                                                     count=100), options=fast)
        reader = await StoreReader.open(broken, fast)
        assert len(file_groups(files_between(reader, 0, reader.sqn))) == 1
        with pytest.raises(lr.ObjectStoreError):
            await changes_of(reader, 0)
        healed = await StoreReader.open(ObjectStore.from_url(url, fast), fast)
        assert [c.sqn for c in await changes_of(healed, 0)] == list(range(1, 19))

    asyncio.run(run())


def test_a_file_whose_every_change_is_wanted_is_read_with_one_get(tmp_path):
    """A feed from the start reads each small journal file whole (one GET, its footer then
    at hand); a feed from inside a file reads that file's footer, then its blocks."""
    url = f"file://{tmp_path}/db"

    async def run():
        bookie = await started(url)
        for g in range(5):  # a file each, of 4 changes
            await write(bookie, [lr.Put("b", f"k{g}{i}", b"v") for i in range(4)], OPTIONS)
        await bookie.close()
        store = ObjectStore.from_url(url, OPTIONS)
        reader = await StoreReader.open(store, OPTIONS)
        files = files_between(reader, 0, reader.sqn)
        assert len(files) == 5
        before = store.stats.gets
        assert [c.sqn for c in await changes_of(reader, 0)] == list(range(1, 21))
        assert store.stats.gets - before == len(files)
        fresh = ObjectStore.from_url(url, OPTIONS)
        reader = await StoreReader.open(fresh, OPTIONS)
        before = fresh.stats.gets
        assert [c.sqn for c in await changes_of(reader, 6)] == list(range(7, 21))
        # the file of SQNs 5-8, from inside: footer, then blocks; the 3 after it: a GET each
        assert fresh.stats.gets - before == 2 + 3

    asyncio.run(run())


def test_files_larger_than_a_span_are_read_a_span_at_a_time(tmp_path):
    """A file of several blocks, larger than a span, between small files: every change
    comes out once, in SQN order, whatever the span and batch sizes."""
    url = f"file://{tmp_path}/db"
    noise = random.Random(7)
    big = [lr.Put("b", f"big{i:03d}", noise.randbytes(8192)) for i in range(40)]  # 5 blocks

    async def run():
        bookie = await started(url)
        await write(bookie, [lr.Put("b", "first", b"1")], OPTIONS)
        await write(bookie, big, OPTIONS)
        await write(bookie, [lr.Put("b", "last", b"2")], OPTIONS)
        view = await pinned_view(bookie)
        sizes = [f.size for f in files_between(view, 0, view.sqn)]
        assert len(sizes) == 3 and sizes[1] > 4 * 65536
        want = [("first", b"1")] + [(p.key, p.value) for p in big] + [("last", b"2")]
        for span_bytes, batch_size in [(100_000, 7), (65_536, 1), (SPAN_BYTES, 1000)]:
            got = await changes_of(view, 0, None, batch_size, span_bytes)
            assert [(c.key, c.value) for c in got] == want
            assert [c.sqn for c in got] == sorted(c.sqn for c in got)
            inside = await changes_of(view, got[10].sqn, None, batch_size, span_bytes)
            assert [(c.key, c.value) for c in inside] == want[11:]
        await bookie.close()

    asyncio.run(run())
