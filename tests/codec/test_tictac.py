"""Tictac trees (codec/tictac.py): pure, no store."""

import random

import lz4.block
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import leveled_ray as lr
from leveled_ray.codec.keys import object_key
from leveled_ray.codec.tictac import (
    BRANCH_WIDTH,
    SIZES,
    TicTacTree,
    dirty_branches,
    dirty_segments,
    entry_hash,
    key_hash,
    segment_of,
)

ENTRIES = st.dictionaries(st.binary(min_size=1, max_size=12), st.integers(0, 2**64 - 1),
                          max_size=60)


def tree_of(entries: dict, size: str = "xxsmall") -> TicTacTree:
    tree = TicTacTree(size)
    tree.add(entries.items())
    return tree


@given(ENTRIES, st.randoms())
def test_a_tree_depends_on_its_entries_only_not_their_order(entries, rng):
    shuffled = list(entries.items())
    rng.shuffle(shuffled)
    other = TicTacTree("xxsmall")
    other.add(shuffled)
    assert other == tree_of(entries)


@given(ENTRIES, ENTRIES)
def test_trees_of_disjoint_sets_merge_into_the_tree_of_their_union(a, b):
    b = {k: v for k, v in b.items() if k not in a}
    assert tree_of(a).merge(tree_of(b)) == tree_of({**a, **b})


@given(ENTRIES, st.binary(min_size=1, max_size=12), st.integers(0, 2**64 - 1))
def test_removing_an_entry_undoes_its_add(entries, key, value_hash):
    entries.pop(key, None)
    tree = tree_of(entries)
    tree.add([(key, value_hash)])
    assert tree != tree_of(entries)
    tree.remove([(key, value_hash)])
    assert tree == tree_of(entries)


def test_the_dirty_segments_are_exactly_those_of_the_changed_keys():
    rng = random.Random(7)
    base = {object_key("b", f"k{i}"): rng.getrandbits(64) for i in range(5000)}
    changed = dict(base)
    touched = rng.sample(sorted(base), 12)
    for k in touched[:6]:
        changed[k] ^= 1  # another value
    for k in touched[6:]:
        del changed[k]  # gone
    a, b = tree_of(base, "small"), tree_of(changed, "small")
    segments = []
    for branch in dirty_branches(a.root(), b.root()):
        segments += dirty_segments(branch, a.branch(branch), b.branch(branch))
    assert sorted(segments) == sorted({segment_of(key_hash(k), SIZES["small"])
                                       for k in touched})


def test_keys_changed_from_one_value_to_the_same_other_never_cancel_out():
    """Many keys going from value A to value B, in a tree of 16 branches: were the entry hash
    linear in the value's hash, each would change its segment by the same amount, and pairs
    in one branch would leave the branch's hash as it was (found by bench/aae.py)."""
    keys = [object_key("b", f"k{i}") for i in range(200)]
    a, b = tree_of(dict.fromkeys(keys, 111)), tree_of(dict.fromkeys(keys, 222))
    segments = []
    for branch in dirty_branches(a.root(), b.root()):
        segments += dirty_segments(branch, a.branch(branch), b.branch(branch))
    assert set(segments) == {segment_of(key_hash(k), SIZES["xxsmall"]) for k in keys}
    one = TicTacTree("xxsmall")
    one.add([(keys[0], 111)])
    assert one.leaves[segment_of(key_hash(keys[0]), SIZES["xxsmall"])] == entry_hash(
        key_hash(keys[0]), 111)


def test_sizes_shapes_and_an_encoded_tree():
    large = TicTacTree("large")
    assert large.segments == 1 << 20 and len(large.root()) == 16 << 10
    assert len(large.leaves.tobytes()) == 4 << 20 and len(large.branch(0)) == 4 * BRANCH_WIDTH
    assert len(large.encode()) < 64 << 10  # compressed: a store's tree is mostly zeros at first
    tree = tree_of({b"x": 1, b"y": 2}, "xsmall")
    assert tree.encode()[0] == 3 and len(tree.encode()) < 64  # its two segments
    assert TicTacTree.decode(tree.encode()) == tree
    assert TicTacTree.decode(TicTacTree("large").encode()) == TicTacTree("large")
    half = TicTacTree("xsmall", np.arange(1 << 14, dtype=np.uint32) % 2)
    assert half.encode()[0] == 2 and TicTacTree.decode(half.encode()) == half
    packed = b"\x02" + b"xsmall".ljust(8, b"\0") + lz4.block.compress(tree.leaves.tobytes())
    assert TicTacTree.decode(packed) == tree  # trees saved in format 2 still load
    format_1 = b"\x01" + b"xsmall".ljust(8, b"\0") + tree.leaves.astype("<u4").tobytes()
    assert TicTacTree.decode(format_1) == tree  # trees saved before compression still load
    full = TicTacTree("small", np.random.default_rng(1).integers(0, 2**32, 1 << 16,
                                                                 dtype=np.uint32))
    encoded = full.encode()  # a full store's tree of random hashes: kept as it is
    assert encoded[0] == 1 and len(encoded) == 9 + 4 * full.segments
    assert TicTacTree.decode(encoded) == full
    with pytest.raises(lr.InvalidArgumentError):
        TicTacTree.decode(encoded[:-4])  # a segment short
    assert np.count_nonzero(TicTacTree("xxsmall").leaves) == 0
    with pytest.raises(lr.InvalidArgumentError):
        TicTacTree("huge")
    with pytest.raises(lr.InvalidArgumentError):
        tree.merge(TicTacTree("xxsmall"))
    with pytest.raises(lr.InvalidArgumentError):
        dirty_branches(tree.root(), TicTacTree("xxsmall").root())
    with pytest.raises(lr.InvalidArgumentError):
        TicTacTree.decode(b"\x09junk")
    with pytest.raises(lr.InvalidArgumentError):
        TicTacTree.decode(tree.encode()[:-3])  # damaged
    for at in ([5, 3], [3, 3], [0, 1 << 14]):  # out of order, twice, past the last segment
        sparse = np.array(at, dtype="<u4").tobytes() + np.array([1, 2], dtype="<u4").tobytes()
        with pytest.raises(lr.InvalidArgumentError):
            TicTacTree.decode(b"\x03" + b"xsmall".ljust(8, b"\0") + lz4.block.compress(sparse))


@pytest.mark.parametrize("big, small", [("small", "xsmall"), ("medium", "xsmall"),
                                        ("large", "xxsmall")])
def test_a_resized_tree_is_the_tree_made_at_that_size(big, small):
    """Runs of 4 and 16 segments are halved pairwise, of 256 reduced: both give the tree the
    same entries make at the smaller size, and its root."""
    entries = {b"k%d" % i: i * 7919 for i in range(2000)}
    resized = tree_of(entries, big).resized(small)
    assert resized == tree_of(entries, small)
    assert resized.root() == tree_of(entries, small).root()
