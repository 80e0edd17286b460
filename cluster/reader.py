"""``lr.reader(url)`` on a sharded store: one reader per shard, all at the same checkpoint id,
read as one store without Ray."""

from __future__ import annotations

import asyncio

from .. import roles, roles_admin
from ..admin.checkpoint_lease import CheckpointLease
from ..client.reader import Reader
from ..codec import Head
from ..errors import InvalidArgumentError, SnapshotExpiredError
from ..files.sync import with_sync_twins
from ..read.changes import shard_positions
from ..read.history_view import check_moment
from ..read.merged import MergedView
from ..read.queries import Queries
from .admin import ShardedAdmin
from .fanout import RoutedKeyReads
from .past import positions_at_time


@with_sync_twins
class ShardedReader(RoutedKeyReads, Queries, roles.KeyReads, roles.Queries, roles.History,
                    roles_admin.Following):
    """A read-only handle on a sharded store at one checkpoint (every shard's part of it),
    from any process. Without a ``checkpoint`` it makes its own through
    :class:`~.admin.ShardedAdmin` (so only while no shard is being written), renews it while
    it reads, and deletes it on :meth:`close`. A pickled copy reads the same checkpoint and
    owns nothing."""

    def __init__(self, admin: ShardedAdmin, checkpoint: str, owns: bool,
                 lifetime: float = 600.0, at_sqns: list | None = None):
        self._admin = admin
        self.url = admin.url
        self.shard_map = admin.shard_map
        self.options = admin.options
        self.owns = owns
        self.lifetime = lifetime
        self.at_sqns = at_sqns or [None] * admin.shards
        self._follow(checkpoint)
        self.closed = False

    def _follow(self, checkpoint: str) -> None:
        """Read ``checkpoint``: every shard's part of it (and renew it, if owned)."""
        admin = self._admin
        self.checkpoint_id = checkpoint
        self.parts = [Reader(self.shard_map.shard_url(self.url, s), checkpoint, self.options,
                             self.lifetime, _owns=False, clock=admin.clock,
                             at_sqn=self.at_sqns[s])
                      for s in range(admin.shards)]
        self._leases = [CheckpointLease(admin.shard(s).manifests, checkpoint, self.lifetime,
                                        admin.clock)
                        for s in range(admin.shards)] if self.owns else []

    @property
    def manifest_id(self) -> dict[int, int | None]:
        """Shard -> the manifest version its part reads (``None`` until it first reads)."""
        return {s: part.manifest_id for s, part in enumerate(self.parts)}

    @property
    def renew_failures(self) -> int:
        """Failed renewals of its own checkpoint, over every shard."""
        return sum(lease.failures for lease in self._leases)

    async def refresh_async(self) -> None:
        """Move to a new checkpoint of the store as it is now (readers that own their
        checkpoint only, and, as any checkpoint made without Ray, only while no shard is
        being written); the old one is deleted. Cost: a sharded checkpoint and the old one's
        delete (manifest writes on every shard)."""
        if not self.owns:
            raise InvalidArgumentError("this reader follows a given checkpoint: it cannot "
                                       "move (open a new reader for a newer one)")
        if any(sqn is not None for sqn in self.at_sqns):
            raise InvalidArgumentError("a reader of an earlier moment does not move")
        old = self.checkpoint_id
        made = await self._admin.create_checkpoint_async(self.lifetime, name="reader")
        await asyncio.gather(*(part.close_async() for part in self.parts))
        self._follow(made.id)
        await self._admin.delete_checkpoint_async(old)

    def __reduce__(self):
        return (ShardedReader, (self._admin, self.checkpoint_id, False, self.lifetime,
                                self.at_sqns))

    def __enter__(self) -> ShardedReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def _ready(self) -> None:
        if self.closed:
            raise SnapshotExpiredError("the reader is closed")
        await asyncio.gather(*(lease.keep() for lease in self._leases))

    async def _query_view_async(self, needs_values: bool):
        await self._ready()
        views = await asyncio.gather(*(part._view_async(needs_values) for part in self.parts))
        return MergedView(views), None

    async def close_async(self) -> None:
        """Stop reading; an owned checkpoint is deleted (every shard's part). Cost: a manifest
        write per shard for an owned checkpoint."""
        if not self.closed:
            self.closed = True
            await asyncio.gather(*(part.close_async() for part in self.parts))
            if self.owns:
                await self._admin.delete_checkpoint_async(self.checkpoint_id)

    def stats(self) -> dict:
        """Each shard's reader's figures (see :meth:`Reader.stats`). Cost: none (no I/O)."""
        return {"url": self.url, "checkpoint": self.checkpoint_id,
                "shards": [part.stats() for part in self.parts],
                "state": "closed" if self.closed else "open"}


async def open_reader(admin: ShardedAdmin, checkpoint: str | None, lifetime: float,
                      at_sqn=None, at_time: float | None = None) -> ShardedReader:
    """A reader at ``checkpoint``, or at one of its own made now; ``at_sqn`` (a position)
    reads every shard as it was then, ``at_time`` as :meth:`ShardedStore.snapshot
    <leveled_ray.cluster.store.ShardedStore.snapshot>` does."""
    check_moment(at_sqn, at_time)
    sqns = (shard_positions(at_sqn, admin.shard_map.labels, "at_sqn") if at_sqn is not None
            else [None] * admin.shards)
    if checkpoint is not None:  # taken before a split: read through its own layout
        admin = await admin._layout_of_async(checkpoint)
        found = ShardedReader(admin, checkpoint, False, lifetime, sqns)
    else:
        made = await admin.create_checkpoint_async(lifetime, name="reader")
        found = ShardedReader(admin, made.id, True, lifetime, sqns)
    if at_time is None:
        return found
    try:  # a checkpoint is a cut: every batch is in all its shards' views, or in none
        views = await asyncio.gather(*(p._view_async(True) for p in found.parts))
        found.at_sqns = await positions_at_time(views, at_time, admin.shard_map.labels)
        await asyncio.gather(*(p._go_back_async(s) for p, s in zip(found.parts, found.at_sqns)))
    except BaseException:
        await found.close_async()
        raise
    return found


class ShardsAsTheyAre(Queries):
    """Every shard's newest manifest (and journal tail), read as one store, to inspect it
    without Ray (the command line). While shards are written this is no consistent cut: a
    point in time is a checkpoint (:class:`ShardedReader`)."""

    def __init__(self, views: list, shard_map):
        self.views = views
        self.shard_map = shard_map

    async def get(self, lkey: bytes) -> bytes | None:
        return await self.views[self.shard_map.shard_of(lkey)].get(lkey)

    async def head(self, lkey: bytes) -> Head | None:
        return await self.views[self.shard_map.shard_of(lkey)].head(lkey)

    async def _query_view_async(self, needs_values: bool):
        return MergedView(self.views), None
