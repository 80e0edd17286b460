"""Ledger keys: an order-preserving byte encoding of ``(tag, bucket, key, subkey)``.

Comparing two encoded keys as bytes gives the order of the tuples. Object keys use the tag
``o``; index entries use the tag ``i`` with ``(bucket, field, term, key)``. This is
leveled's ``leveled_codec``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import InvalidArgumentError

TAG_OBJECT = b"o"


TAG_INDEX = b"i"


_T_NONE, _T_BYTES, _T_STR, _T_INT = 0x00, 0x01, 0x02, 0x03


INT_BIAS = 1 << 63


def _encode_part(part: Any) -> bytes:
    if isinstance(part, bytes):
        return b"\x01" + part.replace(b"\x00", b"\x00\xff") + b"\x00"
    if isinstance(part, str):
        return b"\x02" + part.encode("utf-8").replace(b"\x00", b"\x00\xff") + b"\x00"
    if part is None:
        return b"\x00"
    if isinstance(part, int) and not isinstance(part, bool):
        return b"\x03" + (part + INT_BIAS).to_bytes(8, "big")
    raise InvalidArgumentError(f"cannot encode key part of type {type(part).__name__}")


def encode_key(tag: bytes, *parts: Any) -> bytes:
    """Encode a Ledger key. Byte order of the result is tuple order of ``parts``.

    >>> encode_key(TAG_OBJECT, "users", "alice") < encode_key(TAG_OBJECT, "users", "bob")
    True
    """
    return tag + b"".join(_encode_part(p) for p in parts)


def holds_index_entries(min_keys: Iterable[bytes]) -> bool:
    """Whether files with these smallest keys may hold index entries: index keys (tag ``i``)
    sort before every object key (tag ``o``)."""
    return any(k < TAG_OBJECT for k in min_keys)


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
            out.append(int.from_bytes(data[pos : pos + 8], "big") - INT_BIAS)
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
