"""Validation of user input (names, values, index terms, TTLs, metadata, SQNs): each check
raises :class:`~leveled_ray.errors.InvalidArgumentError` and changes nothing.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidArgumentError
from .keys import INT_BIAS, TAG_OBJECT, object_key
from .name_text import BYTES_PREFIX

MAX_METADATA_BYTES = 4096


MAX_INDEX_TERM_BYTES = 1024


def checked_key(bucket, key, options) -> bytes:
    """The Ledger key of ``(bucket, key)``, checked (``InvalidArgumentError`` if bad)."""
    return object_key(check_name(bucket, "bucket", options.max_key_bytes),
                      check_name(key, "key", options.max_key_bytes))


def checked_keys(pairs, options) -> list[bytes]:
    """Ledger keys of many ``(bucket, key)`` pairs, each checked.

    The common case, a batch of ``(str, str)`` tuples with no zero character, is keyed as
    columns (:func:`_plain_batch`); any other batch pair by pair by :func:`checked_key`."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise InvalidArgumentError("expected a list of (bucket, key) pairs")
    pairs = pairs if type(pairs) is list else list(pairs)
    plain = _plain_batch(pairs, options.max_key_bytes)
    if plain is not None:
        return plain
    out = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidArgumentError(f"expected a (bucket, key) pair, not {pair!r}")
        out.append(checked_key(*pair, options))
    return out


def _plain_batch(pairs: list, max_bytes: int) -> list[bytes] | None:
    """The Ledger keys of ``pairs`` when every pair is a ``(str, str)`` tuple that needs no
    escaping and is valid, checked and built a column at a time (C-level passes); else
    ``None``."""
    if set(map(type, pairs)) != {tuple} or set(map(len, pairs)) != {2}:
        return None
    buckets, keys = zip(*pairs)
    distinct = set(buckets)
    if set(map(type, distinct)) != {str} or set(map(type, keys)) != {str} or "" in keys:
        return None
    prefixes = {bucket: _plain_prefix(bucket, max_bytes) for bucket in distinct}
    if None in prefixes.values() or "\x00" in "".join(keys):
        return None
    try:
        raw = list(map(str.encode, keys))
    except UnicodeEncodeError:
        return None
    if max(map(len, raw)) > max_bytes:
        return None
    heads = (itertools.repeat(prefixes[buckets[0]]) if len(prefixes) == 1
             else map(prefixes.__getitem__, buckets))
    return list(map(b"".join, zip(heads, raw, itertools.repeat(b"\x00"))))


def _plain_prefix(bucket: str, max_bytes: int) -> bytes | None:
    """The encoded tag and bucket that start an object key, for a valid bucket that needs no
    escaping; else ``None``."""
    try:
        raw = bucket.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if not raw or len(raw) > max_bytes or b"\x00" in raw:
        return None
    return TAG_OBJECT + b"\x02" + raw + b"\x00\x02"


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
        if value.startswith(BYTES_PREFIX):
            raise InvalidArgumentError(f"a str {what} may not begin with {BYTES_PREFIX!r} (the "
                                       f"text form of bytes names): give bytes")
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
            if not -INT_BIAS <= term < INT_BIAS:
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


def check_expiry(ttl: Any, expires_at: Any, now_s: float) -> int:
    """Expiry (unix seconds, 0 = never) for a ``ttl`` in seconds or an ``expires_at`` in Unix
    seconds (one of them at most; an ``expires_at`` already past is kept: such an object is
    expired at once)."""
    if expires_at is None:
        return check_ttl(ttl, now_s)
    if ttl is not None:
        raise InvalidArgumentError("give ttl or expires_at, not both")
    if (isinstance(expires_at, bool) or not isinstance(expires_at, (int, float))
            or not math.isfinite(expires_at) or expires_at <= 0):
        raise InvalidArgumentError(f"expires_at must be Unix seconds > 0, not {expires_at!r}")
    expiry = int(math.ceil(expires_at))
    if expiry >= 2**32:
        raise InvalidArgumentError(f"expires_at {expires_at!r} is after the year 2106")
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
