"""Key ranges of queries, and decoding object keys in bulk (pure functions).

Every range is half-open, ``[lo, hi)`` over encoded Ledger keys. Part encodings delimit
themselves (see :mod:`leveled_ray.codec`), so ``encoded + b"\\x00"`` is the smallest key after
``encoded``, and ``prefix + b"\\x04"`` is above every key that extends ``prefix`` by one more
part (part type codes are 0 to 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import TAG_INDEX, TAG_OBJECT, check_name, encode_key, split_object_key, utf8_size
from ..codec.name_text import texts_array
from ..errors import InvalidArgumentError

_AFTER = b"\x00"
_ABOVE_PARTS = b"\x04"
_STR = b"\x02"  # the type byte of a part given as str
#: A slice end past any name (slices take a stop).
_NO_END = 1 << 30


def object_range(bucket=None, start=None, end=None, *,
                 max_key_bytes: int = 1 << 16) -> tuple[bytes, bytes]:
    """Objects of ``bucket`` (all buckets when ``None``) with ``start <= key <= end``; either
    bound may be ``None`` (open)."""
    if bucket is None:
        if start is not None or end is not None:
            raise InvalidArgumentError("start and end need a bucket")
        return TAG_OBJECT, bytes([TAG_OBJECT[0] + 1])
    bucket = check_name(bucket, "bucket", max_key_bytes)
    prefix = encode_key(TAG_OBJECT, bucket)
    lo = prefix if start is None else encode_key(
        TAG_OBJECT, bucket, check_name(start, "start", max_key_bytes))
    hi = prefix + _ABOVE_PARTS if end is None else encode_key(
        TAG_OBJECT, bucket, check_name(end, "end", max_key_bytes)) + _AFTER
    return lo, hi


def next_bucket(bucket) -> bytes:
    """The first object key after every key of ``bucket``."""
    return encode_key(TAG_OBJECT, bucket) + _ABOVE_PARTS


def check_term(field: str, term, what: str):
    """A term of the type ``field``'s suffix says: ``str`` for ``_bin``, ``int`` for ``_int``."""
    if not isinstance(field, str) or not field.endswith(("_bin", "_int")):
        raise InvalidArgumentError(f"index field {field!r} must be a str ending in _bin or _int")
    utf8_size(field, "index field")
    if field.endswith("_bin"):
        if not isinstance(term, str):
            raise InvalidArgumentError(f"{what} of {field!r} must be a str, not {term!r}")
        utf8_size(term, what)
    elif not isinstance(term, int) or isinstance(term, bool):
        raise InvalidArgumentError(f"{what} of {field!r} must be an int, not {term!r}")
    return term


def index_range(bucket, field: str, start, end, start_key=None, *,
                max_key_bytes: int = 1 << 16) -> tuple[bytes, bytes]:
    """Index entries of ``(bucket, field)`` with ``start <= term <= end``; with ``start_key``,
    only those after ``(start, start_key)`` (to continue a paged query)."""
    bucket = check_name(bucket, "bucket", max_key_bytes)
    check_term(field, start, "start")
    check_term(field, end, "end")
    if start_key is None:
        lo = encode_key(TAG_INDEX, bucket, field, start)
    else:
        start_key = check_name(start_key, "start_key", max_key_bytes)
        lo = encode_key(TAG_INDEX, bucket, field, start, start_key) + _AFTER
    return lo, encode_key(TAG_INDEX, bucket, field, end) + _ABOVE_PARTS


def index_prefix(bucket, field: str) -> bytes:
    return encode_key(TAG_INDEX, bucket, field)


class Names:
    """The buckets and keys of object Ledger keys, decoded in bulk.

    ``buckets`` and ``keys`` are binary arrays (UTF-8 for names given as ``str``);
    ``bucket_str`` / ``key_str`` say which rows were ``str``.
    """

    def __init__(self, lkeys: pa.Array):
        self._bucket = None  # the one bucket of every row, when :meth:`_one_bucket` found it
        if len(lkeys) and self._one_bucket(lkeys):
            return
        # A key without escaped zero bytes splits at its zeros into exactly three parts:
        # tag, type and bucket | type and key | nothing.
        parts = pc.split_pattern(lkeys, pattern=b"\x00")
        n = len(lkeys)
        flat = pc.list_flatten(parts)
        if n and not (pc.all(pc.equal(pc.list_value_length(parts), 3)).as_py()
                      and len(flat) == 3 * n):
            self._decode_slowly(lkeys)
            return
        firsts = flat.take(np.arange(0, 3 * n, 3))
        seconds = flat.take(np.arange(1, 3 * n, 3))
        self.buckets = pc.binary_slice(firsts, 2, _NO_END)
        self.keys = pc.binary_slice(seconds, 1, _NO_END)
        self.bucket_str = pc.equal(pc.binary_slice(firsts, 1, 2), _STR).to_numpy(
            zero_copy_only=False) if n else np.zeros(0, bool)
        self.key_str = pc.equal(pc.binary_slice(seconds, 0, 1), _STR).to_numpy(
            zero_copy_only=False) if n else np.zeros(0, bool)

    def _one_bucket(self, lkeys: pa.Array) -> bool:
        """The common case, at a fraction of the cost: every key has the first key's bucket
        and key type, and no zero byte in its key. Then each key is a slice at a fixed
        offset, and the buckets one value."""
        first = lkeys[0].as_py()
        end = first.find(b"\x00", 2)  # the bucket's terminator (or an escaped zero in it)
        if end < 0 or len(first) < end + 3:
            return False
        prefix = first[:end + 2]  # tag, bucket type, bucket, terminator, key type
        if not pc.all(pc.starts_with(lkeys, pattern=prefix)).as_py():
            return False
        keys = pc.binary_slice(lkeys, len(prefix), -1)  # each key ends with its terminator
        if pc.any(pc.match_substring(keys, pattern=b"\x00")).as_py():
            return False  # an escaped zero byte, in a key or in the bucket
        n = len(lkeys)
        self._bucket = split_object_key(first)[0]
        self.keys = keys
        self.bucket_str = np.full(n, isinstance(self._bucket, str))
        self.key_str = np.full(n, prefix[-1:] == _STR)
        self.buckets = pa.repeat(pa.scalar(first[2:end], pa.binary()), n)
        return True

    def _decode_slowly(self, lkeys: pa.Array) -> None:
        pairs = [split_object_key(k) for k in lkeys.to_pylist()]
        self.bucket_str = np.array([isinstance(b, str) for b, _ in pairs], dtype=bool)
        self.key_str = np.array([isinstance(k, str) for _, k in pairs], dtype=bool)
        self.buckets = pa.array([b.encode() if isinstance(b, str) else b for b, _ in pairs],
                                pa.binary())
        self.keys = pa.array([k.encode() if isinstance(k, str) else k for _, k in pairs],
                             pa.binary())

    def arrow(self, binary: bool) -> tuple[pa.Array, pa.Array]:
        """``(bucket, key)`` columns: ``binary`` (each name's bytes, UTF-8 for a ``str``), or
        ``string``, each name in its text form (see :mod:`~leveled_ray.codec.name_text`)."""
        if binary:
            return self.buckets, self.keys
        return texts_array(self.buckets, self.bucket_str), texts_array(self.keys, self.key_str)

    def python(self) -> tuple[list, list]:
        """``(buckets, keys)`` as the ``str`` / ``bytes`` values they were written as."""
        return self.python_slices()(0, len(self.keys))

    def python_slices(self) -> Callable[[int, int], tuple[list, list]]:
        """A function of ``(lo, count)`` giving :meth:`python` of those rows, with the work
        every slice shares (checks, casts) done once, here: many small slices of one large
        ``Names`` cost little more than one conversion of it."""
        one_bucket = self._bucket
        buckets = None if one_bucket is not None else _Written(self.buckets, self.bucket_str)
        keys = _Written(self.keys, self.key_str)

        def names(lo: int, count: int) -> tuple[list, list]:
            found = keys.slice(lo, count)
            return ([one_bucket] * len(found) if buckets is None
                    else buckets.slice(lo, count)), found
        return names


class _Written:
    """A column of names as they were written (``str`` where ``is_str``), made Python
    objects a slice at a time."""

    def __init__(self, values: pa.Array, is_str: np.ndarray):
        self.mixed = None  # the rows' is_str, where some names are str and some bytes
        if is_str.all():
            values = values.cast(pa.string())
        elif is_str.any():
            self.mixed = is_str
        self.values = values

    def slice(self, lo: int, count: int) -> list:
        raw = self.values.slice(lo, count).to_pylist()
        if self.mixed is None:
            return raw
        return [v.decode() if s else v
                for v, s in zip(raw, self.mixed[lo:lo + count].tolist())]


def term_from_text(field_name: str, text):
    """A term given as text (a Spark option, a command-line argument) in the type
    ``field_name`` takes: ``*_int`` fields take integers."""
    if text is None or not field_name.endswith("_int") or isinstance(text, int):
        return text
    if not re.fullmatch(r"-?\d+", str(text).strip()):
        raise InvalidArgumentError(f"field {field_name!r} takes int terms, not {text!r}")
    return int(text)
