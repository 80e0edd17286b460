"""Routing of a sharded store: which shard holds ``(bucket, key)``. A pure function.

Rule ``xxh3-v1`` (recorded in the shard map, so a later rule can sit beside it):

1. The *routing key* is the object's Ledger key (:func:`~.keys.object_key`: the tag ``o`` and
   the encoded bucket and key) or, with ``route_by="bucket"``, only its bucket part (the same
   bytes up to the end of the bucket), so that a bucket's objects stay in one shard (Riak's
   bucket-only hash).
2. Its *partition* is ``xxh3_64(routing key) % PARTITIONS``: a fixed 4096, whatever the count of
   shards.
3. Each shard owns one contiguous run of partitions: shard ``s`` of ``n`` owns partitions
   ``[s * 4096 // n, (s + 1) * 4096 // n)``. A later split of one shard then moves only its own
   partitions.

An object's index entries live with the object, in the same shard.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np
import xxhash

from ..errors import InvalidArgumentError
from .keys import TAG_OBJECT, encode_key, object_key

PARTITIONS = 4096
RULE = "xxh3-v1"
#: What a shard is chosen by: the whole key, or the bucket alone.
ROUTE_BY = ("key", "bucket")
#: Most shards of one store, and the counts allowed: powers of two.
MAX_SHARDS = 256


def check_shards(shards) -> int:
    """``shards``, refused unless it is an int that is a power of two from 1 to 256."""
    ok = (isinstance(shards, int) and not isinstance(shards, bool) and 1 <= shards <= MAX_SHARDS
          and shards & (shards - 1) == 0)
    if not ok:
        raise InvalidArgumentError(f"shards must be a power of two from 1 to {MAX_SHARDS}, "
                                   f"not {shards!r}")
    return shards


def check_route_by(route_by) -> str:
    if route_by not in ROUTE_BY:
        raise InvalidArgumentError(f"route_by must be one of {ROUTE_BY}, not {route_by!r}")
    return route_by


def partition_runs(shards: int) -> list[tuple[int, int]]:
    """Each shard's run of partitions, ``[start, end)``, in shard order."""
    return [(s * PARTITIONS // shards, (s + 1) * PARTITIONS // shards) for s in range(shards)]


def routing_key(lkey: bytes, route_by: str) -> bytes:
    """The bytes an object's Ledger key is routed by."""
    if route_by == "key":
        return lkey
    return lkey[:_bucket_end(lkey)]


def _bucket_end(lkey: bytes) -> int:
    """The end of the encoded bucket (a str or bytes part) in an object Ledger key."""
    pos = 2
    while True:
        zero = lkey.index(b"\x00", pos)
        if zero + 1 < len(lkey) and lkey[zero + 1] == 0xFF:  # an escaped zero byte
            pos = zero + 2
            continue
        return zero + 1


def partition_of(lkey: bytes, route_by: str = "key") -> int:
    """The partition of an object Ledger key."""
    return xxhash.xxh3_64_intdigest(routing_key(lkey, route_by)) % PARTITIONS


def shard_of_partition(partition: int, runs: list[tuple[int, int]]) -> int:
    """The shard whose run holds ``partition``."""
    return bisect.bisect_right([start for start, _ in runs], partition) - 1


def shards_of(lkeys: Iterable[bytes], runs: list[tuple[int, int]], route_by: str = "key"
              ) -> np.ndarray:
    """The shard of each object Ledger key, as an int array (one hash per key, then one
    vectorised search)."""
    digest = xxhash.xxh3_64_intdigest
    parts = np.fromiter((digest(routing_key(k, route_by)) % PARTITIONS for k in lkeys),
                        dtype=np.int64)
    starts = np.array([start for start, _ in runs], dtype=np.int64)
    return np.searchsorted(starts, parts, side="right") - 1


def shard_of(bucket, key, runs: list[tuple[int, int]], route_by: str = "key") -> int:
    """The shard of ``(bucket, key)``."""
    return shard_of_partition(partition_of(object_key(bucket, key), route_by), runs)


def bucket_shard(bucket, runs: list[tuple[int, int]]) -> int:
    """With ``route_by="bucket"``: the one shard that holds all of ``bucket``."""
    prefix = encode_key(TAG_OBJECT, bucket)
    return shard_of_partition(xxhash.xxh3_64_intdigest(prefix) % PARTITIONS, runs)
