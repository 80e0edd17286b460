"""Journal file: one immutable object of the Journal, covering a range of SQNs (leveled's CDB file).

Layout::

    header (52 bytes) | block | block | ... | footer | trailer

The header holds the writer epoch and the journal slot (used for fencing), and a random write
token: a writer whose create of a slot had an unknown outcome reads the header back to learn
whether the file there is its own. A block is an Arrow
IPC batch of :data:`JOURNAL_SCHEMA` rows (one row per change, in SQN order), compressed on its
own, as SST blocks are. The footer (msgpack, compressed) holds every SQN of the file, and each
block's offset, first row and checksum. Fetching one value is one ranged GET of its block once
the footer is cached; a bulk read decodes whole blocks and takes their ``value`` column as it
is, with no Python object per value.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import msgpack
import numpy as np
import pyarrow as pa

from ..errors import CorruptObjectError
from . import framing
from .framing import CODEC_LZ4, checksum, encode_block, encode_footer

MAGIC = b"LRJNL\x00\x00\x01"
#: Format 4 added the ``batch`` column; format 3 files read as if it were null.
VERSION = 4
READABLE = (3, 4)
KIND_DATA = 0
KIND_FENCE = 1
NO_SLOT = (1 << 64) - 1  # journal files written by compaction have no slot
#: Raw bytes of a block, about: one point read decodes this much.
BLOCK_BYTES = 64 << 10

# magic, version, kind, epoch, slot, write token, header checksum
_HEADER = struct.Struct("<8sHBxQQ16sQ")
HEADER_SIZE = _HEADER.size
#: The bytes that identify one write of a journal file (its header, with the write token).
IDENTITY_BYTES = HEADER_SIZE
#: Fixed bytes of one row besides its variable-length columns (for block sizing).
_FIXED_ROW = 8 + 1 + 4 + 8 + 5 * 4

#: One change per row. ``value`` is null for deletes and key deltas; ``indexes`` is null when
#: the change touches no index term, else msgpack of ``[[op, field, term], ...]``; ``batch``
#: names the cross-shard batch the change was part of (see
#: :func:`~leveled_ray.manifest.batch_tags.batch_tag`), null for any other change.
JOURNAL_SCHEMA = pa.schema([
    ("sqn", pa.uint64()), ("op", pa.uint8()), ("lkey", pa.binary()), ("value", pa.binary()),
    ("indexes", pa.binary()), ("expiry", pa.uint32()), ("extra", pa.binary()),
    ("last_modified", pa.int64()), ("batch", pa.binary()),
])
_SCHEMA_V3 = JOURNAL_SCHEMA.remove(JOURNAL_SCHEMA.get_field_index("batch"))


@dataclass(frozen=True)
class JournalRecord:
    """One change as the Journal keeps it."""

    sqn: int
    op: int
    lkey: bytes
    value: bytes | None
    indexes: tuple
    expiry: int
    extra: bytes
    last_modified: int  # unix ms
    batch: bytes | None = None


@dataclass(frozen=True)
class JournalInfo:
    """What the manifest records of a journal file."""

    name: str
    slot: int
    epoch: int
    kind: int
    size: int
    entries: int
    min_sqn: int
    max_sqn: int


@dataclass(frozen=True, eq=False)
class JournalFooter:
    epoch: int
    slot: int
    kind: int
    sqns: np.ndarray  # every SQN of the file, increasing (uint64)
    offsets: np.ndarray  # each block's offset, then the footer's
    rows: np.ndarray  # each block's first row, then the row count
    checksums: np.ndarray
    version: int = VERSION

    @property
    def block_count(self) -> int:
        return len(self.checksums)

    def positions(self, sqns) -> np.ndarray:
        """The row of each SQN in ``sqns``, or -1 where the file does not hold it."""
        sqns = np.asarray(sqns, dtype=np.uint64)
        n = len(self.sqns)
        if n and int(self.sqns[-1]) - int(self.sqns[0]) == n - 1:
            # Consecutive SQNs (most files): the row is the distance from the first.
            pos = sqns.astype(np.int64) - np.int64(self.sqns[0])
            return np.where((pos >= 0) & (pos < n) & (sqns >= self.sqns[0]), pos, -1)
        pos = np.searchsorted(self.sqns, sqns)
        held = pos < len(self.sqns)
        held[held] = self.sqns[pos[held]] == sqns[held]
        return np.where(held, pos, -1)

    def blocks_of(self, rows: np.ndarray) -> np.ndarray:
        """The block of each row."""
        return np.searchsorted(self.rows, rows, side="right") - 1

    def block_range(self, i: int) -> tuple[int, int]:
        return int(self.offsets[i]), int(self.offsets[i + 1])

    @property
    def nbytes(self) -> int:
        return self.sqns.nbytes + 24 * len(self.offsets) + 64


# --- writing ------------------------------------------------------------------------------------


def encode_header(epoch: int, slot: int, kind: int) -> bytes:
    """A header with a fresh write token."""
    body = _HEADER.pack(MAGIC, VERSION, kind, epoch, slot, os.urandom(16), 0)[: HEADER_SIZE - 8]
    return body + struct.pack("<Q", checksum(body))


def pack_indexes(indexes) -> bytes | None:
    """A change's index changes as the ``indexes`` column holds them."""
    return msgpack.packb([list(i) for i in indexes]) if indexes else None


def _record_columns(records) -> list:
    """Records as columns, their index changes packed as the ``indexes`` column holds them."""
    columns = list(zip(*records))
    columns[4] = [pack_indexes(i) for i in columns[4]]
    return columns


def _record_arrays(columns) -> list[pa.Array]:
    sqn, op, lkey, value, indexes, expiry, extra, lm, batch = columns
    return [
        pa.array(sqn, pa.uint64()), pa.array(op, pa.uint8()), pa.array(lkey, pa.binary()),
        pa.array(value, pa.binary()), pa.array(indexes, pa.binary()),
        pa.array(expiry, pa.uint32()), pa.array(extra, pa.binary()), pa.array(lm, pa.int64()),
        pa.array(batch, pa.binary()),
    ]


def records_table(records) -> pa.Table:
    """Records (each ``(sqn, op, lkey, value, indexes, expiry, extra, last_modified,
    batch)``) as a table of :data:`JOURNAL_SCHEMA`."""
    if not records:
        return JOURNAL_SCHEMA.empty_table()
    return pa.Table.from_arrays(_record_arrays(_record_columns(records)), schema=JOURNAL_SCHEMA)


#: Up to this many records, :func:`build_journal` sizes them in Python and builds their one
#: block's batch directly (100-200 microseconds): the Inker encodes such a group commit on its
#: event loop, larger ones in a thread.
SMALL_RECORDS = 32


def _small_block(records, block_bytes: int) -> tuple[pa.RecordBatch, tuple] | None:
    """A few records as one block's batch and their SQNs, or ``None`` if they need more
    than one block."""
    columns = _record_columns(records)
    size = _FIXED_ROW * len(records) + sum(
        len(v) for c in (2, 3, 4, 6, 8) for v in columns[c] if v is not None)
    if size > block_bytes:
        return None
    sqns = columns[0]
    if any(b <= a for a, b in zip(sqns, sqns[1:])):
        raise ValueError("journal records must be in increasing SQN order")
    return pa.RecordBatch.from_arrays(_record_arrays(columns), schema=JOURNAL_SCHEMA), sqns


def _block_rows(records, block_bytes: int
                ) -> tuple[pa.RecordBatch | None, np.ndarray, list[int]]:
    """Records (tuples, or a table) as one batch, their SQNs, and each block's first row
    followed by the row count."""
    if not isinstance(records, pa.Table) and 0 < len(records) <= SMALL_RECORDS:
        small = _small_block(records, block_bytes)
        if small is not None:
            return small[0], np.asarray(small[1], dtype=np.uint64), [0, len(records)]
    table = records if isinstance(records, pa.Table) else records_table(records)
    if table.schema != JOURNAL_SCHEMA:
        table = table.cast(JOURNAL_SCHEMA)
    n = table.num_rows
    if not n:
        return None, np.zeros(0, dtype=np.uint64), [0]
    batch = table.combine_chunks().to_batches()[0]
    sqns = table.column("sqn").to_numpy()
    if not np.all(sqns[1:] > sqns[:-1]):
        raise ValueError("journal records must be in increasing SQN order")
    size = np.full(n, _FIXED_ROW, dtype=np.int64)
    for column in ("lkey", "value", "indexes", "extra", "batch"):
        size += framing.binary_lengths(batch.column(column))
    return batch, sqns, framing.size_cuts(size, block_bytes) + [n]


def build_journal(name: str, epoch: int, slot: int, records, *, codec: int = CODEC_LZ4,
                  kind: int = KIND_DATA, block_bytes: int = BLOCK_BYTES
                  ) -> tuple[bytes, JournalInfo]:
    """Encode ``records`` (tuples, see :func:`records_table`, or a table of
    :data:`JOURNAL_SCHEMA`), in SQN order, as one journal file; returns its bytes and info."""
    batch, sqns, rows = _block_rows(records, block_bytes)
    n = len(sqns)
    parts = [encode_header(epoch, slot, kind)]
    offsets, sums = [HEADER_SIZE], []
    for lo, hi in zip(rows, rows[1:]):
        block = encode_block(codec, batch.slice(lo, hi - lo))
        parts.append(block)
        sums.append(checksum(block))
        offsets.append(offsets[-1] + len(block))
    parts.append(encode_footer(MAGIC, VERSION, codec, {
        "v": VERSION, "epoch": epoch, "slot": slot, "kind": kind,
        "sqn": np.ascontiguousarray(sqns, dtype="<u8").tobytes(),
        "off": np.asarray(offsets, dtype="<u8").tobytes(),
        "row": np.asarray(rows, dtype="<u8").tobytes(),
        "sum": np.asarray(sums, dtype="<u8").tobytes(),
    }, offsets[-1]))
    data = b"".join(parts)
    info = JournalInfo(name, slot, epoch, kind, len(data), n,
                       int(sqns[0]) if n else 0, int(sqns[-1]) if n else 0)
    return data, info


# --- reading ------------------------------------------------------------------------------------


def parse_header(data: bytes, path: str) -> tuple[int, int, int]:
    """``(epoch, slot, kind)`` from a journal file's first bytes."""
    if len(data) < HEADER_SIZE:
        raise CorruptObjectError(path, 0, "too short to be a journal file")
    magic, version, kind, epoch, slot, _token, hsum = _HEADER.unpack(data[:HEADER_SIZE])
    if magic != MAGIC:
        raise CorruptObjectError(path, 0, "bad journal magic")
    if version not in READABLE:
        raise CorruptObjectError(path, 0, f"unsupported journal format version {version}")
    if checksum(data[: HEADER_SIZE - 8]) != hsum:
        raise CorruptObjectError(path, 0, "journal header checksum mismatch")
    return epoch, slot, kind


def footer_span(size: int, tail: bytes, path: str) -> tuple[int, int]:
    """From the object's last bytes, where its footer is: ``(offset, length)``."""
    return framing.footer_span(MAGIC, READABLE, size, tail, path, HEADER_SIZE)


def parse_footer(size: int, tail: bytes, path: str) -> JournalFooter:
    """Parse the footer from the object's last bytes (which must cover footer and trailer)."""
    doc, foff = framing.decode_footer(MAGIC, READABLE, size, tail, path, HEADER_SIZE)
    try:
        footer = JournalFooter(
            epoch=int(doc["epoch"]), slot=int(doc["slot"]), kind=int(doc["kind"]),
            sqns=np.frombuffer(doc["sqn"], dtype="<u8"),
            offsets=np.frombuffer(doc["off"], dtype="<u8").astype(np.int64),
            rows=np.frombuffer(doc["row"], dtype="<u8").astype(np.int64),
            checksums=np.frombuffer(doc["sum"], dtype="<u8"), version=int(doc["v"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(path, foff, f"malformed footer: {exc}") from None
    blocks = footer.block_count
    # Blocks must tile [header, footer) exactly, and their rows cover every SQN, in order.
    if len(footer.offsets) != blocks + 1 or len(footer.rows) != blocks + 1:
        raise CorruptObjectError(path, foff, "block index lengths disagree")
    if footer.offsets[0] != HEADER_SIZE or footer.offsets[-1] != foff:
        raise CorruptObjectError(path, foff, "blocks do not end where the footer starts")
    if np.any(np.diff(footer.offsets) <= 0) or np.any(np.diff(footer.rows) <= 0):
        raise CorruptObjectError(path, foff, "block index is out of place")
    if footer.rows[0] != 0 or footer.rows[-1] != len(footer.sqns):
        raise CorruptObjectError(path, foff, "blocks do not cover the SQN index")
    if np.any(footer.sqns[1:] <= footer.sqns[:-1]):
        raise CorruptObjectError(path, foff, "SQN index is not increasing")
    return footer


def decode_block(raw: bytes | memoryview, footer: JournalFooter, i: int,
                 path: str) -> pa.RecordBatch:
    """Validate and decode block ``i`` (its bytes): rows of :data:`JOURNAL_SCHEMA`, holding
    exactly the SQNs the footer says."""
    return decode_blocks([raw], footer, [i], path).to_batches()[0]


def decode_blocks(raws: list, footer: JournalFooter, blocks, path: str) -> pa.Table:
    """Validate and decode blocks ``blocks`` (their bytes ``raws``) as one table of
    :data:`JOURNAL_SCHEMA`, one chunk per block, holding exactly the SQNs the footer says.
    Checked as a whole: one validation, one comparison of SQNs (per block, those were
    most of a block's cost)."""
    blocks = [int(i) for i in blocks]
    offsets, sums = footer.offsets, footer.checksums
    schema = JOURNAL_SCHEMA if footer.version >= 4 else _SCHEMA_V3
    batches = [framing.decode_block(raw, int(sums[i]), schema, path, int(offsets[i]),
                                    validate=False) for i, raw in zip(blocks, raws)]
    if schema is _SCHEMA_V3:
        batches = [pa.RecordBatch.from_arrays([*b.columns, pa.nulls(b.num_rows, pa.binary())],
                                              schema=JOURNAL_SCHEMA) for b in batches]
    table = pa.Table.from_batches(batches, JOURNAL_SCHEMA)
    try:
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException, ValueError) as exc:
        raise CorruptObjectError(path, int(offsets[blocks[0]]), f"malformed block: {exc}") \
            from None
    idx = np.asarray(blocks, dtype=np.int64)
    sizes = footer.rows[idx + 1] - footer.rows[idx]
    expected = np.concatenate([footer.sqns[footer.rows[i]:footer.rows[i + 1]]
                               for i in blocks]) if blocks else np.zeros(0, np.uint64)
    sqns = table.column("sqn")
    if not sqns.null_count and all(b.num_rows == n for b, n in zip(batches, sizes.tolist())):
        wrong = np.flatnonzero(sqns.to_numpy() != expected)
        if not len(wrong):
            return table
        at = int(np.searchsorted(np.cumsum(sizes), wrong[0], side="right"))
    else:  # a block of the wrong length, or without SQNs: the first such, for the error
        at = next(k for k, batch in enumerate(batches)
                  if batch.num_rows != sizes[k] or batch.column("sqn").null_count)
    raise CorruptObjectError(path, int(offsets[blocks[at]]),
                             "block does not hold the SQNs of its footer")


def records(batch: pa.RecordBatch, path: str) -> list[JournalRecord]:
    """The rows of a decoded block (or part of one) as records."""
    cols = [batch.column(name).to_pylist() for name in JOURNAL_SCHEMA.names]
    out = []
    for sqn, op, lkey, value, idx, expiry, extra, lm, batch in zip(*cols):
        indexes: tuple = ()
        if idx:
            try:
                indexes = tuple((int(a), str(b), c) for a, b, c in msgpack.unpackb(idx, raw=False))
            except (TypeError, ValueError, msgpack.UnpackException) as exc:
                raise CorruptObjectError(path, 0, f"SQN {sqn}: malformed index changes: "
                                                  f"{exc}") from None
        out.append(JournalRecord(sqn, op, lkey, value, indexes, expiry, extra, lm, batch))
    return out


def _blocks(data: bytes, footer: JournalFooter, first: int, path: str) -> Iterator:
    """Blocks ``first, first + 1, ...`` of a whole file held in memory, decoded."""
    view = memoryview(data)
    for i in range(first, footer.block_count):
        lo, hi = footer.block_range(i)
        yield decode_block(view[lo:hi], footer, i, path)


def read_all(data: bytes, path: str) -> tuple[tuple[int, int, int], JournalFooter,
                                              list[JournalRecord]]:
    """Validate a whole journal file held in memory: header, footer and every block."""
    header = parse_header(data, path)
    footer = parse_footer(len(data), data, path)
    if (footer.epoch, footer.slot, footer.kind) != header:
        raise CorruptObjectError(path, 0, "header and footer disagree")
    return header, footer, [r for batch in _blocks(data, footer, 0, path)
                            for r in records(batch, path)]


def iter_records(data: bytes, path: str, after_sqn: int = 0) -> Iterator[JournalRecord]:
    """Records of a whole journal file with SQN above ``after_sqn``, validated as they go."""
    parse_header(data, path)
    footer = parse_footer(len(data), data, path)
    start = int(np.searchsorted(footer.sqns, np.uint64(after_sqn), side="right"))
    if start == len(footer.sqns):
        return
    first = int(footer.blocks_of(np.array([start]))[0])
    for i, batch in enumerate(_blocks(data, footer, first, path), first):
        yield from records(batch.slice(max(0, start - int(footer.rows[i]))), path)
