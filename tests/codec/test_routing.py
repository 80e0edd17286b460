"""Routing of a sharded store: a documented pure function of (bucket, key)."""

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

import leveled_ray as lr
from leveled_ray.codec import object_key
from leveled_ray.codec.keys import TAG_OBJECT, encode_key
from leveled_ray.codec.routing import (
    PARTITIONS,
    bucket_shard,
    check_shards,
    partition_of,
    partition_runs,
    shard_of,
    shards_of,
)

names = st.one_of(st.text(min_size=1, max_size=12), st.binary(min_size=1, max_size=12))


@pytest.mark.parametrize("bad", [0, 3, 6, 12, 512, -2, 2.0, "4", True, None])
def test_shards_must_be_a_power_of_two_from_1_to_256(bad):
    with pytest.raises(lr.InvalidArgumentError, match="power of two"):
        check_shards(bad)


@pytest.mark.parametrize("count", [1, 2, 4, 8, 256])
def test_each_shard_owns_one_contiguous_run_and_the_runs_tile_the_partitions(count):
    runs = partition_runs(count)
    assert runs[0][0] == 0 and runs[-1][1] == PARTITIONS
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    assert {end - start for start, end in runs} == {PARTITIONS // count}


@given(bucket=names, key=names)
def test_the_partition_is_xxh3_of_the_object_key_modulo_4096(bucket, key):
    lkey = object_key(bucket, key)
    assert partition_of(lkey) == xxhash.xxh3_64_intdigest(lkey) % 4096
    assert partition_of(lkey, "bucket") == xxhash.xxh3_64_intdigest(
        encode_key(TAG_OBJECT, bucket)) % 4096


@given(bucket=names, keys=st.lists(names, min_size=1, max_size=20))
def test_route_by_bucket_keeps_a_bucket_in_one_shard(bucket, keys):
    runs = partition_runs(8)
    shards = {shard_of(bucket, key, runs, "bucket") for key in keys}
    assert shards == {bucket_shard(bucket, runs)}


@given(pairs=st.lists(st.tuples(names, names), min_size=1, max_size=50),
       count=st.sampled_from([1, 2, 4, 16]), route_by=st.sampled_from(["key", "bucket"]))
def test_the_vectorised_form_agrees_with_one_key_at_a_time(pairs, count, route_by):
    runs = partition_runs(count)
    many = shards_of([object_key(b, k) for b, k in pairs], runs, route_by)
    assert many.tolist() == [shard_of(b, k, runs, route_by) for b, k in pairs]


def test_keys_spread_over_the_shards_and_a_split_moves_only_its_own_partitions():
    keys = [object_key("b", f"k{i}") for i in range(20_000)]
    four = shards_of(keys, partition_runs(4))
    counts = np.bincount(four, minlength=4)
    assert counts.min() > 0.9 * len(keys) / 4  # about even
    eight = shards_of(keys, partition_runs(8))
    assert (eight // 2 == four).all()  # shard s splits into 2s and 2s+1: nothing else moves


def test_zero_bytes_in_a_bucket_do_not_end_it_early():
    runs = partition_runs(256)
    for bucket in (b"a\x00b", "a\x00", b"\x00"):
        assert {shard_of(bucket, k, runs, "bucket") for k in ("x", "y", b"\x00z")} == {
            bucket_shard(bucket, runs)}
