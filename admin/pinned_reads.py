"""Change-feed reads on a store URL without Ray (``lr.admin(url).changes(...)``): each read
pins the newest version of every shard with a checkpoint of its own (holding every
acknowledged write, even while the store runs), reads it, and deletes the checkpoints when it
ends. A read whose process dies leaves its checkpoints to expire after :data:`LIFETIME`
seconds. A change feed needs no consistent cut across shards: its position is one SQN per
shard, and each shard's changes come in that shard's order."""

from __future__ import annotations

from ..files.sync import run_sync, two_forms, with_sync_twins
from ..read.merged import MergedView
from ..read.queries import Queries
from ..read.store_reader import StoreReader

#: Seconds a read's own checkpoint lives if its reader never deletes it.
LIFETIME = 3600.0


class PinnedReads(Queries):
    """Queries of a store through the :class:`~leveled_ray.admin.handle.Admin` of each of its
    shards (one, for a plain store: ``shard_map`` is then ``None``), each query on
    checkpoints made for it."""

    def __init__(self, admins: list, shard_map=None):
        self.admins = admins
        self.shard_map = shard_map

    async def _query_view_async(self, needs_values: bool):
        made: list = []

        async def release() -> None:
            for admin, checkpoint in made:
                await admin.delete_checkpoint_async(checkpoint.id)

        try:
            views = []
            for admin in self.admins:
                made.append((admin, await admin.create_checkpoint_async(LIFETIME,
                                                                        name="changes")))
                views.append(await StoreReader.open(admin.store, admin.options,
                                                    manifest_id=made[-1][1].manifest_id,
                                                    clock=admin.clock))
        except BaseException:
            await release()
            raise
        return (views[0] if self.shard_map is None else MergedView(views)), release

    def _query_view(self, needs_values: bool):
        view, release = run_sync(self._query_view_async(needs_values))
        return view, lambda: run_sync(release())


@with_sync_twins
class ChangesWithoutRay:
    """The change feed of a handle that reads a store without Ray: ``changes`` and
    ``changes_batches`` and their async forms, each on checkpoints of its own (see
    :class:`PinnedReads`, which the handle's ``_pinned_reads`` gives)."""

    def _pinned_reads(self) -> PinnedReads:
        raise NotImplementedError

    @two_forms(iterates=True)
    def changes(self, after=0, until=None, *, values: bool = True, batch_size: int = 1000):
        """The store's changes after position ``after`` (see
        :meth:`Queries.changes <leveled_ray.read.queries.Queries.changes>`), read without Ray
        on checkpoints made for the read and deleted when it ends. Cost: the feed's reads (see
        there), plus a checkpoint per shard made and deleted (manifest writes)."""
        reads = self._pinned_reads()
        return reads._plan(reads._changes_query(after, until, batch_size, False, False, values))

    @two_forms(iterates=True)
    def changes_batches(self, after=0, until=None, *, values: bool = True,
                        batch_size: int = 1000, binary_names: bool = False):
        """:meth:`changes` as Arrow batches. Cost: :meth:`changes`'s, without a Python object
        per row."""
        reads = self._pinned_reads()
        return reads._plan(reads._changes_query(after, until, batch_size, True, binary_names,
                                                values))
