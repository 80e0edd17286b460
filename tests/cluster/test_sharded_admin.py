"""A sharded store without Ray: readers at its checkpoints, admin checkpoints while no shard is
written, backup and restore, GC and destroy; on file:// and on moto's S3."""

import uuid

import pytest
from support.s3 import QUICK_FAILURES, S3_BUCKET, s3_options

import leveled_ray as lr
from leveled_ray.files.store import ObjectStore
from leveled_ray.testing.fault_proxy import FaultProxy

pytestmark = pytest.mark.ray

KEYS = [("b", f"k{i:03d}") for i in range(100)]


def test_readers_admin_backup_gc_and_destroy(ray_cluster, s3_backend, tmp_path):
    url, options = s3_backend
    store = lr.open(url, options, shards=2)
    store.put_many([lr.Put(b, k, b"v1") for b, k in KEYS])  # one batch across both shards
    checkpoint = store.checkpoint(lifetime=600)
    store.put_many([lr.Put(b, k, b"v2") for b, k in KEYS])
    with lr.reader(url, checkpoint.id, options=options) as at_cut:  # no Ray needed
        assert isinstance(at_cut, lr.ShardedReader)
        assert at_cut.get_many(KEYS) == [b"v1"] * len(KEYS)
        assert list(at_cut.fold_keys("b")) == KEYS
    admin = lr.admin(url, options)
    assert isinstance(admin, lr.ShardedAdmin)
    assert checkpoint.id in {c.id for c in admin.list_checkpoints()}
    with pytest.raises(lr.InvalidArgumentError, match="being written"):
        admin.create_checkpoint()  # no cut without Ray while shards are written
    with pytest.raises(lr.InvalidArgumentError, match="being written"):
        admin.split_shard(0)  # a split at rest waits for the store to close
    feed = list(admin.changes(0, values=False))  # a feed needs no cut: read while written
    assert [(c.shard, c.sqn) for c in feed] == [(c.shard, c.sqn)
                                                for c in store.changes(0, values=False)]
    assert sorted((c.bucket, c.key) for c in feed) == sorted(KEYS * 2)
    assert {c.shard for c in feed} == {0, 1}
    assert sum(b.num_rows for b in admin.changes_batches(0)) == len(feed)
    backup = f"file://{tmp_path}/backup"
    done = store.backup(backup, progress=False)
    assert len(done["shards"]) == 2 and done["files"] == sum(s["files"] for s in done["shards"])
    store.close()
    with lr.reader(url, options=options) as own:  # no shard is written now: its own checkpoint
        assert own.get_many(KEYS) == [b"v2"] * len(KEYS)
        first = own.checkpoint_id
        own.refresh()  # a new checkpoint; the old one goes
        assert own.checkpoint_id != first and own.get_many(KEYS) == [b"v2"] * len(KEYS)
        assert own.checkpoint_id in {c.id for c in admin.list_checkpoints()}
        assert first not in {c.id for c in admin.list_checkpoints()}
        assert own.renew_failures == 0
    admin.delete_checkpoint(checkpoint.id)
    assert admin.list_checkpoints() == []  # the reader's went with it
    plan = lr.gc(url, min_age=0, options=options)
    assert plan.deleted and not plan.failed and not plan.doubts
    restored = lr.open(backup)
    try:
        assert restored.shards == 2 and restored.get_many(KEYS) == [b"v2"] * len(KEYS)
    finally:
        restored.close()
    assert lr.destroy(url, soft=False, options=options) > 0
    root = ObjectStore.from_url(url, options)
    assert [m.path for prefix in ("shards/", "txn/", "backups/", "shard-000/", "shard-001/")
            for m in root.list(prefix)] == []


def test_the_command_line_on_a_sharded_store(ray_cluster, tmp_url, capsys):
    import json
    import uuid

    from leveled_ray.cli import main as cli

    name = f"cli-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, shards=2, name=name)
    try:
        store.put_many([lr.Put(b, k, b"v") for b, k in KEYS])
        assert cli.main(["stats", "--name", name, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert list(shown["shards"]) == ["shard 0", "shard 1"]  # one row per shard
        assert [row["node"] for row in shown["shards"].values()] == [  # where each runs
            s["process"]["node"][:12] for s in store.stats()["shards"]]
        assert cli.main(["checkpoint", "create", "--url", tmp_url]) == 2  # written: no cut
        assert "being written" in capsys.readouterr().err
        assert cli.main(["get", "--url", tmp_url, "b", "k007"]) == 0  # its shard's newest
        assert capsys.readouterr().out.strip() == "v"
        assert cli.main(["keys", "--url", tmp_url, "--bucket", "b", "--json"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == len(KEYS)
    finally:
        store.close()
    assert cli.main(["checkpoint", "create", "--url", tmp_url, "--json"]) == 0
    made = json.loads(capsys.readouterr().out)[0]
    assert cli.main(["checkpoint", "list", "--url", tmp_url, "--json"]) == 0
    assert [row["id"] for row in json.loads(capsys.readouterr().out)] == [made["id"]]
    assert cli.main(["gc", "--url", tmp_url, "--dry-run", "--json"]) == 0
    assert "would_delete" in json.loads(capsys.readouterr().out)
    assert cli.main(["stats", "--url", tmp_url, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["shards"]) == 2
    assert cli.main(["inspect", "--url", tmp_url]) == 0
    assert capsys.readouterr().out.count("== shard") == 2


def test_a_clone_of_a_sharded_store_is_sharded_and_starts_at_one_cut(ray_cluster, tmp_path):
    parent_url, child_url = f"file://{tmp_path}/parent", f"file://{tmp_path}/child"
    store = lr.open(parent_url, shards=2)
    try:
        store.put_many([lr.Put(b, k, b"v1") for b, k in KEYS])
        checkpoint = store.checkpoint()
        store.put_many([lr.Put(b, k, b"v2") for b, k in KEYS])
        with pytest.raises(lr.InvalidArgumentError, match="being written"):
            lr.clone(parent_url, f"file://{tmp_path}/now")  # "as of now" needs a cut
        child = lr.clone(parent_url, child_url, checkpoint.id)
        try:
            assert isinstance(child, lr.ShardedStore) and child.shards == 2
            assert child.get_many(KEYS) == [b"v1"] * len(KEYS)
            child.put_many([lr.Put(b, k, b"v3") for b, k in KEYS])  # the two are independent
            assert store.get_many(KEYS) == [b"v2"] * len(KEYS)
        finally:
            child.close()
        # The parent's pin of the cut is gone; each shard keeps its own clone's pin.
        admin = lr.admin(parent_url)
        assert [c.id for c in admin.list_checkpoints()] == [checkpoint.id]
        for shard in range(2):
            assert {c.name for c in admin.shard(shard).list_checkpoints()} >= {
                f"clone:{child_url}/shard-{shard:03d}"}
    finally:
        store.close()
    again = lr.clone(parent_url, child_url, checkpoint.id)  # a retry just opens it
    try:
        assert again.get_many(KEYS) == [b"v3"] * len(KEYS)
    finally:
        again.close()
    lr.open(f"file://{tmp_path}/plain").close()
    with pytest.raises(lr.InvalidArgumentError, match="plain store"):
        lr.clone(parent_url, f"file://{tmp_path}/plain", checkpoint.id)


@pytest.mark.s3
def test_a_half_made_sharded_clone_is_never_opened_and_a_retry_finishes_it(ray_cluster,
                                                                          moto_endpoint):
    """``lr.clone`` fails half-way: every write of its second shard's manifest answers 503
    (moto's S3 behind the fault proxy), after the first shard was made and before the shard
    map. Opening the clone's URL, sharded or plain, is refused and creates nothing; a retried
    ``lr.clone`` finishes it, whole."""
    direct = s3_options(moto_endpoint)
    root = f"s3://{S3_BUCKET}/half-clone-{uuid.uuid4().hex[:10]}"
    parent_url, url = f"{root}/parent", f"{root}/clone"
    with lr.open(parent_url, direct, shards=2) as parent:
        parent.put_many([lr.Put(b, k, b"v1") for b, k in KEYS])
    with FaultProxy(moto_endpoint) as proxy:
        proxy.fail_paths("PUT", "/clone/shard-001/", 10**6)
        with pytest.raises(lr.ObjectStoreError, match="503"):
            lr.clone(parent_url, url, options=s3_options(proxy.endpoint, **QUICK_FAILURES),
                     parent_options=direct)
    never_opened(url, direct, "shard-000/manifest/")
    clone = lr.clone(parent_url, url, options=direct)
    try:
        assert clone.shards == 2 and clone.get_many(KEYS) == [b"v1"] * len(KEYS)
    finally:
        clone.close()


def test_a_first_backup_interrupted_before_its_record_is_never_opened(ray_cluster,
                                                                       moto_endpoint):
    """A running store's first backup fails at its commit point: every write of its record
    answers 503 (moto's S3 behind the fault proxy), after both shards' files were copied.
    Opening the target, sharded or plain, is refused and creates nothing; the next backup
    finishes it, and opening it then restores the store."""
    direct = s3_options(moto_endpoint)
    target = f"s3://{S3_BUCKET}/half-backup-{uuid.uuid4().hex[:10]}"
    with lr.open(f"s3://{S3_BUCKET}/source-{uuid.uuid4().hex[:10]}", direct,
                 shards=2) as store:
        store.put_many([lr.Put(b, k, b"v1") for b, k in KEYS])
        with FaultProxy(moto_endpoint) as proxy:
            proxy.fail_paths("PUT", "/backups/", 10**6)
            with pytest.raises(lr.ObjectStoreError, match="503"):
                store.backup(target, target_options=s3_options(proxy.endpoint,
                                                               **QUICK_FAILURES),
                             progress=False)
        never_opened(target, direct, "shard-000/")
        store.backup(target, target_options=direct, progress=False)
    with lr.open(target, direct) as restored:
        assert restored.shards == 2 and restored.get_many(KEYS) == [b"v1"] * len(KEYS)
    assert not ObjectStore.from_url(target, direct).list("unfinished/")


def never_opened(url: str, options: lr.Options, made_prefix: str) -> None:
    """The store at ``url`` is half made (objects under ``made_prefix``, no shard map), and
    each open of it, sharded or plain, is refused and creates nothing."""
    made = ObjectStore.from_url(url, options)
    assert made.list(made_prefix) and not made.list("shards/")
    for shards in (2, None):
        refused_to_open(url, options, shards)
        assert not made.list("shards/") and not made.list("manifest/")


def refused_to_open(url: str, options: lr.Options, shards: int | None) -> None:
    """``lr.open(url)`` raises a typed error; if it opens a store instead, the test fails,
    saying what it opened."""
    try:
        store = lr.open(url, options, shards=shards)
    except lr.LeveledError:
        return
    try:
        held = sum(v is not None for v in store.get_many(KEYS))
    finally:
        store.close()
    pytest.fail(f"lr.open(shards={shards}) opened the half-made store as a "
                f"{type(store).__name__} holding {held} of the {len(KEYS)} keys")


def test_an_interrupted_sharded_backup_never_mixes_two_cuts(ray_cluster, tmp_path):
    """Two backups of one store, the second interrupted before its record at one target and
    after it (one shard's manifest written) at the other: the first restores the first cut
    whole, the second the second cut whole."""
    from leveled_ray.admin.backup import stage_version
    from leveled_ray.files.sync import run_sync
    from leveled_ray.manifest.backup_records import BackupRecord, create_backup_record
    from leveled_ray.manifest.store import ManifestStore

    url = f"file://{tmp_path}/db"
    before, after = f"file://{tmp_path}/before-record", f"file://{tmp_path}/after-record"
    store = lr.open(url, shards=2)
    try:
        store.put_many([lr.Put(b, k, b"v1") for b, k in KEYS])
        for target in (before, after):
            store.backup(target, progress=False)
        store.put_many([lr.Put(b, k, b"v2") for b, k in KEYS])
        checkpoint = store.checkpoint()
        admin = lr.admin(url)
        versions = [next(c.manifest_id for c in admin.shard(s).list_checkpoints()
                         if c.id == checkpoint.id) for s in range(2)]

        def stage(target):  # what a backup does before its record: copy every shard's files
            return [run_sync(stage_version(
                ObjectStore.from_url(f"{url}/shard-{s:03d}"), store.options, versions[s],
                ObjectStore.from_url(f"{target}/shard-{s:03d}"))) for s in range(2)]

        stage(before)
        staged = stage(after)
        record = BackupRecord(store.shard_map, tuple(s.version for s in staged),
                              tuple(s.manifest for s in staged))
        assert run_sync(create_backup_record(ObjectStore.from_url(after), 2, record))
        shard0 = ManifestStore(ObjectStore.from_url(f"{after}/shard-000"))
        assert run_sync(shard0.try_create(staged[0].version, staged[0].manifest))
    finally:
        store.close()
    for target, value in ((before, b"v1"), (after, b"v2")):
        restored = lr.open(target)
        try:
            assert restored.get_many(KEYS) == [value] * len(KEYS)
        finally:
            restored.close()
