"""Which Ledger entries a split shard's child owns: the partitions of one run.

A child of a split starts from its parent's files by reference (see
:mod:`leveled_ray.cluster.split`), so those files hold the other child's keys too. The child's
manifest records the run it owns as the setting ``owns`` (``"key:1024-2048"``: the routing rule's
``route_by``, and the run ``[start, end)`` of partitions); every read of an inherited file leaves
out the entries it does not own, and merges and journal compaction drop them as they rewrite.

An index entry belongs where its object does: it is routed by the object Ledger key of its
bucket and key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import xxhash

from ..errors import CorruptObjectError, WrongShardError
from .keys import TAG_OBJECT, decode_key, object_key
from .routing import PARTITIONS, check_route_by, routing_key

#: The manifest setting that records a child's run.
SETTING = "owns"


class Owns(NamedTuple):
    """The partitions ``[start, end)`` a shard owns, under ``route_by``."""

    route_by: str
    start: int
    end: int

    def encode(self) -> str:
        return f"{self.route_by}:{self.start}-{self.end}"

    @classmethod
    def decode(cls, text: str | None) -> Owns | None:
        """The run a manifest's setting records (``None``: the store owns every key)."""
        if text is None:
            return None
        try:
            route_by, run = text.split(":")
            start, end = (int(x) for x in run.split("-"))
            check_route_by(route_by)
        except Exception:
            raise CorruptObjectError("manifest", 0, f"damaged owns setting {text!r}") from None
        if not 0 <= start < end <= PARTITIONS:
            raise CorruptObjectError("manifest", 0, f"damaged owns setting {text!r}")
        return cls(route_by, start, end)

    def owns(self, lkey: bytes) -> bool:
        """Whether this run holds the Ledger entry ``lkey`` (an object's or an index entry's)."""
        part = xxhash.xxh3_64_intdigest(routing_key(owner_key(lkey), self.route_by))
        return self.start <= part % PARTITIONS < self.end

    def refuse_others(self, lkeys: list[bytes], url: str) -> None:
        """Raise :class:`WrongShardError` if any of ``lkeys`` is not this run's."""
        if lkeys and not self.mask(lkeys).all():
            raise WrongShardError(f"the shard at {url} owns partitions {self.start} to "
                                  f"{self.end - 1} only: a key was routed by an older shard map")

    def mask(self, lkeys: Iterable[bytes]) -> np.ndarray:
        """:meth:`owns` of each key, as a bool array."""
        digest, route_by = xxhash.xxh3_64_intdigest, self.route_by
        parts = np.fromiter((digest(routing_key(owner_key(k), route_by)) % PARTITIONS
                             for k in lkeys), dtype=np.int64)
        return (parts >= self.start) & (parts < self.end)


def owner_key(lkey: bytes) -> bytes:
    """The object Ledger key an entry is routed by: its own, or its index entry's object's."""
    if lkey[:1] == TAG_OBJECT:
        return lkey
    _, bucket, _field, _term, key = decode_key(lkey)
    return object_key(bucket, key)
