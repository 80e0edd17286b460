"""Snapshots through real Ray actors on file:// and s3:// (moto): a frozen view that any process
can read, whose files outlive merges and compactions until it is released or expires."""

import pickle

import pytest
import ray
from support.stores import SMALL, current_files, stored
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.clock import ManualClock

pytestmark = pytest.mark.ray

def snapshot_files(snap) -> set[str]:
    view = snap._view
    return ({f.name for level in view.files.levels for f in level}
            | {j.name for j in view.journal.files})


@ray.remote(num_cpus=0)
def read_in_a_task(snap, keys):
    return snap.get_many(keys), snap.head("b", keys[0][1]).sqn


def test_a_snapshot_sees_its_moment_from_any_process(ray_cluster, s3_backend):
    url, options = s3_backend
    store = lr.open(url, options)
    try:
        store.put_many([lr.Put("b", f"k{i:03d}", b"old %d" % i) for i in range(100)])
        with store.snapshot() as snap:
            store.put_many([lr.Put("b", f"k{i:03d}", b"new %d" % i) for i in range(50)])
            store.delete("b", "k099")
            store.put("b", "later", b"after the snapshot")
            keys = [("b", f"k{i:03d}") for i in range(100)]
            expected = [b"old %d" % i for i in range(100)]
            assert snap.get_many(keys) == expected
            assert snap.get("b", "later") is None and snap.head("b", "later") is None
            assert store.get("b", "k000") == b"new 0" and store.get("b", "k099") is None
            # A copy, in this process and in a Ray task, reads the same moment.
            assert pickle.loads(pickle.dumps(snap)).get_many(keys) == expected
            values, sqn = ray.get(read_in_a_task.remote(snap, keys))
            assert values == expected and sqn == snap.head("b", "k000").sqn
        with pytest.raises(lr.SnapshotExpiredError):
            snap.get("b", "k000")
    finally:
        store.close()


def test_bad_snapshot_calls_are_refused(ray_cluster, tmp_url):
    url, options = tmp_url, lr.Options()
    store = lr.open(url, options, clock=ManualClock())
    try:
        store.put("b", "k", b"v")
        with pytest.raises(lr.InvalidArgumentError):
            store.snapshot(timeout_s=0)
        with pytest.raises(lr.InvalidArgumentError):  # longer than GC protects files for
            store.snapshot(timeout_s=options.gc.long_snapshot_timeout_s + 1)
        with store.snapshot(values=False) as heads_only:
            assert heads_only.head("b", "k").size == 1
            with pytest.raises(lr.InvalidArgumentError):
                heads_only.get("b", "k")
            with pytest.raises(lr.InvalidArgumentError):
                heads_only.head_many("not pairs")
        short = store.snapshot(timeout_s=0.5)
        store.clock.advance(0.6)
        with pytest.raises(lr.SnapshotExpiredError):
            short.get("b", "k")
        assert store.get("b", "k") == b"v"  # the store is unaffected
    finally:
        store.close()


def test_a_snapshot_keeps_its_view_through_merges_and_compaction(ray_cluster, s3_backend):
    url, options = s3_backend
    options = options.replace(**SMALL)
    store = lr.open(url, options)
    try:
        first = {f"k{i:04d}": b"first %d" % i for i in range(300)}
        store.put_many([lr.Put("b", k, v) for k, v in first.items()])
        snap = store.snapshot()
        held = snapshot_files(snap)
        for r in range(10):  # 10x more data: every key replaced ten times
            store.put_many([lr.Put("b", f"k{i:04d}", b"round %d" % r) for i in range(300)])
            store.put_many([lr.Put("b", f"x{r}-{i:04d}", b"extra") for i in range(300)])
        wait_until(lambda: store.stats()["merges"]["merges"] > 0, timeout=60)
        store.compact_journal()
        wait_until(lambda: not store.stats()["inker"]["compacting"], timeout=60)
        replaced = held - current_files(url, options)
        assert replaced  # merges and compaction replaced files the snapshot reads ...
        assert replaced <= stored(url, options)  # ... and they are all still there
        keys = sorted(first)
        assert snap.get_many([("b", k) for k in keys]) == [first[k] for k in keys]
        assert store.get("b", "k0000") == b"round 9"
        snap.release()
        # Released: the replaced files go within a bounded time.
        wait_until(lambda: not (replaced & stored(url, options)), timeout=60, interval=0.5)
    finally:
        store.close()


@ray.remote(num_cpus=0)
class Holder:
    """A process that takes a snapshot and never releases it."""

    def take(self, store, timeout_s):
        self.snap = store.snapshot(timeout_s=timeout_s)
        return {f.name for level in self.snap._view.files.levels for f in level}


def test_a_killed_holders_snapshot_expires(ray_cluster, tmp_url):
    url, options = tmp_url, lr.Options(**SMALL)
    clock = ManualClock()
    store = lr.open(url, options, clock=clock)
    try:
        store.put_many([lr.Put("b", f"k{i:04d}", b"first") for i in range(300)])
        wait_until(lambda: store.stats()["penciller"]["ledger_sqn"] > 0, timeout=30)
        holder = Holder.remote()
        timeout_s = 60.0
        held = ray.get(holder.take.remote(store, timeout_s))
        ray.kill(holder, no_restart=True)  # dies without releasing
        for r in range(4):
            store.put_many([lr.Put("b", f"k{i:04d}", b"round %d" % r) for i in range(300)])
        wait_until(lambda: held - current_files(url, options), timeout=30)
        replaced = held - current_files(url, options)
        swept = store.stats()["reaper_sweeps"] + 2  # the reaper has had its chances:
        wait_until(lambda: store.stats()["reaper_sweeps"] >= swept, timeout=30)
        assert replaced <= stored(url, options)  # still registered: the files stay
        clock.advance(timeout_s)  # expired: nothing protects them any more
        wait_until(lambda: not (replaced & stored(url, options)), timeout=60, interval=0.2)
    finally:
        store.close()
