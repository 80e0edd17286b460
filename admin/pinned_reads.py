"""Change-feed reads on a store URL without Ray (``lr.admin(url).changes(...)``): each read
pins the newest version with a checkpoint of its own (holding every acknowledged write, even
while the store runs), reads it, and deletes the checkpoint when it ends. A read whose process
dies leaves its checkpoint to expire after :data:`LIFETIME` seconds."""

from __future__ import annotations

from ..files.sync import run_sync
from ..read.queries import Queries
from ..read.store_reader import StoreReader

#: Seconds a read's own checkpoint lives if its reader never deletes it.
LIFETIME = 3600.0


class PinnedReads(Queries):
    """Queries of an :class:`~leveled_ray.admin.handle.Admin`'s store, each on a checkpoint
    made for it."""

    def __init__(self, admin):
        self.admin = admin

    async def _query_view_async(self, needs_values: bool):
        made = await self.admin.create_checkpoint_async(LIFETIME, name="changes")
        try:
            view = await StoreReader.open(self.admin.store, self.admin.options,
                                          manifest_id=made.manifest_id, clock=self.admin.clock)
        except BaseException:
            await self.admin.delete_checkpoint_async(made.id)
            raise
        return view, lambda: self.admin.delete_checkpoint_async(made.id)

    def _query_view(self, needs_values: bool):
        view, release = run_sync(self._query_view_async(needs_values))
        return view, lambda: run_sync(release())
