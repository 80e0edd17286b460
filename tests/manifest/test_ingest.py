"""Bulk ingestion: where a bulk write's SSTs go, and the manifest change (pure, no Ray)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.errors import FencedError
from leveled_ray.files.journal import KIND_DATA, NO_SLOT, JournalInfo
from leveled_ray.files.sst import SstInfo
from leveled_ray.manifest import Manifest
from leveled_ray.manifest import ingest as ig
from leveled_ray.manifest.levels import check_level
from leveled_ray.manifest.model import decode, encode


def sst(name, lo, hi, min_sqn=1, max_sqn=10):
    return SstInfo(f"ledger/{name}.sst", 100, 10, 0, lo, hi, min_sqn, max_sqn)


def jnl(name, min_sqn, max_sqn):
    return JournalInfo(f"journal/c/{name}.jnl", NO_SLOT, 0, KIND_DATA, 100,
                       max_sqn - min_sqn + 1, min_sqn, max_sqn)


def level_of(levels, name):
    return next(n for n, level in enumerate(levels) for f in level
                if f.name.endswith(f"/{name}.sst"))


NEW = dict(min_sqn=1000, max_sqn=1100)


def test_an_empty_store_takes_the_files_at_the_level_that_fits_them():
    files = tuple(sst(f"n{i}", bytes([65 + i]), bytes([65 + i]), **NEW) for i in range(5))
    levels = ig.place(((),), files)
    assert levels[0] == () and levels[1] == ()
    assert [f.name for f in levels[2]] == [f.name for f in files]  # 5 files: L2 holds 16


def test_a_file_goes_just_above_the_first_level_it_overlaps():
    levels = ((), (sst("a", b"a", b"c"),), (sst("b", b"m", b"p"),), (sst("c", b"x", b"z"),))
    placed = ig.place(levels, (sst("over_l2", b"n", b"o", **NEW),
                               sst("over_l1", b"b", b"b", min_sqn=1200, max_sqn=1300),
                               sst("free", b"f", b"g", min_sqn=1400, max_sqn=1500)))
    assert level_of(placed, "over_l2") == 1
    assert level_of(placed, "over_l1") == 0
    assert level_of(placed, "free") == 3  # overlaps nothing: the deepest level
    for n, level in enumerate(placed):
        check_level(level, n)


def test_newer_files_of_one_write_land_above_older_ones_they_overlap():
    older = sst("older", b"a", b"m", min_sqn=1000, max_sqn=1010)
    newer = sst("newer", b"k", b"z", min_sqn=2000, max_sqn=2010)
    newest = sst("newest", b"l", b"l", min_sqn=3000, max_sqn=3010)
    placed = ig.place(((),), (newest, newer, older))
    read_order = [f.name.split("/")[1] for level in placed for f in level]
    assert read_order == ["newest.sst", "newer.sst", "older.sst"]
    assert level_of(placed, "older") == 1 and level_of(placed, "newest") == 0


def test_l0_stays_newest_first():
    levels = ((sst("l0", b"a", b"z"),),)
    placed = ig.place(levels, (sst("x", b"b", b"c", **NEW),
                               sst("y", b"b", b"d", min_sqn=2000, max_sqn=2001)))
    assert [f.name.split("/")[1] for f in placed[0]] == ["y.sst", "x.sst", "l0.sst"]


@st.composite
def ledgers(draw):
    """Valid levels (deeper levels hold older SQNs) and a bulk write's files (newer)."""
    levels, sqn = [], 10_000
    for n in range(draw(st.integers(1, 4))):
        keys = sorted(draw(st.sets(st.integers(0, 60), max_size=8)))
        files = []
        if n == 0:
            for i in range(0, len(keys) - 1, 2):
                files.append(sst(f"l0_{i}", bytes([keys[i]]), bytes([keys[i + 1]]),
                                 sqn - 10, sqn))
                sqn -= 20
        else:
            for i in range(0, len(keys) - 1, 2):
                files.append(sst(f"l{n}_{i}", bytes([keys[i]]), bytes([keys[i + 1]]),
                                 sqn - 10, sqn))
            sqn -= 20
        levels.append(tuple(files))
    new = []
    for p in range(draw(st.integers(1, 6))):
        lo = draw(st.integers(0, 60))
        hi = draw(st.integers(lo, 60))
        new.append(sst(f"new{p}", bytes([lo]), bytes([hi]), 20_000 + p * 100,
                       20_000 + p * 100 + 50))
    return tuple(levels), tuple(new)


@settings(max_examples=300, deadline=None)
@given(ledgers())
def test_placement_keeps_every_overlap_newest_on_top(case):
    levels, new = case
    placed = ig.place(levels, new)
    assert sorted(f.name for lv in placed for f in lv) == sorted(
        f.name for lv in levels + (new,) for f in lv)
    order = []  # files in read order: L0 front to back, then each deeper level
    for n, level in enumerate(placed):
        check_level(level, n)
        order.extend(level)
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if a.min_key <= b.max_key and b.min_key <= a.max_key and (
                    a.name.startswith("ledger/new") or b.name.startswith("ledger/new")):
                assert a.min_sqn > b.max_sqn, (a, b)


def manifest(**changes):
    base = Manifest(store_id="s", writer_epoch=3, ledger_sqn=50,
                    journal=(jnl("old", 1, 50),), levels=((), (sst("a", b"a", b"c", 1, 50),)))
    return base.with_changes(**changes)


def test_ingest_installs_every_file_and_moves_the_persisted_sqn():
    j = (jnl("p1", 2000, 2010), jnl("p0", 1000, 1010))
    s = (sst("x", b"x", b"y", 1000, 1010), sst("b", b"b", b"b", 2000, 2010))
    m = ig.ingest(manifest(), 3, j, s)
    assert m.ledger_sqn == 2010
    assert [f.name for f in m.journal][1:] == ["journal/c/p0.jnl", "journal/c/p1.jnl"]
    assert {f.name for f in m.sst_files()} >= {"ledger/x.sst", "ledger/b.sst"}
    assert ig.ingest(m, 3, j, s) is m  # installing twice changes nothing


def test_a_streaming_batch_is_installed_once_however_often_it_is_sent():
    first = (jnl("p0", 1000, 1010),), (sst("x", b"x", b"y", 1000, 1010),)
    m = ig.ingest(manifest(), 3, *first, ("query-a", 7))
    assert m.stream_batches == (("query-a", 7),) and ig.applied(m, ("query-a", 7))
    again = (jnl("p9", 2000, 2010),), (sst("z", b"x", b"y", 2000, 2010),)  # a retry's files
    assert ig.ingest(m, 3, *again, ("query-a", 7)) is m
    assert ig.ingest(m, 3, *again, ("query-a", 6)) is m  # an older batch too
    other = ig.ingest(m, 3, *again, ("query-b", 7))  # another writer's batch 7 is its own
    assert dict(other.stream_batches) == {"query-a": 7, "query-b": 7}
    assert ig.ingest(other, 3, (jnl("p8", 3000, 3001),), (), ("query-a", 8)).stream_batches[
        -1] == ("query-a", 8)
    back = decode(encode(other, 9), "m", 9)
    assert back.stream_batches == other.stream_batches


def test_ingest_refuses_when_the_store_got_past_the_window_or_is_behind():
    j, s = (jnl("p0", 40, 60),), (sst("x", b"x", b"y", 40, 60),)
    with pytest.raises(ig.IngestConflictError, match="reached SQN 50"):
        ig.ingest(manifest(), 3, j, s)
    behind = manifest(journal=(jnl("old", 1, 80),))
    with pytest.raises(ig.IngestConflictError, match="not in the Ledger yet"):
        ig.ingest(behind, 3, (jnl("p0", 100, 110),), ())
    with pytest.raises(ig.IngestConflictError, match="outside"):
        ig.ingest(manifest(), 3, (jnl("p0", 100, 110),), (sst("x", b"x", b"y", 100, 120),))
    with pytest.raises(FencedError):
        ig.ingest(manifest(), 2, (jnl("p0", 100, 110),), ())


def test_windows_are_disjoint_and_bounded():
    base = ig.reserve_base(123)
    assert base > 123 + ig.SQN_GAP
    w0, w1 = ig.partition_window(base, 0), ig.partition_window(base, 1)
    assert w0.stop == w1.start and len(w0) == ig.PARTITION_SQNS
    assert ig.reserve_base(123, reserved_upto=base + ig.WINDOW_SQNS) > base + ig.WINDOW_SQNS
    with pytest.raises(ig.IngestConflictError, match="partitions"):
        ig.partition_window(base, ig.MAX_PARTITIONS)
    with pytest.raises(ig.IngestConflictError, match="used up"):
        ig.reserve_base(ig.MAX_SQN - ig.WINDOW_SQNS)


def test_bulk_parts_below_a_write_are_settled_first_lowest_first():
    """Before a bulk write goes in, a shard settles the held bulk parts whose windows lie
    below it (they could never go in after it); parts of put_many and higher parts wait."""
    from leveled_ray.manifest.txn_records import Part, settle_before

    def bulk_part(first):
        return Part("file:///root", files=((jnl(f"j{first}", first, first + 9),), ()))

    parts = {"high": bulk_part(3000), "low": bulk_part(1000), "mid": bulk_part(2000),
             "txn": Part("file:///root", changes=("c",), values=(b"v",))}
    assert parts["txn"].first_sqn is None and parts["mid"].first_sqn == 2000
    assert settle_before(parts, 2500) == ["low", "mid"]
    assert settle_before(parts, 3000) == ["low", "mid"]
    assert settle_before(parts, 1000) == []
    assert settle_before({}, 5) == []


def test_a_write_below_an_sqn_the_store_gave_out_is_refused_saying_run_it_again():
    ig.check_install_order([jnl("a", 100, 200)], 100)  # nothing above it yet
    with pytest.raises(ig.IngestConflictError, match="run it again"):
        ig.check_install_order([jnl("a", 100, 200)], 101)


def test_a_part_below_a_write_being_installed_is_refused():
    """Once a shard has begun installing a bulk write (settling the parts below it), a part
    from below that write is refused: prepared after the settling, it could never go in."""
    ig.check_install_order([jnl("a", 100, 200)], 50, installing=100)
    with pytest.raises(ig.IngestConflictError, match="being installed first"):
        ig.check_install_order([jnl("a", 100, 200)], 50, installing=101)


def test_a_found_part_is_applied_already_when_a_key_was_written_since_its_prepare():
    from leveled_ray.manifest.txn_records import Part, applied_already

    part = Part("file:///root", changes=("c1", "c2"), values=(b"a", b"b"), after=100)
    assert applied_already(part, [None, 100])  # its own group, at or above its prepare
    assert not applied_already(part, [99, None])  # older entries only: not applied yet
    assert not applied_already(Part("file:///root", changes=("c",), values=(b"a",)), [500])


def test_a_found_bulk_part_is_installed_already_once_the_store_gave_out_sqns_above_it():
    from leveled_ray.manifest.txn_records import Part, installed_already

    part = Part("file:///root", files=((jnl("a", 100, 200),), ()))
    assert not installed_already(part, 100)  # a fresh part: the store is below its window
    assert installed_already(part, 101)  # its window was given out: settled in order before
    assert not installed_already(Part("file:///root", changes=("c",), values=(b"a",)), 500)
