"""The shard map: versioned, create-if-absent, checked when read; and which layout an open
finds or creates."""

import asyncio
import dataclasses
import json

import pytest

import leveled_ray as lr
from leveled_ray.bulk import write as bulk_write
from leveled_ray.cluster.layout import resolve_layout
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest.shard_map import (
    ShardMap,
    create_shard_map,
    mark_unfinished,
    read_shard_map,
    shard_map_name,
    unmark_unfinished,
)


def test_a_map_round_trips_and_says_where_each_shard_lives():
    m = ShardMap.new(4, "bucket")
    back = ShardMap.decode(m.encode(), "x")
    assert back == m and back.count == 4 and back.route_by == "bucket"
    assert back.shard_url("s3://bkt/db/", 2) == "s3://bkt/db/shard-002"


def test_same_layout_ignores_the_version_and_nothing_else():
    m = ShardMap.new(4, "key")
    assert m.same_layout(dataclasses.replace(m, version=7))
    assert not m.same_layout(ShardMap.new(4, "bucket"))
    assert not m.same_layout(ShardMap.new(2, "key"))
    assert not m.same_layout(dataclasses.replace(m, prefixes=m.prefixes[::-1]))


@pytest.mark.parametrize("damage", [
    b"not json", b"{}",
    lambda raw: {**raw, "format": 9},
    lambda raw: {**raw, "rule": "md5"},
    lambda raw: {**raw, "route_by": "value"},
    lambda raw: {**raw, "shards": raw["shards"][:-1]},  # the runs no longer tile
    lambda raw: {**raw, "shards": [raw["shards"][1], raw["shards"][0]]},
    lambda raw: {**raw, "shards": []},
])
def test_a_damaged_map_raises_corrupt_object_error(damage):
    raw = json.loads(ShardMap.new(2).encode())
    data = damage if isinstance(damage, bytes) else json.dumps(damage(raw)).encode()
    with pytest.raises(lr.CorruptObjectError, match="shard map"):
        ShardMap.decode(data, "shards/1")


def test_the_first_creator_wins_and_everyone_reads_its_map(tmp_path):
    store = ObjectStore.from_url(f"file://{tmp_path}/db")
    first = asyncio.run(create_shard_map(store, ShardMap.new(4)))
    second = asyncio.run(create_shard_map(store, ShardMap.new(8)))
    assert first.count == second.count == 4
    assert asyncio.run(read_shard_map(store)) == first
    assert [m.path for m in store.list("shards/")] == [shard_map_name(1)]


def _layout(store, shards=None, route_by=None):
    return asyncio.run(resolve_layout(store, shards, route_by))


def test_bad_layout_arguments_are_refused_and_create_nothing(tmp_path):
    store = ObjectStore.from_url(f"file://{tmp_path}/db")
    for shards, route_by in ((3, None), (0, None), ("2", None), (2, "value"), (None, "bucket")):
        with pytest.raises(lr.InvalidArgumentError):
            _layout(store, shards, route_by)
    assert store.list("shards/") == store.list("manifest/") == []
    assert _layout(store) is None  # a plain store, as always
    made = _layout(store, 4, "bucket")
    assert (made.count, made.route_by) == (4, "bucket")
    assert _layout(store) == made == _layout(store, 4)
    with pytest.raises(lr.InvalidArgumentError, match="has 4 shards"):
        _layout(store, 8)
    with pytest.raises(lr.InvalidArgumentError, match="routes by 'bucket'"):
        _layout(store, 4, "key")


def test_shards_on_a_plain_store_is_refused(tmp_path):
    url = f"file://{tmp_path}/db"
    bulk_write.begin(url)  # a plain store's first manifest, offline
    store = ObjectStore.from_url(url)
    with pytest.raises(lr.InvalidArgumentError, match="plain store"):
        _layout(store, 2)
    assert store.list("shards/") == []


def test_a_root_marked_unfinished_is_refused_until_its_shard_map_is_written(tmp_path):
    """A sharded clone or backup that died before its shard map (written last) left shards
    and its mark: an open, sharded or plain, refuses the root and creates nothing there."""
    url = f"file://{tmp_path}/db"
    bulk_write.begin(f"{url}/shard-000")  # one shard's first manifest
    store = ObjectStore.from_url(url)
    asyncio.run(mark_unfinished(store, "clone"))
    for shards in (None, 2):
        with pytest.raises(lr.InvalidArgumentError, match="holds shards but no shard map"):
            _layout(store, shards)
    assert store.list("shards/") == store.list("manifest/") == []
    made = asyncio.run(create_shard_map(store, ShardMap.new(2)))  # the maker's last step
    asyncio.run(unmark_unfinished(store, "clone"))
    assert _layout(store) == made and store.list("unfinished/") == []


def test_a_split_halves_one_shards_run_and_names_its_children():
    m = ShardMap.new(4)
    two = m.split(1)
    assert two.version == 2 and two.count == 5
    assert two.runs == ((0, 1024), (1024, 1536), (1536, 2048), (2048, 3072), (3072, 4096))
    assert two.prefixes[1:3] == ("shard-001.0", "shard-001.1")
    assert two.labels == ("0", "1.0", "1.1", "2", "3")
    assert ShardMap.decode(two.encode(), "x") == two  # labels round-trip
    three = two.split(2)
    assert three.labels[1:4] == ("1.0", "1.1.0", "1.1.1") and three.version == 3
    # Every key of a child was its parent's: no key moves to another shard's children.
    keys = [bytes([i % 251, i // 251]) for i in range(5000)]
    for k in keys:
        before, after = m.shard_of(k), three.shard_of(k)
        assert three.labels[after].split(".")[0] == m.labels[before]
    for bad in (-1, 4, 9, "1", True):
        with pytest.raises(lr.InvalidArgumentError, match="no shard"):
            m.split(bad)
    narrow = ShardMap(1, "key", ("a", "b"), ((0, 1), (1, 4096)))
    with pytest.raises(lr.InvalidArgumentError, match="one partition"):
        narrow.split(0)


def test_a_position_taken_before_a_split_reads_on_from_the_parents_sqn():
    m = ShardMap.new(2)
    split = m.split(0)
    assert m.sqns_of({"0": 7, "1": 9}) == [7, 9]
    assert split.sqns_of({"0": 7, "1": 9}) == [7, 7, 9]  # both children from the parent's
    assert split.sqns_of({"0.0": 12, "0.1": 8, "1": 9}) == [12, 8, 9]
    assert split.sqns_of({"0": 7, "0.1": 8, "1": 9}) == [7, 8, 9]  # the nearest ancestor
    assert split.position([12, 8, 9]) == {"0.0": 12, "0.1": 8, "1": 9}
    assert split.sqns_of(0) == [0, 0, 0] and split.sqns_of(None) is None
    for bad in ({"0": 7}, {"0.0": 1, "0.1": 1, "1": 1, "2": 1},  # a shard missing; another's
                {"0.0": 1, "0.1": 1, 1: 1}, [7, 7, 9], "0"):
        with pytest.raises(lr.InvalidArgumentError, match="position of every shard"):
            split.sqns_of(bad)
    with pytest.raises(lr.InvalidArgumentError, match="an SQN"):
        split.sqns_of({"0.0": 1, "0.1": 1, "1": -1})
    with pytest.raises(lr.InvalidArgumentError):  # a position of a newer layout
        m.sqns_of({"0.0": 12, "0.1": 8, "1": 9})
