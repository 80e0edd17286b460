"""The rule that keeps a past view of a sharded store from holding a cross-shard batch in
part (pure: no store, no Ray)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.manifest.batch_tags import batch_tag, tag_shards, whole_batches

A, B, C = batch_tag("a", [0, 1]), batch_tag("b", [1, 0]), batch_tag("c", [0, 1, 2])


def test_a_tag_names_its_shards_in_order():
    assert tag_shards(B) == ["0", "1"] and tag_shards(batch_tag("x", ())) == []


def test_a_batch_inside_on_one_shard_only_is_left_out_everywhere():
    # A: SQNs 5-6 on shard 0 (inside at 8), 12-13 on shard 1 (outside at 10)
    found = [{A: (5, 6)}, {A: (12, 13)}]
    assert whole_batches([8, 10], found, [4, 10]) == ([4, 10], {})


def test_leaving_one_batch_out_can_leave_out_another():
    # Leaving A out lowers shard 0 below 5, which leaves out C (7 there): so C goes from
    # shards 1 and 2 too.
    found = [{A: (5, 5), C: (7, 7)}, {A: (12, 12), C: (9, 9)}, {C: (2, 2)}]
    positions, wanted = whole_batches([8, 10, 3], found, [1, 1, 1])
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
    """Both children hold the parent's part at the same SQNs (5-6), each its own keys: once
    "1.0" found it and "1.1" read all above 4 without it, "1.1" has none of it."""
    found = [{A: (12, 13)}, {A: (5, 6)}, {}]
    _, wanted = whole_batches([10, 8, 8], found, [10, 4, 4], ["0", "1.0", "1.1"])
    assert wanted == {}
    _, wanted = whole_batches([10, 8, 8], found, [10, 4, 5], ["0", "1.0", "1.1"])
    assert wanted == {2: {A}}
