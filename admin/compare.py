"""Compare two stores: which keys differ, found by Riak's exchange of tictac trees
(``aae_exchange``) rather than by reading both stores side by side.

Each side is a point in time of a store of any kind (a plain or sharded store, a snapshot, a
checkpoint's reader, a backup or a clone opened as a reader): any
:class:`~leveled_ray.read.queries.Queries`. Keys are compared as their Ledger keys, so a
``str`` and a ``bytes`` name are two keys, and any bytes compare. A side folds its heads
once into a tictac tree (:mod:`leveled_ray.codec.tictac`). The exchange then moves only
what it needs between the sides, and counts it:

1. the two roots (one hash per branch);
2. the branches whose hashes differ (one hash per segment);
3. the keys and value hashes of at most ``max_segments`` dirty segments per round, until every
   dirty segment is compared: each side folds those segments again, reading only the SST
   blocks whose segment hints hold them.

Objects in :data:`REPLICATION_BUCKET` (a replica's positions) are left out. A side of the
whole store starts from the tree its store keeps (``kept_tree_async``: see
:mod:`leveled_ray.codec.kept_tree`): a running store's Penciller keeps one as writes land, and
a store at rest has the one saved at its close. Where there is none it may use (trees off or
being rebuilt, objects with a TTL, a range compare, a view of a past time), the side folds its
heads once (no values), a sharded one each shard at once, XOR-merging their trees;
:attr:`Comparison.kept_sides` counts the sides that did not fold. The bytes exchanged are what
a compare across a network would send.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..codec.kept_tree import REPLICATION_BUCKET
from ..codec.keys import object_key, split_object_key
from ..codec.tictac import (
    BRANCH_WIDTH,
    DEFAULT_SIZE,
    TicTacTree,
    check_size,
    dirty_branches,
    dirty_segments,
    tree_key_hashes,
)
from ..errors import InvalidArgumentError, LeveledError
from ..read.key_ranges import object_range

log = logging.getLogger(__name__)
#: Kinds of difference.
MISSING_IN_A, MISSING_IN_B, DIFFERENT = "missing_in_a", "missing_in_b", "different"


@dataclass(frozen=True)
class Difference:
    """A key that differs: absent from side ``a`` or ``b``, or held with another value."""

    bucket: str | bytes  # as written: "k" and b"k" are two keys
    key: str | bytes
    kind: str


@dataclass
class Comparison:
    """What :func:`compare_views` found: the differing keys (sorted), the rounds of the
    exchange, the bytes the sides exchanged, and the dirty segments compared."""

    differences: list[Difference] = field(default_factory=list)
    rounds: int = 0
    bytes_exchanged: int = 0
    dirty_segments: int = 0
    #: Sides whose tree was a kept one (0, 1 or 2); the others were folded.
    kept_sides: int = 0

    def __len__(self) -> int:
        return len(self.differences)

    @property
    def equal(self) -> bool:
        return not self.differences


class FoldedSide:
    """One side of a compare: its heads folded into a tree; the keys of dirty segments are
    folded again when asked for, reading only the blocks that may hold them."""

    def __init__(self, size: str, views: list, span: tuple):
        self.tree = TicTacTree(size)
        self.size, self.views, self.span = size, views, span
        self.kept = False  # the tree was the store's kept one, not folded

    @classmethod
    async def fold(cls, view, size: str, span: tuple = (None, None, None)) -> FoldedSide:
        """``view``'s side, of the objects in ``span`` (``(bucket, start, end)`` as a fold
        takes them: all ``None`` for the whole store). A sharded view (a sharded snapshot or
        reader: one part per shard) folds its shards at once, and its tree is the XOR merge
        of theirs: the shards hold disjoint keys, so it equals the tree of all their keys."""
        side = cls(size, list(getattr(view, "parts", None) or [view]), span)
        if span == (None, None, None) and (kept := await _kept_tree(view, size)) is not None:
            side.tree, side.kept = kept, True
            return side
        for tree in await asyncio.gather(*(side._fold_tree(v) for v in side.views)):
            side.tree = side.tree.merge(tree)
        return side

    async def _fold_tree(self, view) -> TicTacTree:
        tree = TicTacTree(self.size)
        async for batch in self._heads(view):
            tree.add_hashes(_key_hashes(batch), _value_hashes(batch))
        return tree

    def _heads(self, view, segments=None):
        return _own_objects(view._fold_entries_async(*self.span, segments=segments,
                                                     tree_size=self.size))

    async def entries(self, segments: list[int]) -> dict[bytes, int]:
        """Ledger key -> value hash of the entries in ``segments``: a fold of those segments
        of each view, read from the blocks that may hold them."""
        out = {}
        for view in self.views:
            async for table in self._heads(view, segments):
                out.update(zip(table.column("key").to_pylist(), _value_hashes(table).tolist()))
        return out


async def _kept_tree(view, size: str) -> TicTacTree | None:
    """``view``'s kept tree, or ``None`` (also if it could not be had: the side folds)."""
    kept = getattr(view, "kept_tree_async", None)
    if kept is None:
        return None
    try:
        return await kept(size)
    except (LeveledError, OSError):
        log.warning("a kept tree could not be had: folding instead", exc_info=True)
        return None


#: The start of every Ledger key of :data:`REPLICATION_BUCKET`.
_OWN_PREFIX = object_key(REPLICATION_BUCKET, "")[:-2]  # its bucket, to its end


async def _own_objects(tables):
    """The Ledger rows, less leveled-ray's own objects (:data:`REPLICATION_BUCKET`)."""
    async for table in tables:
        keys = table.column("key").to_pylist()
        if any(k.startswith(_OWN_PREFIX) for k in keys):
            table = table.filter(pa.array([not k.startswith(_OWN_PREFIX) for k in keys]))
        yield table


def _key_hashes(table) -> np.ndarray:
    return tree_key_hashes(table.column("key").to_pylist())


def _value_hashes(table) -> np.ndarray:
    return table.column("hash").to_numpy(zero_copy_only=False).astype(np.uint64)


def entry_bytes(entries: dict[bytes, int]) -> int:
    """What sending these entries costs: each key's bytes and an 8-byte hash."""
    return sum(len(k) + 8 for k in entries)


async def compare_views(a, b, *, size: str = DEFAULT_SIZE, max_segments: int = 256,
                        bucket=None, start=None, end=None) -> Comparison:
    """The keys that differ between views ``a`` and ``b`` (see the module docstring), among
    the objects of ``bucket`` from ``start`` to ``end`` if given (a range tree, as leveled's
    ``tictactree_obj``), else among all."""
    check_size(size)
    if not isinstance(max_segments, int) or isinstance(max_segments, bool) or max_segments < 1:
        raise InvalidArgumentError(f"max_segments must be a positive int, not {max_segments!r}")
    object_range(bucket, start, end)  # bad names or a range without its bucket: refused now
    span = (bucket, start, end)
    side_a, side_b = await asyncio.gather(FoldedSide.fold(a, size, span),
                                          FoldedSide.fold(b, size, span))
    root_a, root_b = side_a.tree.root(), side_b.tree.root()
    out = Comparison(rounds=1, bytes_exchanged=len(root_a) + len(root_b),
                     kept_sides=side_a.kept + side_b.kept)
    segments: list[int] = []
    branches = dirty_branches(root_a, root_b)
    if branches:
        out.rounds += 1
    for branch in branches:
        out.bytes_exchanged += 2 * 4 * BRANCH_WIDTH
        segments += dirty_segments(branch, side_a.tree.branch(branch), side_b.tree.branch(branch))
    out.dirty_segments = len(segments)
    for start in range(0, len(segments), max_segments):
        chunk = segments[start:start + max_segments]
        held_a, held_b = await asyncio.gather(side_a.entries(chunk), side_b.entries(chunk))
        out.rounds += 1
        out.bytes_exchanged += 4 * len(chunk) + entry_bytes(held_a) + entry_bytes(held_b)
        for lkey in sorted(held_a.keys() | held_b.keys()):
            if lkey not in held_b:
                out.differences.append(Difference(*split_object_key(lkey), MISSING_IN_B))
            elif lkey not in held_a:
                out.differences.append(Difference(*split_object_key(lkey), MISSING_IN_A))
            elif held_a[lkey] != held_b[lkey]:
                out.differences.append(Difference(*split_object_key(lkey), DIFFERENT))
    out.differences.sort(key=lambda d: object_key(d.bucket, d.key))  # Ledger key order
    return out
