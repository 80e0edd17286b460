"""Changes: the user's :class:`Put` and :class:`Delete`, and the validated :class:`Change`
that travels from the client to the Bookie.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import xxhash

from ..errors import InvalidArgumentError
from .checks import (
    check_expiry,
    check_indexes,
    check_metadata,
    check_name,
    check_sqn,
    check_value,
)
from .keys import object_key
from .name_text import BYTES_PREFIX

#: Change operations (journal entry types share these numbers).
OP_PUT = 0


OP_DELETE = 1


OP_KEY_DELTA = 2


#: A transaction's check of a key it read and does not write: its condition is checked with
#: the writes', and nothing is written for it (see :mod:`leveled_ray.client.transaction`).
OP_CHECK = 3


#: A transaction's check of a key range it read (see :func:`range_check`): written nowhere.
OP_RANGE = 4


#: Condition codes carried with a change.
NO_CONDITION = -2


IF_ABSENT = -1


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
    #: When the object expires, in Unix seconds (rounded up to a whole second), instead of a
    #: ``ttl``: what a copy of an object keeps (replication, a revert), so its expiry is the
    #: source's to the second, however long the copy took.
    expires_at: float | None = None


class Delete(NamedTuple):
    """One object delete for :meth:`Store.put_many` (index entries to remove may be given)."""

    bucket: str | bytes
    key: str | bytes
    indexes: Sequence[tuple] = ()
    if_sqn: int | None = None


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
            expires_at=item.expires_at,
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
               if_sqn=None, if_absent=False, expires_at=None) -> tuple[Change, bytes]:
    if (type(bucket) is str and type(key) is str and type(value) is bytes and not indexes
            and ttl is None and expires_at is None and metadata is None and if_sqn is None
            and if_absent is False
            and len(bucket) > 0 and len(key) > 0 and len(value) <= limits.max_value_bytes
            and len(bucket) + len(key) <= limits.max_key_bytes // 4
            and not key.startswith(BYTES_PREFIX) and not bucket.startswith(BYTES_PREFIX)):
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
        check_expiry(ttl, expires_at, now_s), check_metadata(metadata),
        _condition(if_sqn, if_absent),
    ), value


def delete_change(bucket, key, limits, *, indexes=(), if_sqn=None) -> tuple[Change, None]:
    bucket = check_name(bucket, "bucket", limits.max_key_bytes)
    key = check_name(key, "key", limits.max_key_bytes)
    return Change(OP_DELETE, object_key(bucket, key), 0, 0, check_indexes(indexes), 0, b"",
                  _condition(if_sqn, False)), None


def check_change(lkey: bytes, sqn: int | None) -> Change:
    """A check that key ``lkey`` is still as a transaction read it: at SQN ``sqn``, or absent
    (``None``)."""
    return Change(OP_CHECK, lkey, 0, 0, (), 0, b"", IF_ABSENT if sqn is None else sqn)


#: A range check's condition: the live objects in it, with their SQNs (a fold); or only which
#: keys are there (an index query's range of index entries: their SQNs are not the objects').
RANGE_OF_OBJECTS, RANGE_OF_KEYS = 0, 1


def range_check(lo: bytes, hi: bytes, found: Iterable[tuple[bytes, int]],
                kind: int = RANGE_OF_OBJECTS) -> Change:
    """A check that the live Ledger entries with keys in ``[lo, hi)`` are still ``found``, as
    ``(key, SQN)`` pairs in key order (SQNs 0 for ``RANGE_OF_KEYS``): none added, removed or
    written since. It carries ``lo`` as its key, ``hi`` as its extra, ``kind`` as its
    condition, and the pairs' count and digest (:func:`range_digest`) as its size and hash."""
    count, digest = range_digest(found)
    return Change(OP_RANGE, lo, count, digest, (), 0, hi, kind)


def range_digest(found: Iterable[tuple[bytes, int]]) -> tuple[int, int]:
    """How many ``(key, SQN)`` pairs there are, and a hash of them in order."""
    h = xxhash.xxh3_64()
    count = 0
    for lkey, sqn in found:
        h.update(len(lkey).to_bytes(4, "big") + lkey + int(sqn).to_bytes(8, "big"))
        count += 1
    return count, h.intdigest()


def is_check(change: Change) -> bool:
    """Whether a change is a transaction's check of a key or a range: it writes nothing."""
    return change.op >= OP_CHECK


def written(changes: list[Change]) -> list[Change]:
    """The changes that write, without a transaction's checks."""
    return [c for c in changes if c.op < OP_CHECK]


def keyed(changes: list[Change]) -> list[Change]:
    """The changes of one key each: without a transaction's range checks."""
    return [c for c in changes if c.op != OP_RANGE]


def value_hash(value: bytes) -> int:
    return xxhash.xxh3_64_intdigest(value)


def check_put_size(changes: list[Change], options) -> int:
    """The group's size in bytes; one group must fit in one journal file."""
    total = sum(c.size + len(c.lkey) for c in changes)
    limit = options.journal.max_file_bytes
    if total > limit:
        raise InvalidArgumentError(
            f"put_many of {total} bytes is over journal.max_file_bytes={limit}: "
            "one group is one journal file; split it or raise the option"
        )
    return total
