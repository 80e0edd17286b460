"""Ledger SST: one immutable, sorted file of Ledger entries (leveled's ``leveled_sst``).

Layout::

    block 0 | block 1 | ... | footer | trailer

A block is ``codec u8 | raw_len u32 | payload``: an Arrow IPC record batch of
:data:`~leveled_ray.codec.LEDGER_SCHEMA` rows, compressed on its own. Its checksum sits in the
footer's block index. The footer (msgpack, compressed) holds the format version, the first key of
each block, the bloom filter, the key range, the SQN range and counts, and (from version 2)
each block's *segment hints*: the top bits of its keys' tictac key hashes (the distinct top
16 bits of each block's keys in version 2, 32 bits in version 3; from version 4 the top 32
bits of every key, in row order; :mod:`leveled_ray.codec.tictac`), so that a fold of a few
tree segments reads only the blocks that can hold them (leveled's per-block segment index),
and, from version 4, keeps their keys without hashing any. The
trailer points at the footer and holds its checksum. Once the footer is cached, a point lookup
reads one block: one ranged GET.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import LEDGER_SCHEMA, TOMBSTONE, LedgerEntry
from ..codec.tictac import HINT_BITS, hints_in_segments, hints_of, tree_key_hashes
from ..errors import CorruptObjectError
from . import framing
from .bloom import Bloom
from .framing import CODEC_LZ4, checksum, encode_block, encode_footer, size_cuts

MAGIC = b"LRSST\x00\x00\x01"
VERSION = 5
#: The versions this code reads: 1 has no segment hints (a fold of segments reads every
#: block), 2 has 16-bit ones, 3 each block's distinct 32-bit ones, 4 every row's, 5 every
#: row's under :data:`~leveled_ray.codec.tictac.TREE_KEYS` 1. The hints of versions 2 to 4
#: hashed a ``str`` name as its bytes: they are not used (such a file is read as version 1
#: is, until a merge rewrites it).
READABLE = (1, 2, 3, 4, 5)
#: Bits of a segment hint, by format version.
_HINT_BITS = {2: 16, 3: HINT_BITS, 4: HINT_BITS, 5: HINT_BITS}
#: The first version whose hints are of the tree keys used now.
_HINTS_USED_FROM = 5
#: Fixed bytes of one row besides its key and extra columns (for block sizing).
_FIXED_ROW = 8 + 1 + 4 + 8 + 8 + 8 + 8


@dataclass(frozen=True)
class SstInfo:
    """What the manifest records of an SST."""

    name: str
    size: int
    entries: int
    tombstones: int
    min_key: bytes
    max_key: bytes
    min_sqn: int
    max_sqn: int


@dataclass(frozen=True)
class SstFooter:
    entries: int
    tombstones: int
    min_key: bytes
    max_key: bytes
    min_sqn: int
    max_sqn: int
    first_keys: list
    offsets: list  # block start offsets, plus the footer offset at the end
    checksums: list
    bloom: Bloom
    hints: np.ndarray | None = None  # every block's segment hints, one after another
    hint_offsets: np.ndarray | None = None  # where each block's hints start, then their end
    hint_bits: int = 0  # of each hint
    hints_per_row: bool = False  # a hint for each row of a block, in order (version 4)

    @property
    def block_count(self) -> int:
        return len(self.first_keys)

    def hits(self, segments: np.ndarray, bits: int) -> np.ndarray | None:
        """For each of the footer's segment hints: may it be a key of ``segments`` of a
        tictac tree of ``2**bits`` segments (a bool each, found once for a file, for its
        blocks and then their rows); ``None`` for a file written before segment hints."""
        if self.hints is None:
            return None
        return hints_in_segments(self.hints, self.hint_bits, segments, bits)

    def blocks_with(self, hits: np.ndarray | None) -> np.ndarray:
        """Which blocks may hold keys of the segments of :meth:`hits`, as a bool per block:
        every block of a file written before segment hints."""
        if hits is None:
            return np.ones(self.block_count, dtype=bool)
        return np.logical_or.reduceat(hits, self.hint_offsets[:-1])

    def rows_in(self, blocks: list[int], hits: np.ndarray) -> np.ndarray:
        """For the rows of ``blocks`` (in order, one after another; a version 4 file): which
        are keys of the segments of :meth:`hits`."""
        bounds = self.hint_offsets
        return np.concatenate([hits[bounds[b]:bounds[b + 1]] for b in blocks])

    def block_spans(self, keys: list[bytes]) -> list[tuple[int, int, int]]:
        """For sorted ``keys``: ``(block, lo, hi)`` for each block that may hold some of
        them, ``keys[lo:hi]`` being those (keys before the first block are in none). Two
        searches per block found."""
        firsts, out, n = self.first_keys, [], len(keys)
        if not firsts:
            return out
        i = bisect.bisect_left(keys, firsts[0])
        while i < n:
            b = bisect.bisect_right(firsts, keys[i]) - 1
            hi = bisect.bisect_left(keys, firsts[b + 1], i) if b + 1 < len(firsts) else n
            out.append((b, i, hi))
            i = hi
        return out

    def block_for(self, key: bytes) -> int | None:
        """Index of the only block that can hold ``key``, or ``None`` when out of range."""
        if not self.first_keys or key < self.min_key or key > self.max_key:
            return None
        return bisect.bisect_right(self.first_keys, key) - 1

    def block_range(self, i: int) -> tuple[int, int]:
        return self.offsets[i], self.offsets[i + 1]

    def block_size(self, i: int) -> int:
        return self.offsets[i + 1] - self.offsets[i]

    @property
    def nbytes(self) -> int:
        hints = 0 if self.hints is None else self.hints.nbytes + self.hint_offsets.nbytes
        return (self.bloom.nbytes + sum(len(k) for k in self.first_keys)
                + 24 * len(self.offsets) + hints)


# --- writing ------------------------------------------------------------------------------------


def sort_and_dedupe(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Sort Ledger rows by key, keeping only the highest SQN of each key (newest wins)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if table.num_rows == 0:
        return table
    return first_of_each_key(table.sort_by([("key", "ascending"), ("sqn", "descending")]))


def first_of_each_key(table: pa.Table) -> pa.Table:
    """The first row of each key of ``table``, sorted by key (the one its sort put first)."""
    keys = table.column("key").combine_chunks()
    if len(keys) > 1:
        changed = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
        keep = pa.concat_arrays([pa.array([True]), changed])
        if not pc.all(keep).as_py():
            table = table.filter(keep)
    return table


def build_sst(name: str, table: pa.Table, *, codec: int = CODEC_LZ4, block_bytes: int = 32768,
              bloom_bits_per_key: int = 10, version: int = VERSION,
              tree_hashes: np.ndarray | None = None) -> tuple[bytes, SstInfo]:
    """Encode sorted, deduplicated Ledger rows as an SST; returns the object bytes and its info.
    ``version`` 1 or 2 writes an older format (for compatibility tests). ``tree_hashes`` are
    the rows' :func:`~leveled_ray.codec.tictac.tree_key_hashes` if the caller has them."""
    if version not in READABLE:
        raise ValueError(f"no SST format version {version}")
    n = table.num_rows
    if n == 0:
        raise ValueError("an SST needs at least one entry")
    table = table.cast(LEDGER_SCHEMA) if table.schema != LEDGER_SCHEMA else table
    keys = table.column("key").combine_chunks()
    key_list = keys.to_pylist()
    row_bytes = (
        pc.binary_length(keys).to_numpy().astype(np.int64)
        + pc.binary_length(table.column("extra").combine_chunks()).to_numpy().astype(np.int64)
        + _FIXED_ROW
    )
    starts = size_cuts(row_bytes, block_bytes)
    bounds = starts + [n]

    parts: list[bytes] = []
    offsets: list[int] = []
    checksums: list[int] = []
    first_keys: list[bytes] = []
    pos = 0
    for b in range(len(starts)):
        lo, hi = bounds[b], bounds[b + 1]
        block = encode_block(codec, table.slice(lo, hi - lo).combine_chunks().to_batches()[0])
        parts.append(block)
        offsets.append(pos)
        checksums.append(checksum(block))
        first_keys.append(key_list[lo])
        pos += len(block)
    footer_offset = pos
    offsets.append(footer_offset)
    hint_doc = {}
    if version >= 2:
        if tree_hashes is None:
            tree_hashes = tree_key_hashes(key_list)
        hints = hints_of(tree_hashes) >> (HINT_BITS - _HINT_BITS[version])
        if version < 4:
            per_block = [np.unique(hints[bounds[b]:bounds[b + 1]]) for b in range(len(starts))]
            dtype = "<u2" if version == 2 else "<u4"
            hint_doc = {"seg": np.concatenate(per_block).astype(dtype).tobytes(),
                        "sego": np.cumsum([0] + [len(h) for h in per_block]).astype(
                            "<u4").tobytes()}
        else:  # every row's, so that a fold of segments need not hash the keys it reads
            hint_doc = {"seg": hints.astype("<u4").tobytes(),
                        "sego": np.asarray(bounds, dtype="<u4").tobytes()}

    sqns = table.column("sqn")
    tombstones = pc.sum(pc.equal(table.column("status"), TOMBSTONE)).as_py() or 0
    bloom = Bloom.build(key_list, n, bloom_bits_per_key)
    min_key, max_key = key_list[0], key_list[-1]
    min_sqn, max_sqn = pc.min(sqns).as_py(), pc.max(sqns).as_py()
    doc = {
        "v": version, "n": n, "tomb": tombstones, "kmin": min_key, "kmax": max_key,
        "smin": min_sqn, "smax": max_sqn, "first": first_keys,
        "off": np.asarray(offsets, dtype="<u8").tobytes(),
        "sum": np.asarray(checksums, dtype="<u8").tobytes(),
        "bloom": bloom.bits, "bk": bloom.k, **hint_doc,
    }
    data = b"".join(parts) + encode_footer(MAGIC, version, codec, doc, footer_offset)
    info = SstInfo(name, len(data), n, tombstones, min_key, max_key, min_sqn, max_sqn)
    return data, info


# --- reading ------------------------------------------------------------------------------------


#: Bytes of footer per entry, about, in a format 4 SST: a 4-byte segment hint, and its
#: share of the bloom filter.
FOOTER_BYTES_PER_ENTRY = 6


def footer_guess(entries: int) -> int:
    """Bytes to read from the end of an SST of ``entries`` entries to have its footer in
    one request: a format 4 footer grows with its entries (a 35 000-entry file's is 186 KB),
    and a second request costs more than the bytes read past it."""
    return framing.FOOTER_READ + FOOTER_BYTES_PER_ENTRY * entries


def footer_span(size: int, tail: bytes, path: str) -> tuple[int, int]:
    """From the object's last bytes, where its footer is: ``(offset, length)``."""
    return framing.footer_span(MAGIC, READABLE, size, tail, path)


def parse_footer(size: int, tail: bytes, path: str) -> SstFooter:
    """Parse the footer from the object's last bytes (which must cover footer and trailer)."""
    doc, foff = framing.decode_footer(MAGIC, READABLE, size, tail, path)
    try:
        offsets = np.frombuffer(doc["off"], dtype="<u8").tolist()
        checksums = np.frombuffer(doc["sum"], dtype="<u8").tolist()
        first = doc["first"]
        footer = SstFooter(
            entries=int(doc["n"]), tombstones=int(doc["tomb"]), min_key=doc["kmin"],
            max_key=doc["kmax"], min_sqn=int(doc["smin"]), max_sqn=int(doc["smax"]),
            first_keys=first, offsets=offsets, checksums=checksums,
            bloom=Bloom(doc["bloom"], int(doc["bk"])),
            **_hints(doc),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(path, foff, f"malformed footer: {exc}") from None
    blocks = len(first)
    if footer.hints is not None:
        bounds = footer.hint_offsets
        if (len(bounds) != blocks + 1 or bounds[0] != 0 or bounds[-1] != len(footer.hints)
                or np.any(np.diff(bounds.astype(np.int64)) < 1)
                or footer.hints_per_row and len(footer.hints) != footer.entries):
            raise CorruptObjectError(path, foff, "segment hints do not match the blocks")
    if blocks == 0 or len(offsets) != blocks + 1 or len(checksums) != blocks:
        raise CorruptObjectError(path, foff, "block index lengths disagree")
    if offsets[0] != 0 or offsets[-1] != foff or any(
        offsets[i] >= offsets[i + 1] for i in range(blocks)
    ):
        raise CorruptObjectError(path, foff, "block offsets do not tile the data region")
    if not all(isinstance(k, bytes) for k in first) or first != sorted(first):
        raise CorruptObjectError(path, foff, "block first keys are not sorted bytes")
    return footer


def _hints(doc: dict) -> dict:
    """The segment hints of a footer document (none in version 1; those of versions 2 to 4
    are not used: see :data:`READABLE`)."""
    if doc["v"] < _HINTS_USED_FROM:
        return {}
    return {"hints": np.frombuffer(doc["seg"], dtype="<u4"),
            "hint_offsets": np.frombuffer(doc["sego"], dtype="<u4"),
            "hint_bits": _HINT_BITS[doc["v"]], "hints_per_row": True}


class BlockKeys:
    """Sorted keys of a decoded block, indexable without converting the whole column."""

    __slots__ = ("off", "data")

    def __init__(self, arr: pa.Array):
        bufs = arr.buffers()
        off = np.frombuffer(bufs[1], dtype=np.int32, count=arr.offset + len(arr) + 1)
        self.off = off[arr.offset :].tolist()
        self.data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, i: int) -> bytes:
        return bytes(self.data[self.off[i] : self.off[i + 1]])

    def find(self, key: bytes) -> int | None:
        i = bisect.bisect_left(self, key)
        if i < len(self) and self[i] == key:
            return i
        return None


class Block:
    """A decoded block: its Arrow batch plus numpy views for row access."""

    __slots__ = ("batch", "keys", "cols", "nbytes", "_index", "_joined")

    def __init__(self, batch: pa.RecordBatch):
        self.batch = batch
        self.keys = BlockKeys(batch.column(0))
        self.cols = [batch.column(i).to_numpy(zero_copy_only=False) for i in range(1, 7)]
        # Room for the entry index that many-key lookups build: a key object, an entry and
        # a slot per row, about three times the block.
        self.nbytes = 3 * batch.nbytes + 200 * len(self.keys)
        self._index: dict[bytes, LedgerEntry] | None = None
        self._joined = False  # a many-key lookup has run without the index

    def lookup(self, names: list[bytes]) -> list[LedgerEntry | None]:
        """The entries of ``names`` (``None`` where absent). The first many-key lookup of a
        block joins the names against its keys in Arrow and makes entries of the rows found
        only: a block read for one lookup (a flush's, of the entries its keys had) never
        pays for an entry of every row. A second builds the index of every row (key ->
        entry), so a block read again and again costs a dict probe a key."""
        if self._index is None and not self._joined:
            self._joined = True
            at = pc.index_in(pa.array(names, pa.binary()), value_set=self.batch.column(0))
            rows = at.fill_null(-1).to_numpy()
            hit = np.flatnonzero(rows >= 0)
            taken = rows[hit]
            out: list[LedgerEntry | None] = [None] * len(names)
            for i, entry in zip(hit.tolist(), self._entries(taken)):
                out[i] = entry
            return out
        self.build_index()
        return list(map(self._index.get, names))  # type: ignore[union-attr]

    def build_index(self) -> None:
        """Build the index of every row now (what a second many-key lookup builds)."""
        if self._index is None:
            self._index = dict(zip(self.batch.column(0).to_pylist(), self._entries(None)))

    def _entries(self, rows: np.ndarray | None):
        """Entries of ``rows`` (every row for ``None``), in order."""
        cols = [(c if rows is None else c[rows]).tolist() for c in self.cols]
        extra = self.batch.column(7)
        cols.append((extra if rows is None else extra.take(rows)).to_pylist())
        return map(functools.partial(tuple.__new__, LedgerEntry), zip(*cols))

    def entry(self, i: int) -> LedgerEntry:
        """The Ledger entry of row ``i``."""
        sqn, status, expiry, vhash, size, lm = (int(c[i]) for c in self.cols)
        return LedgerEntry(sqn, status, expiry, vhash, size, lm, self.batch.column(7)[i].as_py())

    def get(self, key: bytes) -> LedgerEntry | None:
        i = self.keys.find(key)
        return None if i is None else self.entry(i)


def decode_block(raw_block: bytes, expected_sum: int, path: str, offset: int) -> Block:
    """Validate and decode one block read from ``offset``."""
    return Block(decode_batch(raw_block, expected_sum, path, offset))


def decode_batch(raw_block: bytes, expected_sum: int, path: str,
                 offset: int) -> pa.RecordBatch:
    """Validate and decode one block read from ``offset``, as an Arrow batch (for scans)."""
    return framing.decode_block(raw_block, expected_sum, LEDGER_SCHEMA, path, offset)


def decode_blocks(raw: bytes, footer: SstFooter, first: int, path: str) -> list[pa.RecordBatch]:
    """Decode consecutive blocks ``first, first + 1, ...`` read in one range starting at
    block ``first``'s offset."""
    base = footer.offsets[first]
    out, i = [], first
    while base + len(raw) > footer.offsets[i]:
        lo, hi = footer.block_range(i)
        out.append(decode_batch(raw[lo - base : hi - base], footer.checksums[i], path, lo))
        i += 1
    return out


def block_span(footer: SstFooter, lo: bytes, hi: bytes) -> tuple[int, int]:
    """The blocks that may hold keys in ``[lo, hi)``: ``(first, end)``, ``end`` exclusive."""
    if hi <= footer.min_key or lo > footer.max_key:
        return 0, 0
    return (max(0, bisect.bisect_right(footer.first_keys, lo) - 1),
            bisect.bisect_left(footer.first_keys, hi))


#: Runs of rows :func:`kept_rows` slices out at most; beyond, it filters.
MAX_SLICES = 64


def kept_rows(batches: list[pa.RecordBatch], keep: np.ndarray) -> pa.Table:
    """The rows of ``batches`` (one after another) that ``keep`` marks. A fold of a few tictac
    segments keeps a few rows of many: a zero-copy slice of each run of them costs a fifth of
    a filter of every column."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], keep.view(np.int8), [0]))))
    if len(edges) > 2 * MAX_SLICES:
        return pa.Table.from_batches(batches, LEDGER_SCHEMA).filter(keep)
    bounds = np.cumsum([0] + [b.num_rows for b in batches]).tolist()
    out = []
    for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist()):
        b = bisect.bisect_right(bounds, lo) - 1
        while lo < hi:  # a run may go on into the next block
            end = min(hi, bounds[b + 1])
            out.append(batches[b].slice(lo - bounds[b], end - lo))
            lo, b = end, b + 1
    return pa.Table.from_batches(out, LEDGER_SCHEMA)


def read_all(data: bytes, path: str) -> tuple[SstFooter, pa.Table]:
    """Validate a whole SST held in memory; returns its footer and all its rows."""
    footer = parse_footer(len(data), data, path)
    batches = []
    for i in range(footer.block_count):
        lo, hi = footer.block_range(i)
        batches.append(decode_block(data[lo:hi], footer.checksums[i], path, lo).batch)
    table = pa.Table.from_batches(batches, schema=LEDGER_SCHEMA)
    if table.num_rows != footer.entries:
        raise CorruptObjectError(path, 0, "entry count does not match the footer")
    return footer, table
