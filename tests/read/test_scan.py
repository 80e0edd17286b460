"""Range scans and key ranges (pure, no Ray): the windowed merge against a dict model, the
half-open ranges of folds and index queries, and the bulk decoding of object keys."""

import asyncio
import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.codec import (
    ACTIVE,
    TOMBSTONE,
    LedgerRows,
    encode_key,
    index_key,
    object_key,
    split_object_key,
)
from leveled_ray.codec.name_text import name_text
from leveled_ray.errors import InvalidArgumentError
from leveled_ray.files.sst import build_sst, sort_and_dedupe
from leveled_ray.files.store import ObjectStore
from leveled_ray.options import Options
from leveled_ray.read import scan as scan_mod
from leveled_ray.read.key_ranges import Names, index_range, object_range
from leveled_ray.read.point_in_time import PointInTime
from leveled_ray.read.views import LedgerFiles

NOW = 2_000_000_000


def rows_table(entries):
    rows = LedgerRows()
    for key, sqn, status, expiry in entries:
        rows.add(key, sqn, status, expiry, 0, 1, 0, b"")
    return sort_and_dedupe(rows.to_batch())


def build_view(tmp_path, rng):
    """A point in time with an overlay, three L0 files and two levels of random keys."""
    store = ObjectStore.from_url(f"file://{tmp_path}")
    keys = [object_key(rng.choice(["a", "b", b"\x00z"]), f"k{rng.randrange(300):03d}")
            for _ in range(900)]
    sqn = 0
    sources = []
    for _ in range(6):
        chosen, entries = set(rng.sample(keys, 150)), []
        for key in chosen:
            sqn += 1
            status = TOMBSTONE if rng.random() < 0.2 else ACTIVE
            expiry = rng.choice([0, 0, 0, NOW - 5, NOW + 5])
            entries.append((key, sqn, status, expiry))
        sources.append(rows_table(entries))
    overlay, l0, levels = sources[0], sources[1:4], sources[4:]

    def sst(table):
        data, info = build_sst(f"ledger/{random.random()}.sst", table, block_bytes=128)
        store.put(info.name, data)
        return info

    def run(table, n):  # non-overlapping files of one level
        step = -(-table.num_rows // n)
        return tuple(sst(table.slice(i, step)) for i in range(0, table.num_rows, step))

    files = LedgerFiles(1, (tuple(sst(t) for t in l0), *(run(t, 3) for t in levels)), 0)
    view = PointInTime(store.url, Options(), files, [], overlay.to_batches(), sqn, store=store)
    newest = {}
    for table in sources:
        for key, s, status, expiry in zip(*(table.column(c).to_pylist() for c in
                                            ("key", "sqn", "status", "expiry"))):
            if key not in newest or newest[key][0] < s:
                newest[key] = (s, status, expiry)
    return view, newest


async def collect(view, lo, hi, live=True):
    out = []
    async for table in scan_mod.scan(view, lo, hi, now_s=NOW, live=live):
        out += zip(table.column("key").to_pylist(), table.column("sqn").to_pylist())
    return out


@pytest.mark.parametrize("seed", range(4))
def test_scan_matches_a_model(tmp_path, monkeypatch, seed):
    monkeypatch.setattr(scan_mod, "READ_BYTES", 300)  # many reads per file
    monkeypatch.setattr(scan_mod, "FIRST_READ_BYTES", 100)
    monkeypatch.setattr(scan_mod, "OVERLAY_ROWS", 7)
    rng = random.Random(seed)
    view, newest = build_view(tmp_path, rng)
    bounds = sorted(newest)
    for _ in range(6):
        lo, hi = sorted(rng.sample(bounds, 2))
        got = asyncio.run(collect(view, lo, hi))
        want = [(k, s) for k, (s, status, expiry) in sorted(newest.items())
                if lo <= k < hi and status == ACTIVE and (expiry == 0 or expiry > NOW)]
        assert got == want
    everything = asyncio.run(collect(view, b"", b"\xff", live=False))
    assert everything == [(k, s) for k, (s, _, _) in sorted(newest.items())]


def test_closing_a_scan_early_stops_its_reads(tmp_path):
    view, _ = build_view(tmp_path, random.Random(9))

    async def first_then_close():
        it = scan_mod.scan(view, b"", b"\xff")
        first = await it.__anext__()
        await it.aclose()
        return first, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    first, pending = asyncio.run(first_then_close())
    assert first.num_rows > 0 and pending == []


def test_object_ranges_include_both_ends_and_nothing_else():
    keys = sorted(object_key(b, k) for b in ("a", "ab", b"a") for k in
                  ("", "k", "k\x00", "k1", "l", b"k") if k)
    lo, hi = object_range("a", "k", "k1")
    inside = [split_object_key(k) for k in keys if lo <= k < hi]
    assert inside == [("a", "k"), ("a", "k\x00"), ("a", "k1")]
    lo, hi = object_range("a")
    assert {split_object_key(k)[0] for k in keys if lo <= k < hi} == {"a"}
    lo, hi = object_range()
    assert all(lo <= k < hi for k in keys) and not lo <= index_key("a", "f_bin", "x", "k") < hi
    with pytest.raises(InvalidArgumentError):
        object_range(None, "k")


def test_index_ranges_cover_terms_inclusively_and_continue_after_a_key():
    entries = sorted(index_key("b", "f_bin", t, k) for t in ("a", "ab", "b", "b\x00", "c")
                     for k in ("k1", "k2"))
    lo, hi = index_range("b", "f_bin", "ab", "b")
    assert [k for k in entries if lo <= k < hi] == [
        index_key("b", "f_bin", t, k) for t in ("ab", "b") for k in ("k1", "k2")]
    lo, hi = index_range("b", "f_bin", "ab", "b", start_key="k1")
    assert [k for k in entries if lo <= k < hi][0] == index_key("b", "f_bin", "ab", "k2")
    ints = sorted(index_key("b", "n_int", t, "k") for t in (-5, 0, 3, 2**40))
    lo, hi = index_range("b", "n_int", -5, 3)
    assert sum(lo <= k < hi for k in ints) == 3
    for bad in [("b", "n_int", "1", "2"), ("b", "f_bin", 1, 2), ("b", "f", "a", "b")]:
        with pytest.raises(InvalidArgumentError):
            index_range(*bad)


def test_names_decode_in_bulk_like_one_by_one():
    names = [("a", "k"), (b"raw", "k2"), ("b\x00c", b"\x00\x01"), ("\u00e9t\u00e9", "cl\u00e9")]
    lkeys = [object_key(b, k) for b, k in names]
    fast = Names(pa.array(lkeys[::3], pa.binary()))  # no escaped zero bytes: vectorized
    assert list(zip(*fast.python())) == names[::3]
    slow = Names(pa.array(lkeys, pa.binary()))
    assert list(zip(*slow.python())) == names
    sliced = Names(pa.array(lkeys, pa.binary()).slice(1, 1))
    assert list(zip(*sliced.python())) == [names[1]]
    buckets, keys = Names(pa.array([lkeys[0], lkeys[3]], pa.binary())).arrow(binary=False)
    assert buckets.to_pylist() == ["a", "\u00e9t\u00e9"] and keys.type == pa.string()
    # Bytes names in their text form, whatever their bytes: one-to-one with the names.
    buckets, keys = Names(pa.array(lkeys, pa.binary())).arrow(binary=False)
    assert buckets.to_pylist() == ["a", "hex:726177", "b\x00c", "\u00e9t\u00e9"]
    assert keys.to_pylist() == ["k", "k2", "hex:0001", "cl\u00e9"]
    buckets, keys = Names(pa.array([object_key(b"\xff", "k"), object_key("b", b"k"),
                                    object_key("b", "k")], pa.binary())).arrow(binary=False)
    assert buckets.to_pylist() == ["hex:ff", "b", "b"]
    assert keys.to_pylist() == ["k", "hex:6b", "k"]
    assert encode_key(b"o", "a") < lkeys[0]


_NAME_PART = st.one_of(st.text(alphabet="ab\x00\xff\u00e9", min_size=1, max_size=3),
                       st.binary(min_size=1, max_size=3))


@settings(max_examples=200, deadline=None)
@given(bucket=_NAME_PART, keys=st.lists(_NAME_PART, min_size=1, max_size=8),
       others=st.lists(st.tuples(_NAME_PART, _NAME_PART), max_size=2), at=st.integers(0, 8))
def test_names_of_one_bucket_or_many_decode_like_one_by_one(bucket, keys, others, at):
    """Batches of one bucket (the fast path) and batches that leave it: a zero byte in a
    key, a key of the other type, another bucket."""
    names = [(bucket, k) for k in keys]
    names[at % len(names):at % len(names)] = others
    decoded = Names(pa.array([object_key(b, k) for b, k in names], pa.binary()))
    assert list(zip(*decoded.python())) == names
    buckets, keys_out = decoded.arrow(binary=True)
    as_bytes = [(b.encode() if isinstance(b, str) else b, k.encode() if isinstance(k, str)
                 else k) for b, k in names]
    assert list(zip(buckets.to_pylist(), keys_out.to_pylist())) == as_bytes
    buckets, keys_out = decoded.arrow(binary=False)
    assert list(zip(buckets.to_pylist(), keys_out.to_pylist())) == [
        (name_text(b), name_text(k)) for b, k in names]
