"""A sharded store on the session's multi-node Ray cluster: placement, routing, the plain
store's API and answers, reopening and connecting."""

import uuid

import pytest

import leveled_ray as lr
from leveled_ray.files.store import ObjectStore

pytestmark = pytest.mark.ray


def nodes_of(store) -> list[tuple[str, str]]:
    """Each shard's (Bookie node, Penciller node)."""
    return [(s["process"]["node"], s["penciller"]["process"]["node"])
            for s in store.stats()["shards"]]


def test_shards_spread_over_the_nodes_and_keep_their_actors_together(ray_cluster, tmp_url):
    with lr.open(tmp_url, shards=2) as two:
        placed = nodes_of(two)
        assert all(bookie == penciller for bookie, penciller in placed)  # a shard's node
        assert placed[0][0] != placed[1][0]  # one node per shard
    with lr.open(f"{tmp_url}-4", shards=4) as four:
        assert len({bookie for bookie, _ in nodes_of(four)}) == 3  # every node holds some


def test_every_call_reaches_the_keys_shard_and_answers_in_input_order(ray_cluster, tmp_url):
    store = lr.open(tmp_url, shards=4)
    try:
        assert store.shards == 4
        keys = [("b", f"k{i:03d}") for i in range(200)]
        sqns = [store.put(b, k, k.encode(), indexes=[("add", "n_int", i)])
                for i, (b, k) in enumerate(keys)]
        assert all(sqn > 0 for sqn in sqns)
        assert store.get_many(keys[::-1]) == [k.encode() for _, k in keys[::-1]]
        heads = store.head_many(keys + [("b", "none")])
        assert heads[-1] is None and [h.size for h in heads[:-1]] == [4] * 200
        # Each key is where the routing function says, and nowhere else.
        for shard in range(4):
            here = store.shard(shard).get_many(keys)
            assert [v is not None for v in here] == [store.shard_of(b, k) == shard
                                                     for b, k in keys]
        assert len({store.shard_of(b, k) for b, k in keys}) == 4
        # Folds and index queries merge the shards in key order.
        assert list(store.fold_keys("b")) == keys
        assert [v for _, _, v in store.fold_objects("b")] == [k.encode() for _, k in keys]
        assert list(store.index_query("b", "n_int", 10, 19)) == [k for _, k in keys[10:20]]
        page = list(store.index_query("b", "n_int", 5, 199, return_terms=True, max_results=7,
                                      start_key="k005"))
        assert page == [(i, f"k{i:03d}") for i in range(6, 13)]  # after (5, "k005")
        assert store.list_buckets() == ["b"] and not store.is_empty()
        store.delete("b", "k000")
        assert store.get("b", "k000") is None
        stats = store.stats()
        assert stats["changes"] == sum(s["changes"] for s in stats["shards"]) == 201
    finally:
        store.close()


def test_a_put_many_across_shards_is_atomic_and_checks_every_condition_first(ray_cluster,
                                                                              tmp_url):
    store = lr.open(tmp_url, shards=4, options=lr.Options(txn_timeout_s=5))
    try:
        items = [lr.Put("b", f"k{i}", b"v1", if_absent=True) for i in range(40)]
        sqns = store.put_many(items)
        assert len(sqns) == 40 and store.get_many([("b", f"k{i}") for i in range(40)]) == [
            b"v1"] * 40
        assert len({store.shard_of("b", f"k{i}") for i in range(40)}) == 4
        # One failed condition in one shard: nothing is written anywhere.
        again = [lr.Put("b", f"k{i}", b"v2", if_sqn=sqn) for i, sqn in enumerate(sqns)]
        again[17] = lr.Put("b", "k17", b"v2", if_absent=True)
        with pytest.raises(lr.ConditionFailedError):
            store.put_many(again)
        assert store.get_many([("b", f"k{i}") for i in range(40)]) == [b"v1"] * 40
        again[17] = lr.Put("b", "k17", b"v2", if_sqn=sqns[17])
        store.put_many(again + [lr.Delete("b", "k0")])
        assert store.get_many([("b", f"k{i}") for i in range(40)]) == [None] + [b"v2"] * 39
        stats = store.stats()["shards"]
        assert sum(s["txn_committed"] for s in stats) == 8  # two batches over four shards
        assert sum(s["txn_aborted"] for s in stats) == 3  # the failed one: three had prepared
        assert not ObjectStore.from_url(tmp_url).list("txn/")  # records go once applied
    finally:
        store.close()


def test_routing_and_contents_survive_a_reopen_and_connect_finds_the_store(ray_cluster,
                                                                           tmp_url):
    name = f"sharded-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, shards=2, route_by="bucket", name=name)
    store.put_many([lr.Put(f"b{i}", "k", b"v") for i in range(20)])
    where = {f"b{i}": store.shard_of(f"b{i}", "k") for i in range(20)}
    assert {store.shard_of("b3", f"x{i}") for i in range(50)} == {where["b3"]}  # by bucket
    other = lr.connect(name)
    assert isinstance(other, lr.ShardedStore) and other.shards == 2
    assert other.get("b7", "k") == b"v"
    with pytest.raises(lr.InvalidArgumentError, match="already running"):
        lr.open(tmp_url, name=name)
    store.close()
    with pytest.raises(lr.InvalidArgumentError, match="has 2 shards"):
        lr.open(tmp_url, shards=4)
    again = lr.open(tmp_url)  # the count is stored
    try:
        assert again.shards == 2 and again.shard_map.route_by == "bucket"
        assert {b: again.shard_of(b, "k") for b in where} == where
        assert again.get_many([(b, "k") for b in where]) == [b"v"] * 20
    finally:
        again.close()


def test_bad_shard_arguments_create_nothing(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    for kwargs in ({"shards": 3}, {"shards": 512}, {"shards": "2"}, {"route_by": "bucket"},
                   {"shards": 2, "route_by": "hash"},
                   {"shards": 2, "store": ObjectStore.from_url(url)}):
        with pytest.raises(lr.InvalidArgumentError):
            lr.open(url, **kwargs)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    lr.open(url).close()  # a plain store
    with pytest.raises(lr.InvalidArgumentError, match="plain store"):
        lr.open(url, shards=2)
    assert not (tmp_path / "db" / "shards").exists()


def test_a_dead_shard_fails_its_own_calls_only(ray_cluster, tmp_url):
    import ray

    store = lr.open(tmp_url, shards=2)
    try:
        keys = {store.shard_of("b", f"k{i}"): f"k{i}" for i in range(10)}
        for key in keys.values():
            store.put("b", key, b"v")
        ray.kill(store.shard(1).actors()[0], no_restart=True)
        assert store.get("b", keys[0]) == b"v"
        with pytest.raises(lr.StoreClosedError):
            store.get("b", keys[1])
        with pytest.raises(lr.StoreClosedError):
            store.get_many([("b", keys[0]), ("b", keys[1])])
    finally:
        store.shard(0).close()
