"""Bulk writes that run at once through the running store, as two Spark jobs do: each is
installed whole or refused whole with an error that says it may be retried, and the store
always takes a snapshot and opens again. A streaming micro-batch sent again changes neither
the Ledger nor the change feed."""

import uuid

import pyarrow as pa
import pytest

import leveled_ray as lr
from leveled_ray.bulk import sharded as bulk
from leveled_ray.manifest.ingest import IngestConflictError

pytestmark = pytest.mark.ray

N = 101
KEYS = [("b", f"k{i:04d}") for i in range(N)]


def rows(value: bytes) -> pa.RecordBatch:
    return pa.record_batch({"bucket": [b for b, _ in KEYS], "key": [k for _, k in KEYS],
                            "value": [value] * N})


def written(plan, value: bytes) -> list:
    return [bulk.write_partition(plan, 0, [rows(value)])]


@pytest.mark.parametrize("shards", [None, 2])
def test_two_bulk_writes_committed_out_of_order_refuse_the_later_and_leave_a_usable_store(
        ray_cluster, tmp_url, shards):
    """W1 begins, then W2; W2 commits first. W1's commit is refused whole (retryable), and
    Spark's abort() after it changes nothing; the store snapshots, checkpoints and reopens."""
    name = f"bulk-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, shards=shards, name=name)
    try:
        first = bulk.begin_write(tmp_url, store_name=name)
        second = bulk.begin_write(tmp_url, store_name=name)
        m1, m2 = written(first, b"w1"), written(second, b"w2")
        assert bulk.commit(second, m2) == N
        with pytest.raises((lr.ConflictError, IngestConflictError), match="again|retr"):
            bulk.commit(first, m1)
        bulk.abort(first, m1)  # what Spark does after a failed commit
        assert store.get_many(KEYS) == [b"w2"] * N
        with store.snapshot() as snap:
            assert snap.get_many(KEYS) == [b"w2"] * N
        checkpoint = store.checkpoint()
        with lr.reader(tmp_url, checkpoint.id) as r:
            assert r.get_many(KEYS) == [b"w2"] * N
        again = bulk.begin_write(tmp_url, store_name=name)  # the retry of W1
        assert bulk.commit(again, written(again, b"w1")) == N
        assert store.get_many(KEYS) == [b"w1"] * N
    finally:
        store.close()
    store = lr.open(tmp_url)
    try:
        assert store.get_many(KEYS) == [b"w1"] * N
    finally:
        store.close()


@pytest.mark.parametrize("shards", [None, 2])
def test_a_streaming_batch_sent_again_through_the_running_store_is_in_the_feed_once(
        ray_cluster, tmp_url, shards):
    """Spark retries micro-batch 0 of writer-1: the Ledger and the change feed each hold it
    once, and every journal file the feed lists is one the manifest lists."""
    name = f"bulk-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, shards=shards, name=name)
    try:
        store.put("b", "before", b"x")
        for value in (b"v", b"again"):
            plan = bulk.begin_write(tmp_url, store_name=name)
            bulk.commit(plan, written(plan, value), ("writer-1", 0))
        assert store.get_many(KEYS) == [b"v"] * N
        start = 0 if shards is None else {str(s): 0 for s in range(shards)}
        changes = list(store.changes(start))
        assert len(changes) == N + 1
        assert sorted((c.bucket, c.key) for c in changes) == sorted(KEYS + [("b", "before")])
        lr.gc(tmp_url, min_age=0)  # the second attempt's files are orphans; the feed's are not
        assert len(list(store.changes(start))) == N + 1
    finally:
        store.close()


def test_abort_after_a_commit_that_installed_in_some_shards_deletes_nothing(
        ray_cluster, tmp_url, monkeypatch):
    """Spark calls abort() when commit() raises. A sharded commit whose record says commit
    but whose shard 1 died before installing its part must keep every file: shard 0 lists
    its own, and shard 1 installs its part when the store is opened again."""
    from support.waits import kill_actor

    name = f"bulk-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, shards=2, name=name)
    try:
        store.put_many([lr.Put(b, k, b"old") for b, k in KEYS])
        plan = bulk.begin_write(tmp_url, store_name=name)
        messages = written(plan, b"new")
        real_apply = bulk.apply

        async def apply_after_losing_shard_1(plan, txn, shards):
            kill_actor(store.shard(1).actors()[0])
            return await real_apply(plan, txn, shards)

        monkeypatch.setattr(bulk, "apply", apply_after_losing_shard_1)
        with pytest.raises(lr.StoreClosedError, match="committed"):
            bulk.commit(plan, messages)
        bulk.abort(plan, messages)
    finally:
        store.close()  # shard 1 is gone already; this also frees the placement group
    store = lr.open(tmp_url)
    try:
        assert store.get_many(KEYS) == [b"new"] * N
        lr.gc(tmp_url, min_age=0)
        assert store.get_many(KEYS) == [b"new"] * N
    finally:
        store.close()
