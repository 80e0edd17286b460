"""Administration on a store URL, with or without the store running: checkpoints, garbage
collection and destroy, and the functions the running store uses for the same work.

``lr.admin(url)`` changes only the manifest's checkpoints and its record of journal files, with
the CAS loop, so it never fences the store's writer, and a running store keeps every checkpoint
made this way. A
checkpoint (and so a reader's pin, and a clone) first records the journal files written since
the newest manifest recorded them, so it holds every write acknowledged before the call, even
while the store runs.
"""

from __future__ import annotations

import contextlib
import time

from . import garbage_collection
from .errors import CheckpointNotFoundError, InvalidArgumentError
from .files.journal_slots import slot_info, tail_slots, write_fence
from .files.store import ObjectStore
from .files.sync import run_sync
from .manifest import checkpoints as cp
from .manifest.model import Checkpoint
from .manifest.store import ManifestStore, Versioned
from .manifest.transitions import mark_destroyed, record_journal
from .options import Options


async def record_tail(manifests: ManifestStore, current: Versioned | None = None) -> Versioned:
    """Record the journal files written since the newest version recorded them (a running
    writer records them every ``catalog_s``), so that the newest version holds every write
    acknowledged so far."""
    latest = await manifests.latest(current)
    if latest is None:
        raise InvalidArgumentError(f"no store at {manifests.store.url}")
    store = manifests.store
    tail = [await slot_info(store, s) for s in await tail_slots(store,
                                                                 latest[1].journal_next_slot)]
    if not tail:
        return latest
    next_slot = tail[-1].slot + 1
    return await manifests.update(lambda m: record_journal(m, tuple(tail), next_slot), latest)


async def create_checkpoint(manifests: ManifestStore, lifetime: float | None = None,
                            name: str | None = None, source: str | None = None,
                            current: Versioned | None = None) -> Checkpoint:
    """Add a checkpoint pinning the newest version (at or after ``current``, and after
    recording the journal tail: every acknowledged write is in it), or the version of the
    checkpoint ``source``."""
    new = cp.new_checkpoint(lifetime, name, time.time())
    if source is None:
        current = await record_tail(manifests, current)
    _, m = await manifests.update(
        lambda mid, m: cp.add_checkpoint(mid, m, new, source, time.time()), current,
        with_id=True)
    return cp.find(m, new.id, time.time())


async def refresh_checkpoint(manifests: ManifestStore, checkpoint_id: str,
                             lifetime: float | None) -> Checkpoint:
    _, m = await manifests.update(
        lambda m: cp.refresh_checkpoint(m, checkpoint_id, lifetime, time.time()))
    return cp.find(m, checkpoint_id, time.time())


async def delete_checkpoint(manifests: ManifestStore, checkpoint_id: str) -> None:
    await manifests.update(lambda m: cp.delete_checkpoint(m, checkpoint_id, time.time()))


async def release_checkpoint(manifests: ManifestStore, checkpoint_id: str) -> None:
    """Delete a checkpoint its holder is done with; one that expired or was deleted
    already needs nothing more."""
    with contextlib.suppress(CheckpointNotFoundError):
        await delete_checkpoint(manifests, checkpoint_id)


async def list_checkpoints(manifests: ManifestStore) -> list[Checkpoint]:
    latest = await manifests.latest()
    return [] if latest is None else list(cp.live(latest[1], time.time()))


class Admin:
    """Administration of the store at a URL; every call has an ``*_async`` twin."""

    def __init__(self, url: str, options: Options | None = None):
        self.url = url
        self.options = options or Options()
        self.store = ObjectStore.from_url(url, self.options)
        self.manifests = ManifestStore(self.store)

    async def _existing(self) -> ManifestStore:
        if await self.manifests.latest() is None:
            raise InvalidArgumentError(f"no store at {self.url}")
        return self.manifests

    async def create_checkpoint_async(self, lifetime: float | None = None,
                                      name: str | None = None,
                                      source: str | None = None) -> Checkpoint:
        return await create_checkpoint(await self._existing(), lifetime, name, source)

    async def list_checkpoints_async(self) -> list[Checkpoint]:
        return await list_checkpoints(await self._existing())

    async def refresh_checkpoint_async(self, checkpoint_id: str,
                                       lifetime: float | None = None) -> Checkpoint:
        return await refresh_checkpoint(await self._existing(), checkpoint_id, lifetime)

    async def delete_checkpoint_async(self, checkpoint_id: str) -> None:
        await delete_checkpoint(await self._existing(), checkpoint_id)

    async def gc_async(self, min_age: float | None = None, dry_run: bool = False,
                       progress=None) -> garbage_collection.Plan:
        await self._existing()
        return await garbage_collection.collect(self.store, self.options, min_age=min_age,
                                                dry_run=dry_run, progress=progress)

    def gc(self, min_age: float | None = None, dry_run: bool = False,
           progress=None) -> garbage_collection.Plan:
        """One garbage-collection pass (see :mod:`leveled_ray.garbage_collection`); returns
        the :class:`~leveled_ray.garbage_collection.Plan` it carried out."""
        return run_sync(self.gc_async(min_age, dry_run, progress))

    async def destroy_async(self, soft: bool = True) -> int:
        return await destroy_store(self.store, self.options, soft)

    def destroy(self, soft: bool = True) -> int:
        """Destroy the store (see :func:`destroy_store`)."""
        return run_sync(self.destroy_async(soft))

    def create_checkpoint(self, lifetime: float | None = None, name: str | None = None,
                          source: str | None = None) -> Checkpoint:
        """Pin the newest manifest version (or ``source``'s) for ``lifetime`` seconds
        (``None``: until deleted)."""
        return run_sync(self.create_checkpoint_async(lifetime, name, source))

    def list_checkpoints(self) -> list[Checkpoint]:
        """The live (unexpired) checkpoints."""
        return run_sync(self.list_checkpoints_async())

    def refresh_checkpoint(self, checkpoint_id: str,
                           lifetime: float | None = None) -> Checkpoint:
        """Expire the checkpoint ``lifetime`` seconds from now (``None``: never)."""
        return run_sync(self.refresh_checkpoint_async(checkpoint_id, lifetime))

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint; the files only it pinned may then be deleted."""
        run_sync(self.delete_checkpoint_async(checkpoint_id))


async def destroy_store(store: ObjectStore, options: Options, soft: bool = True) -> int:
    """Mark the store destroyed (fencing any writer); ``soft=False`` also deletes every object
    now, and refuses while a live checkpoint exists. Returns the objects deleted."""
    manifests = ManifestStore(store)
    latest = await manifests.latest()
    if latest is None:
        raise InvalidArgumentError(f"no store at {store.url}")
    if not soft and cp.live(latest[1], time.time()):
        raise InvalidArgumentError("the store has live checkpoints (clones or readers may "
                                   "depend on them): delete them first, or destroy softly")
    _, m = await manifests.update(lambda m: mark_destroyed(m, time.time()))
    await write_fence(store, m.writer_epoch, m.journal_next_slot)  # the writer's next append
    if soft:
        return 0
    plan = await garbage_collection.collect(store, options, min_age=0.0)
    return len(plan.paths)


def admin(url: str, options: Options | None = None) -> Admin:
    """An :class:`Admin` for the store at ``url`` (no store needs to be running)."""
    return Admin(url, options)


def gc(url: str, min_age: float | None = None, *, dry_run: bool = False,
       options: Options | None = None, progress=None) -> garbage_collection.Plan:
    """One garbage-collection pass on the store at ``url`` (running or not): deletes what no
    manifest, checkpoint, clone or snapshot can read and is older than ``min_age`` seconds
    (default ``Options.gc_min_age_s``). While a writer runs, ``min_age`` must be longer than
    any upload takes to be published (the default leaves an hour); ``min_age=0`` is for a
    store nobody writes."""
    return Admin(url, options).gc(min_age, dry_run, progress)


def destroy(url: str, soft: bool = True, *, options: Options | None = None) -> int:
    """Destroy the store at ``url``. ``soft`` marks it destroyed and fences its writer; GC then
    deletes everything after a grace period (``gc_min_age_s``) once no checkpoint is left.
    ``soft=False`` deletes everything now, and refuses while live checkpoints exist."""
    return Admin(url, options).destroy(soft)
