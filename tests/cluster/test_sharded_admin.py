"""A sharded store without Ray: readers at its checkpoints, admin checkpoints while no shard is
written, backup and restore, GC and destroy; on file:// and on moto's S3."""

import pytest

import leveled_ray as lr
from leveled_ray.files.store import ObjectStore

pytestmark = pytest.mark.ray

KEYS = [("b", f"k{i:03d}") for i in range(100)]


def test_readers_admin_backup_gc_and_destroy(ray_cluster, durable_backend, tmp_path):
    url, options = durable_backend
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
    backup = f"file://{tmp_path}/backup"
    done = store.backup(backup, progress=False)
    assert len(done["shards"]) == 2 and done["files"] == sum(s["files"] for s in done["shards"])
    store.close()
    with lr.reader(url, options=options) as own:  # no shard is written now: its own checkpoint
        assert own.get_many(KEYS) == [b"v2"] * len(KEYS)
        assert own.checkpoint_id in {c.id for c in admin.list_checkpoints()}
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
    assert [m.path for prefix in ("shards/", "txn/", "shard-000/", "shard-001/")
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
