"""Keys, changes and Ledger entries: the encodings every part of the store shares.

A Ledger key is an order-preserving byte encoding of ``(tag, bucket, key, subkey)``: comparing
two encoded keys as bytes gives the order of the tuples. Object keys use the tag ``o``; index
entries use the tag ``i`` with ``(bucket, field, term, key)``. This is leveled's ``leveled_codec``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack
import pyarrow as pa
import xxhash

from .errors import InvalidArgumentError

TAG_OBJECT = b"o"
TAG_INDEX = b"i"

_T_NONE, _T_BYTES, _T_STR, _T_INT = 0x00, 0x01, 0x02, 0x03
_INT_BIAS = 1 << 63

#: Ledger entry status.
ACTIVE = 0
TOMBSTONE = 1

#: Change operations (journal entry types share these numbers).
OP_PUT = 0
OP_DELETE = 1
OP_KEY_DELTA = 2

#: Condition codes carried with a change.
NO_CONDITION = -2
IF_ABSENT = -1

MAX_METADATA_BYTES = 4096
PACKED_EXTRA = b"\x01"  # JSON metadata starts with "{": the first byte tells them apart
MAX_INDEX_TERM_BYTES = 1024

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


# --- key encoding -------------------------------------------------------------------------------


def _encode_part(part: Any) -> bytes:
    if isinstance(part, bytes):
        return b"\x01" + part.replace(b"\x00", b"\x00\xff") + b"\x00"
    if isinstance(part, str):
        return b"\x02" + part.encode("utf-8").replace(b"\x00", b"\x00\xff") + b"\x00"
    if part is None:
        return b"\x00"
    if isinstance(part, int) and not isinstance(part, bool):
        return b"\x03" + (part + _INT_BIAS).to_bytes(8, "big")
    raise InvalidArgumentError(f"cannot encode key part of type {type(part).__name__}")


def encode_key(tag: bytes, *parts: Any) -> bytes:
    """Encode a Ledger key. Byte order of the result is tuple order of ``parts``.

    >>> encode_key(TAG_OBJECT, "users", "alice") < encode_key(TAG_OBJECT, "users", "bob")
    True
    """
    return tag + b"".join(_encode_part(p) for p in parts)


def checked_key(bucket, key, options) -> bytes:
    """The Ledger key of ``(bucket, key)``, checked (``InvalidArgumentError`` if bad)."""
    return object_key(check_name(bucket, "bucket", options.max_key_bytes),
                      check_name(key, "key", options.max_key_bytes))


def checked_keys(pairs, options) -> list[bytes]:
    """Ledger keys of many ``(bucket, key)`` pairs, each checked."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise InvalidArgumentError("expected a list of (bucket, key) pairs")
    out = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidArgumentError(f"expected a (bucket, key) pair, not {pair!r}")
        out.append(checked_key(*pair, options))
    return out


def object_key(bucket: str | bytes, key: str | bytes) -> bytes:
    """The Ledger key of an object (tag ``o``)."""
    return encode_key(TAG_OBJECT, bucket, key)


def index_key(bucket: str | bytes, field_name: str, term: str | int, key: str | bytes) -> bytes:
    """The Ledger key of an index entry (tag ``i``): ``(bucket, field, term, key)``."""
    return encode_key(TAG_INDEX, bucket, field_name, term, key)


def decode_key(data: bytes) -> tuple:
    """Decode a Ledger key into ``(tag, part, part, ...)``; the inverse of :func:`encode_key`."""
    if not data:
        raise ValueError("empty ledger key")
    out: list[Any] = [data[:1]]
    pos, end = 1, len(data)
    while pos < end:
        kind = data[pos]
        pos += 1
        if kind == _T_NONE:
            out.append(None)
        elif kind == _T_INT:
            if pos + 8 > end:
                raise ValueError("truncated int in ledger key")
            out.append(int.from_bytes(data[pos : pos + 8], "big") - _INT_BIAS)
            pos += 8
        elif kind in (_T_BYTES, _T_STR):
            chunks = []
            while True:
                zero = data.find(b"\x00", pos)
                if zero < 0:
                    raise ValueError("unterminated part in ledger key")
                chunks.append(data[pos:zero])
                if zero + 1 < end and data[zero + 1] == 0xFF:
                    chunks.append(b"\x00")
                    pos = zero + 2
                    continue
                pos = zero + 1
                break
            raw = b"".join(chunks)
            out.append(raw if kind == _T_BYTES else raw.decode("utf-8"))
        else:
            raise ValueError(f"unknown part type {kind} in ledger key")
    return tuple(out)


def split_object_key(lkey: bytes) -> tuple[str | bytes, str | bytes]:
    """``(bucket, key)`` of an object Ledger key."""
    parts = decode_key(lkey)
    return parts[1], parts[2]


# --- validation ---------------------------------------------------------------------------------


def utf8_size(text: str, what: str) -> int:
    """The UTF-8 length of ``text``; ``InvalidArgumentError`` if it cannot be encoded (a lone
    surrogate, for example)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid unicode: {exc}") from None


def check_name(value: Any, what: str, max_bytes: int) -> str | bytes:
    """Validate a bucket or key: a non-empty ``str`` or ``bytes`` of at most ``max_bytes``."""
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if isinstance(value, str):
        size = utf8_size(value, what)
    elif isinstance(value, bytes):
        size = len(value)
    else:
        raise InvalidArgumentError(f"{what} must be str or bytes, not {type(value).__name__}")
    if size == 0:
        raise InvalidArgumentError(f"{what} must not be empty")
    if size > max_bytes:
        raise InvalidArgumentError(f"{what} is {size} bytes, over the limit of {max_bytes}")
    return value


def check_value(value: Any, max_bytes: int) -> bytes:
    """Validate a value: bytes-like of at most ``max_bytes``; returns it as ``bytes``."""
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, (bytearray, memoryview)):
        data = bytes(value)
    else:
        raise InvalidArgumentError(f"value must be bytes, not {type(value).__name__}")
    if len(data) > max_bytes:
        raise InvalidArgumentError(
            f"value is {len(data)} bytes, over max_value_bytes={max_bytes}"
        )
    return data


def check_indexes(indexes: Any) -> tuple[tuple[int, str, str | int], ...]:
    """Validate index changes ``[("add"|"remove", field, term), ...]``.

    Fields ending in ``_bin`` take ``str`` terms, fields ending in ``_int`` take ``int`` terms.
    Returns ``((op, field, term), ...)`` with op 0 for add and 1 for remove.
    """
    if indexes is None:
        return ()
    if isinstance(indexes, (str, bytes)) or not isinstance(indexes, Iterable):
        raise InvalidArgumentError("indexes must be a list of (op, field, term) tuples")
    out = []
    for change in indexes:
        if not isinstance(change, (tuple, list)) or len(change) != 3:
            raise InvalidArgumentError(f"index change {change!r} is not (op, field, term)")
        op, field_name, term = change
        if op not in ("add", "remove"):
            raise InvalidArgumentError(f"index op must be 'add' or 'remove', not {op!r}")
        if not isinstance(field_name, str) or not field_name:
            raise InvalidArgumentError(f"index field must be a non-empty str, not {field_name!r}")
        utf8_size(field_name, "index field")
        if field_name.endswith("_bin"):
            if not isinstance(term, str):
                raise InvalidArgumentError(f"field {field_name!r} takes str terms, not {term!r}")
            if utf8_size(term, "index term") > MAX_INDEX_TERM_BYTES:
                raise InvalidArgumentError(f"index term over {MAX_INDEX_TERM_BYTES} bytes")
        elif field_name.endswith("_int"):
            if not isinstance(term, int) or isinstance(term, bool):
                raise InvalidArgumentError(f"field {field_name!r} takes int terms, not {term!r}")
            if not -_INT_BIAS <= term < _INT_BIAS:
                raise InvalidArgumentError(f"int term {term} is outside the signed 64-bit range")
        else:
            raise InvalidArgumentError(f"index field {field_name!r} must end in _bin or _int")
        out.append((0 if op == "add" else 1, field_name, term))
    return tuple(out)


def check_ttl(ttl: Any, now_s: float) -> int:
    """Expiry (unix seconds, 0 = never) for a TTL in seconds."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl):
        raise InvalidArgumentError(f"ttl must be a number of seconds, not {ttl!r}")
    if ttl <= 0:
        raise InvalidArgumentError(f"ttl must be positive, not {ttl!r}")
    expiry = int(math.ceil(now_s + ttl))
    if expiry >= 2**32:
        raise InvalidArgumentError(f"ttl {ttl!r} expires after the year 2106")
    return expiry


def check_metadata(metadata: Any) -> bytes:
    """User metadata: a small JSON-able dict, stored as JSON bytes."""
    if metadata is None:
        return b""
    if not isinstance(metadata, dict):
        raise InvalidArgumentError(f"metadata must be a dict, not {type(metadata).__name__}")
    try:
        data = json.dumps(metadata, separators=(",", ":"), sort_keys=True).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"metadata is not JSON-able: {exc}") from None
    if len(data) > MAX_METADATA_BYTES:
        raise InvalidArgumentError(f"metadata is {len(data)} bytes, over {MAX_METADATA_BYTES}")
    return data


def check_sqn(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{what} must be an int >= 0, not {value!r}")
    return value


# --- user-facing records ------------------------------------------------------------------------


class Put(NamedTuple):
    """One object write for :meth:`Store.put_many`.

    ``if_sqn`` makes the write conditional on the key's current SQN; ``if_absent`` on the key
    not existing. A ``put_many`` whose conditions do not all hold writes nothing. (A NamedTuple:
    bulk loads build one per object, three times faster than a frozen dataclass.)
    """

    bucket: str | bytes
    key: str | bytes
    value: bytes
    indexes: Sequence[tuple] = ()
    ttl: float | None = None
    metadata: dict | None = None
    if_sqn: int | None = None
    if_absent: bool = False


class Delete(NamedTuple):
    """One object delete for :meth:`Store.put_many` (index entries to remove may be given)."""

    bucket: str | bytes
    key: str | bytes
    indexes: Sequence[tuple] = ()
    if_sqn: int | None = None


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


class Change(NamedTuple):
    """A validated change, without its value, as it travels from the client to the Bookie.

    The Bookie needs only the key and the value's size and hash; the value itself travels
    separately, straight to the Inker (see :class:`~leveled_ray.actors.remote.ValueBatch`).
    A NamedTuple, because it pickles four times faster than a dataclass.
    """

    op: int
    lkey: bytes
    size: int
    vhash: int
    indexes: tuple
    expiry: int
    extra: bytes
    condition: int = NO_CONDITION


def make_change(item: Put | Delete, limits, now_s: float) -> tuple[Change, bytes | None]:
    """Validate a :class:`Put` or :class:`Delete`: ``(change, value)`` (raises on bad input)."""
    if isinstance(item, Put):
        return put_change(
            item.bucket, item.key, item.value, limits, now_s, indexes=item.indexes, ttl=item.ttl,
            metadata=item.metadata, if_sqn=item.if_sqn, if_absent=item.if_absent,
        )
    if isinstance(item, Delete):
        return delete_change(item.bucket, item.key, limits, indexes=item.indexes,
                             if_sqn=item.if_sqn)
    raise InvalidArgumentError(f"put_many takes Put or Delete items, not {type(item).__name__}")


def _condition(if_sqn: Any, if_absent: Any) -> int:
    if not isinstance(if_absent, bool):
        raise InvalidArgumentError(f"if_absent must be a bool, not {if_absent!r}")
    if if_sqn is not None and if_absent:
        raise InvalidArgumentError("give if_sqn or if_absent, not both")
    if if_sqn is not None:
        return check_sqn(if_sqn, "if_sqn")
    return IF_ABSENT if if_absent else NO_CONDITION


def put_change(bucket, key, value, limits, now_s, *, indexes=(), ttl=None, metadata=None,
               if_sqn=None, if_absent=False) -> tuple[Change, bytes]:
    if (type(bucket) is str and type(key) is str and type(value) is bytes and not indexes
            and ttl is None and metadata is None and if_sqn is None and if_absent is False
            and len(bucket) > 0 and len(key) > 0 and len(value) <= limits.max_value_bytes
            and len(bucket) + len(key) <= limits.max_key_bytes // 4):
        # The common case, checked with as little work as possible (bulk loads spend their
        # client time here). Short str names cannot exceed max_key_bytes once encoded.
        try:
            lkey = (b"o\x02" + bucket.encode().replace(b"\x00", b"\x00\xff") + b"\x00\x02"
                    + key.encode().replace(b"\x00", b"\x00\xff") + b"\x00")
            return Change(OP_PUT, lkey, len(value), value_hash(value), (), 0, b"",
                          NO_CONDITION), value
        except UnicodeEncodeError:
            pass  # the full path below reports it
    bucket = check_name(bucket, "bucket", limits.max_key_bytes)
    key = check_name(key, "key", limits.max_key_bytes)
    value = check_value(value, limits.max_value_bytes)
    return Change(
        OP_PUT, object_key(bucket, key), len(value), value_hash(value), check_indexes(indexes),
        check_ttl(ttl, now_s), check_metadata(metadata), _condition(if_sqn, if_absent),
    ), value


def delete_change(bucket, key, limits, *, indexes=(), if_sqn=None) -> tuple[Change, None]:
    bucket = check_name(bucket, "bucket", limits.max_key_bytes)
    key = check_name(key, "key", limits.max_key_bytes)
    return Change(OP_DELETE, object_key(bucket, key), 0, 0, check_indexes(indexes), 0, b"",
                  _condition(if_sqn, False)), None


# --- Ledger entries -----------------------------------------------------------------------------


def value_hash(value: bytes) -> int:
    return xxhash.xxh3_64_intdigest(value)


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
        """``(key, entry)`` pairs, where an entry is ``(sqn, status, expiry, hash, size,
        last_modified, extra)``: the form the Bookie's cache and the SST blocks share."""
        return zip(self.key, zip(self.sqn, self.status, self.expiry, self.hash, self.size,
                                 self.last_modified, self.extra))

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


def empty_ledger_batch() -> pa.RecordBatch:
    return LedgerRows().to_batch()


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


def entry_to_head(sqn, status, expiry, vhash, size, last_modified_ms, extra,
                  now_s: float | None = None) -> Head | None:
    """A :class:`Head` for a Ledger entry, or ``None`` for tombstones and expired entries."""
    if status != ACTIVE or (expiry and expiry <= (time.time() if now_s is None else now_s)):
        return None
    metadata, terms, value = unpack_extra(extra) if extra else (b"", (), None)
    return Head(
        sqn=sqn, size=size, last_modified=last_modified_ms / 1000.0, hash=vhash,
        expires_at=float(expiry) if expiry else None,
        metadata=json.loads(metadata) if metadata else None, indexes=terms, value=value,
    )


def is_live(entry: tuple | None, now_s: float) -> bool:
    """Whether a Ledger entry is a current object (not a tombstone, not expired)."""
    if entry is None or entry[1] != ACTIVE:
        return False
    expiry = entry[2]
    return not expiry or expiry > now_s


def now_ms() -> int:
    return time.time_ns() // 1_000_000
