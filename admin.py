"""Administration on a store URL, with or without the store running: checkpoints today, and
the functions the running store uses for the same work.

``lr.admin(url)`` changes only the manifest's checkpoints, with the CAS loop, so it never
fences the store's writer and a running store keeps every checkpoint made this way. A
checkpoint made here pins the newest manifest, which holds every write a cleanly closed store
acknowledged; a running store's own ``store.checkpoint()`` also records the journal files it
wrote since, so it holds every write acknowledged before the call.
"""

from __future__ import annotations

import time

from .errors import InvalidArgumentError
from .files.store import ObjectStore
from .manifest import checkpoints as cp
from .manifest.model import Checkpoint
from .manifest.store import ManifestStore, Versioned
from .options import Options
from .point_in_time import run_sync


async def create_checkpoint(manifests: ManifestStore, lifetime: float | None = None,
                            name: str | None = None, source: str | None = None,
                            current: Versioned | None = None) -> Checkpoint:
    """Add a checkpoint pinning the newest version (at or after ``current``), or the version of
    the checkpoint ``source``."""
    new = cp.new_checkpoint(lifetime, name, time.time())
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


async def list_checkpoints(manifests: ManifestStore) -> list[Checkpoint]:
    latest = await manifests.latest()
    return [] if latest is None else list(cp.live(latest[1], time.time()))


class Admin:
    """Checkpoint administration on a store URL; every call has an ``*_async`` twin."""

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


def admin(url: str, options: Options | None = None) -> Admin:
    """An :class:`Admin` for the store at ``url`` (no store needs to be running)."""
    return Admin(url, options)
