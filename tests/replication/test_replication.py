"""lr.replicate (replicate/): a second store kept in sync with a running one, through a
kill -9 of the replicator, and full syncs that repair what the stream missed."""

from __future__ import annotations

import os
import random
import signal
import threading
import uuid

import pyarrow as pa
import pytest
from support.s3 import QUICK_FAILURES, S3_BUCKET, s3_options
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.clock import ManualClock
from leveled_ray.replication.rules import BUCKET, MARK
from leveled_ray.testing.fault_proxy import FaultProxy

pytestmark = pytest.mark.ray


def caught_up(rep, source) -> bool:
    stats = rep.stats()
    durable = ({str(i): s["durable_sqn"] for i, s in enumerate(source.stats()["shards"])}
               if isinstance(source, lr.ShardedStore) else source.stats()["durable_sqn"])
    return stats["position"] == durable


def scraped(ray) -> str:
    """Every node's Prometheus text."""
    import urllib.request

    return "".join(urllib.request.urlopen(f"http://127.0.0.1:{n['MetricsExportPort']}/metrics")
                   .read().decode() for n in ray.nodes() if n["Alive"])


def feed(view) -> list[tuple]:
    """Every change but the replicator's positions, by key, in each key's order."""
    out = [(c.bucket, c.key, c.kind, c.value) for c in view.changes(0) if c.bucket != BUCKET]
    return sorted(out, key=lambda c: (c[0], c[1]))  # stable: each key's changes keep their order


def test_a_replica_keeps_up_under_load_through_a_kill_of_its_replicator(ray_cluster,
                                                                         tmp_path):
    source = lr.open(f"file://{tmp_path}/src", shards=2)
    target_url = f"file://{tmp_path}/dst"
    try:
        source.put_many([lr.Put("b", f"k{i:03d}", b"first") for i in range(100)])
        source.put_many([lr.Put("t", f"k{i}", b"x", ttl=3600.5) for i in range(20)])
        rep = lr.replicate(source, target_url, name="load", full_sync_s=0)
        stop, rng = threading.Event(), random.Random(5)

        def write():
            n = 0
            while not stop.is_set() and n < 400:
                key = f"k{rng.randrange(120):03d}"
                if rng.random() < 0.2:
                    source.delete("b", key)
                else:
                    source.put("b", key, b"%d" % n, indexes=[("add", "n_int", n % 7)])
                n += 1

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: rep.stats()["applied"] > 150)
        os.kill(rep.stats()["pid"], signal.SIGKILL)  # Ray restarts it; it resumes
        writer.join()
        wait_until(lambda: caught_up(rep, source), timeout=60)
        stats = rep.stats()
        assert stats["lag_changes"] == 0 and stats["applied"] > 0
        assert stats["delay_p99_s"] >= stats["delay_p50_s"] > 0
        rep.close()
        assert lr.compare(source, target_url).equal
        with lr.reader(target_url) as target:
            # Nothing applied twice, nothing out of order: the same changes, key by key.
            assert feed(target) == feed(source)
            assert sorted(target.index_query("b", "n_int", 0, 6)) == sorted(
                source.index_query("b", "n_int", 0, 6))
            ttl_keys = [("t", f"k{i}") for i in range(20)]
            expiries = [h.expires_at for h in source.head_many(ttl_keys)]
            assert all(expiries)  # the same second, not one later
            assert [h.expires_at for h in target.head_many(ttl_keys)] == expiries
    finally:
        source.close()


def test_a_full_sync_repairs_what_the_stream_missed_and_reports_foreign_writes(ray_cluster,
                                                                               tmp_path):
    source = lr.open(f"file://{tmp_path}/src")
    target_url = f"file://{tmp_path}/dst"
    try:
        source.put_many([lr.Put("b", f"k{i}", b"v%d" % i, metadata={"i": i})
                         for i in range(50)])
        # A bytes key of the same text as a str one, and one that is not UTF-8.
        source.put_many([lr.Put("b", b"k4", b"bytes"), lr.Put(b"\xff", b"\xffraw", b"r")])
        rep = lr.replicate(source, target_url, name="sync", full_sync_s=0)
        wait_until(lambda: caught_up(rep, source))
        rep.close()
        target = lr.open(target_url)  # behind the replicator's back
        target.delete("b", "k1")  # as if the stream had missed it: repaired
        target.delete("b", b"k4")  # a bytes key: repaired as itself
        target.delete(b"\xff", b"\xffraw")
        target.put("b", "k2", b"foreign")  # someone else's writes: reported, kept
        target.put("b", "extra", b"x")
        target.close()
        source.put("b", "k3", b"while down")  # the stream's, when it resumes
        rep = lr.replicate(source, target_url, name="sync", full_sync_s=0)
        wait_until(lambda: caught_up(rep, source))
        done = rep.full_sync()
        assert (done["copy"], done["delete"], done["foreign"]) == (3, 0, 2)
        assert sorted(rep.stats()["foreign"]) == [("b", "extra"), ("b", "k2")]
        wait_until(lambda: "ray_leveled_replication_lag_changes" in scraped(ray_cluster))
        rep.close()
        with lr.reader(target_url) as t:
            assert t.get_many([("b", "k1"), ("b", "k2"), ("b", "k3")]) == [
                b"v1", b"foreign", b"while down"]
            assert t.head("b", "k1").metadata["i"] == 1
            assert t.get_many([("b", b"k4"), ("b", "k4"), (b"\xff", b"\xffraw")]) == [
                b"bytes", b"v4", b"r"]
        assert [(d.key, d.kind) for d in lr.compare(source, target_url).differences] == [
            ("extra", "missing_in_a"), ("k2", "different")]
        with pytest.raises(lr.InvalidArgumentError):
            lr.replicate(source, source.url)
        with pytest.raises(lr.InvalidArgumentError):
            lr.replicate(target_url, source.url)
    finally:
        source.close()


def test_bad_replication_input_is_refused_before_anything_starts(ray_cluster, tmp_path):
    """Another spelling of the source's URL, a bad scheme, NaN and a name in use: each is
    ``InvalidArgumentError``, with no actor and no name held and the source not fenced."""
    url = f"file://{tmp_path}/a"
    with lr.open(url) as a:
        for same in (url + "/", f"file://{tmp_path}//a", f"file://{tmp_path}/./a"):
            with pytest.raises(lr.InvalidArgumentError, match="the source's"):
                lr.replicate(a, same)
        with pytest.raises(lr.InvalidArgumentError, match="unsupported store URL"):
            lr.replicate(a, "nope://x", name="r1")
        for bad in (float("nan"), float("inf"), -1.0, True):
            with pytest.raises(lr.InvalidArgumentError, match="full_sync_s"):
                lr.replicate(a, f"file://{tmp_path}/b", name="r1", full_sync_s=bad)
        assert not (tmp_path / "b").exists()
        a.put("b", "k", b"v")  # not fenced
        rep = lr.replicate(a, f"file://{tmp_path}/b", name="r1", full_sync_s=0)
        try:
            with pytest.raises(lr.InvalidArgumentError, match="runs already"):
                lr.replicate(a, f"file://{tmp_path}/c", name="r1")
        finally:
            rep.close()
        assert not (tmp_path / "c").exists()


@pytest.mark.s3
def test_a_replica_resumes_after_its_target_or_its_source_fails_and_reports_its_lag(
        ray_cluster, moto_endpoint, tmp_path):
    """The target (moto's S3 behind the fault proxy) refuses every connection for a while,
    under writes: the replicator counts the errors, then resumes from the position the target
    holds. Then the source's Bookie is killed, and Ray restarts it: the replicator goes on.
    No change is applied twice or skipped. While it is behind, ``lag_s`` is the delay of its
    last batch; once it has caught up, 0."""
    source = lr.open(f"file://{tmp_path}/src")
    target_url = f"s3://{S3_BUCKET}/replica-{uuid.uuid4().hex[:10]}"
    stop = threading.Event()

    def write():
        n = 0
        while not stop.is_set() and n < 3000:
            source.put("b", f"k{n % 150:03d}", b"%d" % n)
            n += 1

    writer = threading.Thread(target=write)
    try:
        with FaultProxy(moto_endpoint) as proxy:
            rep = lr.replicate(source, target_url, name="unreachable", full_sync_s=0,
                               target_options=s3_options(proxy.endpoint, **QUICK_FAILURES))
            writer.start()
            try:
                wait_until(lambda: 0 < rep.stats()["lag_s"] < 60)  # behind the writes
                proxy.refuse()
                wait_until(lambda: rep.stats()["errors"] >= 2, timeout=60)
                assert "ObjectStoreError" in rep.stats()["last_error"]
                proxy.heal()
                applied = rep.stats()["applied"]
                wait_until(lambda: rep.stats()["applied"] > applied)  # resumed, under writes
            finally:
                stop.set()
                writer.join()
            running = source.stats()
            os.kill(running["process"]["pid"], signal.SIGKILL)  # Ray restarts it
            assert source.get("b", "k000") is not None  # sent again until it is back
            assert source.stats()["epoch"] == running["epoch"] + 1  # it failed over
            applied = rep.stats()["applied"]
            source.put_many([lr.Put("b", f"k{i:03d}", b"after") for i in range(150)])
            wait_until(lambda: rep.stats()["applied"] >= applied + 150, timeout=60)
            wait_until(lambda: caught_up(rep, source), timeout=60)
            wait_until(lambda: rep.stats()["lag_s"] == 0 and rep.stats()["lag_changes"] == 0)
            rep.close()
        with lr.reader(target_url, options=s3_options(moto_endpoint)) as target:
            assert feed(target) == feed(source)  # nothing applied twice, nothing skipped
    finally:
        stop.set()
        source.close()


def test_a_replica_caught_up_after_a_bulk_write_and_a_split_reports_no_lag(ray_cluster,
                                                                          tmp_path):
    """A bulk write takes its changes' SQNs from a window it reserves, far past the shard's
    other SQNs; a split's children start after the parent's last SQN, so the child without
    the write's key has a durable SQN at the window and no change up to it. A replica that
    has applied every change is caught up all the same, and says so (``lag_changes`` and
    ``lag_s`` 0)."""
    from leveled_ray.bulk import sharded as bulk

    name = f"bulk-src-{uuid.uuid4().hex[:8]}"
    url = f"file://{tmp_path}/src"
    source = lr.open(url, name=name, shards=2)
    try:
        plan = bulk.begin_write(url, store_name=name)
        one = pa.record_batch({"bucket": ["b"], "key": ["k1"], "value": [b"1"]})
        bulk.commit(plan, [bulk.write_partition(plan, 0, [one])])
        source.split_shard(source.shard_of("b", "k1"))  # before the replica read the write
        rep = lr.replicate(source, f"file://{tmp_path}/dst", name="bulk", full_sync_s=0)
        wait_until(lambda: rep.stats()["applied"] == 1)
        wait_until(lambda: rep.stats()["lag_changes"] == 0 and rep.stats()["lag_s"] == 0,
                   timeout=20)
        rep.close()
    finally:
        source.close()


def test_a_batch_of_a_replicator_that_another_took_over_from_is_refused(ray_cluster,
                                                                       tmp_path):
    """Two replication loops under one name, as a replicator whose process died (its last
    batch still in flight to the target) and the one Ray restarted, which read the position
    before that batch landed: whichever batch lands second is refused whole
    (``ConditionFailedError``), so no change is applied twice."""
    import asyncio

    from leveled_ray.replication.replicator import Replication

    source = lr.open(f"file://{tmp_path}/src")
    target = lr.open(f"file://{tmp_path}/dst")
    try:
        source.put_many([lr.Put("b", f"k{i}", b"v") for i in range(5)])

        async def race() -> None:
            dead, restarted = (Replication(source, target, "r", full_sync_s=0)
                               for _ in range(2))
            await dead.resume()
            await restarted.resume()  # reads the position before the dead one's batch lands
            try:
                assert await dead.step() == 5
                with pytest.raises(lr.ConditionFailedError):
                    await restarted.step()
            finally:
                await dead.close()
                await restarted.close()
        asyncio.run(race())
        applied = [c for c in target.changes(0) if c.bucket != BUCKET]
        assert sorted(c.key for c in applied) == [f"k{i}" for i in range(5)]  # once each
    finally:
        source.close()
        target.close()


def test_a_full_sync_leaves_the_changes_past_the_position_to_the_stream(ray_cluster,
                                                                       tmp_path):
    """A full sync compares the source as of the replicator's position: a change the stream
    has not reached yet is not a difference (copied early, it would be applied twice, and a
    key could go back to an older value before the stream reached the newer one)."""
    import asyncio

    from leveled_ray.replication.replicator import Replication

    source = lr.open(f"file://{tmp_path}/src")
    target = lr.open(f"file://{tmp_path}/dst")
    try:
        source.put("b", "k", b"v1")

        async def run() -> dict:
            loop = Replication(source, target, "r", full_sync_s=0)
            await loop.resume()
            try:
                assert await loop.step() == 1
                source.put("b", "k", b"v2")  # past the position
                found = await loop.full_sync()
                assert await loop.step() == 1
                return found
            finally:
                await loop.close()
        found = asyncio.run(run())
        assert found["differences"] == 0, found
        assert [c.value for c in target.changes(0) if c.bucket != BUCKET] == [b"v1", b"v2"]
    finally:
        source.close()
        target.close()


#: Journal compaction on demand only, willing to rewrite any run that drops something.
COMPACTING = lr.Options(ledger=SMALL["ledger"],
                        journal=dict(compaction_interval_s=0, singlefile_compactionpercentage=95.0,
                                     maxrunlength_compactionpercentage=99.0))


def test_a_replicator_whose_history_was_compacted_away_reports_it_and_stays_there(ray_cluster,
                                                                                  tmp_path):
    """A replicator down for longer than its lease (600 s by the source's clock) finds the
    changes after its position compacted away: ``last_error`` says
    ``HistoryUnavailableError``, and it does not go on by itself."""
    clock = ManualClock()
    source = lr.open(f"file://{tmp_path}/src", COMPACTING, clock=clock)
    target_url = f"file://{tmp_path}/dst"
    try:
        def rounds(first: int) -> None:
            for r in range(first, first + 3):
                source.put_many([lr.Put("b", f"k{i}", b"r%d" % r) for i in range(30)])

        rounds(0)
        rep = lr.replicate(source, target_url, name="behind", full_sync_s=0)
        wait_until(lambda: caught_up(rep, source))
        position = rep.stats()["position"]
        rep.close()
        rounds(3)
        clock.advance(601)  # its lease, renewed no more, has expired
        assert source.compact_journal(wait=True)["history_sqn"] > position
        rep = lr.replicate(source, target_url, name="behind", full_sync_s=0)
        try:
            wait_until(lambda: rep.stats()["errors"] >= 2)  # tried, and tried again
            stats = rep.stats()
            assert stats["last_error"].startswith("HistoryUnavailableError")
            assert stats["position"] == position and stats["applied"] == 0
        finally:
            rep.close()
    finally:
        source.close()


def test_a_full_sync_runs_every_full_sync_s_unasked(ray_cluster, tmp_path):
    """With ``full_sync_s > 0`` a full sync runs by itself, and repairs: an object the
    replicator wrote that its source no longer holds is deleted."""
    source = lr.open(f"file://{tmp_path}/src")
    target_url = f"file://{tmp_path}/dst"
    try:
        source.put_many([lr.Put("b", f"k{i}", b"v") for i in range(20)])
        with lr.open(target_url) as target:  # as if the stream had missed its delete
            target.put("b", "gone", b"old", metadata={MARK: source.url})
        rep = lr.replicate(source, target_url, name="periodic", full_sync_s=0.5)
        try:
            wait_until(lambda: rep.stats()["full_syncs"] >= 2)
            assert rep.stats()["repaired"] >= 1
        finally:
            rep.close()
        assert lr.compare(source, target_url).equal
    finally:
        source.close()
