"""``lr.admin(url)``, ``lr.gc`` and ``lr.destroy``: administration on a store URL, with or
without the store running (checkpoints, garbage collection and destroy).
"""
from __future__ import annotations

from collections.abc import Callable

from .. import roles, roles_admin
from ..clock import Clock, system_clock
from ..errors import InvalidArgumentError
from ..files.journal_slots import write_fence
from ..files.store import ObjectStore
from ..files.sync import with_sync_twins
from ..manifest import checkpoints as cp
from ..manifest.model import Checkpoint
from ..manifest.store import ManifestStore, Versioned
from ..manifest.transitions import mark_destroyed
from ..options import Options
from . import gc as garbage_collection
from .backup import backup_version
from .checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    list_checkpoints,
    refresh_checkpoint,
    release_checkpoint,
)
from .pinned_reads import ChangesWithoutRay, PinnedReads
from .progress import progress_of


@with_sync_twins
class Admin(ChangesWithoutRay, roles.History, roles.Checkpoints, roles_admin.Administration,
            roles.Backups):
    """Administration of the store at a URL. Each operation is defined once, as ``*_async``;
    its synchronous form (``gc`` for ``gc_async``) runs it."""

    def __init__(self, url: str, options: Options | None = None,
                 clock: Clock | None = None):
        self.url = url
        self.options = options or Options()
        self.clock = clock or system_clock
        self.store = ObjectStore.from_url(url, self.options)
        self.manifests = ManifestStore(self.store)
        self._seen = False  # a store was found here (its manifest outlives even a destroy)

    async def _existing(self) -> Versioned | None:
        """Refuse a URL with no store, checked at the first call: the newest version then
        (a first guess for what follows, which need not list every version again), else
        ``None``."""
        if self._seen:
            return None
        newest = await self.manifests.latest()
        if newest is None:
            raise InvalidArgumentError(f"no store at {self.url}")
        self._seen = True
        return newest

    async def create_checkpoint_async(self, lifetime: float | None = None,
                                      name: str | None = None, source: str | None = None, *,
                                      checkpoint_id: str | None = None) -> Checkpoint:
        """Pin the newest manifest version (or ``source``'s) for ``lifetime`` seconds
        (``None``: until deleted). ``checkpoint_id`` gives it that id (a sharded store's
        checkpoint has the same in every shard). Cost: a read of the newest manifest and one
        manifest write."""
        return await create_checkpoint(self.manifests, lifetime, name, source,
                                       await self._existing(), clock=self.clock,
                                       checkpoint_id=checkpoint_id)

    async def list_checkpoints_async(self) -> list[Checkpoint]:
        """The live (unexpired) checkpoints. Cost: a read of the newest manifest."""
        return await list_checkpoints(self.manifests, self.clock, await self._existing())

    async def refresh_checkpoint_async(self, checkpoint_id: str,
                                       lifetime: float | None = None) -> Checkpoint:
        """Expire the checkpoint ``lifetime`` seconds from now (``None``: never). Cost: one
        manifest write."""
        await self._existing()
        return await refresh_checkpoint(self.manifests, checkpoint_id, lifetime, self.clock)

    async def delete_checkpoint_async(self, checkpoint_id: str) -> None:
        """Delete a checkpoint; the files only it pinned may then be deleted. Cost: one
        manifest write."""
        await self._existing()
        await delete_checkpoint(self.manifests, checkpoint_id, self.clock)

    def _pinned_reads(self) -> PinnedReads:
        return PinnedReads([self])

    async def gc_async(self, min_age: float | None = None, dry_run: bool = False,
                       progress=None) -> garbage_collection.Plan:
        """One garbage-collection pass (see :mod:`leveled_ray.admin.gc`); returns
        the :class:`~leveled_ray.admin.gc.Plan` it carried out. Cost: a listing of the store's
        objects, a read of every live manifest version, and one delete per object it frees."""
        await self._existing()
        return await garbage_collection.collect(self.store, self.options, min_age=min_age,
                                                dry_run=dry_run, progress=progress,
                                                clock=self.clock)

    async def backup_async(self, target_url: str, *, target_options: Options | None = None,
                           progress: bool | Callable[[int, int], None] = True) -> dict:
        """Incremental hot backup to ``target_url`` (see :mod:`leveled_ray.admin.backup`),
        running or not, without Ray: a checkpoint made here pins what is copied, and holds
        every write acknowledged before the call. A progress line on stderr follows the
        copies (or calls to ``progress(done, total)``; ``False``: none). Returns
        ``{"files", "copied", "bytes", "removed", "max_sqn", "version"}``. Cost: a checkpoint,
        then a copy of each journal file the backup lacks (one read and one write each) and
        of the manifest."""
        target = ObjectStore.from_url(target_url, target_options or self.options)
        pin = await create_checkpoint(self.manifests, self.options.gc.long_snapshot_timeout_s,
                                      name="backup", current=await self._existing(),
                                      clock=self.clock)
        try:
            return (await backup_version(self.store, self.options, pin.manifest_id, target,
                                         progress_of(progress, "backup"))).as_dict()
        finally:
            await release_checkpoint(self.manifests, pin.id, self.clock)

    async def destroy_async(self, soft: bool = True) -> int:
        """Destroy the store (see :func:`destroy_store`). Cost: one manifest write; with
        ``soft=False``, a GC pass that deletes every object."""
        return await destroy_store(self.store, self.options, soft, self.clock)


async def destroy_store(store: ObjectStore, options: Options, soft: bool = True,
                        clock: Clock = system_clock) -> int:
    """Mark the store destroyed (fencing any writer); ``soft=False`` also deletes every object
    now, and refuses while a live checkpoint exists. Returns the objects deleted."""
    manifests = ManifestStore(store)
    latest = await manifests.latest()
    if latest is None:
        raise InvalidArgumentError(f"no store at {store.url}")
    if not soft and cp.live(latest.manifest, clock()):
        raise InvalidArgumentError("the store has live checkpoints (clones or readers may "
                                   "depend on them): delete them first, or destroy softly")
    _, m = await manifests.update(lambda m: mark_destroyed(m, clock()))
    await write_fence(store, m.writer_epoch, m.journal_next_slot)  # the writer's next append
    if soft:
        return 0
    plan = await garbage_collection.collect(store, options, min_age=0.0, clock=clock)
    return len(plan.deleted)  # a delete that failed is left for GC (the store stays destroyed)
