"""An SST's segment hints (every row's 32 bits from format version 4; each block's distinct
32 bits in version 3, 16 in version 2): a fold of a few tictac segments may skip a block only
if it holds none of their keys, and from version 4 tells a block's keys of those segments
without hashing them; files of versions 1 to 3 still read, every block kept in version 1
(no Ray)."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveled_ray import CorruptObjectError, codec
from leveled_ray.codec.tictac import SIZES, key_hash, segment_of
from leveled_ray.files import framing
from leveled_ray.files import sst as sfmt


def table_of(keys):
    rows = codec.LedgerRows()
    for i, key in enumerate(sorted(set(keys))):
        rows.add(key, i + 1, 0, 0, i, 10, 1000, b"")
    return pa.Table.from_batches([rows.to_batch()])


def hits(footer, segments, size: str):
    return footer.hits(np.asarray(sorted(segments), dtype=np.int64), SIZES[size].bit_length() - 1)


def blocks_with(footer, segments, size: str):
    return footer.blocks_with(hits(footer, segments, size))


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=24), min_size=1, max_size=400, unique=True),
       st.sampled_from(sorted(SIZES)), st.data())
def test_a_block_is_skipped_only_if_it_holds_none_of_the_segments(keys, size, data):
    sst, _ = sfmt.build_sst("s", table_of(keys), block_bytes=data.draw(st.integers(64, 2048)))
    footer, table = sfmt.read_all(sst, "s")
    segments = SIZES[size]
    segment = {k: segment_of(key_hash(k), segments) for k in keys}
    wanted = set(data.draw(st.lists(st.sampled_from(sorted(set(segment.values()))),
                                    max_size=5)))
    keep = blocks_with(footer, wanted, size)
    assert keep.shape == (footer.block_count,)
    for b in range(footer.block_count):
        lo, hi = footer.block_range(b)
        block = sfmt.decode_block(sst[lo:hi], footer.checksums[b], "s", lo)
        held = {segment[block.keys[i]] for i in range(len(block.keys))}
        if held & wanted:
            assert keep[b]  # never skipped when it holds a wanted key
        else:
            assert not keep[b]  # exact: 32-bit hints


def test_older_files_still_read_and_version_1_keeps_every_block():
    keys = [b"k%05d" % i for i in range(2000)]
    old, _ = sfmt.build_sst("s", table_of(keys), block_bytes=512, version=1)
    footer, table = sfmt.read_all(old, "s")
    assert footer.hints is None and table.num_rows == 2000
    assert blocks_with(footer, [0], "small").all()
    one = [segment_of(key_hash(keys[7]), 1 << 20)]
    # Versions 2 to 4 hashed a str name as its bytes: their hints are not used, and a fold of
    # segments reads each of their blocks, as of version 1.
    for version in (2, 3, 4):
        older, _ = sfmt.build_sst("s", table_of(keys), block_bytes=512, version=version)
        older_footer, older_table = sfmt.read_all(older, "s")
        assert older_footer.hints is None and older_table.equals(table)
        assert blocks_with(older_footer, one, "large").all()
    new, _ = sfmt.build_sst("s", table_of(keys), block_bytes=512)
    new_footer, _ = sfmt.read_all(new, "s")
    assert new_footer.hint_bits == 32 and new_footer.hints_per_row
    # One segment of a large tree is in one block.
    assert blocks_with(new_footer, one, "large").sum() == 1
    with pytest.raises(ValueError):
        sfmt.build_sst("s", table_of(keys), version=6)


def test_hints_that_do_not_match_the_blocks_are_damage():
    keys = [b"k%05d" % i for i in range(500)]
    sst, _ = sfmt.build_sst("s", table_of(keys), block_bytes=512)
    footer = sfmt.parse_footer(len(sst), sst, "s")
    doc = {"v": 5, "n": footer.entries, "tomb": 0, "kmin": footer.min_key,
           "kmax": footer.max_key, "smin": footer.min_sqn, "smax": footer.max_sqn,
           "first": footer.first_keys,
           "off": np.asarray(footer.offsets, dtype="<u8").tobytes(),
           "sum": np.asarray(footer.checksums, dtype="<u8").tobytes(),
           "bloom": footer.bloom.bits, "bk": footer.bloom.k,
           "seg": footer.hints.tobytes(), "sego": footer.hint_offsets[:-1].tobytes()}
    body = sst[:footer.offsets[-1]]
    bad = body + framing.encode_footer(sfmt.MAGIC, 5, framing.CODEC_LZ4, doc, len(body))
    with pytest.raises(CorruptObjectError, match="segment hints"):
        sfmt.parse_footer(len(bad), bad, "s")


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=24), min_size=1, max_size=400, unique=True),
       st.sampled_from(sorted(SIZES)), st.data())
def test_a_version_5_file_tells_each_rows_segment_without_hashing(keys, size, data):
    """The footer's hint of each row tells exactly the rows of the wanted segments, for any
    run of blocks."""
    sst, _ = sfmt.build_sst("s", table_of(keys), block_bytes=data.draw(st.integers(64, 2048)))
    footer, table = sfmt.read_all(sst, "s")
    blocks = sorted(data.draw(st.sets(st.integers(0, footer.block_count - 1), min_size=1)))
    rows = [key for b in blocks for key in sfmt.decode_block(
        sst[footer.block_range(b)[0]:footer.block_range(b)[1]], footer.checksums[b], "s",
        footer.block_range(b)[0]).keys]
    segment = {k: segment_of(key_hash(k), SIZES[size]) for k in keys}
    wanted = sorted(set(data.draw(st.lists(st.sampled_from(sorted(set(segment.values()))),
                                           max_size=5))))
    got = footer.rows_in(blocks, hits(footer, wanted, size))
    assert got.tolist() == [segment[k] in wanted for k in rows]


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.data())
def test_kept_rows_are_the_rows_a_filter_keeps(sizes, data):
    """Slices of the runs of kept rows, across block edges, or a filter past
    :data:`MAX_SLICES` runs: the same rows either way."""
    keys = [b"k%05d" % i for i in range(sum(sizes))]
    table = table_of(keys)
    batches, at = [], 0
    for n in sizes:
        batches.append(table.slice(at, n).combine_chunks().to_batches()[0])
        at += n
    keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=at, max_size=at)), dtype=bool)
    if data.draw(st.booleans()):  # many runs: past the slices' limit
        keep[::2], keep[1::2] = True, False
    assert sfmt.kept_rows(batches, keep).to_pylist() == table.filter(keep).to_pylist()


def test_a_fold_of_segments_returns_exactly_their_objects_across_levels(tmp_path, monkeypatch):
    """Through the public fold: objects overwritten and deleted across several SSTs and the
    Bookie's memory, under str and bytes names, however many files are read at once; bad
    segments are refused."""
    import asyncio
    import random

    import leveled_ray as lr
    from leveled_ray.actors.bookie import Bookie
    from leveled_ray.actors.remote import LocalHandle
    from leveled_ray.client.store import Store
    from leveled_ray.clock import system_clock
    from leveled_ray.codec.keys import object_key
    from leveled_ray.read import scan

    options = lr.Options(metrics_interval_s=0,
                         ledger=dict(push_keys=40, l0_max_keys=120, push_ms=5,
                                     sst_max_keys=40))
    url = f"file://{tmp_path}/db"
    rng = random.Random(7)
    names = [("b", f"k{i:03d}") for i in range(150)] + [(b"raw", b"k%03d" % i)
                                                       for i in range(50)]

    async def fill():
        bookie = Bookie(url, options, local=True)
        await bookie.start()
        store = Store(LocalHandle(bookie), options, url, None, {"head_only": None},
                      system_clock)
        for round_ in range(4):
            await store.put_many_async([lr.Put(b, k, b"v%d" % round_)
                                        for b, k in rng.sample(names, 120)])
            await store.put_many_async([lr.Delete(b, k) for b, k in rng.sample(names, 20)])
        await bookie.close()

    asyncio.run(fill())
    with lr.reader(url, options=options) as r:
        # Each object's names as written ("b" is a str bucket, b"raw" a bytes one): its tree
        # key is its Ledger key, types and all.
        every = [(b, k, head.sqn) for b, k, head in r.fold_heads()]
        # Several SSTs however the merges ran (a merge writes at most 40 entries to a file, and
        # merges may drop deleted keys: 3 to 8 files in runs).
        assert len(list((tmp_path / "db" / "ledger").glob("*.sst"))) >= 2

        def as_bytes(name):
            return name if isinstance(name, bytes) else name.encode()

        for size, at_once in (("xxsmall", 1), ("small", 2), ("large", scan.SEGMENT_FILES)):
            monkeypatch.setattr(scan, "SEGMENT_FILES", at_once)
            count = SIZES[size]
            segment = {(b, k): segment_of(key_hash(object_key(b, k)), count)
                       for b, k, _ in every}
            wanted = set(rng.sample(sorted(set(segment.values())), 6))
            got = [(row["bucket"], row["key"], row["sqn"])
                   for batch in r.fold_heads_batches(binary_names=True, segments=wanted,
                                                     tree_size=size)
                   for row in batch.to_pylist()]
            assert got == [(as_bytes(b), as_bytes(k), sqn) for b, k, sqn in every
                           if segment[(b, k)] in wanted]
            assert got
        for bad in ([-1], [1 << 20], ["3"], [True], 2.5):
            with pytest.raises(lr.InvalidArgumentError):
                r.fold_heads_batches(segments=bad)
        with pytest.raises(lr.InvalidArgumentError):
            r.fold_heads_batches(segments=[1], tree_size="huge")


@pytest.mark.parametrize("count", [10, 2_000, 20_000])
def test_a_footer_is_read_in_one_request(count):
    """The tail a reader fetches for a format 4 footer (``footer_guess``, from the entry
    count the manifest lists) covers it: the per-row hints grow it with the entries."""
    sst, _ = sfmt.build_sst("s", table_of([codec.object_key("b", f"k{i:08d}")
                                           for i in range(count)]), version=4)
    offset, _ = sfmt.footer_span(len(sst), sst[-sfmt.footer_guess(count):], "s")
    assert len(sst) - offset <= sfmt.footer_guess(count)
    if count == 20_000:
        assert len(sst) - offset > framing.FOOTER_READ  # the fixed read would not have
