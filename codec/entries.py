"""Ledger entries: their Arrow schema, the columns being built (:class:`LedgerRows`), the
packed ``extra`` column, and the :class:`Head` a reader sees.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import msgpack
import pyarrow as pa

from .changes import OP_DELETE, OP_PUT, value_hash
from .keys import index_key, split_object_key

#: Ledger entry status.
ACTIVE = 0


TOMBSTONE = 1


PACKED_EXTRA = b"\x01"  # JSON metadata starts with "{": the first byte tells them apart


#: One Ledger entry per row, sorted by ``key`` (then ``sqn`` descending) inside SSTs.
LEDGER_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("sqn", pa.uint64(), nullable=False),
        pa.field("status", pa.uint8(), nullable=False),
        pa.field("expiry", pa.uint32(), nullable=False),  # unix seconds, 0 = never
        pa.field("hash", pa.uint64(), nullable=False),  # xxh3 of the value
        pa.field("size", pa.uint64(), nullable=False),  # value bytes
        pa.field("last_modified", pa.int64(), nullable=False),  # unix milliseconds
        pa.field("extra", pa.binary(), nullable=False),  # user metadata (JSON), may be empty
    ]
)


class LedgerEntry(NamedTuple):
    """One key's Ledger entry, without its key: the form the Bookie's cache, the SST blocks
    and the views share. ``expiry`` is unix seconds (0: never); ``hash`` the value's xxh3;
    ``extra`` the packed metadata, index terms and (head_only) value."""

    sqn: int
    status: int
    expiry: int
    hash: int
    size: int
    last_modified: int
    extra: bytes


@dataclass(frozen=True)
class Head:
    """What the Ledger knows of an object, without its value.

    ``last_modified`` and ``expires_at`` are unix seconds (``expires_at`` is ``None`` for objects
    without a TTL); ``hash`` is the xxh3-64 hash of the value.
    """

    sqn: int
    size: int
    last_modified: float
    hash: int
    expires_at: float | None = None
    metadata: dict | None = None
    #: The index terms the object holds now, as sorted ``(field, term)`` pairs.
    indexes: tuple = field(default=())
    #: The value itself, in ``head_only`` stores (which keep small values in the Ledger).
    value: bytes | None = None


class LedgerRows:
    """Columns of Ledger entries being built, turned into one Arrow batch at the end.

    Building columns as lists and converting once keeps per-change Python work to a few appends.
    """

    __slots__ = ("key", "sqn", "status", "expiry", "hash", "size", "last_modified", "extra")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.key)

    def add(self, lkey, sqn, status, expiry, vhash, size, last_modified_ms, extra) -> None:
        self.key.append(lkey)
        self.sqn.append(sqn)
        self.status.append(status)
        self.expiry.append(expiry)
        self.hash.append(vhash)
        self.size.append(size)
        self.last_modified.append(last_modified_ms)
        self.extra.append(extra)

    def add_change(self, change_op, lkey, sqn, size, vhash, indexes, expiry, extra,
                   last_modified_ms) -> None:
        """Add the Ledger entries of one change: the object and its index entries."""
        if change_op == OP_PUT:
            self.add(lkey, sqn, ACTIVE, expiry, vhash, size, last_modified_ms, extra)
        elif change_op == OP_DELETE:
            self.add(lkey, sqn, TOMBSTONE, 0, 0, 0, last_modified_ms, b"")
        # OP_KEY_DELTA keeps only index changes: the object entry came from a later change.
        if indexes:
            bucket, key = split_object_key(lkey)
            for op, field_name, term in indexes:
                status = ACTIVE if op == 0 and change_op != OP_DELETE else TOMBSTONE
                self.add(index_key(bucket, field_name, term, key), sqn, status, expiry, 0, 0,
                         last_modified_ms, b"")

    @classmethod
    def from_changes(cls, sqns, ops, lkeys, sizes, hashes, indexes, expiries, extras,
                     last_modified_ms) -> LedgerRows:
        """Ledger entries for a group of changes given as columns (one SQN each)."""
        rows = cls()
        if any(indexes):
            for c in zip(ops, lkeys, sqns, sizes, hashes, indexes, expiries, extras):
                rows.add_change(*c, last_modified_ms)
            return rows
        # No index entries: one row per change, built column by column. Deletes carry
        # size 0, hash 0, no expiry and no extra, so only the status depends on the op.
        rows.key = list(lkeys)
        rows.sqn = list(sqns)
        rows.status = [ACTIVE if op == OP_PUT else TOMBSTONE for op in ops]
        rows.expiry = list(expiries)
        rows.hash = list(hashes)
        rows.size = list(sizes)
        rows.last_modified = [last_modified_ms] * len(rows.key)
        rows.extra = list(extras)
        return rows

    def add_record(self, rec) -> None:
        """Add the Ledger entries of a :class:`~leveled_ray.files.journal.JournalRecord`."""
        value = rec.value or b""
        self.add_change(rec.op, rec.lkey, rec.sqn, len(value), value_hash(value), rec.indexes,
                        rec.expiry, rec.extra, rec.last_modified)

    def entries(self):
        """``(key, LedgerEntry)`` pairs."""
        return zip(self.key, map(LedgerEntry._make, zip(
            self.sqn, self.status, self.expiry, self.hash, self.size, self.last_modified,
            self.extra)))

    @classmethod
    def from_entries(cls, pairs) -> LedgerRows:
        """Rows from ``(key, entry)`` pairs (the inverse of :meth:`entries`)."""
        rows = cls()
        for lkey, entry in pairs:
            rows.add(lkey, *entry)
        return rows

    @classmethod
    def from_batch(cls, batch: pa.RecordBatch) -> LedgerRows:
        rows = cls()
        for f in LEDGER_SCHEMA:
            setattr(rows, f.name, batch.column(f.name).to_pylist())
        return rows

    def to_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array(getattr(self, f.name), type=f.type) for f in LEDGER_SCHEMA],
            schema=LEDGER_SCHEMA,
        )


def pack_extra(metadata: bytes = b"", terms: Sequence[tuple] = (),
               value: bytes | None = None) -> bytes:
    """The ``extra`` column of an object's Ledger entry: its user metadata (JSON), the index
    terms it holds and, in ``head_only`` stores, its value. Metadata alone stays plain JSON."""
    if not terms and value is None:
        return metadata
    return PACKED_EXTRA + msgpack.packb([metadata, [list(t) for t in terms], value],
                                         use_bin_type=True)


def unpack_extra(extra: bytes) -> tuple[bytes, tuple, bytes | None]:
    """``(metadata JSON, terms, value)`` of an ``extra`` column (see :func:`pack_extra`)."""
    if extra[:1] != PACKED_EXTRA:
        return extra, (), None
    metadata, terms, value = msgpack.unpackb(extra[1:], raw=False)
    return metadata, tuple((f, t) for f, t in terms), value


def entry_to_head(sqn, status, expiry, vhash, size, last_modified_ms, extra, *,
                  now_s: float) -> Head | None:
    """A :class:`Head` for a Ledger entry, or ``None`` for tombstones and entries expired at
    ``now_s``."""
    if status != ACTIVE or (expiry and expiry <= now_s):
        return None
    metadata, terms, value = unpack_extra(extra) if extra else (b"", (), None)
    return Head(
        sqn=sqn, size=size, last_modified=last_modified_ms / 1000.0, hash=vhash,
        expires_at=float(expiry) if expiry else None,
        metadata=json.loads(metadata) if metadata else None, indexes=terms, value=value,
    )


def live_entries(entries: list, now_s: float) -> list[tuple | None]:
    """The entries of current objects as plain tuples (``None`` for the rest): what a Bookie
    sends for ``head_many``, far cheaper to send than :class:`Head` objects; the caller makes
    them with :func:`heads_of`."""
    return [tuple(e) if e is not None and e[1] == ACTIVE and (not e[2] or e[2] > now_s)
            else None for e in entries]


def live_sqns(entries: list, now_s: float) -> list[int | None]:
    """The SQN of each entry of a current object (``None`` for the rest), as :func:`is_live`
    decides, inline: a call per key was a tenth of a warm ``get_many``'s lookups."""
    return [e[0] if e is not None and e[1] == ACTIVE and (not e[2] or e[2] > now_s) else None
            for e in entries]


def heads_of(entries: list) -> list[Head | None]:
    """The :class:`Head` of each entry of :func:`live_entries` (``None`` stays ``None``)."""
    return list(iter_heads(entries))


def iter_heads(entries: Iterable) -> Iterator[Head | None]:
    """:func:`heads_of`, each made as it is asked for. A fold's rows are made this way: a
    ``Head`` stays tracked by the garbage collector, and a batch of them alive at once makes
    collections promote them and then pass over the whole heap (in a process with a large
    heap, up to half of ``fold_heads``' time)."""
    new = object.__new__
    for e in entries:
        if e is None:
            yield None
            continue
        sqn, _, expiry, vhash, size, lm, extra = e
        if extra:
            yield entry_to_head(*e, now_s=0.0)
            continue
        head = new(Head)  # the fields as Head's own __init__ would set them, without its
        # per-field frozen checks
        head.__dict__.update(sqn=sqn, size=size, last_modified=lm / 1000.0, hash=vhash,
                             expires_at=float(expiry) if expiry else None, metadata=None,
                             indexes=(), value=None)
        yield head


def is_live(entry: LedgerEntry | None, now_s: float) -> bool:
    """Whether a Ledger entry is a current object (not a tombstone, not expired)."""
    if entry is None or entry.status != ACTIVE:
        return False
    return not entry.expiry or entry.expiry > now_s


def now_ms() -> int:
    return time.time_ns() // 1_000_000
