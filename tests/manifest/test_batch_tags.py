"""The rules that keep a past view of a sharded store from holding a cross-shard batch, or a
batch a split shard applied before it split, in part (pure: no store, no Ray)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.errors import CorruptObjectError
from leveled_ray.manifest.batch_tags import batch_tag, one_history, tag_shards, whole_batches
from leveled_ray.manifest.model import Manifest
from leveled_ray.manifest.split_points import SETTING, children_points, split_points

A, B, C = batch_tag("a", [0, 1]), batch_tag("b", [1, 0]), batch_tag("c", [0, 1, 2])


def test_a_tag_names_its_shards_in_order():
    assert tag_shards(B) == ["0", "1"] and tag_shards(batch_tag("x", ())) == []


def test_a_batch_inside_on_one_shard_only_is_left_out_everywhere():
    # A: SQNs 5-6 on shard 0 (inside at 8), 12-13 on shard 1 (outside at 10)
    found = [{A: (5, 6)}, {A: (12, 13)}]
    assert whole_batches([8, 10], found, [3, 10]) == ([4, 10], {})
    # Shard 0 read down to 5 only: A may hold SQN 4 too, which the view would then hold
    # without the rest: shard 0 looks below its floor.
    assert whole_batches([8, 10], found, [4, 10]) == ([4, 10], {0: {A}})


def test_leaving_one_batch_out_can_leave_out_another():
    # Leaving A out lowers shard 0 below 5, which leaves out C (7 there): so C goes from
    # shards 1 and 2 too.
    found = [{A: (5, 5), C: (7, 7)}, {A: (12, 12), C: (9, 9)}, {C: (2, 2)}]
    positions, wanted = whole_batches([8, 10, 3], found, [0, 0, 0])
    assert positions == [4, 8, 1] and wanted == {}


def test_a_batch_outside_somewhere_and_not_read_on_another_shard_is_asked_for():
    found = [{}, {A: (12, 13)}]
    assert whole_batches([8, 10], found, [6, 10]) == ([8, 10], {0: {A}})


def test_whole_batches_inside_or_outside_change_nothing():
    found = [{A: (5, 6), B: (9, 9)}, {A: (2, 3), B: (11, 11)}]
    assert whole_batches([7, 10], found, [0, 0]) == ([7, 10], {})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 30), min_size=2, max_size=2), min_size=1, max_size=8),
       st.lists(st.integers(0, 30), min_size=2, max_size=2))
def test_the_positions_only_go_down_and_leave_no_batch_in_part(sqns, positions):
    """Batches on 2 shards, at arbitrary SQNs (each its own there), read from 0 up."""
    found: list[dict] = [{}, {}]
    used: list[set] = [set(), set()]
    for i, pair in enumerate(sqns):
        if any(q in used[s] for s, q in enumerate(pair)):
            continue
        for s, q in enumerate(pair):
            used[s].add(q)
            found[s][batch_tag(str(i), [0, 1])] = (q, q)
    final, wanted = whole_batches(positions, found, [0, 0])
    assert wanted == {}
    assert all(f <= p for f, p in zip(final, positions))
    for tag in found[0]:
        inside = {found[s][tag][0] <= final[s] for s in (0, 1)}
        assert len(inside) == 1, (tag, final)


def test_a_batch_of_a_shard_that_split_since_is_looked_for_in_both_children():
    """Shard 1 split into "1.0" and "1.1", each inheriting its Journal: a batch of shards 0
    and 1 outside the view on shard 0 is looked for in both children, not at index 1 alone."""
    found = [{A: (12, 13)}, {}, {}]
    positions, wanted = whole_batches([10, 8, 8], found, [10, 4, 4], ["0", "1.0", "1.1"])
    assert positions == [10, 8, 8] and wanted == {1: {A}, 2: {A}}


def test_a_child_that_read_below_where_its_sibling_found_a_batch_looks_no_further():
    """Both children hold the parent's part at its SQNs, each its own keys: once "1.0" found
    it at 5-6 and both read SQN 4 without it, the part starts at 5 and "1.1" has none of it.
    Until both read SQN 4, either may hold it there."""
    found = [{A: (12, 13)}, {A: (5, 6)}, {}]
    _, wanted = whole_batches([10, 8, 8], found, [10, 3, 3], ["0", "1.0", "1.1"])
    assert wanted == {}
    _, wanted = whole_batches([10, 8, 8], found, [10, 3, 4], ["0", "1.0", "1.1"])
    assert wanted == {2: {A}}
    _, wanted = whole_batches([10, 8, 8], found, [10, 4, 4], ["0", "1.0", "1.1"])
    assert wanted == {1: {A}, 2: {A}}


def test_a_splits_children_take_one_position_inside_the_history_they_share():
    # Shard "0" split at SQN 10 into "0.0" and "0.1"; shard "1" never split.
    labels, points = ["0.0", "0.1", "1"], [{"0": 10}, {"0": 10}, {}]
    # "0.0" cuts inside the shared history at 4: its sibling goes down with it, "1" stays.
    assert one_history([4, 25, 30], points, labels) == [4, 4, 30]
    # Both past the split point: each keeps its own (their own writes are apart).
    assert one_history([12, 25, 30], points, labels) == [12, 25, 30]
    assert one_history([10, 25, 30], points, labels) == [10, 25, 30]


def test_nested_splits_share_the_history_of_each_ancestor():
    # "0" split at 10 into "0.0", "0.1"; then "0.1" split at 20 into "0.1.0", "0.1.1".
    labels = ["0.0", "0.1.0", "0.1.1"]
    points = [{"0": 10}, {"0": 10, "0.1": 20}, {"0": 10, "0.1": 20}]
    assert one_history([30, 15, 40], points, labels) == [30, 15, 15]  # inside "0.1"'s only
    assert one_history([30, 40, 7], points, labels) == [7, 7, 7]  # inside "0"'s: all three
    assert one_history([8, 40, 35], points, labels) == [8, 8, 8]


def test_split_points_are_recorded_for_each_generation_and_damage_is_typed():
    parent = Manifest.new().with_changes(ledger_sqn=12)
    first = children_points(parent, "0")
    child = Manifest.new(**{SETTING: first})
    assert split_points(child) == {"0": 12} and split_points(parent) == {}
    assert split_points(Manifest.new(**{SETTING: children_points(
        child.with_changes(ledger_sqn=30), "0.1")})) == {"0": 12, "0.1": 30}
    for bad in ("0", "0:x", ":4", "0:-1"):
        with pytest.raises(CorruptObjectError):
            split_points(Manifest.new(**{SETTING: bad}))


def test_a_part_the_parent_applied_is_looked_for_in_every_child_until_its_start_is_read():
    # Tag P: a batch over shards "0" and "1", applied before "0" split: SQN 513 on "1",
    # 514 (a key now "0.0"'s) and 515 (now "0.1"'s) on "0". The children cut together at
    # 514, below their split point; "0.0" read above 514 only, so it did not find its key.
    P = batch_tag("p", ["0", "1"])
    labels, points = ["0.0", "0.1", "1"], [{"0": 517}, {"0": 517}, {}]
    found = [{}, {P: (515, 515)}, {P: (513, 513)}]
    positions, wanted = whole_batches([514, 514, 512], found, [514, 514, 512], labels)
    assert positions == [514, 514, 512] and wanted == {0: {P}, 1: {P}, 2: {P}}
    found[0][P] = (514, 514)  # found once "0.0" read deeper: the part is held in part
    positions, wanted = whole_batches(positions, found, [500, 500, 500], labels)
    assert one_history(positions, points, labels) == [513, 513, 512] and wanted == {}
