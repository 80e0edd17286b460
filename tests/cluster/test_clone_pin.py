"""A sharded clone interrupted after its shard map was written, before it released the
parent's pin of the cut, releases it when retried (else the pin kept the parent's files for
ever). Without Ray: the parent is written by offline bulk writes."""

import pyarrow as pa
import pytest

import leveled_ray as lr
from leveled_ray.bulk import sharded as bulk
from leveled_ray.cluster import checkpoints, clone
from leveled_ray.cluster.admin import ShardedAdmin
from leveled_ray.errors import ObjectStoreError
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest.shard_map import ShardMap, create_shard_map

KEYS = [("b", f"k{i}") for i in range(40)]


def test_a_retried_sharded_clone_releases_the_parents_pin(tmp_path, monkeypatch):
    parent_url, url = f"file://{tmp_path}/parent", f"file://{tmp_path}/child"
    shard_map = run_sync(create_shard_map(ObjectStore.from_url(parent_url), ShardMap.new(2)))
    plan = bulk.begin_write(parent_url)
    rows = pa.record_batch({"bucket": [b for b, _ in KEYS], "key": [k for _, k in KEYS],
                            "value": [b"v"] * len(KEYS)})
    bulk.commit(plan, [bulk.write_partition(plan, 0, [rows])])
    options = lr.Options()

    async def dies_before_release(store, checkpoint_id):
        raise ObjectStoreError("the driver died here", definite=True)

    monkeypatch.setattr(checkpoints, "delete", dies_before_release)
    with pytest.raises(ObjectStoreError):
        run_sync(clone.create_sharded_clone(parent_url, shard_map, url, None, options,
                                            options))
    parent = ShardedAdmin(parent_url, shard_map, options)
    assert [c.name for c in parent.list_checkpoints()] == [f"clone:{url}"]
    monkeypatch.undo()
    run_sync(clone.create_sharded_clone(parent_url, shard_map, url, None, options, options))
    assert parent.list_checkpoints() == []
    with lr.reader(url) as r:
        assert r.get_many(KEYS) == [b"v"] * len(KEYS)
