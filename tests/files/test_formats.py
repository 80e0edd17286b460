"""File formats: round trips, and every flipped byte is detected (no Ray)."""

import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveled_ray import CorruptObjectError, codec
from leveled_ray.files import framing
from leveled_ray.files import journal as jfmt
from leveled_ray.files import sst as sfmt
from leveled_ray.files.framing import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, FOOTER_READ
from leveled_ray.manifest import model as mmodel
from leveled_ray.manifest.model import Checkpoint, CloneParent, Manifest

codecs = st.sampled_from([CODEC_NONE, CODEC_LZ4, CODEC_ZSTD])
entry = st.tuples(
    st.binary(min_size=1, max_size=40), st.integers(1, 2**40), st.sampled_from([0, 1]),
    st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**40),
    st.integers(0, 2**50), st.binary(max_size=30),
)


def rows_table(entries):
    rows = codec.LedgerRows()
    for e in entries:
        rows.add(*e)
    return pa.Table.from_batches([rows.to_batch()])


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(entry, min_size=1, max_size=300), codecs, st.integers(64, 4096))
def test_sst_round_trip(entries, codec_id, block_bytes):
    table = sfmt.sort_and_dedupe(rows_table(entries))
    data, info = sfmt.build_sst("ledger/x.sst", table, codec=codec_id, block_bytes=block_bytes)
    footer, back = sfmt.read_all(data, "ledger/x.sst")
    assert back.to_pylist() == table.to_pylist()
    # Newest SQN per key, one row per key.
    newest = {}
    for e in entries:
        if e[0] not in newest or e[1] > newest[e[0]][1]:
            newest[e[0]] = e
    assert info.entries == len(newest) == footer.entries
    assert info.max_sqn == max(e[1] for e in newest.values())
    for key, e in newest.items():
        i = footer.block_for(key)
        lo, hi = footer.block_range(i)
        block = sfmt.decode_block(data[lo:hi], footer.checksums[i], "x", lo)
        assert footer.bloom.may_contain(key)
        if e[1] == max(x[1] for x in entries if x[0] == key) and \
                sum(1 for x in entries if x[0] == key and x[1] == e[1]) == 1:
            assert block.get(key)[0] == e[1]


def test_sst_lookup_misses_and_bloom():
    entries = [(b"k%05d" % i, i + 1, 0, 0, i, 10, 1000, b"") for i in range(0, 2000, 2)]
    data, _ = sfmt.build_sst("s", rows_table(entries), block_bytes=512)
    footer = sfmt.parse_footer(len(data), data[-FOOTER_READ:], "s")
    assert footer.block_count > 10
    assert footer.block_for(b"a") is None and footer.block_for(b"z") is None
    false_positives = sum(footer.bloom.may_contain(b"k%05d" % i) for i in range(1, 2000, 2))
    assert false_positives < 50  # about 1% expected at 10 bits per key
    i = footer.block_for(b"k00101")
    lo, hi = footer.block_range(i)
    assert sfmt.decode_block(data[lo:hi], footer.checksums[i], "s", lo).get(b"k00101") is None


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(entry, min_size=1, max_size=200), st.lists(st.binary(min_size=1, max_size=40),
                                                           max_size=30))
def test_a_blocks_first_lookup_and_its_index_find_the_same_entries(entries, others):
    """A block's first many-key lookup joins the keys in Arrow; the next builds the index of
    every row: both find each key's entry, and nothing for a key not there."""
    table = sfmt.sort_and_dedupe(rows_table(entries))
    data, _ = sfmt.build_sst("s", table, block_bytes=1 << 20)  # one block
    footer = sfmt.parse_footer(len(data), data, "s")
    lo, hi = footer.block_range(0)
    block = sfmt.decode_block(data[lo:hi], footer.checksums[0], "s", lo)
    names = sorted(set(table.column("key").to_pylist()) | set(others))
    expected = [block.get(name) for name in names]
    assert block.lookup(names) == expected  # joined
    assert block.lookup(names) == expected  # by the index
    assert {e.sqn for e in expected if e} == set(table.column("sqn").to_pylist())


records = st.lists(
    st.tuples(st.sampled_from([0, 1, 2]), st.binary(min_size=1, max_size=30),
              st.one_of(st.none(), st.binary(max_size=300)),
              st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(["a_bin", "n_int"]),
                                 st.one_of(st.text(max_size=5), st.integers(-5, 5))),
                       max_size=3),
              st.integers(0, 2**32 - 1), st.binary(max_size=20), st.integers(0, 2**50),
              st.one_of(st.none(), st.binary(min_size=1, max_size=40))),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(records, codecs, st.integers(0, 2**40), st.sampled_from([1, 500, jfmt.BLOCK_BYTES]))
def test_journal_round_trip(recs, codec_id, first_sqn, block_bytes):
    full = [(first_sqn + i + 1, op, k, v, tuple(tuple(x) for x in idx), exp, extra, lm, batch)
            for i, (op, k, v, idx, exp, extra, lm, batch) in enumerate(recs)]
    data, info = jfmt.build_journal("journal/x.jnl", 7, 3, full, codec=codec_id,
                                    block_bytes=block_bytes)
    header, footer, back = jfmt.read_all(data, "journal/x.jnl")
    assert header == (7, 3, jfmt.KIND_DATA)
    assert [(r.sqn, r.op, r.lkey, r.value, r.indexes, r.expiry, r.extra, r.last_modified,
             r.batch) for r in back] == full
    assert info.entries == len(full)
    assert (info.min_sqn, info.max_sqn) == ((full[0][0], full[-1][0]) if full else (0, 0))
    # Every SQN is found in the block that holds it; SQNs the file lacks are not.
    sqns = [r[0] for r in full]
    rows = footer.positions(sqns + [first_sqn, first_sqn + len(full) + 1])
    assert rows.tolist() == list(range(len(full))) + [-1, -1]
    for row, blk in zip(rows[:len(full)], footer.blocks_of(rows[:len(full)])):
        lo, hi = footer.block_range(blk)
        batch = jfmt.decode_block(data[lo:hi], footer, blk, "x")
        assert batch.column("sqn")[row - footer.rows[blk]].as_py() == sqns[row]
    if block_bytes == 1:
        assert footer.block_count == len(full)  # one record per block at least
    # A few records in one block are sized and built in Python: the same file as from a table.
    again, again_info = jfmt.build_journal("journal/x.jnl", 7, 3, jfmt.records_table(full),
                                           codec=codec_id, block_bytes=block_bytes)
    assert again[jfmt.HEADER_SIZE:] == data[jfmt.HEADER_SIZE:]
    assert again_info == info


def test_a_journal_file_of_format_3_reads_with_no_batch_tags():
    """A file written before the ``batch`` column (format 3, kept as written then) reads
    whole, every change tagged with no batch; a file of an unknown format is refused."""
    data = (Path(__file__).parent / "fixtures" / "journal_v3.jnl").read_bytes()
    header, footer, back = jfmt.read_all(data, "journal/v3.jnl")
    assert header == (1, 0, jfmt.KIND_DATA) and footer.version == 3
    assert [r.sqn for r in back] == list(range(1, 21))
    assert [r.value for r in back[:3]] == [b"", None, b"vv"]
    assert back[2].indexes == ((0, "a_bin", "x"),)
    assert {r.batch for r in back} == {None} and back[-1].last_modified == 1019
    table = jfmt.decode_blocks([data[slice(*footer.block_range(0))]], footer, [0], "j")
    assert table.schema == jfmt.JOURNAL_SCHEMA and table.column("batch").null_count == 20
    future = bytearray(data)
    future[8:10] = (9).to_bytes(2, "little")  # the header's format version
    with pytest.raises(CorruptObjectError, match="version 9"):
        jfmt.read_all(bytes(future), "journal/v3.jnl")


@pytest.mark.parametrize("count", [2, 40])
def test_journal_records_out_of_order_are_refused(count):
    recs = [(count - i, 0, b"k%d" % i, b"v", (), 0, b"", 0, None) for i in range(count)]
    with pytest.raises(ValueError, match="increasing SQN"):
        jfmt.build_journal("journal/x.jnl", 1, 0, recs)


def test_journal_blocks_holding_other_sqns_than_their_footer_are_refused():
    """A block whose checksum holds but whose SQNs are not its footer's (a writer's bug) is
    refused, naming that block, whether it is read alone or among others."""
    import dataclasses

    import numpy as np

    recs = [(i + 1, 0, b"k%04d" % i, b"v" * 200, (), 0, b"", 0, None) for i in range(60)]
    data, _ = jfmt.build_journal("journal/x.jnl", 1, 0, recs, block_bytes=2000)
    footer = jfmt.parse_footer(len(data), data, "x")
    assert footer.block_count >= 3
    raws = [data[slice(*footer.block_range(i))] for i in range(footer.block_count)]
    everything = range(footer.block_count)
    assert jfmt.decode_blocks(raws, footer, everything, "x").num_rows == 60
    sqns = footer.sqns.copy()
    sqns[int(footer.rows[1])] += 1000  # block 1's first SQN
    wrong = dataclasses.replace(footer, sqns=sqns)
    for blocks in ([1], list(everything)):
        with pytest.raises(CorruptObjectError, match="SQNs of its footer") as err:
            jfmt.decode_blocks([raws[i] for i in blocks], wrong, blocks, "x")
        assert err.value.offset == int(footer.offsets[1])
    rows = footer.rows.copy()
    rows[2] += 1  # block 1 said to hold one row more, block 2 one fewer
    shifted = dataclasses.replace(footer, rows=rows)
    with pytest.raises(CorruptObjectError, match="SQNs of its footer") as err:
        jfmt.decode_blocks(raws, shifted, everything, "x")
    assert err.value.offset == int(footer.offsets[1])
    assert np.array_equal(footer.sqns, np.arange(1, 61))


def sample_manifest():
    sst = sfmt.SstInfo("ledger/a.sst", 100, 10, 1, b"a", b"z", 1, 10)
    jnl = jfmt.JournalInfo("journal/00000000000000000000.jnl", 0, 1, 0, 50, 3, 1, 3)
    return Manifest.new(head_only="no").with_changes(
        writer_epoch=3, journal=(jnl,), journal_next_slot=1, ledger_sqn=10, levels=((sst,), ()),
        checkpoints=(Checkpoint("c1", 4, None, 1.0, "nightly"),),
        parent=CloneParent("s3://b/p", "c9"), stores=(("p-id", "s3://b/p"),),
    )


def test_manifest_round_trip():
    m = sample_manifest()
    assert mmodel.decode(mmodel.encode(m, 5), "manifest/5", 5) == m
    with pytest.raises(CorruptObjectError, match="holds id 5"):
        mmodel.decode(mmodel.encode(m, 5), "manifest/6", 6)


def _objects():
    entries = [(b"key%04d" % i, i + 1, i % 2, 0, i, 100, 5, b"m") for i in range(300)]
    sst, _ = sfmt.build_sst("s", rows_table(entries), block_bytes=1024)
    full = [(i + 1, 0, b"key%d" % i, b"value" * i, (), 0, b"", 9, b"t" if i % 7 else None)
            for i in range(50)]
    jnl, _ = jfmt.build_journal("j", 1, 0, full)
    man = mmodel.encode(sample_manifest(), 5)
    return {
        "sst": (sst, lambda d: sfmt.read_all(d, "s")),
        "journal": (jnl, lambda d: jfmt.read_all(d, "j")),
        "manifest": (man, lambda d: mmodel.decode(d, "m", 5)),
    }


@pytest.mark.parametrize("kind", ["sst", "journal", "manifest"])
def test_every_flipped_byte_is_detected(kind):
    data, read = _objects()[kind]
    read(data)  # the intact object reads
    rng = random.Random(kind)
    for pos in range(len(data)):
        broken = bytearray(data)
        broken[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(CorruptObjectError):
            read(bytes(broken))


@pytest.mark.parametrize("kind", ["sst", "journal", "manifest"])
def test_truncation_is_detected(kind):
    data, read = _objects()[kind]
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(CorruptObjectError):
            read(data[:cut])


def test_declared_lengths_are_not_trusted():
    """A length field pointing far past the object fails cleanly, without a huge allocation."""
    full = [(1, 0, b"k", b"v" * 100, (), 0, b"", 9, None)]
    data, _ = jfmt.build_journal("j", 1, 0, full)
    footer = jfmt.parse_footer(len(data), data, "j")
    lo, hi = footer.block_range(0)
    block = bytearray(data[lo:hi])
    block[1:5] = (2**31).to_bytes(4, "little")  # raw_len, checksum made to match
    with pytest.raises(CorruptObjectError, match="over the limit"):
        framing.decode_block(bytes(block), framing.checksum(bytes(block)),
                             jfmt.JOURNAL_SCHEMA, "j", lo)
