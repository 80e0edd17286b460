"""Fan-out of a batch of keys, and the rule that keeps a batched read from holding half of a
cross-shard batch (pure: no Ray)."""

import asyncio

import numpy as np
import pytest

import leveled_ray as lr
from leveled_ray.cluster.fanout import (
    group_by_shard,
    per_shard_checked,
    stale_shards,
)
from leveled_ray.codec import object_key
from leveled_ray.manifest.shard_map import ShardMap


def test_groups_keep_input_order_within_each_shard():
    groups = group_by_shard(np.array([2, 0, 2, 1, 0]))
    assert {s: w.tolist() for s, w in groups.items()} == {0: [1, 4], 1: [3], 2: [0, 2]}
    assert group_by_shard(np.array([], dtype=np.int64)) == {}


def test_a_shard_read_before_it_prepared_its_part_is_read_again():
    numbers = {"0": (1, 7), "1": (2, 4)}  # a batch: part 7 of shard 0, part 4 of shard 1
    # Shard 0 returned a key that batch wrote; shard 1's read began after 3 parts: stale.
    assert stale_shards({"0": (1, 9), "1": (2, 3)}, {"0": {5: numbers}, "1": {}}) == {"1"}
    # After its fourth part it had prepared this one, so its read waited for the decision.
    assert stale_shards({"0": (1, 9), "1": (2, 4)}, {"0": {5: numbers}, "1": {}}) == set()
    # A shard that restarted since (a later writer epoch) settled every part before reading.
    assert stale_shards({"0": (1, 9), "1": (3, 0)}, {"0": {5: numbers}, "1": {}}) == set()
    # A shard the read did not ask needs nothing; nor does the shard that returned the key.
    assert stale_shards({"0": (1, 0)}, {"0": {1: numbers}}) == set()


class Shard:
    """A shard that answers a checked read from a script of answers, one per read."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.reads = 0

    async def get_many_checked(self, pairs):
        self.reads += 1
        values, began, notes = self.answers.pop(0)
        return [values] * len(pairs), began, notes


def test_a_checked_read_reads_stale_shards_again_until_the_batch_is_whole():
    shard_map = ShardMap.new(2)
    pairs = [("b", f"k{i}") for i in range(40)]
    assert {shard_map.shard_of(object_key(b, k)) for b, k in pairs} == {0, 1}
    batch = {"0": (1, 3), "1": (1, 2)}
    shards = [Shard([("new", (1, 5), {0: batch})]),  # shard 0: the batch applied
              Shard([("old", (1, 1), {}), ("new", (1, 2), {0: batch})])]  # shard 1: too early
    found = asyncio.run(per_shard_checked(shards, pairs, lr.Options(), shard_map,
                                          Shard.get_many_checked))
    assert shards[0].reads == 1 and shards[1].reads == 2
    assert set(found) == {"new"} and len(found) == len(pairs)


def test_part_numbers_name_shards_by_label_so_a_split_shifting_indexes_misleads_no_read():
    """After shard 0 split, shard 1 is at index 2 (label "1"): a batch of shards "0.0" and
    "1" makes the read of index 2 stale, never that of index 1 (label "0.1")."""
    shard_map = ShardMap.new(2).split(0)
    assert shard_map.labels == ("0.0", "0.1", "1")
    pairs = [("b", f"k{i}") for i in range(60)]
    assert {shard_map.shard_of(object_key(b, k)) for b, k in pairs} == {0, 1, 2}
    batch = {"0.0": (1, 3), "1": (1, 2)}
    shards = [Shard([("new", (1, 5), {0: batch})]),
              Shard([("other", (1, 0), {})]),  # index 1, with no part of the batch
              Shard([("old", (1, 1), {}), ("new", (1, 2), {0: batch})])]
    found = asyncio.run(per_shard_checked(shards, pairs, lr.Options(), shard_map,
                                          Shard.get_many_checked))
    assert [s.reads for s in shards] == [1, 1, 2]
    assert "old" not in found


def test_a_checked_read_that_never_sees_a_batch_whole_raises_rather_than_answer_half():
    """Shard 1 never answers from after it prepared its part of a batch that shard 0's
    answer shows: after MAX_ROUNDS the read gives up with a ConflictError (retry it), never
    an answer that holds half the batch."""
    from leveled_ray.cluster.fanout import MAX_ROUNDS

    shard_map = ShardMap.new(2)
    pairs = [("b", f"k{i}") for i in range(40)]
    rounds = MAX_ROUNDS + 1
    batch = {"0": (1, 3), "1": (1, 2)}
    shards = [Shard([("new", (1, 5), {0: batch})]),  # shard 0: the batch applied
              Shard([("old", (1, 1), {})] * rounds)]  # shard 1: read before, every time
    with pytest.raises(lr.ConflictError, match="again"):
        asyncio.run(per_shard_checked(shards, pairs, lr.Options(), shard_map,
                                      Shard.get_many_checked))
    assert shards[1].reads == MAX_ROUNDS
