"""A snapshot of a sharded store: one snapshot per shard, read as one store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from ..client.snapshot import Snapshot
from ..codec import Head, checked_key
from ..files.sync import with_sync_twins
from ..manifest.shard_map import ShardMap
from ..options import Options
from ..read.merged import MergedView
from ..read.queries import Queries
from .fanout import per_shard


@with_sync_twins
class ShardedSnapshot(Queries):
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

    def _of(self, bucket, key) -> Snapshot:
        return self.parts[self.shard_map.shard_of(checked_key(bucket, key, self.options))]

    async def get_async(self, bucket, key) -> bytes | None:
        return await self._of(bucket, key).get_async(bucket, key)

    async def head_async(self, bucket, key) -> Head | None:
        return await self._of(bucket, key).head_async(bucket, key)

    async def _many(self, pairs: Iterable[Sequence], call: str) -> list:
        return await per_shard(self.parts, list(pairs), self.options, self.shard_map, call)

    async def get_many_async(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        return await self._many(pairs, "get_many_async")

    async def head_many_async(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        return await self._many(pairs, "head_many_async")

    async def _query_view_async(self, needs_values: bool):
        return MergedView([part._view_for(needs_values) for part in self.parts]), None

    async def release_async(self) -> None:
        """End every shard's snapshot (idempotent)."""
        await asyncio.gather(*(part.release_async() for part in self.parts))
