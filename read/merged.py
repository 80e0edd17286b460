"""Several shards' points in time read as one store (Riak's coverage queries).

A :class:`MergedView` answers the range reads of :mod:`.queries` (``scan``, ``values``,
``in_turn``) over the views of a consistent cut, one per shard. Shards hold disjoint keys, so
a merged scan is a k-way merge of the shards' scans in key order (:func:`~.scan.merge_sorted`),
with a ``shard`` column that says where each row came from: the values of a batch are then
fetched from each shard's Journal by its own SQNs, at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .point_in_time import PointInTime
from .scan import merge_sorted

SHARD = "shard"


class _Tagged:
    """One shard's scan as a source of :func:`merge_sorted`, each table tagged with the
    shard's number."""

    def __init__(self, tables: AsyncIterator[pa.Table], shard: int):
        self._tables, self._shard = tables, shard

    async def next(self) -> pa.Table | None:
        table = await anext(self._tables, None)
        if table is None:
            return None
        return table.append_column(SHARD, pa.array(np.full(table.num_rows, self._shard,
                                                           dtype=np.int32)))

    async def close(self) -> None:
        await self._tables.aclose()


def _by_key(parts: list[pa.Table]) -> pa.Table:
    """A window's parts from several shards in key order (their keys never repeat)."""
    table = pa.concat_tables(parts).combine_chunks()
    return table.take(pc.sort_indices(table, [("key", "ascending")]))


class MergedView:
    """The views of several shards, read as one. ``views[s]`` is shard ``s``'s."""

    def __init__(self, views: Sequence[PointInTime]):
        self.views = tuple(views)
        self.options = self.views[0].options
        self.clock = self.views[0].clock

    def scan(self, lo: bytes, hi: bytes, **kwargs) -> AsyncIterator[pa.Table]:
        """Every shard's scan of ``[lo, hi)`` merged in key order, with a ``shard`` column."""
        now_s = kwargs.pop("now_s", None)
        now_s = self.clock() if now_s is None else now_s  # one moment for every shard
        sources = [_Tagged(view.scan(lo, hi, now_s=now_s, **kwargs), shard)
                   for shard, view in enumerate(self.views)]
        return merge_sorted(sources, _by_key)

    async def values(self, rows: pa.Table) -> pa.Array:
        """The values of merged rows, in row order: each shard's by its own SQNs, all shards
        at once."""
        shards = rows.column(SHARD).to_numpy()
        sqns = rows.column("sqn").to_numpy()
        wanted = np.unique(shards)
        found = await asyncio.gather(*(
            self.views[s].values(pa.table({"sqn": sqns[shards == s]})) for s in wanted))
        if len(wanted) == 1:
            return found[0]
        order = np.concatenate([np.flatnonzero(shards == s) for s in wanted])
        merged = pa.concat_arrays([f.combine_chunks() if isinstance(f, pa.ChunkedArray) else f
                                   for f in found])
        return merged.take(pa.array(np.argsort(order, kind="stable")))

    async def in_turn(self, make: Callable[[PointInTime], AsyncIterator]) -> AsyncIterator:
        """``make(view)`` of each shard's view, one shard after another."""
        for view in self.views:
            async with contextlib.aclosing(make(view)) as items:
                async for item in items:
                    yield item
