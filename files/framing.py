"""Checksums, codecs and a bounds-checked reader shared by every file format.

Each compressed payload carries its codec id, so a store can switch compression and keep old data
readable. Decoders read through :class:`Reader`, which raises :class:`CorruptObjectError` on any
out-of-bounds length instead of allocating from it.
"""

from __future__ import annotations

import struct

import lz4.block
import msgpack
import numpy as np
import pyarrow as pa
import xxhash
import zstandard

from ..errors import CorruptObjectError, InvalidArgumentError
from ..options import CODECS

CODEC_NONE = CODECS["none"]
CODEC_LZ4 = CODECS["lz4"]
CODEC_ZSTD = CODECS["zstd"]

#: No single block, entry or footer may declare more than this many uncompressed bytes.
MAX_PAYLOAD = 1 << 30

_zstd_c = zstandard.ZstdCompressor(level=3)
_zstd_d = zstandard.ZstdDecompressor()


def size_cuts(sizes: np.ndarray, max_bytes: int) -> list[int]:
    """The first row of each run of consecutive rows holding about ``max_bytes`` (a run ends
    with the row that reaches a multiple of it), for rows of ``sizes`` bytes."""
    total = np.cumsum(sizes.astype(np.int64))
    if len(total) and total[-1] <= max_bytes:
        return [0]  # one run (the common case of a small group commit)
    group = (total - 1) // max_bytes
    return np.flatnonzero(np.diff(group, prepend=-1)).tolist()


def binary_lengths(array: pa.Array) -> np.ndarray:
    """The byte length of each value of a binary array (0 for a null), from its offsets
    buffer, without a compute kernel's fixed cost."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32 if pa.types.is_binary(
        array.type) else np.int64)[array.offset:array.offset + len(array) + 1]
    return np.diff(offsets)


def checksum(*parts: bytes | memoryview) -> int:
    """xxh3-64 over the concatenation of ``parts``."""
    if len(parts) == 1:
        return xxhash.xxh3_64_intdigest(parts[0])
    h = xxhash.xxh3_64()
    for p in parts:
        h.update(p)
    return h.intdigest()


def codec_id(name: str) -> int:
    try:
        return CODECS[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown compression {name!r}") from None


def compress(codec: int, raw: bytes) -> tuple[int, bytes]:
    """Compress ``raw``; returns ``(codec actually used, payload)``.

    Falls back to no compression when compressing does not save space (small or random data).
    """
    if codec == CODEC_LZ4 and len(raw) > 32:
        out = lz4.block.compress(raw, store_size=False)
    elif codec == CODEC_ZSTD and len(raw) > 32:
        out = _zstd_c.compress(raw)
    else:
        return CODEC_NONE, raw
    if len(out) >= len(raw):
        return CODEC_NONE, raw
    return codec, out


def decompress(codec: int, payload: bytes | memoryview, raw_len: int, path: str, offset: int):
    """Decompress a payload whose uncompressed length was declared as ``raw_len``."""
    if raw_len > MAX_PAYLOAD:
        raise CorruptObjectError(path, offset, f"declared length {raw_len} is over the limit")
    try:
        if codec == CODEC_NONE:
            out = bytes(payload)  # a block's own copy: the payload may be a view into a larger
            # read, which a cached block made from it would otherwise keep alive
        elif codec == CODEC_LZ4:
            out = lz4.block.decompress(payload, uncompressed_size=raw_len)
        elif codec == CODEC_ZSTD:
            out = _zstd_d.decompress(bytes(payload), max_output_size=raw_len)
        else:
            raise CorruptObjectError(path, offset, f"unknown codec {codec}")
    except CorruptObjectError:
        raise
    except Exception as exc:  # the codec libraries raise their own error types
        raise CorruptObjectError(path, offset, f"cannot decompress: {exc}") from None
    if len(out) != raw_len:
        raise CorruptObjectError(path, offset, f"decompressed {len(out)} bytes, not {raw_len}")
    return out


#: ``codec u8 | raw_len u32``, then the payload: the head of every SST and journal block.
_BLOCK_HEAD = struct.Struct("<BI")


def encode_block(codec: int, batch: pa.RecordBatch) -> bytes:
    """One block: an Arrow IPC record batch, compressed on its own. Its checksum is kept
    in the file's footer, not in the block."""
    raw = batch.serialize().to_pybytes()
    used, payload = compress(codec, raw)
    return _BLOCK_HEAD.pack(used, len(raw)) + payload


def decode_block(raw_block: bytes | memoryview, expected_sum: int, schema: pa.Schema,
                 path: str, offset: int, *, validate: bool = True) -> pa.RecordBatch:
    """Validate and decode one block read from ``offset`` as an Arrow batch of ``schema``.
    ``validate=False`` leaves the batch's full validation to the caller (who validates many
    blocks at once)."""
    if xxhash.xxh3_64_intdigest(raw_block) != expected_sum:
        raise CorruptObjectError(path, offset, "block checksum mismatch")
    if len(raw_block) < _BLOCK_HEAD.size:
        raise CorruptObjectError(path, offset, f"block of {len(raw_block)} bytes is too short")
    codec, raw_len = _BLOCK_HEAD.unpack_from(raw_block)
    raw = decompress(codec, memoryview(raw_block)[_BLOCK_HEAD.size:], raw_len, path, offset)
    try:
        batch = pa.ipc.read_record_batch(pa.py_buffer(raw), schema)
        if validate:
            batch.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException, ValueError) as exc:
        raise CorruptObjectError(path, offset, f"malformed block: {exc}") from None
    return batch


#: ``magic | version u16 | footer codec u8 | footer raw_len u32 | footer offset u64 |
#: footer length u32 | footer checksum u64``: the last bytes of every SST and journal file.
_TRAILER = struct.Struct("<8sHBIQIQ")
TRAILER_SIZE = _TRAILER.size
#: Bytes read from the end of a file to get its footer in one request, most of the time.
FOOTER_READ = 64 * 1024


def encode_footer(magic: bytes, version: int, codec: int, doc: dict, offset: int) -> bytes:
    """The footer (``doc`` as compressed msgpack) and trailer of a file whose body ends at
    ``offset``."""
    raw = msgpack.packb(doc, use_bin_type=True)
    used, footer = compress(codec, raw)
    return footer + _TRAILER.pack(magic, version, used, len(raw), offset, len(footer),
                                  checksum(footer))


def footer_span(magic: bytes, versions: tuple[int, ...], size: int, tail: bytes, path: str,
                min_offset: int = 0) -> tuple[int, int]:
    """From an object's last bytes (``tail``) and its size: ``(footer offset, footer length)``;
    the format version must be one of ``versions`` (those this code reads)."""
    if size < min_offset + TRAILER_SIZE or len(tail) < TRAILER_SIZE:
        raise CorruptObjectError(path, 0, f"object of {size} bytes is too short")
    found, ver, _, _, foff, flen, _ = _TRAILER.unpack(tail[-TRAILER_SIZE:])
    at = size - TRAILER_SIZE
    if found != magic:
        raise CorruptObjectError(path, at, "bad trailer magic")
    if ver not in versions:
        raise CorruptObjectError(path, at, f"unsupported format version {ver}")
    if foff + flen != at or foff < min_offset:
        raise CorruptObjectError(path, at, "footer does not end where the trailer starts")
    return foff, flen


def decode_footer(magic: bytes, versions: tuple[int, ...], size: int, tail: bytes, path: str,
                  min_offset: int = 0) -> tuple[dict, int]:
    """Validate and decode the footer from an object's last bytes (which must cover the footer
    and trailer); returns the footer document and its offset."""
    foff, flen = footer_span(magic, versions, size, tail, path, min_offset)
    _, version, codec, raw_len, _, _, fsum = _TRAILER.unpack(tail[-TRAILER_SIZE:])
    start = len(tail) - TRAILER_SIZE - flen
    if start < 0:
        raise CorruptObjectError(path, foff, "footer not covered by the bytes read")
    stored = memoryview(tail)[start : start + flen]
    if checksum(stored) != fsum:
        raise CorruptObjectError(path, foff, "footer checksum mismatch")
    raw = decompress(codec, stored, raw_len, path, foff)
    try:
        doc = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptObjectError(path, foff, f"malformed footer: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != version:
        raise CorruptObjectError(path, foff, "footer version does not match the trailer")
    return doc, foff


class Reader:
    """A cursor over untrusted bytes: every read is bounds-checked against the buffer."""

    __slots__ = ("buf", "pos", "end", "path", "base")

    def __init__(self, buf: bytes | memoryview, path: str, base: int = 0, pos: int = 0,
                 end: int | None = None):
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.path = path
        self.base = base  # offset of buf[0] inside the object, for error messages

    def fail(self, reason: str, at: int | None = None) -> CorruptObjectError:
        return CorruptObjectError(self.path, self.base + (self.pos if at is None else at), reason)

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"length {n} runs past the end ({self.end - self.pos} bytes left)")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct) -> tuple:
        return fmt.unpack(self.take(fmt.size))

    def remaining(self) -> int:
        return self.end - self.pos
