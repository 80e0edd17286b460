"""A checkpoint taken before a split reads by its id after it, as the docs promise: through
``lr.reader``, ``lr.clone`` and the parallel read Spark and Ray Data run, after one split and
after two, through a GC pass, until it is deleted."""

import pytest
from support.stores import SMALL

import leveled_ray as lr
from leveled_ray.bulk import sharded as bulk
from leveled_ray.bulk.read import ReadQuery, read_split
from leveled_ray.files.sync import run_sync

pytestmark = pytest.mark.ray

OPTIONS = lr.Options(**SMALL)


def test_a_pre_split_checkpoint_reads_by_id_after_one_and_two_splits(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    with lr.open(url, OPTIONS, shards=2) as store:
        store.put_many([lr.Put("b", f"k{i:03d}", b"old %d" % i) for i in range(100)])
        before = store.checkpoint()
        store.put_many([lr.Put("b", f"k{i:03d}", b"new %d" % i) for i in range(100)])
        store.split_shard(0)
        between = store.checkpoint()  # taken between the two splits
        store.put("b", "k000", b"newest")
        store.split_shard(1)
        listed = {c.id for c in store.list_checkpoints()}
    assert {before.id, between.id} <= listed
    admin = lr.admin(url, OPTIONS)
    split = admin.split_shard(0)  # the third, at rest
    assert split.count == 5
    lr.gc(url, min_age=0, options=OPTIONS)  # keeps what the checkpoints read
    for cp, want, shards in ((before, b"old 7", 2), (between, b"new 7", 3)):
        with lr.reader(url, checkpoint=cp.id, options=OPTIONS) as r:
            assert r.get("b", "k007") == want
            assert len(list(r.fold_keys("b"))) == 100  # each key once
        plans = bulk.begin_reads(url, ReadQuery(bucket="b"), OPTIONS, checkpoint=cp.id)
        rows = {key: value for plan in plans for split in plan.splits
                for batch in read_split(plan, split)
                for key, value in zip(batch.column("key").to_pylist(),
                                      batch.column("value").to_pylist())}
        assert len(rows) == 100 and rows["k007"] == want
        clone = f"file://{tmp_path}/clone-{cp.id}"
        # lr.clone opens the clone it makes; it has the checkpoint's layout.
        with lr.clone(url, clone, checkpoint=cp.id, options=OPTIONS) as copy:
            assert copy.shards == shards
            assert copy.get("b", "k007") == want
            assert len(list(copy.fold_keys("b"))) == 100
    with lr.reader(url, options=OPTIONS) as now:
        assert now.get("b", "k000") == b"newest"
    assert admin.refresh_checkpoint(before.id, lifetime=3600.0).expires_at is not None
    admin.delete_checkpoint(before.id)
    with pytest.raises(lr.CheckpointNotFoundError):
        lr.reader(url, checkpoint=before.id, options=OPTIONS).get("b", "k007")
    # Shard "0.1" was never split: it holds a part of ``between`` in the current layout too.
    admin.delete_checkpoint(between.id)
    layouts = [admin, *run_sync(admin._earlier_layouts_async())]
    left = [s for layout in layouts for s in range(layout.shards)
            if any(c.id in (before.id, between.id)
                   for c in layout.shard(s).list_checkpoints())]
    assert left == []  # every part is gone: nothing pins a retired shard for ever


def test_a_restored_backup_of_a_split_store_holds_each_key_once(ray_cluster, tmp_path):
    """The children of a split read their parent's journal files, of both children's keys; a
    backup copies each child's part only, so the restored store holds each key once: point
    reads, folds, index queries and the change feed alike."""
    url, backup = f"file://{tmp_path}/db", f"file://{tmp_path}/backup"
    with lr.open(url, OPTIONS, shards=2) as store:
        store.put_many([lr.Put("b", f"k{i:03d}", b"v%d" % i,
                               indexes=[("add", "n_bin", f"t{i:03d}")]) for i in range(100)])
        store.split_shard(0)  # its children inherit every journal file the shard had
        store.put("b", "k007", b"after the split")
        store.backup(backup, progress=False)
        kept = sorted(store.fold_keys("b"))
    assert len(kept) == 100
    with lr.open(backup, OPTIONS) as restored:
        assert sorted(restored.fold_keys("b")) == kept
        assert len(list(restored.index_query("b", "n_bin", "t000", "t999"))) == 100
        assert restored.get("b", "k007") == b"after the split"
        changed = [(c.bucket, c.key) for c in restored.changes(0, values=False)
                   if c.kind == "put"]
        assert len(set(changed)) == 100  # each key once, k007 twice (before and after)
        assert len(changed) - changed.count(("b", "k007")) == 99


def test_a_backup_whose_handle_follows_a_split_as_it_begins_is_refused(
        ray_cluster, tmp_path, monkeypatch):
    """A split lands while a hot backup takes its checkpoint, and the handle follows it: the
    backup is refused with ``ConflictError`` (its checkpoint is of the new layout, its
    target of the old), and run again it backs up the new layout whole."""
    from leveled_ray.cluster import backup as backups

    url, target = f"file://{tmp_path}/db", f"file://{tmp_path}/backup"
    taken = backups.checkpoints.create

    async def split_meanwhile(store, *args):
        monkeypatch.setattr(backups.checkpoints, "create", taken)
        await store.split_shard_async(0)  # as another driver's split would, which it follows
        return await taken(store, *args)

    with lr.open(url, OPTIONS, shards=2) as store:
        store.put_many([lr.Put("b", f"k{i:03d}", b"v%d" % i) for i in range(50)])
        monkeypatch.setattr(backups.checkpoints, "create", split_meanwhile)
        with pytest.raises(lr.ConflictError, match="split or move"):
            store.backup(target, progress=False)
        assert store.shards == 3
        store.backup(target, progress=False)
    with lr.open(target, OPTIONS) as restored:
        assert restored.shards == 3
        assert len(list(restored.fold_keys("b"))) == 50
