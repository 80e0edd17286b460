"""Merge choice and the manifest change of a merge (pure functions, no Ray)."""

import dataclasses
import random

import pytest

from leveled_ray.files.sst import SstInfo
from leveled_ray.manifest import Manifest
from leveled_ray.manifest import levels as lv


def sst(name, lo, hi, tombstones=0):
    return SstInfo(f"ledger/{name}.sst", 100, 10, tombstones, lo, hi, 1, 10)


def test_level_sizes_grow_by_four():
    assert [lv.max_files(n) for n in (1, 2, 3)] == [4, 16, 64]


def test_l0_merges_first_with_the_overlapping_l1_files():
    levels = ((sst("l0a", b"b", b"m"), sst("l0b", b"c", b"d")),
              (sst("x", b"a", b"a"), sst("y", b"c", b"f"), sst("z", b"n", b"q")))
    job = lv.choose_work(levels, random.Random(1))
    assert job.source_level == 0 and job.target_level == 1
    assert [f.name for f in job.targets] == ["ledger/y.sst"]
    assert job.basement and not job.move_only


def test_single_l0_file_with_no_overlap_moves_down():
    levels = ((sst("l0", b"x", b"z"),), (sst("a", b"a", b"c"),))
    job = lv.choose_work(levels, random.Random(1))
    assert job.move_only


def test_nothing_to_do_within_sizes():
    levels = ((), tuple(sst(f"f{i}", bytes([i]), bytes([i])) for i in range(4)))
    assert lv.choose_work(levels, random.Random(1)) is None


def test_oversized_level_sends_one_file_down_and_knows_the_basement():
    l1 = tuple(sst(f"a{i}", bytes([10 * i]), bytes([10 * i + 5])) for i in range(5))
    l2 = (sst("b", bytes([0]), bytes([7])),)
    job = lv.choose_work(((), l1, l2), random.Random(3))
    assert job.source_level == 1 and len(job.sources) == 1
    assert job.basement  # nothing below L2
    job3 = lv.choose_work(((), l1, l2, (sst("c", b"\x00", b"\xff"),)), random.Random(3))
    assert not job3.basement


def test_deeper_levels_sometimes_pick_the_most_tombstones():
    l2 = tuple(sst(f"f{i}", bytes([i]), bytes([i]), tombstones=(50 if i == 7 else 0))
               for i in range(17))
    picks = [lv.choose_work(((), (), l2), random.Random(seed)).sources[0].name
             for seed in range(200)]
    share = picks.count("ledger/f7.sst") / len(picks)
    assert 0.15 < share < 0.45  # 25% by tombstones plus 1/17 at random


def test_apply_merge_replaces_inputs_and_keeps_levels_disjoint():
    m = Manifest.new().with_changes(writer_epoch=1, levels=(
        (sst("new", b"a", b"z"), sst("l0", b"b", b"c")),
        (sst("x", b"a", b"d"), sst("y", b"m", b"p")),
    ))
    job = lv.MergeJob(0, (m.levels[0][1],), (m.levels[1][0],), basement=True)
    out = (sst("o1", b"a", b"b"), sst("o2", b"c", b"d"))
    after = lv.apply_merge(m, 1, job, out)
    assert [f.name for f in after.levels[0]] == ["ledger/new.sst"]  # newer L0 file stays
    assert [f.name for f in after.levels[1]] == ["ledger/o1.sst", "ledger/o2.sst",
                                                 "ledger/y.sst"]
    assert [f.name for f in lv.removed_files(m, after)] == ["ledger/l0.sst", "ledger/x.sst"]
    assert lv.apply_merge(after, 1, job, out) is after  # a retried commit that had landed
    with pytest.raises(lv.StaleMergeError, match="left the manifest"):
        lv.apply_merge(after, 1, job, (sst("o3", b"a", b"b"),))
    with pytest.raises(lv.StaleMergeError, match="overlap"):
        lv.apply_merge(m, 1, job, (sst("bad", b"a", b"n"),))


def test_move_down_creates_the_next_level():
    m = Manifest.new().with_changes(writer_epoch=1, levels=((), (sst("a", b"a", b"b"),)))
    after = lv.apply_merge(m, 1, lv.MergeJob(1, m.levels[1], (), True), m.levels[1])
    assert after.levels == ((), (), m.levels[1])


def test_a_split_child_rewrites_its_inherited_files_when_no_merge_is_due():
    from leveled_ray.codec.owned import Owns

    owns = Owns("key", 0, 2048)
    own = sst("own", b"a", b"c")
    inherited = dataclasses.replace(sst("x", b"d", b"f"), name="@parent/ledger/x.sst")
    below = sst("own2", b"e", b"g")
    levels = ((), (own, inherited), (below,))
    job = lv.inherited_work(levels, owns)
    assert (job.source_level, job.sources, job.targets, job.owns) == (1, (inherited,),
                                                                       (below,), owns)
    assert not job.move_only  # an inherited file is rewritten, never just moved down
    alone = lv.MergeJob(2, (inherited,), (), True, owns)
    assert not alone.move_only and lv.MergeJob(2, (own,), (), True, owns).move_only
    assert lv.inherited_work(((), (own,), (below,)), owns) is None  # nothing inherited
    assert lv.merge_due(levels, owns) and not lv.merge_due(levels, None)  # a clerk is needed
    assert not lv.merge_due(((), (own,), (below,)), owns)
    assert lv.merge_due(((own,), (), ()), None)  # an L0 file
