"""Journal file: one immutable object of the Journal, covering a range of SQNs (leveled's CDB file).

Layout::

    header (36 bytes) | entry | entry | ... | footer | trailer

The header holds the writer epoch and the journal slot (used for fencing). Each entry is
``sqn u64 | op u8 | codec u8 | raw_len u32 | stored_len u32 | checksum u64 | payload`` where the
payload is one change, compressed on its own, and the checksum covers the entry header and the
payload. The footer (msgpack, compressed) is the SQN index: the SQN, offset and length of every
entry, so fetching a value by SQN is one ranged GET once the footer is cached.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import msgpack
import numpy as np
import xxhash

from ..errors import CorruptObjectError
from . import framing
from .framing import CODEC_LZ4, checksum, compress, decompress, encode_footer

MAGIC = b"LRJNL\x00\x00\x01"
VERSION = 1
KIND_DATA = 0
KIND_FENCE = 1
NO_SLOT = (1 << 64) - 1  # journal files written by compaction have no slot

_HEADER = struct.Struct("<8sHBxQQQ")  # magic, version, kind, epoch, slot, header checksum
HEADER_SIZE = _HEADER.size
_ENTRY = struct.Struct("<QBBII")
_ENTRY_SUM = struct.Struct("<Q")
ENTRY_HEAD = _ENTRY.size + _ENTRY_SUM.size
_RECORD = struct.Struct("<qIII")  # last_modified, expiry, key_len, extra_len
_VALUE_LEN = struct.Struct("<I")
_NO_VALUE = 0xFFFFFFFF


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


@dataclass(frozen=True)
class JournalFooter:
    epoch: int
    slot: int
    kind: int
    sqns: list
    offsets: list
    lengths: list

    def locate(self, sqn: int) -> tuple[int, int] | None:
        """``(offset, length)`` of the entry with this SQN, if the file holds it."""
        i = bisect.bisect_left(self.sqns, sqn)
        if i < len(self.sqns) and self.sqns[i] == sqn:
            return self.offsets[i], self.lengths[i]
        return None

    @property
    def nbytes(self) -> int:
        return 24 * len(self.sqns) + 64


# --- writing ------------------------------------------------------------------------------------


def encode_header(epoch: int, slot: int, kind: int) -> bytes:
    body = _HEADER.pack(MAGIC, VERSION, kind, epoch, slot, 0)[: HEADER_SIZE - 8]
    return body + struct.pack("<Q", checksum(body))


def encode_record(op, lkey, value, indexes, expiry, extra, last_modified) -> bytes:
    vlen = _NO_VALUE if value is None else len(value)
    idx = msgpack.packb([list(i) for i in indexes]) if indexes else b""
    return b"".join((
        _RECORD.pack(last_modified, expiry, len(lkey), len(extra)), lkey, extra,
        _VALUE_LEN.pack(vlen), value or b"", idx,
    ))


def build_journal(name: str, epoch: int, slot: int, records, *, codec: int = CODEC_LZ4,
                  kind: int = KIND_DATA) -> tuple[bytes, JournalInfo]:
    """Encode ``records`` (each ``(sqn, op, lkey, value, indexes, expiry, extra, last_modified)``,
    in SQN order) as one journal file; returns its bytes and info."""
    parts = [encode_header(epoch, slot, kind)]
    pos = HEADER_SIZE
    sqns, offsets, lengths = [], [], []
    # The per-entry loop is the Inker's hot path: keep it to a few C calls per entry.
    entry_pack, sum_pack, digest = _ENTRY.pack, _ENTRY_SUM.pack, xxhash.xxh3_64_intdigest
    for sqn, op, lkey, value, indexes, expiry, extra, lm in records:
        raw = encode_record(op, lkey, value, indexes, expiry, extra, lm)
        used, payload = compress(codec, raw)
        head = entry_pack(sqn, op, used, len(raw), len(payload))
        parts += (head, sum_pack(digest(head + payload)), payload)
        size = ENTRY_HEAD + len(payload)
        sqns.append(sqn)
        offsets.append(pos)
        lengths.append(size)
        pos += size
    if sqns and any(a >= b for a, b in zip(sqns, sqns[1:])):
        raise ValueError("journal records must be in increasing SQN order")
    parts.append(encode_footer(MAGIC, VERSION, codec, {
        "v": VERSION, "epoch": epoch, "slot": slot, "kind": kind,
        "sqn": np.asarray(sqns, dtype="<u8").tobytes(),
        "off": np.asarray(offsets, dtype="<u8").tobytes(),
        "len": np.asarray(lengths, dtype="<u4").tobytes(),
    }, pos))
    data = b"".join(parts)
    info = JournalInfo(name, slot, epoch, kind, len(data), len(sqns),
                       sqns[0] if sqns else 0, sqns[-1] if sqns else 0)
    return data, info


# --- reading ------------------------------------------------------------------------------------


def parse_header(data: bytes, path: str) -> tuple[int, int, int]:
    """``(epoch, slot, kind)`` from a journal file's first bytes."""
    if len(data) < HEADER_SIZE:
        raise CorruptObjectError(path, 0, "too short to be a journal file")
    magic, version, kind, epoch, slot, hsum = _HEADER.unpack(data[:HEADER_SIZE])
    if magic != MAGIC:
        raise CorruptObjectError(path, 0, "bad journal magic")
    if version != VERSION:
        raise CorruptObjectError(path, 0, f"unsupported journal format version {version}")
    if checksum(data[: HEADER_SIZE - 8]) != hsum:
        raise CorruptObjectError(path, 0, "journal header checksum mismatch")
    return epoch, slot, kind


def footer_span(size: int, tail: bytes, path: str) -> tuple[int, int]:
    """From the object's last bytes, where its footer is: ``(offset, length)``."""
    return framing.footer_span(MAGIC, VERSION, size, tail, path, HEADER_SIZE)


def parse_footer(size: int, tail: bytes, path: str) -> JournalFooter:
    """Parse the footer from the object's last bytes (which must cover footer and trailer)."""
    doc, foff = framing.decode_footer(MAGIC, VERSION, size, tail, path, HEADER_SIZE)
    try:
        footer = JournalFooter(
            epoch=int(doc["epoch"]), slot=int(doc["slot"]), kind=int(doc["kind"]),
            sqns=np.frombuffer(doc["sqn"], dtype="<u8").tolist(),
            offsets=np.frombuffer(doc["off"], dtype="<u8").tolist(),
            lengths=np.frombuffer(doc["len"], dtype="<u4").tolist(),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(path, foff, f"malformed footer: {exc}") from None
    n = len(footer.sqns)
    if len(footer.offsets) != n or len(footer.lengths) != n:
        raise CorruptObjectError(path, foff, "SQN index lengths disagree")
    # Entries must tile [header, footer) exactly, in increasing SQN order.
    expect = HEADER_SIZE
    for i in range(n):
        if footer.offsets[i] != expect or footer.lengths[i] < ENTRY_HEAD:
            raise CorruptObjectError(path, foff, f"SQN index entry {i} is out of place")
        expect += footer.lengths[i]
        if i and footer.sqns[i] <= footer.sqns[i - 1]:
            raise CorruptObjectError(path, foff, "SQN index is not increasing")
    if expect != foff:
        raise CorruptObjectError(path, foff, "entries do not end where the footer starts")
    return footer


def _open_entry(data: bytes | memoryview, path: str, offset: int,
                expect_sqn: int | None) -> tuple[int, int, bytes | memoryview]:
    """Validate one entry (its bytes, read from ``offset``) and decompress its record:
    ``(sqn, op, raw record)``. Parsed with ``unpack_from`` and explicit bounds checks rather
    than a cursor object: folds and exports open an entry per object."""
    if len(data) < ENTRY_HEAD:
        raise CorruptObjectError(path, offset, "entry shorter than its header")
    sqn, op, codec, raw_len, stored_len = _ENTRY.unpack_from(data, 0)
    if ENTRY_HEAD + stored_len > len(data):
        raise CorruptObjectError(path, offset, f"payload of {stored_len} bytes runs past the end")
    if ENTRY_HEAD + stored_len != len(data):
        raise CorruptObjectError(path, offset, "entry length does not match its header")
    (esum,) = _ENTRY_SUM.unpack_from(data, _ENTRY.size)
    view = memoryview(data)
    payload = view[ENTRY_HEAD:]
    if checksum(view[:_ENTRY.size], payload) != esum:
        raise CorruptObjectError(path, offset, "entry checksum mismatch")
    if expect_sqn is not None and sqn != expect_sqn:
        raise CorruptObjectError(path, offset, f"entry holds SQN {sqn}, not {expect_sqn}")
    raw = decompress(codec, payload, raw_len, path, offset)
    if len(raw) < _RECORD.size:
        raise CorruptObjectError(path, offset, "record shorter than its header")
    return sqn, op, raw


def _value_span(raw, path: str, offset: int) -> tuple[int, int, int, int]:
    """``(key_len, extra_len, value start, value length or _NO_VALUE)`` of a record."""
    _, _, key_len, extra_len = _RECORD.unpack_from(raw, 0)
    extra_end = _RECORD.size + key_len + extra_len
    if extra_end + _VALUE_LEN.size > len(raw):
        raise CorruptObjectError(path, offset, "record key or extra runs past the end")
    (vlen,) = _VALUE_LEN.unpack_from(raw, extra_end)
    pos = extra_end + _VALUE_LEN.size
    if vlen != _NO_VALUE and pos + vlen > len(raw):
        raise CorruptObjectError(path, offset, "record value runs past the end")
    return key_len, extra_len, pos, vlen


def decode_value(data: bytes | memoryview, path: str, offset: int,
                 expect_sqn: int | None = None) -> bytes | None:
    """Validate one entry and return only its value (what folds and exports need)."""
    _, _, raw = _open_entry(data, path, offset, expect_sqn)
    _, _, pos, vlen = _value_span(raw, path, offset)
    return None if vlen == _NO_VALUE else bytes(raw[pos:pos + vlen])


def decode_entry(data: bytes | memoryview, path: str, offset: int,
                 expect_sqn: int | None = None) -> JournalRecord:
    """Validate and decode one entry (its bytes, read from ``offset``)."""
    sqn, op, raw = _open_entry(data, path, offset, expect_sqn)
    lm, expiry, _, _ = _RECORD.unpack_from(raw, 0)
    key_len, extra_len, pos, vlen = _value_span(raw, path, offset)
    key_end = _RECORD.size + key_len
    lkey = bytes(raw[_RECORD.size:key_end])
    extra = bytes(raw[key_end:key_end + extra_len])
    value = None
    if vlen != _NO_VALUE:
        value = bytes(raw[pos:pos + vlen])
        pos += vlen
    indexes: tuple = ()
    if pos < len(raw):
        try:
            indexes = tuple((int(a), str(b), c)
                            for a, b, c in msgpack.unpackb(raw[pos:], raw=False))
        except (TypeError, ValueError, msgpack.UnpackException) as exc:
            raise CorruptObjectError(path, offset, f"malformed index changes: {exc}") from None
    return JournalRecord(sqn, op, lkey, value, indexes, expiry, extra, lm)


def read_all(data: bytes, path: str) -> tuple[tuple[int, int, int], JournalFooter,
                                              list[JournalRecord]]:
    """Validate a whole journal file held in memory: header, footer and every entry."""
    header = parse_header(data, path)
    footer = parse_footer(len(data), data, path)
    if (footer.epoch, footer.slot, footer.kind) != header:
        raise CorruptObjectError(path, 0, "header and footer disagree")
    records = [
        decode_entry(memoryview(data)[off : off + ln], path, off, sqn)
        for sqn, off, ln in zip(footer.sqns, footer.offsets, footer.lengths)
    ]
    return header, footer, records


def iter_records(data: bytes, path: str, after_sqn: int = 0) -> Iterator[JournalRecord]:
    """Records of a whole journal file with SQN above ``after_sqn``, validated as they go."""
    parse_header(data, path)
    footer = parse_footer(len(data), data, path)
    start = bisect.bisect_right(footer.sqns, after_sqn)
    view = memoryview(data)
    for i in range(start, len(footer.sqns)):
        off, ln = footer.offsets[i], footer.lengths[i]
        yield decode_entry(view[off : off + ln], path, off, footer.sqns[i])
