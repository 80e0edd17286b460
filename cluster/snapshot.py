"""A snapshot of a sharded store: one snapshot per shard, read as one store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from .. import roles
from ..client.snapshot import Snapshot
from ..errors import InvalidArgumentError
from ..files.sync import with_sync_twins
from ..manifest.shard_map import ShardMap
from ..options import Options
from ..read.changes import shard_positions
from ..read.merged import MergedView
from ..read.queries import Queries
from .fanout import RoutedKeyReads
from .past import positions_at_time


@with_sync_twins
class ShardedSnapshot(RoutedKeyReads, Queries, roles.SnapshotView):
    """Every shard's :class:`~leveled_ray.client.snapshot.Snapshot`, read as one store.
    Picklable; a context manager. ``parts[s]`` is shard ``s``'s snapshot, and ``sqns`` the
    SQN each shard's snapshot holds up to."""

    def __init__(self, parts: Sequence[Snapshot], shard_map: ShardMap, options: Options):
        self.parts = tuple(parts)
        self.shard_map = shard_map
        self.options = options

    def __repr__(self) -> str:
        return f"ShardedSnapshot(sqns={self.sqns})"

    def __enter__(self) -> ShardedSnapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @property
    def sqns(self) -> dict[int, int]:
        """Shard -> the SQN its part holds every change up to."""
        return {s: part.sqn for s, part in enumerate(self.parts)}

    @property
    def sqn(self) -> dict[str, int]:
        """Where this snapshot holds every change up to, as a position ``{"0": sqn, ...}``
        (what ``changes`` and ``listen`` take as ``after``)."""
        return self.shard_map.position(part.sqn for part in self.parts)

    async def go_back_async(self, at_sqn=None, at_time: float | None = None
                            ) -> ShardedSnapshot:
        """Make this snapshot show the store as it was at position ``at_sqn`` (``{"0": sqn,
        ...}``), or at Unix time ``at_time`` (each shard as it was then, less the cross-shard
        batches not applied by then on every shard they span: see :mod:`.past`), within the
        history the Journal keeps; returns it. Exactly one of them. Cost: the plain call's on
        each shard, at once (for ``at_time``, after reading where each shard's batches
        were applied)."""
        if (at_sqn is None) == (at_time is None):
            raise InvalidArgumentError("give one of at_sqn and at_time")
        sqns = (shard_positions(at_sqn, self.shard_map.labels, "at_sqn") if at_sqn is not None
                else await positions_at_time([p._view_for(True) for p in self.parts], at_time,
                                             self.shard_map.labels))
        await asyncio.gather(*(part.go_back_async(sqn) for part, sqn in zip(self.parts, sqns)))
        return self

    async def _query_view_async(self, needs_values: bool):
        return MergedView([part._view_for(needs_values) for part in self.parts]), None

    def _release_soon(self) -> None:
        """End every shard's snapshot without waiting. Cost: one call sent per shard."""
        for part in self.parts:
            part._release_soon()

    async def release_async(self) -> None:
        """End every shard's snapshot (idempotent). Cost: one round trip per shard, at
        once."""
        await asyncio.gather(*(part.release_async() for part in self.parts))
